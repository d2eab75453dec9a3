package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert/upserttest"
)

// heldServer returns a server whose requests wait until release is
// called, and a channel closed when the first one arrives. release is
// also called at the test's end, before the server closes.
func heldServer(t *testing.T) (srv *upserttest.Server, arrived <-chan struct{}, release func()) {
	t.Helper()
	arr, rel := make(chan struct{}), make(chan struct{})
	var arrOnce, relOnce sync.Once
	srv = upserttest.NewServer(upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
		arrOnce.Do(func() { close(arr) })
		<-rel
		return upserttest.Fault{}
	}))
	release = func() { relOnce.Do(func() { close(rel) }) }
	t.Cleanup(srv.Close)
	t.Cleanup(release) // runs before Close, which waits for held requests
	return srv, arr, release
}

// Replaying the default dead-letter file (fed back in, with another
// --dead-letter) while a second load runs in the same directory with the
// default --dead-letter: the replay holds a shared lock on its input, and
// the second load, which would truncate the file and write its letters
// into it while it is read (~18,000 records never read, neither on the
// index nor in any dead-letter file), is refused, exit status 2. Every
// record of the replayed file is on the index or in retry.ndjson.
func TestADeadLetterFileBeingReplayedIsNotTruncatedByAnotherRun(t *testing.T) {
	if !lockSupported {
		t.Skip("no flock on this system: the dead-letter file is not locked")
	}
	t.Chdir(t.TempDir())
	const n = 20000 // far more than the replay reads ahead while its requests are held
	require.NoError(t, os.WriteFile(defaultDeadLetter, []byte(records(t, n)), 0o600))
	require.NoError(t, os.WriteFile("b.ndjson", []byte("bad line of b\n"+records(t, 1)), 0o600))
	srv, arrived, release := heldServer(t)
	other := upserttest.NewServer()
	t.Cleanup(other.Close)

	replay := make(chan result, 1)
	go func() {
		replay <- runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--batch-size", "100", "--concurrency", "1",
			"--dead-letter", "retry.ndjson", defaultDeadLetter)...)
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the replay sent nothing")
	}
	second := runCmd(t, nil, nil, append(remote(t, other), "--progress", "off", "b.ndjson")...)
	release()
	a := <-replay

	assert.Equal(t, exitUsage, second.status, "stderr:\n%s", second.stderr)
	assert.Contains(t, second.stderr, "pcupsert: --dead-letter "+defaultDeadLetter+": another pcupsert is reading it")
	assert.Zero(t, other.Count("__default__"), "the refused load sent nothing")
	lettered := 0
	if _, err := os.Stat("retry.ndjson"); err == nil {
		ids, bad := letters(t, "retry.ndjson")
		lettered = len(ids) + len(bad)
	}
	assert.Equal(t, n, srv.Count("__default__")+lettered,
		"records of the replayed file lost: neither on the index nor in retry.ndjson\nsecond load (status %d):\n%s\nreplay (status %d):\n%s%s",
		second.status, second.stderr, a.status, a.stdout, a.stderr)
	assert.Equal(t, exitOK, a.status, a.stderr)
	assert.Equal(t, records(t, n), readString(t, defaultDeadLetter), "the replayed file is as it was")
}

// A run whose input is a file another run writes its dead letters to
// (which that run may truncate, or write into, while this one reads it)
// is refused, exit status 2, and so is one reading that file redirected
// to stdin; --dry-run, which writes nothing and sends nothing, takes no
// lock and is not refused.
func TestARunIsRefusedAnInputThatAnotherRunWritesItsLettersTo(t *testing.T) {
	if !lockSupported {
		t.Skip("no flock on this system: files are not locked")
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 3)), 0o600))
	lock, err := lockForWriting(in) // a run writing its letters there
	require.NoError(t, err)
	dl := filepath.Join(dir, "dl.ndjson")

	res := runCmd(t, nil, nil, "--progress", "off", "--dead-letter", dl, in)
	assert.Equal(t, exitUsage, res.status, res.stderr)
	assert.Contains(t, res.stderr, "pcupsert: "+in+": another pcupsert is writing its dead letters to it")
	assert.NotContains(t, res.stderr, "embedded loopback index", "nothing was opened")

	f, err := os.Open(in)
	require.NoError(t, err)
	defer f.Close()
	res = runCmd(t, nil, f, "--progress", "off", "--dead-letter", dl)
	assert.Equal(t, exitUsage, res.status, res.stderr)
	assert.Contains(t, res.stderr, "pcupsert: stdin: another pcupsert is writing its dead letters to it")

	res = runCmd(t, nil, nil, "--dry-run", "--dead-letter", dl, in)
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.NoFileExists(t, dl)

	lock.release()
	res = runCmd(t, nil, nil, "--progress", "off", "--dead-letter", dl, in)
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.NoFileExists(t, dl, "nothing failed: the file the lock created is removed")
}

// Several runs may read one input at once (each holds a shared lock on
// it), but a run that would write its dead letters into a file another
// run reads is refused, exit status 2, before it truncates it.
func TestRunsMayReadOneInputAtOnceButNotWriteLettersIntoIt(t *testing.T) {
	if !lockSupported {
		t.Skip("no flock on this system: files are not locked")
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.ndjson")
	content := records(t, 3)
	require.NoError(t, os.WriteFile(in, []byte(content), 0o600))
	f, err := os.Open(in)
	require.NoError(t, err)
	defer f.Close()
	lock, err := lockForReading(f) // a run reading it
	require.NoError(t, err)
	defer lock.release()

	res := runCmd(t, nil, nil, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl.ndjson"), in)
	assert.Equal(t, exitOK, res.status, "a second reader; stderr:\n%s", res.stderr)

	res = runCmd(t, nil, strings.NewReader("not json\n"), "--progress", "off", "--dead-letter", in)
	assert.Equal(t, exitUsage, res.status, res.stderr)
	assert.Contains(t, res.stderr, "pcupsert: --dead-letter "+in+": another pcupsert is reading it")
	assert.Equal(t, content, readString(t, in), "the file being read is as it was")
}

// --dead-letter /dev/stdout (or /dev/stderr) with stdout redirected to a
// file names a different file in each process: it is a link to
// /proc/self/fd/1. Two runs at once, each writing its letters to its own
// redirected stdout, both run: the lock is on the file the path opens,
// each run's own, not on a name (/dev/stdout.lock, which root could
// create, and which every run would share). The test uses a link of its
// own to /proc/self/fd/1, which is what /dev/stdout is.
func TestRunsWithTheDeadLetterFileOnTheirOwnRedirectedStdoutDoNotClash(t *testing.T) {
	if runtime.GOOS != "linux" || !lockSupported {
		t.Skip("/proc/self/fd and flock: Linux")
	}
	dir := t.TempDir()
	link := filepath.Join(dir, "stdout") // as /dev/stdout -> /proc/self/fd/1
	require.NoError(t, os.Symlink("/proc/self/fd/1", link))
	inA, inB := filepath.Join(dir, "a.ndjson"), filepath.Join(dir, "b.ndjson")
	require.NoError(t, os.WriteFile(inA, []byte("bad line of a\n{\"id\":\"a1\",\"values\":[1,2]}\n"), 0o600))
	require.NoError(t, os.WriteFile(inB, []byte("bad line of b\n{\"id\":\"b1\",\"values\":[1,2]}\n"), 0o600))
	srv, arrived, release := heldServer(t)
	other := upserttest.NewServer()
	t.Cleanup(other.Close)

	// child runs the command in a child process whose stdout is the file out.
	child := func(host, in, out string) (*exec.Cmd, *strings.Builder) {
		raw, err := json.Marshal([]string{"--host", host, "--progress", "off", "--dead-letter", link, in})
		require.NoError(t, err)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childArgs+"="+string(raw), "PINECONE_API_KEY=test-key-for-upserttest")
		f, err := os.Create(out)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		var stderr strings.Builder
		cmd.Stdout, cmd.Stderr = f, &stderr
		return cmd, &stderr
	}
	a, _ := child(srv.Host(), inA, filepath.Join(dir, "a.out"))
	require.NoError(t, a.Start())
	t.Cleanup(func() { _ = a.Process.Kill(); _ = a.Wait() })
	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the first run sent nothing")
	}
	b, bErr := child(other.Host(), inB, filepath.Join(dir, "b.out"))
	err := b.Run()
	status := exitStatus(t, err)
	release()
	_ = a.Wait()
	assert.NotContains(t, bErr.String(), "another pcupsert is writing to it",
		"the second run writes its own stdout, not the first run's")
	assert.Equal(t, exitFailed, status, "its bad line; stderr:\n%s", bErr.String())
	assert.Contains(t, readString(t, filepath.Join(dir, "b.out")), "dead letters: 1 in "+link, "its report, on its stdout")
	assert.NoFileExists(t, link+".lock")
}

// A file at PATH.lock next to --dead-letter PATH (a user's own file, whose
// name happens to be the dead-letter file's plus ".lock") is left as it
// is: the dead-letter file is locked itself, and no run makes, locks or
// removes PATH.lock.
func TestAFileNamedAfterTheDeadLetterFilePlusLockIsLeftAlone(t *testing.T) {
	dir := t.TempDir()
	dl := filepath.Join(dir, "dl")
	require.NoError(t, os.WriteFile(dl+".lock", []byte("the user's own file\n"), 0o644))
	res := runCmd(t, nil, strings.NewReader(records(t, 3)), "--progress", "off", "--dead-letter", dl)
	require.Equal(t, exitOK, res.status, res.stderr)
	require.FileExists(t, dl+".lock", "a file the run did not create was deleted")
	assert.Equal(t, "the user's own file\n", readString(t, dl+".lock"))
	assert.NoFileExists(t, dl, "nothing failed")

	// Nor is it refused as an input, or as the checkpoint.
	res = runCmd(t, nil, nil, "--progress", "off", "--dead-letter", dl, "--checkpoint", filepath.Join(dir, "ckpt"), dl+".lock")
	assert.Equal(t, exitFailed, res.status, "its line is not a record; stderr:\n%s", res.stderr)
	assert.NotContains(t, res.stderr, "lock file")
	assert.Equal(t, "the user's own file\n", readString(t, dl+".lock"))
}

// The empty dead-letter file a killed run leaves (it is created at the
// start, for its lock) is removed by the next run that writes no letter in
// it; a dead-letter file holding letters is left as it is.
func TestAnEmptyDeadLetterFileLeftByAKilledRunIsRemovedByTheNext(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no locks, so no file created at the start")
	}
	dir := t.TempDir()
	dl := filepath.Join(dir, "failed.ndjson")
	require.NoError(t, os.WriteFile(dl, nil, 0o600)) // as a killed run leaves it
	res := runCmd(t, nil, strings.NewReader(records(t, 3)), "--progress", "off", "--dead-letter", dl)
	require.Equal(t, exitOK, res.status, res.stderr)
	assert.NoFileExists(t, dl)

	require.NoError(t, os.WriteFile(dl, []byte("{\"line\":1,\"raw\":\"x\",\"error\":\"bad\"}\n"), 0o600))
	res = runCmd(t, nil, strings.NewReader(records(t, 3)), "--progress", "off", "--dead-letter", dl)
	require.Equal(t, exitOK, res.status, res.stderr)
	assert.FileExists(t, dl, "an earlier run's letters stay")
}
