package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert/ndjson"
	"github.com/upsertlib/upsert/upserttest"
)

// childArgs is the environment variable that makes the test binary run
// the command itself, with these JSON-encoded arguments and an empty
// stdin, and exit with its status: a test of a crash (a panic on one of
// the command's goroutines, which would kill the whole test binary) runs
// it so, with runChild. The signals stop it as they stop pcupsert
// (signalContext).
const childArgs = "PCUPSERT_TEST_CHILD_ARGS"

func TestMain(m *testing.M) {
	if raw := os.Getenv(childArgs); raw != "" {
		var args []string
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(99)
		}
		os.Exit(run(signalContext(), args, strings.NewReader(""), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// runChild runs the command in a child process (this test binary, see
// TestMain), without an API key, and returns its exit status and output.
func runChild(t *testing.T, args ...string) result {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgs+"="+string(raw), "PINECONE_API_KEY=")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	status := exitStatus(t, err)
	return result{status, stdout.String(), stderr.String()}
}

// A pcupsert process killed mid-run (SIGKILL: no deferred code runs) and
// run again with the same checkpoint loses nothing: every record is on
// the index or in the dead-letter file.
func TestAKilledRunResumedFromItsCheckpointLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command and runs it for a few seconds")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "pcupsert")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	const n = 6000
	var rejected []string
	for i := 7; i < n; i += 97 {
		rejected = append(rejected, fmt.Sprintf("r%d", i))
	}
	in := filepath.Join(dir, "in.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(records(t, n)), 0o600))
	// Slow enough that the kill comes mid-run, after a few checkpoints.
	srv := upserttest.NewServer(upserttest.WithRate(2000, 200), upserttest.WithFaults(upserttest.RejectIDs(rejected...)))
	defer srv.Close()
	ckpt, dl := filepath.Join(dir, "ckpt"), filepath.Join(dir, "failed.ndjson")
	cmd := func() *exec.Cmd {
		c := exec.Command(bin, "--host", srv.Host(), "--checkpoint", ckpt, "--dead-letter", dl, "--progress", "off", "--batch-size", "50", in)
		c.Env = append(os.Environ(), "PINECONE_API_KEY=test-key-for-upserttest")
		return c
	}

	first := cmd()
	var stderr strings.Builder
	first.Stderr = &stderr
	require.NoError(t, first.Start())
	deadline := time.Now().Add(20 * time.Second)
	for srv.Count("__default__") < n/2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	_ = first.Wait()
	stored := srv.Count("__default__")
	require.Less(t, stored, n, "killed mid-run; stderr:\n%s", stderr.String())
	ck, err := os.ReadFile(ckpt)
	require.NoError(t, err, "a checkpoint was saved before the kill")
	t.Logf("killed with %d records stored, checkpoint %s", stored, strings.TrimSpace(string(ck)))

	second := cmd()
	out, err = second.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the rejected records fail the run; output:\n%s", out)
	assert.Equal(t, exitFailed, exit.ExitCode(), "%s", out)
	assert.Contains(t, string(out), "skipped the first ")

	ids, bad := letters(t, dl)
	assert.Empty(t, bad)
	assert.ElementsMatch(t, rejected, dedupe(ids), "each rejected record is a dead letter")
	vs := srv.Vectors("__default__")
	for i := range n {
		id := fmt.Sprintf("r%d", i)
		_, ok := vs[id]
		if !ok && !assert.Contains(t, ids, id, "record %s is neither on the index nor a dead letter", id) {
			break
		}
	}
	assert.Len(t, vs, n-len(rejected))
}

// dedupe returns ids without repeats, in order.
func dedupe(ids []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// A record that may be stale gets its dead letter (class may-be-stale), so
// that replaying the file upserts it again. With --checkpoint, the
// checkpoint passes it as soon as it lands, and a resumed run skips it: its
// letter must be on disk by then, as the letters of failed records are
// (durableCheckpoint): it is written as the library reports the record
// (Observer.Stale), before the checkpoint passes it. (Written once the
// stream returned, it was lost to a run killed after the checkpoint
// passed the record, and the resumed run never learnt of it.)
func TestAKilledRunKeepsTheDeadLettersOfRecordsThatMayBeStale(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the command in a child process for a few seconds")
	}
	dir := t.TempDir()
	var once sync.Once
	srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		var f upserttest.Fault
		if slices.Contains(r.IDs, "x") {
			// The first request carrying x ends without an answer.
			once.Do(func() { f = upserttest.Fault{Code: codes.DeadlineExceeded} })
			return f
		}
		if len(r.IDs) > 0 && strings.HasPrefix(r.IDs[0], "r") {
			f.Delay = 5 * time.Millisecond // the rest is slow, so that the kill comes mid-run
		}
		return f
	}))
	defer srv.Close()

	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "failed.ndjson")
	input := `{"id":"x","values":[1,1,1]}
{"id":"y","values":[1,1,1]}
{"id":"z","values":[1,1,1]}
{"id":"x","values":[3,1,1]}
` + records(t, 800)
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	args := []string{"--host", srv.Host(), "--checkpoint", ckpt, "--dead-letter", dl, "--progress", "off",
		"--batch-size", "1", "--concurrency", "1", in}
	child := func() *exec.Cmd {
		raw, err := json.Marshal(args)
		require.NoError(t, err)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childArgs+"="+string(raw), "PINECONE_API_KEY=test-key-for-upserttest")
		return cmd
	}

	first := child()
	var stderr strings.Builder
	first.Stderr = &stderr
	require.NoError(t, first.Start())
	// Kill it once the checkpoint has passed the second x (record 4).
	deadline := time.Now().Add(20 * time.Second)
	saved := 0
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(ckpt); err == nil {
			count, _, _ := strings.Cut(string(b), "\n")
			if saved, _ = strconv.Atoi(count); saved >= 10 {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	_ = first.Wait()
	require.GreaterOrEqual(t, saved, 10, "the checkpoint passed both x's before the kill; stderr:\n%s", stderr.String())
	require.Less(t, srv.Count("__default__"), 804, "killed mid-run")

	// The resumed run skips what the checkpoint passed, x included.
	out, err := child().CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "skipped the first ")

	var stale []string
	if f, err := os.Open(dl); err == nil {
		defer f.Close()
		r := ndjson.NewReader(f)
		for {
			v, err := r.Next()
			if err != nil {
				break
			}
			if strings.Contains(string(r.Raw()), `"class":"`+ndjson.StaleClass+`"`) {
				stale = append(stale, v.Id)
			}
		}
	}
	assert.Equal(t, []string{"x"}, stale, "the letter of the record that may be stale is in the dead-letter file after the kill and the resumed run")
}

// SIGHUP, which a closed terminal or ssh session sends, stops a run as
// Ctrl-C and SIGTERM do: the run ends its requests, writes its dead
// letters and its report, and exits 1. (Unhandled, SIGHUP killed it at
// once, losing the letters still buffered and the last checkpoint save.)
// The child holds a request in flight when the signal comes.
func TestSIGHUPStopsARunWithItsReport(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGHUP to send")
	}
	if testing.Short() {
		t.Skip("runs the command in a child process")
	}
	dir := t.TempDir()
	in, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "failed.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 50)), 0o600))
	srv, arrived, _ := heldServer(t)
	child, out := startChild(t, "--host", srv.Host(), "--dead-letter", dl, "--progress", "off", "--batch-size", "50", in)
	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatalf("the child sent nothing; output:\n%s", out.String())
	}
	require.NoError(t, child.Process.Signal(syscall.SIGHUP))
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the child did not end after SIGHUP")
	}

	assert.Equal(t, exitFailed, exitStatus(t, err), "an exit, not a kill by the signal; output:\n%s", out.String())
	assert.Contains(t, out.String(), "pcupsert: interrupted at line 50")
	assert.Contains(t, out.String(), "ended early: interrupted")
	ids, _ := letters(t, dl)
	assert.Len(t, ids, 50, "every record has its dead letter")
}

// startChild starts the command in a child process (this test binary, see
// TestMain) against a real-index host, with an API key, and kills it at
// the test's end; its output, stdout and stderr, is gathered in out.
func startChild(t *testing.T, args ...string) (cmd *exec.Cmd, out *strings.Builder) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgs+"="+string(raw), "PINECONE_API_KEY=test-key-for-upserttest")
	out = &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, out
}

// waitFor polls cond every 2 ms until it holds, failing the test after
// 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		time.Sleep(2 * time.Millisecond)
	}
}

// A second pcupsert process on a --checkpoint that a first one holds (an
// overlapping cron run, a user who starts a second one by mistake) is
// refused, exit status 2, naming the checkpoint: the first one's lock is
// held to its end. The first, killed (SIGKILL), leaves no lock in the way
// of the run that resumes it, and x's last record wins. (Without the
// lock, the second run sent x's older record after the first sent the
// newest, its checkpoint said the whole input was settled, and the
// resumed run skipped everything and exited 0 with the older value on
// the index.)
func TestTwoRunsOnOneCheckpointLeaveNoOlderValue(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the command in a child process")
	}
	dir := t.TempDir()
	in, ckpt := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt")
	input := `{"id":"x","values":[1,1,1]}` + "\n" + records(t, 200) + `{"id":"x","values":[2,2,2]}` + "\n"
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))

	srv := newXHeldServer(t)

	first, out := startChild(t, "--host", srv.Host(), "--checkpoint", ckpt, "--dead-letter", filepath.Join(dir, "dl1"),
		"--progress", "off", "--batch-size", "1", "--concurrency", "1", "--timeout", "60s", in)
	select {
	case <-srv.arrived:
	case <-time.After(20 * time.Second):
		t.Fatalf("the first process sent nothing; output:\n%s", out.String())
	}

	// The second process, on the same checkpoint, while the first runs.
	second := runCmd(t, nil, nil, append(remote(t, srv.Server), "--checkpoint", ckpt, "--dead-letter", filepath.Join(dir, "dl2"),
		"--progress", "off", in)...)
	require.Equal(t, exitUsage, second.status, "stderr:\n%s", second.stderr)
	require.Contains(t, second.stderr, "--checkpoint "+ckpt+": another pcupsert holds it")
	require.NoFileExists(t, filepath.Join(dir, "dl2"), "the second run sent nothing")

	// The first process's request with x's first record now lands, then
	// it is killed.
	srv.failAll.Store(true)
	srv.release()
	waitFor(t, "x's first record to land", func() bool {
		v, ok := srv.Vector("__default__", "x")
		return ok && (*v.Values)[0] == 1
	})
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	_ = first.Wait()

	// The user resumes with the same checkpoint once the index is well.
	srv.SetFaults(nil)
	third := runCmd(t, nil, nil, append(remote(t, srv.Server), "--checkpoint", ckpt, "--dead-letter", filepath.Join(dir, "dl3"),
		"--progress", "off", in)...)
	require.Equal(t, exitOK, third.status, "the killed run's lock is gone with it; stderr:\n%s", third.stderr)

	v, ok := srv.Vector("__default__", "x")
	require.True(t, ok)
	require.Equal(t, []float32{2, 2, 2}, *v.Values, "x's last record wins once the load is done")
}

// xHeldServer is an index whose first request carrying x is held until
// release, then written and answered 503, and which fails every request
// once failAll is set.
type xHeldServer struct {
	*upserttest.Server
	arrived chan struct{} // closed when the request carrying x arrives
	release func()
	failAll atomic.Bool
}

// newXHeldServer starts an xHeldServer, closed (the held request
// released) at the test's end.
func newXHeldServer(t *testing.T) *xHeldServer {
	s := &xHeldServer{arrived: make(chan struct{})}
	var firstX atomic.Bool
	held := make(chan struct{})
	var once sync.Once
	s.release = func() { once.Do(func() { close(held) }) }
	s.Server = upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		if slices.Contains(r.IDs, "x") && firstX.CompareAndSwap(false, true) {
			close(s.arrived)
			<-held
			return upserttest.Fault{Code: codes.Unavailable, Write: upserttest.WriteAll}
		}
		if s.failAll.Load() {
			return upserttest.Fault{Code: codes.Unavailable}
		}
		return upserttest.Fault{}
	}))
	t.Cleanup(func() {
		s.release() // before the server closes, which waits for the held request
		s.Close()
	})
	return s
}

// exitStatus is the exit status of a child process that ended with err
// (nil: 0); an error other than an exit fails the test.
func exitStatus(t *testing.T, err error) int {
	t.Helper()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	require.NoError(t, err)
	return 0
}
