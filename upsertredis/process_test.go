package upsertredis

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/internal/share"
)

// helperEnv, when set to a Redis socket, makes the test binary a writer
// process: it joins lane, says so on stdout, and exchanges until killed.
const helperEnv = "UPSERTREDIS_TEST_WRITER"

func writerProcess(socket string) {
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: socket})
	s := New(rdb, WithPrefix(os.Getenv(helperEnv+"_PREFIX")), WithInterval(5*time.Millisecond), WithHeartbeat(50*time.Millisecond))
	if host := os.Getenv(helperEnv + "_HOST"); host != "" {
		writeRun(s, host) // never returns
	}
	s.Join(context.Background(), lane)
	os.Stdout.WriteString("joined\n")
	select {}
}

// writeRun is a writer process that runs upsert.All into host's namespace
// through s: it says "writing" once the index accepted records, and runs
// until killed.
func writeRun(s *Store, host string) {
	pc, _ := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test"})
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: host, Namespace: e2eNamespace})
	if err != nil {
		os.Exit(2)
	}
	var once sync.Once
	_, _ = upsert.All(context.Background(), vectors(1_000_000, 1_000_000), upsert.WithIndex(idx), s.Option(),
		upsert.WithProgress(10*time.Millisecond, func(p upsert.Progress) {
			if p.Stats.Upserted > 0 {
				once.Do(func() { os.Stdout.WriteString("writing\n") })
			}
		}))
	select {}
}

// TestAKilledWriterProcessUnderARun kills (SIGKILL) a writer process in
// the middle of its upsert.All while this process runs one into the same
// namespace: the lane drops the dead writer once its heartbeat expires,
// and this run lands every record.
func TestAKilledWriterProcessUnderARun(t *testing.T) {
	idx := e2eIndex(t, 6000)
	cmd := startHelper(t, "writing", helperEnv+"_HOST="+idx.Host())

	// A member that asks for nothing watches the lane: it takes no part.
	watch := newStore(t, client(t, nil), WithHeartbeat(50*time.Millisecond))
	// The lane's host is the connection's target: the host without its scheme.
	m := watch.Join(context.Background(), share.Lane{Host: strings.TrimPrefix(idx.Host(), "http://"), Namespace: e2eNamespace}).(*member)
	t.Cleanup(func() { _ = m.Leave(context.Background()) })
	m.Demand(0)
	ws := runWriters(t, idx, func() *Store {
		return New(client(t, nil), WithPrefix(t.Name()+":"), WithInterval(5*time.Millisecond), WithHeartbeat(50*time.Millisecond))
	}, 1, 12000, func() {
		require.Eventually(t, func() bool { return exchange(t, m).Writers == 3 }, 10*time.Second, time.Millisecond, "the run, the process and the watcher")
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		require.Eventually(t, func() bool { return exchange(t, m).Writers == 2 }, 10*time.Second, time.Millisecond, "the dead process dropped")
	})
	require.NoError(t, ws[0].err)
	assert.Equal(t, 12000, ws[0].res.Upserted)
	assert.Zero(t, ws[0].res.Stats.SharedFallbacks)
}

// TestAKilledWriterProcessIsDropped kills (SIGKILL) a writer process of
// the lane: the writers left see it gone once its heartbeat expires, and
// their part of the rate grows.
func TestAKilledWriterProcessIsDropped(t *testing.T) {
	cmd := startHelper(t, "joined")

	a := join(t, newStore(t, client(t, nil)))
	assert.Equal(t, 2, a.View().Writers)
	assert.Equal(t, 500.0, a.View().Allocation(1000))
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	require.Eventually(t, func() bool { return exchange(t, a).Writers == 1 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 1000.0, a.View().Allocation(1000), "the writer left takes up the dead one's part")
}

// startHelper starts this test binary again as a writer process of the
// lane (TestMain runs it when helperEnv is set), with env added, and waits
// for its first line, want; the process is killed at the test's end.
func startHelper(t *testing.T, want string, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+shared.Socket(), helperEnv+"_PREFIX="+t.Name()+":")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, want+"\n", line)
	return cmd
}
