//go:build unix

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A run that reads a file (here a named pipe, whose reads block) leaves
// no goroutine reading it when it ends, interrupted while the input is
// idle: the file is closed, which ends the read, and the run waits for it.
func TestAnInterruptedRunLeavesNoGoroutineReadingItsFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "in.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	w := make(chan *os.File, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0) // blocks until the run opens it
		if err == nil {
			_, _ = f.WriteString(records(t, 3))
		}
		w <- f
	}()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	res := runCmd(t, ctx, nil, "--progress", "off", "--dead-letter", deadLetterPath(t), fifo)
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	assert.NotContains(t, stacks, "main.readSource", "the reading goroutine ended with the run")
	assert.Equal(t, exitFailed, res.status)
	assert.Contains(t, res.stderr, "interrupted at line 3 of "+fifo)
	if f := <-w; f != nil {
		f.Close()
	}
}

// sigIgnored reports whether signal sig is ignored (SIG_IGN) in process
// pid, from the SigIgn mask of /proc/PID/status.
func sigIgnored(t *testing.T, pid int, sig syscall.Signal) bool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			require.NoError(t, err)
			return mask&(1<<(uint(sig)-1)) != 0
		}
	}
	t.Fatalf("no SigIgn in /proc/%d/status", pid)
	return false
}

// `nohup pcupsert … &` keeps a long load alive past the end of the ssh
// session that started it: the process starts with SIGHUP ignored, and
// Notify for SIGHUP would install a handler and undo that (os/signal's
// doc). Such a run is not stopped by SIGHUP; once, it was.
func TestANohupRunIsNotStoppedBySIGHUP(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	if testing.Short() {
		t.Skip("runs the command in a child process")
	}
	dir := t.TempDir()
	in, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "failed.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 50)), 0o600))
	srv, arrived, release := heldServer(t)
	raw, err := json.Marshal([]string{"--host", srv.Host(), "--dead-letter", dl, "--progress", "off", "--batch-size", "50", in})
	require.NoError(t, err)
	// As nohup starts it: SIGHUP ignored, inherited across exec.
	child := exec.Command("/bin/sh", "-c", `trap "" HUP; exec "$0" "$@"`, os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childArgs+"="+string(raw), "PINECONE_API_KEY=test-key-for-upserttest")
	var out strings.Builder
	child.Stdout, child.Stderr = &out, &out
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill() })
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	select {
	case <-arrived: // signalContext ran: the child is sending
	case <-time.After(20 * time.Second):
		t.Fatalf("the child sent nothing; output:\n%s", out.String())
	}

	assert.True(t, sigIgnored(t, child.Process.Pid, syscall.SIGHUP), "SIGHUP, ignored by nohup, is no longer ignored by the run")
	require.NoError(t, child.Process.Signal(syscall.SIGHUP)) // the ssh session closed
	release()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the child did not end")
	}
	assert.Equal(t, exitOK, exitStatus(t, err), "output:\n%s", out.String())
	assert.NotContains(t, out.String(), "interrupted")
}

// `pcupsert big.ndjson 2>&1 | tee run.log`, then Ctrl-C: the terminal
// sends SIGINT to the whole pipeline, tee exits, and pcupsert's messages
// go to a pipe whose reader is gone; an ssh session that drops sends
// SIGHUP and leaves the same pipe. The run still ends as a stopped run
// does: it exits 1, and every record it read and did not land has its
// dead letter. (Go kills a program that writes to a broken pipe on fd 1
// or 2 with SIGPIPE unless it asked for that signal: pcupsert died at its
// "interrupted at line N", before it flushed its dead letters.)
func TestAnInterruptWithTheConsoleGoneStillWritesTheDeadLetters(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the command in a child process")
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			in, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "failed.ndjson")
			require.NoError(t, os.WriteFile(in, []byte(records(t, 50)), 0o600))
			srv, arrived, _ := heldServer(t)
			raw, err := json.Marshal([]string{"--host", srv.Host(), "--dead-letter", dl, "--progress", "off", "--batch-size", "50", in})
			require.NoError(t, err)
			child := exec.Command(os.Args[0], "-test.run=^$") // the command itself: see TestMain
			child.Env = append(os.Environ(), childArgs+"="+string(raw), "PINECONE_API_KEY=test-key-for-upserttest")
			pr, pw, err := os.Pipe()
			require.NoError(t, err)
			child.Stdout, child.Stderr = pw, pw // 2>&1 | tee
			require.NoError(t, child.Start())
			t.Cleanup(func() { _ = child.Process.Kill() })
			pw.Close()
			select {
			case <-arrived: // the records are in flight
			case <-time.After(20 * time.Second):
				t.Fatal("the child sent nothing")
			}

			pr.Close() // tee is gone
			require.NoError(t, child.Process.Signal(sig))
			done := make(chan error, 1)
			go func() { done <- child.Wait() }()
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("the child did not end after %v", sig)
			}
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the run exits 1")
			ws := exit.Sys().(syscall.WaitStatus)
			require.False(t, ws.Signaled(), "killed by %v instead of ending its run", ws.Signal())
			assert.Equal(t, exitFailed, exit.ExitCode())
			ids, _ := letters(t, dl)
			assert.Len(t, ids, 50, "every record read and not landed has its dead letter")
		})
	}
}
