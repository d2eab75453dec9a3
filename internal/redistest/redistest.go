// Package redistest starts a real redis-server (Debian's package) for tests
// and benchmarks, on a unix socket in a directory of its own, and stops it;
// it can kill and restart it mid-run, and put a delaying proxy in front of
// it. The server keeps nothing on disk between starts.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds the wait for a started server to answer.
const startTimeout = 10 * time.Second

// Server is a redis-server process.
type Server struct {
	dir  string
	args []string
	cmd  *exec.Cmd
	exit chan error
}

// Start starts redis-server with args added to the package's own (no
// persistence, a unix socket, no TCP port unless args give one), and waits
// until it answers.
func Start(args ...string) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("redis-server is not installed (apt-get install -y redis-server)")
	}
	// A short directory: a unix socket's path is limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "redis")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, args: args}
	if err := s.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Run starts a server for tb and stops it when tb ends; it fails tb if the
// server does not start.
func Run(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s, err := Start(args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// Socket is the path of the server's unix socket.
func (s *Server) Socket() string { return filepath.Join(s.dir, "redis.sock") }

// Client returns a client of the server over its socket, configured further
// by o (nil for none); the caller closes it.
func (s *Server) Client(o *redis.Options) *redis.Client {
	if o == nil {
		o = new(redis.Options)
	}
	o.Network, o.Addr = "unix", s.Socket()
	return redis.NewClient(o)
}

func (s *Server) start() error {
	args := append([]string{
		"--port", "0", "--unixsocket", s.Socket(), "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}, s.args...)
	cmd := exec.Command("redis-server", args...)
	setPdeathsig(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	s.cmd, s.exit = cmd, make(chan error, 1)
	go func() { s.exit <- cmd.Wait() }()
	deadline := time.Now().Add(startTimeout)
	for !s.answers() {
		select {
		case err := <-s.exit:
			s.exit <- err
			return fmt.Errorf("redis-server exited at start (%v): %s", err, s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server did not answer within %v: %s", startTimeout, s.logTail())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// answers reports whether the server answers a PING on its socket (an
// error reply, such as NOAUTH, counts: the server is up).
func (s *Server) answers() bool {
	c, err := net.DialTimeout("unix", s.Socket(), 100*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && (strings.HasPrefix(line, "+") || strings.HasPrefix(line, "-"))
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], " | ")
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
// Its data is gone.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	err := <-s.exit
	s.exit <- err
	s.cmd = nil
	os.Remove(s.Socket())
}

// Restart starts the server again on the same socket after Kill, empty.
func (s *Server) Restart() error {
	s.Kill()
	return s.start()
}

// Close stops the server and removes its directory.
func (s *Server) Close() {
	s.Kill()
	os.RemoveAll(s.dir)
}

// FreePort returns a loopback TCP port that was free a moment ago, for a
// server argument such as --tls-port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
