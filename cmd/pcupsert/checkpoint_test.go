package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/ndjson"
	"github.com/upsertlib/upsert/upserttest"
)

// A checkpoint holds the count of records settled, the identity of the
// input (the SHA-256 of its first bytes, and how many), and where the
// records were settled: the index's host and the namespace.
func TestACheckpointNamesItsInput(t *testing.T) {
	dir := t.TempDir()
	ckpt, in := filepath.Join(dir, "ckpt"), filepath.Join(dir, "in.ndjson")
	input := records(t, 3)
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	res := runCmd(t, nil, nil, "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl"), in)
	require.Equal(t, exitOK, res.status, res.stderr)
	got, err := os.ReadFile(ckpt)
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("3\n%v\n", idOf([]byte(input)))+embeddedTarget, string(got))
	assert.Regexp(t, `^3\ninput 102 [0-9a-f]{64}\ntarget "embedded loopback index" "__default__"\n$`, string(got), "the whole input, of 102 bytes")
}

// A checkpoint saved for one input, given with another (a script that
// loads several files with one --checkpoint, a regenerated export), is
// refused before anything is sent, with exit status 2: resuming would skip
// as many records of the other input, never sent. The message says to
// remove the checkpoint to start over, which then loads every record.
func TestACheckpointOfAnotherInputDoesNotSkipItsRecords(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	a, b := filepath.Join(dir, "a.ndjson"), filepath.Join(dir, "b.ndjson")
	require.NoError(t, os.WriteFile(a, []byte(strings.ReplaceAll(records(t, 3), `"r`, `"a`)), 0o600))
	require.NoError(t, os.WriteFile(b, []byte(records(t, 5)), 0o600))

	res := runCmd(t, nil, nil, "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl-a"), a)
	require.Equal(t, exitOK, res.status, res.stderr)
	saved, err := os.ReadFile(ckpt)
	require.NoError(t, err)

	srv := upserttest.NewServer()
	defer srv.Close()
	res = runCmd(t, nil, nil, append(remote(t, srv), "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl-b"), b)...)
	assert.Equal(t, exitUsage, res.status, "stderr:\n%s", res.stderr)
	assert.Contains(t, res.stderr, "the checkpoint "+ckpt+" was saved for another input: "+b+" does not start as that input did")
	assert.Contains(t, res.stderr, "remove "+ckpt+" to load "+b+" from its start")
	assert.Zero(t, srv.Stats().Requests, "nothing was sent")
	got, err := os.ReadFile(ckpt)
	require.NoError(t, err)
	assert.Equal(t, string(saved), string(got), "the checkpoint is left as it was")

	require.NoError(t, os.Remove(ckpt))
	res = runCmd(t, nil, nil, append(remote(t, srv), "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl-b"), b)...)
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.Equal(t, 5, srv.Count("__default__"))
}

// An input that grew at its end since its checkpoint was saved (a log, an
// export still being written) is the same input: the run resumes it, and
// sends what was added. So is stdin fed the same input again.
func TestACheckpointResumesAnInputThatGrew(t *testing.T) {
	dir := t.TempDir()
	ckpt, in := filepath.Join(dir, "ckpt"), filepath.Join(dir, "in.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 3)), 0o600))
	res := runCmd(t, nil, nil, "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl"), in)
	require.Equal(t, exitOK, res.status, res.stderr)

	require.NoError(t, os.WriteFile(in, []byte(records(t, 5)), 0o600))
	res = runCmd(t, nil, nil, "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl"), in)
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.Equal(t, "3 (settled by an earlier run: --checkpoint)", reportValue(t, res.stdout, "skipped"))
	assert.Equal(t, "2", reportValue(t, res.stdout, "upserted"))

	// The same through stdin, with an input longer than the identity.
	big := records(t, 3000)
	require.Greater(t, len(big), headBytes)
	stdinCkpt := filepath.Join(dir, "stdin-ckpt")
	res = runCmd(t, nil, strings.NewReader(big), "--checkpoint", stdinCkpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl"))
	require.Equal(t, exitOK, res.status, res.stderr)
	assert.Regexp(t, `^3000\ninput 65536 `, readString(t, stdinCkpt))
	res = runCmd(t, nil, strings.NewReader(big+records(t, 3001)[len(big):]), "--checkpoint", stdinCkpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl"))
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.Equal(t, "1", reportValue(t, res.stdout, "upserted"))
	res = runCmd(t, nil, strings.NewReader("\n"+big), "--checkpoint", stdinCkpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl"))
	assert.Equal(t, exitUsage, res.status, "another input on stdin")
	assert.Contains(t, res.stderr, "was saved for another input: stdin does not start as that input did")
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// A checkpoint of an earlier pcupsert, a count alone, is taken as it is,
// with a warning that says what to do if it belongs to another input; the
// run's saves then name the input.
func TestACheckpointWithoutItsInputIsTakenWithAWarning(t *testing.T) {
	dir := t.TempDir()
	ckpt, in := filepath.Join(dir, "ckpt"), filepath.Join(dir, "in.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 5)), 0o600))
	require.NoError(t, os.WriteFile(ckpt, []byte("3\n"), 0o600))
	res := runCmd(t, nil, nil, "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl"), in)
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.Contains(t, res.stderr, "pcupsert: the checkpoint "+ckpt+" does not say which input it was saved for (an earlier pcupsert wrote it): "+
		"skipping the first 3 records of "+in+" as it says; if it belongs to another input, stop and remove it")
	assert.Equal(t, "2", reportValue(t, res.stdout, "upserted"))
	assert.Regexp(t, `^5\ninput \d+ [0-9a-f]{64}\ntarget "embedded loopback index" "__default__"\n$`, readString(t, ckpt))

	for _, bad := range []string{"x\n", "3\ninput 12\n", "3\nsomething else\n"} {
		require.NoError(t, os.WriteFile(ckpt, []byte(bad), 0o600))
		res = runCmd(t, nil, nil, "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl"), in)
		assert.Equal(t, exitFailed, res.status, "%q", bad)
		assert.Contains(t, res.stderr, "not a pcupsert checkpoint", "%q", bad)
	}
}

// A Ctrl-C while the run waits for the start of stdin, to check it against
// the checkpoint, ends the run: nothing was sent.
func TestAnInterruptWhileCheckingStdinAgainstTheCheckpointEndsTheRun(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	require.NoError(t, os.WriteFile(ckpt, []byte(fmt.Sprintf("3\n%v\n", idOf([]byte(records(t, 3))))), 0o600))
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	res := runCmd(t, ctx, pr, "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl"))
	assert.Equal(t, exitFailed, res.status)
	assert.Contains(t, res.stderr, "interrupted while waiting for the start of the input; nothing was sent")
}

// A --checkpoint that cannot be written (a directory that does not exist,
// a directory as the path) is a usage error before anything starts, not a
// silent run that would restart from the beginning when interrupted.
func TestACheckpointThatCannotBeSavedIsReported(t *testing.T) {
	dir := t.TempDir()
	for _, ckpt := range []string{filepath.Join(dir, "no-such-dir", "ckpt"), dir} {
		res := runCmd(t, nil, strings.NewReader(records(t, 20)), "--checkpoint", ckpt, "--progress", "off", "--dead-letter", deadLetterPath(t))
		assert.Equal(t, exitUsage, res.status)
		assert.Contains(t, res.stderr, "pcupsert: --checkpoint "+ckpt+": cannot be saved there: ")
		assert.NotContains(t, res.stderr, "embedded loopback index", "nothing was opened")
	}
	assert.NoDirExists(t, filepath.Join(dir, "no-such-dir"))
}

// A save that fails during the run (the directory removed, a full disk) is
// told on stderr, once per cause, not only logged by the library: the user
// counts on resuming.
func TestACheckpointSaveThatFailsIsToldOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpts")
	require.NoError(t, os.Mkdir(dir, 0o700))
	path := filepath.Join(dir, "ckpt")
	var con strings.Builder
	c := durableCheckpoint{
		checkpointFile: &checkpointFile{path: path, head: &inputHead{}},
		dead:           &deadLetters{path: filepath.Join(t.TempDir(), "dl")},
		failed:         saveReporter(&con, path),
	}
	ctx := context.Background()
	require.NoError(t, c.Save(ctx, 1))
	require.NoError(t, os.RemoveAll(dir))
	for n := range 3 {
		err := c.Save(ctx, int64(2+n))
		require.Error(t, err)
		assert.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
	}
	assert.Equal(t, "pcupsert: could not save the checkpoint "+path+": creating a file in "+dir+": no such file or directory; "+
		"a run resumed from it sends again what it does not cover\n", con.String(), "once for the three saves")

	// Another cause is told too.
	require.NoError(t, os.WriteFile(dir, nil, 0o600)) // the directory is now a file
	require.Error(t, c.Save(ctx, 9))
	assert.Len(t, regexp.MustCompile(`could not save`).FindAllString(con.String(), -1), 2, con.String())
}

// deniedFrom is a fault script: the index denies every request that
// carries a record from r50 on, which stops the run.
func deniedFrom(req upserttest.Request) upserttest.Fault {
	for _, id := range req.IDs {
		if n, err := strconv.Atoi(strings.TrimPrefix(id, "r")); err == nil && n >= 50 {
			return upserttest.Fault{Code: codes.Unauthenticated}
		}
	}
	return upserttest.Fault{}
}

// A failure that says nothing against its record (upsert.Failure.Resend:
// here a denied key, which stops the run) is left to the next run when
// there is a checkpoint, which stops before it: not a dead letter, which a
// replay would send a second time. Without a checkpoint nothing sends it
// again: it is a dead letter. Either way the run exits 1, and the report's
// counts add up: the records' dead letters are the failed ones not left
// to resume.
func TestResendFailuresAreLeftToTheCheckpointNotDeadLetters(t *testing.T) {
	tests := []struct {
		name       string
		checkpoint bool
	}{
		{"with a checkpoint, left to resume", true},
		{"without a checkpoint, dead letters", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			ckpt, dl, in := filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson"), filepath.Join(dir, "in.ndjson")
			// r3 is refused before sending (all-zero values): a failure
			// for good.
			input := strings.Replace(records(t, 100), `{"id":"r3","values":[3,0.5,0.25]}`, `{"id":"r3","values":[0,0,0]}`, 1)
			require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
			srv := upserttest.NewServer(upserttest.WithFaults(deniedFrom))
			defer srv.Close()
			args := append(remote(t, srv), "--json", "--progress", "off", "--batch-size", "10", "--concurrency", "1", "--dead-letter", dl)
			if tt.checkpoint {
				args = append(args, "--checkpoint", ckpt)
			}

			res := runCmd(t, nil, nil, append(args, in)...)
			assert.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
			s := jsonReport(t, res)
			assert.Equal(t, exitFailed, s.ExitStatus)
			assert.Equal(t, s.RecordsRead, s.Upserted+s.Failed)
			require.Greater(t, s.Failed, 1, "r3, and the records the denial failed")
			assert.True(t, s.Stopped, "the denial stopped the run")
			ids, _ := letters(t, dl)
			if tt.checkpoint {
				assert.Equal(t, s.Failed-1, s.LeftToResume, "every denied record")
				assert.Equal(t, map[string]int{"denied": s.LeftToResume}, s.LeftToResumeByClass)
				assert.Equal(t, []string{"r3"}, ids, "only the failure for good is a dead letter")
			} else {
				assert.Zero(t, s.LeftToResume)
				assert.Empty(t, s.LeftToResumeByClass)
				assert.Len(t, ids, s.Failed, "every failure is a dead letter: nothing resends them")
				assert.Contains(t, ids, "r50")
			}
			assert.Equal(t, s.Failed-s.LeftToResume, s.DeadLetters.Count, "the dead letters are the failed records not left to resume")
			assert.Equal(t, len(ids), s.DeadLetters.Count)
			if !tt.checkpoint {
				return
			}

			// The denial lifted, the next run sends what was left, and
			// no more letters: the file keeps r3's alone.
			srv.SetFaults(nil)
			res = runCmd(t, nil, nil, append(args, in)...)
			assert.Equal(t, exitOK, res.status, "stderr:\n%s", res.stderr)
			s = jsonReport(t, res)
			assert.Positive(t, s.Skipped, "r0 to r3 at least settled")
			assert.Equal(t, 100, s.Skipped+s.Upserted)
			assert.Equal(t, 99, srv.Count("__default__"), "every record but r3")
			ids, _ = letters(t, dl)
			assert.Equal(t, []string{"r3"}, ids)
		})
	}
}

// The human report says how many failed records are left to resume, and
// by class, apart from the dead letters; with a host that answers nothing
// (a port nobody listens on: the breaker gives up at once), the run's
// records are left to resume.
func TestTheReportTellsWhatIsLeftToResume(t *testing.T) {
	dir := t.TempDir()
	ckpt, dl, in := filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson"), filepath.Join(dir, "in.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 3000)), 0o600))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	host := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	t.Setenv("PINECONE_API_KEY", "test-key-for-upserttest")
	res := runCmd(t, nil, nil, "--host", host, "--progress", "off", "--checkpoint", ckpt, "--dead-letter", dl, in)
	assert.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
	left := regexp.MustCompile(`^(\d+) of the failed \(server (\d+)\): not dead letters; the next run with the same --checkpoint sends them again$`).
		FindStringSubmatch(reportValue(t, res.stdout, "left to resume"))
	require.NotNil(t, left, res.stdout)
	n, _ := strconv.Atoi(left[1])
	assert.Equal(t, left[1], left[2])
	assert.Equal(t, "3000 (server 3000)", reportValue(t, res.stdout, "failed"))
	var letterCount int
	if _, err := os.Stat(dl); err == nil {
		ids, _ := letters(t, dl)
		letterCount = len(ids)
	}
	assert.Equal(t, 3000, n+letterCount, "each failed record is left to resume or a dead letter")
	assert.Less(t, letterCount, 3000/2, "most are left to resume: the breaker gave up on them")
}

// A count-only checkpoint (an earlier pcupsert's) stays one: the library's
// save of the loaded position, before any input is read, must not give it
// the identity of nothing read, which matches every input and would let a
// run on another file skip records never sent.
func TestALegacyCheckpointIsNotTurnedIntoOneThatMatchesEveryInput(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	a, b := filepath.Join(dir, "a.ndjson"), filepath.Join(dir, "b.ndjson")
	require.NoError(t, os.WriteFile(a, []byte(strings.ReplaceAll(records(t, 3), `"r`, `"a`)), 0o600))
	require.NoError(t, os.WriteFile(b, []byte(records(t, 5)), 0o600))
	require.NoError(t, os.WriteFile(ckpt, []byte("3\n"), 0o600)) // an earlier pcupsert's, for a

	res := runCmd(t, nil, nil, "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl-a"), a)
	require.Equal(t, exitOK, res.status, res.stderr)
	t.Logf("checkpoint after the run of a: %q", readString(t, ckpt))

	srv := upserttest.NewServer()
	defer srv.Close()
	res = runCmd(t, nil, nil, append(remote(t, srv), "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl-b"), b)...)
	warned := strings.Contains(res.stderr, "does not say which input it was saved for")
	refused := strings.Contains(res.stderr, "was saved for another input")
	assert.True(t, warned || refused, "b's first 3 records are skipped silently (exit %d, %d stored); stderr:\n%s", res.status, srv.Count("__default__"), res.stderr)
}

// checkpointFor returns the content of a checkpoint of n records for input,
// as pcupsert wrote it for an input without bad lines before it kept the
// target line (embeddedTarget, or targetLine, follows it now).
func checkpointFor(n int, input string) string {
	return fmt.Sprintf("%d\n%v\n", n, idOf([]byte(input[:min(len(input), headBytes)])))
}

// embeddedTarget is the target line of a checkpoint of the embedded
// index's default namespace.
const embeddedTarget = `target "embedded loopback index" "__default__"` + "\n"

// targetLine returns the target line of a checkpoint of namespace ns of
// srv, as --host srv.Host() names it.
func targetLine(srv *upserttest.Server, ns string) string {
	return checkpointTarget{host: canonicalHost(srv.Host()), namespace: namespaceName(ns)}.String() + "\n"
}

// A Ctrl-C (or SIGTERM) while a resumed run still reads through the part
// of its input that the checkpoint skips is an interrupted run, reported
// as such (with --json too), exit status 1, and the checkpoint is kept.
// (The input ended early because the run was interrupted: pcupsert once
// said that the checkpoint was past the end of the input and to remove
// it, which would have sent the whole settled part again, and wrote no
// report.)
func TestAnInterruptWhileSkippingIsNotACheckpointPastTheEnd(t *testing.T) {
	input := records(t, 3000)
	require.Greater(t, len(input), headBytes)
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	saved := checkpointFor(2900, input)
	require.NoError(t, os.WriteFile(ckpt, []byte(saved), 0o600))

	// stdin gives the first 2500 records, then waits: the Ctrl-C comes
	// while the run skips what the checkpoint settled.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	after := make(chan struct{})
	defer close(after)
	stdin := &stallingReader{r: strings.NewReader(input[:strings.Index(input, `{"id":"r2500"`)]), stalled: cancel, after: after}
	srv := upserttest.NewServer()
	defer srv.Close()
	res := runCmd(t, ctx, stdin, append(remote(t, srv), "--checkpoint", ckpt, "--progress", "off", "--json",
		"--dead-letter", filepath.Join(dir, "dl"))...)

	require.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
	require.NotContains(t, res.stderr, "does not fit", "interrupted while skipping, not a checkpoint of another input; stderr:\n%s", res.stderr)
	require.NotContains(t, res.stderr, "remove "+ckpt, "the checkpoint is right: removing it would send 2900 settled records again")
	require.Regexp(t, `interrupted at line \d+ of stdin, while skipping the 2900 records that the checkpoint says a previous run settled; `+
		`nothing was sent, and the checkpoint .* is kept`, res.stderr)
	s := jsonReport(t, res)
	require.True(t, s.Interrupted)
	require.Positive(t, s.Skipped)
	require.LessOrEqual(t, s.Skipped, 2500, "what was read ahead is not counted")
	require.Equal(t, s.RecordsRead, s.Skipped)
	require.Zero(t, s.Upserted)
	require.Equal(t, exitFailed, s.ExitStatus)
	// An earlier pcupsert's (no target line): it now names the target the
	// run checked, its count and identity kept.
	require.Equal(t, saved+targetLine(srv, ""), readString(t, ckpt), "the checkpoint is kept")
}

// stallingReader reads r, then calls stalled and blocks until after is
// closed (the test's end), as a pipe whose producer is idle when the user
// presses Ctrl-C.
type stallingReader struct {
	r       io.Reader
	stalled func()
	after   chan struct{}
	once    sync.Once
}

func (s *stallingReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err == io.EOF {
		s.once.Do(s.stalled)
		<-s.after
	}
	return n, err
}

// An input truncated since its checkpoint was saved (a re-export that
// failed half-way) is a usage error, exit status 2, as a checkpoint of
// another input is: nothing was sent, and the command line must change.
// The message says what is known, whatever the input's size: the input is
// shorter than, or differs from, the one the checkpoint was saved for.
// (pcupsert once exited 1 for an input longer than the checkpoint's 64 KiB
// identity, and 2 with "saved for another input … which were never sent"
// for a shorter one.)
func TestATruncatedInputIsAUsageErrorAsAnotherInputIs(t *testing.T) {
	dir := t.TempDir()
	in, ckpt := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt")
	input := records(t, 3000)
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()
	args := append(remote(t, srv), "--checkpoint", ckpt, "--dead-letter", filepath.Join(dir, "dl"), "--progress", "off", in)
	res := runCmd(t, nil, nil, args...)
	require.Equal(t, exitOK, res.status, res.stderr)
	saved := readString(t, ckpt)
	requests := srv.Stats().Requests

	for _, truncated := range []string{
		input[:strings.Index(input, `{"id":"r2500"`)], // longer than the identity
		input[:strings.Index(input, `{"id":"r100"`)],  // shorter
	} {
		require.NoError(t, os.WriteFile(in, []byte(truncated), 0o600))
		res = runCmd(t, nil, nil, args...)
		require.Equal(t, exitUsage, res.status, "the checkpoint does not fit the input, nothing was sent; stderr:\n%s", res.stderr)
		require.Contains(t, res.stderr, "the input is shorter than, or differs from, the one the checkpoint was saved for")
		require.Contains(t, res.stderr, "remove "+ckpt+" to load "+in+" from its start")
		require.NotContains(t, res.stderr, "never sent")
		require.Equal(t, saved, readString(t, ckpt), "the checkpoint is left as it was")
		require.Equal(t, requests, srv.Stats().Requests, "nothing was sent")
	}
}

// --checkpoint and --dead-letter naming one file, by the same path or
// another (through a link to its directory), are refused, exit status 2:
// each save of the checkpoint would replace the dead letters. (pcupsert
// once accepted them, reported "dead letters: 1 in PATH", and the file
// held the checkpoint.)
func TestACheckpointAtTheDeadLetterPathIsRefused(t *testing.T) {
	dir := t.TempDir()
	in, both := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "state")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 100)+"not json\n"+records(t, 200)[len(records(t, 100)):]), 0o600))
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(dir, link))
	srv := upserttest.NewServer()
	defer srv.Close()
	for _, dl := range []string{both, filepath.Join(dir, ".", "state"), filepath.Join(link, "state")} {
		res := runCmd(t, nil, nil, append(remote(t, srv), "--checkpoint", both, "--dead-letter", dl, "--progress", "off", in)...)
		require.Equal(t, exitUsage, res.status, "stderr:\n%s", res.stderr)
		require.Contains(t, res.stderr, "--checkpoint "+both+" and --dead-letter "+dl+" are the same file")
		require.NoFileExists(t, both)
	}
	require.Zero(t, srv.Stats().Requests, "nothing was sent")
}

// A load that finished (the checkpoint covers every record) and is run
// again with the same --checkpoint (a retry wrapper, a cron job) does not
// report the bad line after the input's last record again: the checkpoint
// keeps the line up to which bad lines are reported. (pcupsert once
// reported it, appended another letter and exited 1 at every rerun.)
func TestARerunOfAFinishedLoadDoesNotReportItsTrailingBadLineAgain(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 5)+"not json\n"), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()
	args := append(remote(t, srv), "--checkpoint", ckpt, "--dead-letter", dl, "--progress", "off", "--json", in)

	res := runCmd(t, nil, nil, args...)
	require.Equal(t, exitFailed, res.status, res.stderr)
	require.Equal(t, 1, jsonReport(t, res).BadLines)
	require.Regexp(t, `^5\ninput \d+ [0-9a-f]{64}\ntarget "127\.0\.0\.1:\d+" "__default__"\nreported-through 6\n$`, readString(t, ckpt),
		"the checkpoint covers every record, and the bad line")

	for rerun := range 2 {
		res = runCmd(t, nil, nil, args...)
		require.Equal(t, exitOK, res.status, "rerun %d: stderr:\n%s", rerun+1, res.stderr)
		s := jsonReport(t, res)
		require.Equal(t, 5, s.Skipped)
		require.Zero(t, s.BadLines, "the bad line was reported by the run that settled the input")
		_, bad := letters(t, dl)
		require.Len(t, bad, 1, "one letter for the one bad line, however often the finished load is run; rerun %d", rerun+1)
	}
}

// A checkpoint that does not say up to which line bad lines are reported
// (one of an earlier pcupsert) reports the bad line after its last record
// once more, as it cannot know, and then says it: the run saves the
// checkpoint though no record was settled, and the next run reports it no
// more.
func TestACheckpointOfAnEarlierPcupsertReportsTheTrailingBadLineOnceMore(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	input := records(t, 5) + "not json\n"
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	require.NoError(t, os.WriteFile(ckpt, []byte(checkpointFor(5, input)), 0o600))
	require.NoError(t, os.WriteFile(dl, []byte(`{"line":6,"raw":"not json","error":"line 6: invalid JSON at byte 2"}`+"\n"), 0o600))
	args := []string{"--checkpoint", ckpt, "--dead-letter", dl, "--progress", "off", "--json", in}

	res := runCmd(t, nil, nil, args...)
	require.Equal(t, exitFailed, res.status, res.stderr)
	require.Equal(t, 1, jsonReport(t, res).BadLines, "it cannot know")
	require.Equal(t, checkpointFor(5, input)+embeddedTarget+"reported-through 6\n", readString(t, ckpt))

	res = runCmd(t, nil, nil, args...)
	require.Equal(t, exitOK, res.status, res.stderr)
	require.Zero(t, jsonReport(t, res).BadLines)
	_, bad := letters(t, dl)
	require.Len(t, bad, 2)
}

// A second run on a checkpoint whose lock another holds is refused, exit
// status 2, before anything is opened; the lock, once let go, takes its
// file with it.
func TestACheckpointInUseIsRefused(t *testing.T) {
	if !lockSupported {
		t.Skip("no flock on this system: the checkpoint is not locked")
	}
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	lock, err := lockFile(ckpt + ".lock")
	require.NoError(t, err)
	_, err = lockFile(ckpt + ".lock")
	require.ErrorIs(t, err, errLocked)

	res := runCmd(t, nil, strings.NewReader(records(t, 3)), "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl"))
	assert.Equal(t, exitUsage, res.status)
	assert.Contains(t, res.stderr, "pcupsert: --checkpoint "+ckpt+": another pcupsert holds it (a lock on "+ckpt+".lock)")
	assert.NotContains(t, res.stderr, "embedded loopback index", "nothing was opened")

	lock.release()
	assert.NoFileExists(t, ckpt+".lock")
	res = runCmd(t, nil, strings.NewReader(records(t, 3)), "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl"))
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.NoFileExists(t, ckpt+".lock", "let go at the end of the run")
}

// A second run on a dead-letter file that another holds (a lock on the
// file itself) is refused, exit status 2, naming the file and the other
// run, before it truncates the file; once the other lets go, the file is
// the next run's, and no PATH.lock was ever made.
func TestADeadLetterFileInUseIsRefusedBeforeItIsTruncated(t *testing.T) {
	if !lockSupported {
		t.Skip("no flock on this system: the dead-letter file is not locked")
	}
	dir := t.TempDir()
	dl := filepath.Join(dir, "dl.ndjson")
	held := `{"line":1,"raw":"x","error":"line 1: invalid JSON at byte 1"}` + "\n"
	require.NoError(t, os.WriteFile(dl, []byte(held), 0o600))
	lock, err := lockForWriting(dl) // another run's
	require.NoError(t, err)
	_, err = lockForWriting(dl)
	require.ErrorIs(t, err, errLocked)

	res := runCmd(t, nil, strings.NewReader("not json\n"+records(t, 3)), "--progress", "off", "--dead-letter", dl)
	assert.Equal(t, exitUsage, res.status)
	assert.Contains(t, res.stderr, "pcupsert: --dead-letter "+dl+": another pcupsert is writing to it, and this run would truncate it")
	assert.NotContains(t, res.stderr, "embedded loopback index", "nothing was opened")
	assert.Equal(t, held, readString(t, dl), "the other run's letters are kept")

	lock.release()
	require.FileExists(t, dl, "the lock did not create the file: its release leaves it")
	res = runCmd(t, nil, strings.NewReader("not json\n"+records(t, 3)), "--progress", "off", "--dead-letter", dl)
	assert.Equal(t, exitFailed, res.status, res.stderr)
	_, bad := letters(t, dl)
	assert.Equal(t, []int{1}, bad, "this run's letter")
	assert.NoFileExists(t, dl+".lock", "the file itself is locked, not PATH.lock")
}

// Two runs at once writing one dead-letter file (two files loaded in one
// directory with the default --dead-letter, or the same one given to
// both) would each truncate it and write from its start, the last to
// flush overwriting the other's letters: the second is refused (exit
// status 2) while the first runs, and the first keeps its letters.
func TestTwoRunsWithOneDeadLetterFileKeepBothRunsLetters(t *testing.T) {
	if !lockSupported {
		t.Skip("no flock on this system: the dead-letter file is not locked")
	}
	dir := t.TempDir()
	t.Chdir(dir) // the default --dead-letter, pcupsert-failed.ndjson, is there
	inA, inB := filepath.Join(dir, "a.ndjson"), filepath.Join(dir, "b.ndjson")
	require.NoError(t, os.WriteFile(inA, []byte("bad line of a\n{\"id\":\"a1\",\"values\":[1,2]}\n"), 0o600))
	require.NoError(t, os.WriteFile(inB, []byte("bad line of b\n{\"id\":\"b1\",\"values\":[1,2]}\n"), 0o600))

	// The first run's request is held while the second starts.
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	srv := upserttest.NewServer(upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
		once.Do(func() { close(arrived) })
		<-release
		return upserttest.Fault{}
	}))
	defer srv.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	args := append(remote(t, srv), "--progress", "off")

	first := make(chan result, 1)
	go func() { first <- runCmd(t, nil, nil, append(args, inA)...) }()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run sent nothing")
	}
	second := runCmd(t, nil, nil, append(args, inB)...)
	assert.Equal(t, exitUsage, second.status, "stderr:\n%s", second.stderr)
	assert.Contains(t, second.stderr, "pcupsert: --dead-letter "+defaultDeadLetter+": another pcupsert is writing to it")

	close(release)
	a := <-first
	require.Equal(t, exitFailed, a.status, "a's bad line; stderr:\n%s", a.stderr)
	assert.Contains(t, a.stdout, "dead letters: 1 in "+defaultDeadLetter)
	raw := readString(t, defaultDeadLetter)
	assert.Contains(t, raw, `"raw":"bad line of a"`, "the first run's letter is kept")
	assert.NotContains(t, raw, "bad line of b", "the refused run wrote nothing")
	assert.NoFileExists(t, defaultDeadLetter+".lock", "the file itself is locked, not PATH.lock")
}

// --dry-run with the --checkpoint of a load that finished says what the
// resumed run would do: skip every record and send none, exit status 0,
// rather than "would send 100 records". It reads the checkpoint without
// writing it, or leaving its lock file behind.
func TestADryRunWithACheckpointSaysWhatTheResumedRunWouldSend(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 100)), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()

	done := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--checkpoint", ckpt, "--dead-letter", dl, in)...)
	require.Equal(t, exitOK, done.status, "stderr:\n%s", done.stderr)
	again := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--json", "--checkpoint", ckpt, "--dead-letter", dl, in)...)
	require.Equal(t, exitOK, again.status)
	require.Zero(t, jsonReport(t, again).Upserted, "the real resumed run sends nothing")
	saved := readString(t, ckpt)
	info, err := os.Stat(ckpt)
	require.NoError(t, err)

	dry := runCmd(t, nil, nil, append(remote(t, srv), "--dry-run", "--json", "--checkpoint", ckpt, in)...)
	require.Equal(t, exitOK, dry.status, "stderr:\n%s", dry.stderr)
	var rep dryRunReport
	require.NoError(t, json.Unmarshal([]byte(dry.stdout), &rep), "stdout:\n%s", dry.stdout)
	assert.Equal(t, dryRunReport{
		DryRun: true, Input: in, Format: "ndjson", Checkpoint: ckpt, Skipped: 100, RecordsRead: 100,
		BatchSize: 1000, Namespaces: map[string]int{}, ExitStatus: exitOK,
	}, rep)

	human := runCmd(t, nil, nil, append(remote(t, srv), "--dry-run", "--checkpoint", ckpt, in)...)
	require.Equal(t, exitOK, human.status, "stderr:\n%s", human.stderr)
	assert.Contains(t, human.stdout, "skipped        100 records, settled by an earlier run (--checkpoint "+ckpt)
	assert.Contains(t, human.stdout, "would send     0 records in 0 batches")

	assert.Equal(t, saved, readString(t, ckpt), "the dry run does not write the checkpoint")
	after, err := os.Stat(ckpt)
	require.NoError(t, err)
	assert.Equal(t, info.ModTime(), after.ModTime(), "nor replace it")
	assert.NoFileExists(t, ckpt+".lock")
}

// A dry run resumed from a checkpoint in the middle of the input checks
// only what follows it: the bad line the earlier run reported is not
// reported or counted again, the one after the checkpoint is, and the
// records after it are what would be sent. A run on the checkpoint under
// way does not stop it: it takes no lock.
func TestADryRunWithACheckpointChecksOnlyWhatFollowsIt(t *testing.T) {
	dir := t.TempDir()
	in, ckpt := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt")
	lines := strings.SplitAfter(records(t, 6), "\n")
	input := lines[0] + "not json\n" + strings.Join(lines[1:3], "") + "oops\n" + strings.Join(lines[3:], "")
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	// 3 records settled, and the bad lines through line 4 (the first).
	require.NoError(t, os.WriteFile(ckpt, []byte(checkpointFor(3, input)+"reported-through 4\n"), 0o600))
	if lockSupported {
		lock, err := lockFile(ckpt + ".lock") // a run under way
		require.NoError(t, err)
		defer lock.release()
	}

	dry := runCmd(t, nil, nil, "--dry-run", "--json", "--checkpoint", ckpt, in)
	assert.Equal(t, exitFailed, dry.status, "line 5 is bad, and after the checkpoint; stderr:\n%s", dry.stderr)
	var rep dryRunReport
	require.NoError(t, json.Unmarshal([]byte(dry.stdout), &rep), "stdout:\n%s", dry.stdout)
	assert.Equal(t, 3, rep.Skipped)
	assert.Equal(t, 1, rep.SkippedBadLines)
	assert.Equal(t, 1, rep.BadLines)
	assert.Equal(t, 3, rep.Records, "r3 to r5")
	assert.Equal(t, 6, rep.RecordsRead)
	assert.NotContains(t, dry.stderr, "line 2:", "reported by the earlier run")
	assert.Contains(t, dry.stderr, "line 5: invalid JSON")
}

// A dry run refuses the checkpoint of another input, or one past the end
// of its input, as the run would (exit status 2), and leaves it as it is.
func TestADryRunRefusesTheCheckpointOfAnotherInput(t *testing.T) {
	dir := t.TempDir()
	in, ckpt := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 3)), 0o600))
	for _, c := range []struct{ saved, want string }{
		{checkpointFor(2, records(t, 5)[100:]), "was saved for another input"},
		{"5\n", "does not fit " + in},
	} {
		require.NoError(t, os.WriteFile(ckpt, []byte(c.saved), 0o600))
		res := runCmd(t, nil, nil, "--dry-run", "--checkpoint", ckpt, in)
		assert.Equal(t, exitUsage, res.status, "stderr:\n%s", res.stderr)
		assert.Contains(t, res.stderr, c.want)
		assert.Empty(t, res.stdout)
		assert.Equal(t, c.saved, readString(t, ckpt))
	}
}

// The embedded index is gone when pcupsert exits: a --checkpoint with it
// is warned of, since a resumed run would skip records its new embedded
// index never got.
func TestACheckpointWithTheEmbeddedIndexIsWarnedOf(t *testing.T) {
	dir := t.TempDir()
	res := runCmd(t, nil, strings.NewReader(records(t, 3)), "--checkpoint", filepath.Join(dir, "ckpt"), "--progress", "off",
		"--dead-letter", filepath.Join(dir, "dl"))
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.Contains(t, res.stderr, "pcupsert: warning: --checkpoint with the embedded loopback index, which is gone when pcupsert exits")

	srv := upserttest.NewServer()
	defer srv.Close()
	res = runCmd(t, nil, strings.NewReader(records(t, 3)), append(remote(t, srv), "--checkpoint", filepath.Join(dir, "ckpt2"),
		"--progress", "off", "--dead-letter", filepath.Join(dir, "dl"))...)
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.NotContains(t, res.stderr, "warning")
}

// A run that settled no record but reported bad lines (the index denied
// the key from the start) keeps them in its checkpoint: the next run does
// not report them again, and appends to their letters rather than
// replacing them.
func TestABadLineReportedByARunThatSettledNothingIsNotReportedAgain(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	require.NoError(t, os.WriteFile(in, []byte("not json\n"+records(t, 3)), 0o600))
	srv := upserttest.NewServer(upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
		return upserttest.Fault{Code: codes.Unauthenticated}
	}))
	defer srv.Close()
	args := append(remote(t, srv), "--checkpoint", ckpt, "--dead-letter", dl, "--progress", "off", in)

	res := runCmd(t, nil, nil, args...)
	require.Equal(t, exitFailed, res.status, res.stderr)
	require.Contains(t, res.stderr, "line 1: invalid JSON")
	require.Regexp(t, `^0\ninput \d+ [0-9a-f]{64}\ntarget "127\.0\.0\.1:\d+" "__default__"\nreported-through 1\n$`, readString(t, ckpt))

	srv.SetFaults(nil)
	res = runCmd(t, nil, nil, args...)
	require.Equal(t, exitOK, res.status, res.stderr)
	require.NotContains(t, res.stderr, "line 1:")
	require.Contains(t, res.stderr, "skipped 1 bad line of "+in+", which the checkpoint says a previous run reported")
	require.Equal(t, "3", reportValue(t, res.stdout, "upserted"))
	require.Contains(t, res.stdout, "earlier dead letters: 1 in "+dl)
	_, bad := letters(t, dl)
	require.Equal(t, []int{1}, bad, "the letter of the bad line is kept")
}

// A checkpoint that settled no record but says up to which line bad lines
// are reported names its input too: another input is refused, not
// stripped of its bad lines' reports.
func TestACheckpointOfReportedBadLinesOnlyRefusesAnotherInput(t *testing.T) {
	dir := t.TempDir()
	ckpt, in := filepath.Join(dir, "ckpt"), filepath.Join(dir, "in.ndjson")
	require.NoError(t, os.WriteFile(ckpt, []byte(fmt.Sprintf("0\n%v\nreported-through 2\n", idOf([]byte("x\n"+records(t, 3))))), 0o600))
	require.NoError(t, os.WriteFile(in, []byte("not json\n"+records(t, 3)), 0o600))
	res := runCmd(t, nil, nil, "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl"), in)
	assert.Equal(t, exitUsage, res.status, res.stderr)
	assert.Contains(t, res.stderr, "was saved for another input: "+in+" does not start as that input did, "+
		"and resuming would skip 0 records and the bad lines up to line (or row) 2 of it")
}

// A save keeps the loaded identity of the input, checked against it, when
// the run has read less of the input than it names (a run interrupted
// early, which saves how far bad lines are reported): a shorter identity
// would match more inputs.
func TestASaveKeepsTheLongerIdentityItLoaded(t *testing.T) {
	input := records(t, 3000)
	loaded := idOf([]byte(input[:headBytes]))
	head := &inputHead{}
	head.record([]byte(input[:100]))
	path := filepath.Join(t.TempDir(), "ckpt")
	c := &checkpointFile{path: path, loaded: 2900, saved: 2900, loadedID: &loaded, head: head, reported: func() int { return 7 }}
	require.NoError(t, c.Save(context.Background(), 2900))
	assert.Equal(t, fmt.Sprintf("2900\n%v\nreported-through 7\n", loaded), readString(t, path))
}

// A resumed run whose --dead-letter is a pipe (bash's process
// substitution, --dead-letter >(gzip > dl.gz), passes /dev/fd/63) does not
// hang: the "earlier dead letters" are counted in a regular file only (a
// read of the pipe waited for an EOF that the run itself held back).
func TestAResumedRunWithAPipeAsDeadLetterDoesNotHang(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/dev/fd of a pipe: Linux")
	}
	dir := t.TempDir()
	in, ckpt := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt")
	input := records(t, 5)
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	require.NoError(t, os.WriteFile(ckpt, []byte(checkpointFor(3, input)), 0o600)) // a resumed run

	r, w, err := os.Pipe() // r plays gzip, w is /dev/fd/63
	require.NoError(t, err)
	defer r.Close()
	dl := fmt.Sprintf("/dev/fd/%d", w.Fd())

	srv := upserttest.NewServer()
	defer srv.Close()
	args := append(remote(t, srv), "--checkpoint", ckpt, "--dead-letter", dl, "--progress", "off", in)
	done := make(chan result, 1)
	go func() { done <- runCmd(t, nil, nil, args...) }()
	select {
	case res := <-done:
		w.Close()
		require.Equal(t, exitOK, res.status, res.stderr)
	case <-time.After(10 * time.Second):
		w.Close() // lets the hung read see EOF
		<-done
		t.Fatalf("a resumed run with --dead-letter %s (a pipe) hung counting the earlier dead letters", dl)
	}
}

// The run removes its lock file PATH.lock at its end: a --dead-letter
// named so is refused, or every letter in it was removed with it.
func TestADeadLetterFileAtTheLockPathIsRefused(t *testing.T) {
	if !lockSupported {
		t.Skip("no lock file on this system")
	}
	dir := t.TempDir()
	in, ckpt := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "state")
	dl := ckpt + ".lock"
	require.NoError(t, os.WriteFile(in, []byte(records(t, 3)+"not json\n"), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()
	res := runCmd(t, nil, nil, append(remote(t, srv), "--checkpoint", ckpt, "--dead-letter", dl, "--progress", "off", in)...)
	if res.status == exitUsage {
		return // refused: fine
	}
	require.Contains(t, res.stdout, "dead letters: 1 in "+dl)
	require.FileExists(t, dl, "the report names a dead-letter file that the lock's release removed")
	_, bad := letters(t, dl)
	require.Equal(t, []int{4}, bad)
}

// A dead-letter file whose last line was cut by a kill (no "\n": the
// letter was being flushed) holds one letter, not two, as
// AppendDeadLetters counts.
func TestEarlierDeadLettersDoNotCountATornLastLine(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	input := records(t, 5)
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	require.NoError(t, os.WriteFile(ckpt, []byte(checkpointFor(3, input)), 0o600))
	require.NoError(t, os.WriteFile(dl, []byte(`{"line":2,"raw":"not json","error":"line 2: invalid JSON at byte 2"}`+"\n"+
		`{"id":"r9","values":[0.1,0.`), 0o600)) // the second letter torn by a kill
	srv := upserttest.NewServer()
	defer srv.Close()
	res := runCmd(t, nil, nil, append(remote(t, srv), "--checkpoint", ckpt, "--dead-letter", dl, "--progress", "off", "--json", in)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	require.Equal(t, 1, jsonReport(t, res).DeadLetters.Earlier, "one letter, and a torn line that is none")
}

// A dry run refuses a --checkpoint a run could not save, as the run would
// (exit status 2), without writing anything to find out.
func TestADryRunRefusesACheckpointThatCannotBeSaved(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 3)), 0o600))
	for _, ckpt := range []string{dir, filepath.Join(dir, "missing", "ckpt")} {
		res := runCmd(t, nil, nil, "--dry-run", "--checkpoint", ckpt, in)
		assert.Equal(t, exitUsage, res.status, "%s: stderr:\n%s", ckpt, res.stderr)
		assert.Contains(t, res.stderr, "cannot be saved there")
		real := runCmd(t, nil, nil, "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl"), in)
		assert.Equal(t, exitUsage, real.status, "the run refuses it too: %s", real.stderr)
	}
}

// deniedFromRow is a fault script: every request carrying a record whose
// id ends in a number >= from is denied, which stops the run.
func deniedFromRow(from int) upserttest.FaultFunc {
	return func(req upserttest.Request) upserttest.Fault {
		for _, id := range req.IDs {
			i := strings.LastIndexAny(id, "-r")
			if n, err := strconv.Atoi(id[i+1:]); err == nil && n >= from {
				return upserttest.Fault{Code: codes.Unauthenticated}
			}
		}
		return upserttest.Fault{}
	}
}

// exportRows returns the rows of a Parquet export of n records, whose
// embeddings the model number tells apart: same ids, same sizes, same
// bounds (and so the same footer, statistics included).
func exportRows(n int, model float32) []parquetRow {
	rows := make([]parquetRow, n)
	for i := range rows {
		rows[i] = parquetRow{ID: fmt.Sprintf("document-chunk-%06d", i), Values: []float32{model, float32(i), 1}}
	}
	return rows
}

// README, "Replays and resumed runs": a run whose input is "another file,
// a regenerated export ... refuses to start, with exit status 2". A
// Parquet file's first 64 KiB are the "id" column of its first row group
// alone, which an export regenerated with new embeddings for the same ids
// shares, as it shares its footer: the checkpoint of the old export was
// taken for it, and the resumed run skipped records whose new values were
// never sent, exiting 0. The checkpoint names a Parquet file by the start
// of each of its columns too: the run is refused and sends nothing, and
// once the checkpoint is removed the new values land.
func TestAParquetExportRegeneratedWithNewValuesIsNotTakenForTheOld(t *testing.T) {
	const n = 6000
	dir := t.TempDir()
	ckpt, dl := filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	old := writeParquet(t, exportRows(n, 1))
	srv := upserttest.NewServer(upserttest.WithFaults(deniedFromRow(3000)))
	defer srv.Close()
	args := append(remote(t, srv), "--progress", "off", "--batch-size", "100", "--concurrency", "1", "--checkpoint", ckpt, "--dead-letter", dl)
	res := runCmd(t, nil, nil, append(args, old)...)
	require.Equal(t, exitFailed, res.status, res.stderr)
	saved := readString(t, ckpt)
	settled, _ := strconv.Atoi(strings.SplitN(saved, "\n", 2)[0])
	require.Positive(t, settled, "run 1 settled records before the denial: %q", saved)
	assert.Regexp(t, `^\d+\ninput 65536 [0-9a-f]{64} parquet \d+ [0-9a-f]{64}\ntarget `, saved, "the file's size and the hash of its footer and columns' starts")

	regenerated := writeParquet(t, exportRows(n, 2))
	a, err := os.ReadFile(old)
	require.NoError(t, err)
	b, err := os.ReadFile(regenerated)
	require.NoError(t, err)
	require.Equal(t, a[:headBytes], b[:headBytes], "the first 64 KiB are the same")
	require.Len(t, b, len(a), "and so is the size")

	srv.SetFaults(nil)
	requests := srv.Stats().Requests
	res = runCmd(t, nil, nil, append(args, regenerated)...)
	assert.Equal(t, exitUsage, res.status, "the checkpoint of another export is refused; stderr:\n%s", res.stderr)
	assert.Contains(t, res.stderr, "the checkpoint "+ckpt+" was saved for another input: "+regenerated+" is not that Parquet file")
	assert.Equal(t, requests, srv.Stats().Requests, "nothing was sent")
	assert.Equal(t, saved, readString(t, ckpt), "the checkpoint is left as it was")

	require.NoError(t, os.Remove(ckpt))
	res = runCmd(t, nil, nil, append(args, regenerated)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	v, ok := srv.Vector("__default__", "document-chunk-000000")
	require.True(t, ok)
	assert.Equal(t, float32(2), (*v.Values)[0], "the regenerated values land")

	// The same export resumes from its own checkpoint.
	res = runCmd(t, nil, nil, append(args, regenerated)...)
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.Contains(t, res.stderr, fmt.Sprintf("skipped the first %d records", n))
}

// A checkpoint of a Parquet file written by an earlier pcupsert names it
// by its first 64 KiB alone. It is taken as it is, with a warning that
// says what to do if the export was regenerated, as a checkpoint that
// names no input is: the run that wrote it most likely read that very
// file, and refusing it would send its settled records again. The run's
// saves then name the file in full. (A file of less than 64 KiB was named
// whole: no warning.) An NDJSON input's checkpoint, as the current
// pcupsert writes it, is read and matched as it was.
func TestAParquetCheckpointOfAnEarlierPcupsertIsTakenWithAWarning(t *testing.T) {
	dir := t.TempDir()
	ckpt, dl := filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	in := writeParquet(t, exportRows(6000, 1))
	b, err := os.ReadFile(in)
	require.NoError(t, err)
	require.Greater(t, len(b), headBytes)
	require.NoError(t, os.WriteFile(ckpt, []byte(checkpointFor(4, string(b))), 0o600))
	res := runCmd(t, nil, nil, "--progress", "off", "--checkpoint", ckpt, "--dead-letter", dl, in)
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.Contains(t, res.stderr, "pcupsert: the checkpoint "+ckpt+" names "+in+" by its first 64 KiB only (an earlier pcupsert wrote it)")
	assert.Contains(t, res.stderr, "skipped the first 4 records")
	assert.Equal(t, "5996", reportValue(t, res.stdout, "upserted"))
	assert.Regexp(t, `^6000\ninput 65536 [0-9a-f]{64} parquet \d+ [0-9a-f]{64}\ntarget `, readString(t, ckpt))

	// A file shorter than 64 KiB was named whole: no warning.
	small := writeParquet(t, exportRows(10, 1))
	b, err = os.ReadFile(small)
	require.NoError(t, err)
	require.Less(t, len(b), headBytes)
	require.NoError(t, os.WriteFile(ckpt, []byte(checkpointFor(4, string(b))), 0o600))
	res = runCmd(t, nil, nil, "--progress", "off", "--checkpoint", ckpt, "--dead-letter", dl, small)
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.NotContains(t, res.stderr, "by its first 64 KiB only")
	assert.Equal(t, "6", reportValue(t, res.stdout, "upserted"))

	nd := filepath.Join(dir, "in.ndjson")
	input := records(t, 5)
	require.NoError(t, os.WriteFile(nd, []byte(input), 0o600))
	require.NoError(t, os.WriteFile(ckpt, []byte(checkpointFor(3, input)), 0o600))
	res = runCmd(t, nil, nil, "--progress", "off", "--checkpoint", ckpt, "--dead-letter", dl, nd)
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.NotContains(t, res.stderr, "by its first 64 KiB only")
	assert.Equal(t, "2", reportValue(t, res.stdout, "upserted"))
	assert.Equal(t, checkpointFor(5, input)+embeddedTarget, readString(t, ckpt), "the line of an NDJSON input is as it was")
}

// The identity line reads back as it was written, with or without the
// Parquet part; a Parquet part that is not whole is no checkpoint.
func TestAnInputIdentityReadsBackAsItWasWritten(t *testing.T) {
	ndjsonID := idOf([]byte("abc"))
	parquetID := idOf([]byte("PAR1"))
	parquetID.tail = inputTail{size: 4096}
	parquetID.tail.sum[0] = 7
	for _, id := range []inputID{ndjsonID, parquetID} {
		got, ok := parseInputID(id.String())
		assert.True(t, ok, id.String())
		assert.Equal(t, id, got)
	}
	sum := strings.Repeat("ab", 32)
	for _, bad := range []string{
		"input 3 " + sum + " parquet 4096",
		"input 3 " + sum + " parquet 11 " + sum,
		"input 3 " + sum + " footer 4096 " + sum,
		"input 3 " + sum + " parquet 4096 abc",
	} {
		_, ok := parseInputID(bad)
		assert.False(t, ok, bad)
	}
}

// xAmbiguousYDenied returns a fault script: the first request carrying x
// ends without an answer, so that x's next record that lands may be
// stale, and every request carrying y is denied, which stops the run.
func xAmbiguousYDenied() upserttest.FaultFunc {
	var once sync.Once
	return func(r upserttest.Request) upserttest.Fault {
		var f upserttest.Fault
		if slices.Contains(r.IDs, "x") {
			once.Do(func() { f = upserttest.Fault{Code: codes.DeadlineExceeded} })
		}
		if slices.Contains(r.IDs, "y") {
			f = upserttest.Fault{Code: codes.Unauthenticated}
		}
		return f
	}
}

// lettersOf returns the first value of each letter of id in the
// dead-letter file at path, in file order, and whether each is a
// may-be-stale letter.
func lettersOf(t *testing.T, path, id string) (firsts []float32, stale []bool) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r := ndjson.NewReader(f)
	for {
		v, err := r.Next()
		if errors.Is(err, io.EOF) {
			return firsts, stale
		}
		if err != nil || v.Id != id {
			continue
		}
		firsts = append(firsts, (*v.Values)[0])
		l, ok := recordLetter(r.Raw())
		stale = append(stale, ok && l.Class == ndjson.StaleClass)
	}
}

// README: a record that may be stale has a dead letter "so that replaying
// the file once the index is quiet upserts it again"; a resumed run
// "appends to the dead-letter file". Within one run a later record of the
// id that lands is lettered too (it is exposed as well), so that a replay
// ends on the input's last record of the id. Across a resumed run it was
// not: run 1 letters x's second record (may be stale) and is stopped
// before x's third; run 2 landed the third without a letter, and the
// replay the report asks for put the second back over it. Run 2 reads the
// ids of the file's may-be-stale letters and letters its records of them
// that land (class may-be-stale, exit status 1), and the checkpoint ends
// on the whole input once the run is over (it is held back to the records
// whose letters are written while it runs).
func TestReplayingTheLettersOfAResumedLoadDoesNotUndoALaterRecord(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	input := `{"id":"x","values":[1,1,1]}
{"id":"x","values":[2,1,1]}
{"id":"y","values":[1,1,1]}
{"id":"x","values":[3,1,1]}
`
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	srv := upserttest.NewServer(upserttest.WithFaults(xAmbiguousYDenied()))
	defer srv.Close()
	args := append(remote(t, srv), "--progress", "off", "--batch-size", "1", "--concurrency", "1", "--checkpoint", ckpt, "--dead-letter", dl)

	res := runCmd(t, nil, nil, append(args, in)...)
	require.Equal(t, exitFailed, res.status, res.stderr)
	require.Contains(t, res.stderr, "may be stale", "run 1 letters x's second record")
	srv.SetFaults(nil) // the key is fixed

	res = runCmd(t, nil, nil, append(args, "--json", in)...)
	require.Contains(t, res.stderr, "skipped the first 2 records", res.stderr)
	assert.Contains(t, res.stderr, "letters of an earlier run in "+dl+", of records that may have landed or were sent again, name the ids of records that landed: the letters of 1 record follow them")
	s := jsonReport(t, res)
	assert.Equal(t, 1, s.MayBeStale)
	assert.Equal(t, exitFailed, s.ExitStatus, "a record may be stale")
	assert.Equal(t, deadLetterSummary{Path: dl, Count: 1, Earlier: 1}, s.DeadLetters)
	assert.Regexp(t, `^4\n`, readString(t, ckpt), "the whole input is settled")
	v, ok := srv.Vector("__default__", "x")
	require.True(t, ok)
	require.Equal(t, []float32{3, 1, 1}, *v.Values, "run 2 landed x's last record")
	firsts, stale := lettersOf(t, dl, "x")
	assert.Equal(t, []float32{2, 3}, firsts, "x's letters, in input order")
	assert.Equal(t, []bool{true, true}, stale)

	// The index is quiet: replay the dead-letter file, as the report says.
	res = runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", filepath.Join(dir, "dl2.ndjson"), dl)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	v, ok = srv.Vector("__default__", "x")
	require.True(t, ok)
	assert.Equal(t, []float32{3, 1, 1}, *v.Values, "the replay put back x's second record over its last one")
}

// The letters of a resumed run's records of an id with a may-be-stale
// letter in the file are written in input order, failures included: a
// landed record's letter waits for its ack, which waits for every record
// before it, and a later record of its id that failed for good meanwhile
// (its retries spent: a replay may land it) would have its letter first,
// so that a replay would end on the earlier one. A record refused before
// it is sent (x's fourth, all zeros) fails that way at once, before x's
// third has landed: run 2's letters of x are the third's, then the
// fourth's.
func TestTheLettersOfARecordOfAnExposedIDFollowTheInputOrder(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	input := `{"id":"x","values":[1,1,1]}
{"id":"x","values":[2,1,1]}
{"id":"y","values":[1,1,1]}
{"id":"x","values":[3,1,1]}
{"id":"x","values":[0,0,0]}
`
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	srv := upserttest.NewServer(upserttest.WithFaults(xAmbiguousYDenied()))
	defer srv.Close()
	args := append(remote(t, srv), "--progress", "off", "--batch-size", "1", "--concurrency", "1", "--checkpoint", ckpt, "--dead-letter", dl, in)
	res := runCmd(t, nil, nil, args...)
	require.Equal(t, exitFailed, res.status, res.stderr)
	require.Contains(t, res.stderr, "may be stale")
	srv.SetFaults(nil)
	// Run 1 may have refused x's fourth record before it stopped: a
	// letter, and a second one when run 2 sends it again, as any record
	// after the checkpoint that failed for good.
	before, _ := lettersOf(t, dl, "x")
	require.Contains(t, before, float32(2), "x's second record may be stale")

	res = runCmd(t, nil, nil, args...)
	require.Contains(t, res.stderr, "skipped the first 2 records", res.stderr)
	assert.Contains(t, res.stderr, `line 5 (id "x")`, "x's fourth record is refused")
	firsts, stale := lettersOf(t, dl, "x")
	require.Len(t, firsts, len(before)+2)
	assert.Equal(t, []float32{3, 0}, firsts[len(before):], "run 2's letters of x, in input order")
	assert.Equal(t, []bool{true, false}, stale[len(before):])
	assert.Regexp(t, `^5\n`, readString(t, ckpt))
}

// A run whose checkpoint settled nothing (the input's first record left to
// resume: no checkpoint file is even written) replaced the dead-letter
// file of the run before, losing its may-be-stale letters: x's second
// record landed while x's first had no answer, and the next run, sending
// both again without a letter, leaves the index exposed to that request
// with nothing telling to replay. A file holding may-be-stale letters is
// appended to, said on stderr, and the run's records of their ids are
// lettered after them.
func TestARunWhoseCheckpointSettledNothingKeepsTheMayBeStaleLettersOfTheRunBefore(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	input := `{"id":"z","values":[1,1,1]}
{"id":"x","values":[1,1,1]}
{"id":"x","values":[2,1,1]}
{"id":"w","values":[1,1,1]}
`
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	// z's request waits until w's comes, after x's records settled, and
	// is denied: z is left to resume, and the checkpoint stays at 0.
	release := make(chan struct{})
	var releaseOnce, xOnce sync.Once
	srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		var f upserttest.Fault
		switch {
		case slices.Contains(r.IDs, "z"):
			<-release
			f.Code = codes.Unauthenticated
		case slices.Contains(r.IDs, "x"):
			xOnce.Do(func() { f.Code = codes.DeadlineExceeded })
		case slices.Contains(r.IDs, "w"):
			releaseOnce.Do(func() { close(release) })
		}
		return f
	}))
	defer srv.Close()
	defer releaseOnce.Do(func() { close(release) })
	args := append(remote(t, srv), "--progress", "off", "--batch-size", "1", "--concurrency", "2", "--checkpoint", ckpt, "--dead-letter", dl, in)

	res := runCmd(t, nil, nil, args...)
	require.Equal(t, exitFailed, res.status, res.stderr)
	require.Contains(t, res.stderr, "1 record that landed may be stale", res.stderr)
	require.NoFileExists(t, ckpt, "nothing settled")
	srv.SetFaults(nil)

	res = runCmd(t, nil, nil, args...)
	assert.Contains(t, res.stderr, dl+" holds letters of an earlier run whose records may have landed, and the checkpoint "+ckpt+" settled nothing: appending to it")
	assert.Contains(t, res.stdout, "earlier dead letters: 1 in "+dl+", written by earlier runs, kept and appended to (--checkpoint)\n",
		"this run resumes none of them")
	firsts, stale := lettersOf(t, dl, "x")
	assert.Equal(t, []float32{2, 1, 2}, firsts, "run 1's letter is kept, and run 2's follow it")
	assert.Equal(t, []bool{true, true, true}, stale)

	res = runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", filepath.Join(dir, "dl2.ndjson"), dl)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	v, ok := srv.Vector("__default__", "x")
	require.True(t, ok)
	assert.Equal(t, []float32{2, 1, 1}, *v.Values, "the replay ends on the input's last record of x")
}

// The checkpoint does not pass a record of an exposed id before its ack
// has written its letter: a save is held back to the records
// acknowledged, and once every record is, the position the library last
// asked for is owed (durableCheckpoint.finish saves it).
func TestACheckpointWaitsForTheLettersHeldForAcks(t *testing.T) {
	var written []exposedLetter
	x := newExposure(map[letterKey]int{{namespace: "tenant", id: "x"}: 1}, 2, "tenant", func(l exposedLetter) { written = append(written, l) },
		func(st upsert.Stale) string { return "exposed" })
	require.NotNil(t, x)
	assert.Nil(t, newExposure(nil, 2, "", nil, nil), "no letters: nothing exposed")
	rec := func(id string) *pinecone.Vector { return &pinecone.Vector{Id: id, Values: &[]float32{1}} }
	x.take(2, rec("x"))
	x.take(3, rec("y"))
	x.take(4, rec("x"))
	assert.True(t, x.hold(4, "x", exposedLetter{failure: &upsert.Failure{Index: 4, ID: "x"}}), "x's letters wait for their acks")
	assert.False(t, x.hold(3, "y", exposedLetter{}), "y's are written at once")

	assert.Equal(t, int64(2), x.savable(5), "nothing acknowledged yet")
	x.ack([]upsert.Ack{{Position: 2, ID: "x"}, {Position: 3, ID: "y"}})
	require.Len(t, written, 1, "x's record landed: its letter")
	assert.Equal(t, upsert.Stale{Index: 2, ID: "x", Namespace: "tenant", Record: rec("x"), Earlier: 1}, written[0].stale, "with the run's namespace")
	assert.Equal(t, "exposed", written[0].msg)
	assert.Equal(t, int64(4), x.savable(5))
	assert.Equal(t, int64(4), x.owed())
	x.ack([]upsert.Ack{{Position: 4, ID: "x", Failure: &upsert.Failure{Index: 4, ID: "x"}}})
	require.Len(t, written, 2, "the held letter of the failure")
	assert.NotNil(t, written[1].failure)
	assert.Equal(t, int64(5), x.owed(), "the position asked for, every record acknowledged")
	assert.Equal(t, 1, x.landedLetters())
}

// Two dead-letter files concatenated (records and bad-line letters whose
// original line numbers are not in order), replayed with --checkpoint,
// interrupted at several points and resumed: every record lands and
// every bad line has exactly one letter (reported-through counts the
// replay's own lines, not the letters' original ones).
func TestAnInterruptedReplayOfConcatenatedLettersResumesExactlyOnce(t *testing.T) {
	dir := t.TempDir()
	var a, b strings.Builder
	for i := 0; i < 400; i++ {
		if i%37 == 5 {
			fmt.Fprintf(&a, `{"line":%d,"raw":"bad a %d","error":"line %d: invalid JSON at byte 1"}`+"\n", 1000+i, i, 1000+i)
			continue
		}
		fmt.Fprintf(&a, `{"id":"a%d","values":[1,2,%d],"class":"server","error":"x","attempts":3,"may_have_landed":false,"index":%d}`+"\n", i, i, i)
	}
	for i := 0; i < 400; i++ {
		if i%41 == 7 {
			fmt.Fprintf(&b, `{"line":%d,"raw":"bad b %d","error":"line %d: invalid JSON at byte 1"}`+"\n", 3+i, i, 3+i)
			continue
		}
		fmt.Fprintf(&b, `{"id":"b%d","values":[1,2,%d]}`+"\n", i, i)
	}
	in := filepath.Join(dir, "in.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(a.String()+b.String()), 0o600))
	ckpt, dl := filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")

	for _, stopAt := range []int{3, 9, 14} {
		os.Remove(ckpt)
		os.Remove(dl)
		ctx, cancel := context.WithCancel(context.Background())
		var seq atomic.Int32
		release := make(chan struct{})
		var once sync.Once
		srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
			if int(seq.Add(1)) == stopAt {
				once.Do(cancel)
				<-release
				return upserttest.Fault{Code: codes.Unavailable}
			}
			return upserttest.Fault{}
		}))
		args := append(remote(t, srv), "--progress", "off", "--batch-size", "50", "--concurrency", "2", "--checkpoint", ckpt, "--dead-letter", dl, "--json")
		res := runCmd(t, ctx, nil, append(args, in)...)
		close(release)
		require.Equal(t, exitFailed, res.status, "interrupted")
		res = runCmd(t, nil, nil, append(args, in)...)
		// Records settled, or only bad lines reported when the first
		// batch was still in flight at the interrupt.
		require.Regexp(t, `skipped (the first|\d+ bad line)`, res.stderr, "resumed")
		ids, bad := letters(t, dl)
		_, byLine := letterErrors(t, dl)
		vs := srv.Vectors("__default__")
		assert.Empty(t, ids)
		nb := 0
		for i := 0; i < 400; i++ {
			if i%37 == 5 {
				nb++
				assert.Contains(t, byLine, 1000+i)
				continue
			}
			_, ok := vs[fmt.Sprintf("a%d", i)]
			assert.True(t, ok)
		}
		for i := 0; i < 400; i++ {
			if i%41 == 7 {
				nb++
				assert.Contains(t, byLine, 3+i)
				continue
			}
			_, ok := vs[fmt.Sprintf("b%d", i)]
			assert.True(t, ok)
		}
		assert.Len(t, bad, nb, "each bad line once")
		srv.Close()
		cancel()
	}
}

// The ids a resumed run exposes are read from the dead-letter file a line
// at a time: those of letters whose record may have landed (may-be-stale,
// or a failure without an answer) and those of letters of records at or
// past the checkpoint, which the run sends again; the last such letter of
// an id gives its position; other letters and a line cut short are passed
// over (the file is read by ndjson.Reader, as a replay reads it).
func TestTheIDsAResumedRunExposesAreReadFromTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dl.ndjson")
	content := `{"id":"x","values":[2,1,1],"class":"may-be-stale","error":"e","may_have_landed":true,"index":1,"earlier":0}
{"id":"f","values":[1],"class":"server","error":"may-be-stale in its message","index":2}
{"line":4,"raw":"may-be-stale","error":"line 4: invalid JSON at byte 1"}
{"id":"x","values":[3,1,1],"class":"may-be-stale","error":"e","may_have_landed":true,"index":5,"earlier":1}
{"id":"y","values":[1],"class":"may-be-stale","index":7}
{"id":"t","values":[1],"class":"timeout","error":"deadline","may_have_landed":true,"index":3}
{"id":"g","values":[1],"class":"invalid","error":"bad","index":9}
{"id":"z","values":[1],"class":"may-be-st`
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	keys := func(m map[string]int) map[letterKey]int {
		out := make(map[letterKey]int)
		for id, i := range m {
			out[letterKey{namespace: "__default__", id: id}] = i
		}
		return out
	}
	e, err := exposedIDs(path, 8, "")
	require.NoError(t, err)
	assert.True(t, e.late)
	assert.Equal(t, keys(map[string]int{"x": 5, "y": 7, "t": 3, "g": 9}), e.ids, "f failed for good before the checkpoint, and did not land")
	assert.Empty(t, e.others)
	e, err = exposedIDs(path, 0, "__default__")
	require.NoError(t, err)
	assert.True(t, e.late)
	assert.Equal(t, keys(map[string]int{"x": 5, "y": 7, "t": 3, "g": 9, "f": 2}), e.ids, "a run that settled nothing sends every record again")

	e, err = exposedIDs(filepath.Join(t.TempDir(), "none"), 0, "")
	assert.NoError(t, err)
	assert.False(t, e.late)
	assert.Empty(t, e.ids)
}

// A checkpoint names where its records were settled, and a run that
// writes elsewhere (the same input into another --namespace, a script
// that loads one file into each tenant with one --checkpoint) is refused
// before anything is sent, with exit status 2, as the checkpoint of
// another input is: resuming would skip every record the checkpoint
// settled, and none of them is in that namespace. (pcupsert once skipped
// them, sent nothing and exited 0.) The message names both targets and
// says what to do; the original target still resumes, and with the
// checkpoint removed the other namespace gets every record.
func TestACheckpointOfAnotherNamespaceIsRefused(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	input := records(t, 5)
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()
	args := append(remote(t, srv), "--progress", "off", "--checkpoint", ckpt, "--dead-letter", dl)
	res := runCmd(t, nil, nil, append(args, "--namespace", "a", in)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	require.Equal(t, 5, srv.Count("a"))
	saved := readString(t, ckpt)
	require.Equal(t, checkpointFor(5, input)+targetLine(srv, "a"), saved)

	requests := srv.Stats().Requests
	res = runCmd(t, nil, nil, append(args, "--namespace", "b", in)...)
	assert.Equal(t, exitUsage, res.status, res.stderr)
	host := canonicalHost(srv.Host())
	assert.Contains(t, res.stderr, "pcupsert: the checkpoint "+ckpt+" was saved for another target: "+
		`namespace "a" of the index at `+host+`, and this run writes to namespace "b" of the index at `+host+"; "+
		"resuming would skip 5 records of "+in+", which were never sent there: remove "+ckpt+" to load "+in+" from its start, "+
		"or give the target it was saved for\n")
	assert.Equal(t, requests, srv.Stats().Requests, "nothing was sent")
	assert.Zero(t, srv.Count("b"))
	assert.Equal(t, saved, readString(t, ckpt), "the checkpoint is left as it was")

	res = runCmd(t, nil, nil, append(args, "--namespace", "a", in)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	assert.Contains(t, res.stderr, "skipped the first 5 records", "the original target resumes")

	require.NoError(t, os.Remove(ckpt))
	res = runCmd(t, nil, nil, append(args, "--namespace", "b", in)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	assert.Equal(t, 5, srv.Count("b"))
}

// A checkpoint settled in another index (another --host, or the --index
// of another host) is refused as one of another namespace is. One index
// is one host however --host spells it: a run given its host with a
// trailing "/" resumes; the library's spelling (lower case, no ":443") is
// what the checkpoint keeps.
func TestACheckpointOfAnotherHostIsRefused(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 5)), 0o600))
	one, other := upserttest.NewServer(), upserttest.NewServer()
	defer one.Close()
	defer other.Close()
	args := []string{"--progress", "off", "--checkpoint", ckpt, "--dead-letter", dl, in}
	res := runCmd(t, nil, nil, append(remote(t, one), args...)...)
	require.Equal(t, exitOK, res.status, res.stderr)

	res = runCmd(t, nil, nil, append(remote(t, other), args...)...)
	assert.Equal(t, exitUsage, res.status, res.stderr)
	assert.Contains(t, res.stderr, "pcupsert: the checkpoint "+ckpt+" was saved for another target: "+
		`namespace "__default__" of the index at `+canonicalHost(one.Host())+
		`, and this run writes to namespace "__default__" of the index at `+canonicalHost(other.Host())+"; ")
	assert.Zero(t, other.Stats().Requests, "nothing was sent")

	res = runCmd(t, nil, nil, append([]string{"--host", one.Host() + "/"}, args...)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	assert.Contains(t, res.stderr, "skipped the first 5 records")

	assert.Equal(t, "name-project.svc.region.pinecone.io", canonicalHost("https://Name-Project.svc.REGION.pinecone.io:443/"))
	assert.Equal(t, "127.0.0.1:5081", canonicalHost("http://127.0.0.1:5081"))
	assert.Equal(t, canonicalHost("http://localhost"), canonicalHost("HTTP://localhost:80/"), "the default port of plaintext")
	assert.Equal(t, "localhost:443", canonicalHost("http://localhost:443"), "not plaintext's default port")
}

// A checkpoint that pcupsert wrote before it kept the target line (the
// count, the identity, and how far bad lines are reported) is taken as it
// is, with one warning line that says what to do if it was settled
// elsewhere; the run's saves then name the target.
func TestACheckpointWithoutItsTargetStillResumesWithAWarning(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	input := records(t, 5) + "not json\n"
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	require.NoError(t, os.WriteFile(ckpt, []byte(checkpointFor(3, input)+"reported-through 2\n"), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()
	args := append(remote(t, srv), "--progress", "off", "--namespace", "t", "--checkpoint", ckpt, "--dead-letter", dl, in)
	res := runCmd(t, nil, nil, args...)
	assert.Equal(t, exitFailed, res.status, "line 6 is bad; stderr:\n%s", res.stderr)
	warning := "pcupsert: the checkpoint " + ckpt + " does not say which index and namespace it was saved for (an earlier pcupsert wrote it): " +
		"skipping 3 records and the bad lines up to line (or row) 2 of " + in + ` as it says; if they were settled elsewhere than namespace "t" of the index at ` +
		canonicalHost(srv.Host()) + ", stop and remove it to load " + in + " from its start\n"
	assert.Contains(t, res.stderr, warning)
	assert.Equal(t, 1, strings.Count(res.stderr, "does not say"), "one warning")
	assert.Contains(t, res.stderr, "skipped the first 3 records")
	assert.Equal(t, 2, srv.Count("t"))
	assert.Equal(t, checkpointFor(5, input)+targetLine(srv, "t")+"reported-through 6\n", readString(t, ckpt))

	res = runCmd(t, nil, nil, args...)
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.NotContains(t, res.stderr, "does not say", "the checkpoint names its target now")
}

// The default namespace has two names, "" and "__default__" (the SDK
// sends the second for the first): a checkpoint settled under one resumes
// under the other, in a run and in a dry run, whichever name the
// checkpoint holds.
func TestTheDefaultNamespaceIsOneNamespaceForTheCheckpoint(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	input := records(t, 5)
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()
	args := append(remote(t, srv), "--progress", "off", "--checkpoint", ckpt, "--dead-letter", dl)
	res := runCmd(t, nil, nil, append(args, "--namespace", "__default__", in)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	for _, saved := range []string{"__default__", ""} {
		hand := checkpointTarget{host: canonicalHost(srv.Host()), namespace: saved}.String() + "\n"
		require.NoError(t, os.WriteFile(ckpt, []byte(checkpointFor(5, input)+hand), 0o600))
		for _, ns := range []string{"", "__default__"} {
			res = runCmd(t, nil, nil, append(args, "--namespace", ns, in)...)
			assert.Equal(t, exitOK, res.status, "saved %q, run %q: %s", saved, ns, res.stderr)
			assert.Contains(t, res.stderr, "skipped the first 5 records")
			res = runCmd(t, nil, nil, append(args, "--dry-run", "--namespace", ns, in)...)
			assert.Equal(t, exitOK, res.status, "saved %q, dry run %q: %s", saved, ns, res.stderr)
		}
	}
	assert.Equal(t, 5, srv.Count("__default__"))
}

// A dry run with --checkpoint checks the checkpoint's target as a run
// does: one of another namespace is refused (exit status 2), with the
// run's message. Without the index's host, which --index looks up and a
// dry run does not, it checks the namespace alone.
func TestADryRunRefusesACheckpointOfAnotherNamespace(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 5)), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()
	res := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--namespace", "a", "--checkpoint", ckpt, "--dead-letter", dl, in)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	saved := readString(t, ckpt)

	host := canonicalHost(srv.Host())
	for _, c := range []struct {
		target []string
		want   string
	}{
		{[]string{"--host", srv.Host()}, `namespace "a" of the index at ` + host + `, and this run writes to namespace "b" of the index at ` + host + "; "},
		{[]string{"--index", "docs"}, `namespace "a" of the index at ` + host + `, and this run writes to namespace "b" of the index --index names; `},
	} {
		res = runCmd(t, nil, nil, append(c.target, "--dry-run", "--namespace", "b", "--checkpoint", ckpt, in)...)
		assert.Equal(t, exitUsage, res.status, "%v: %s", c.target, res.stderr)
		assert.Contains(t, res.stderr, "pcupsert: the checkpoint "+ckpt+" was saved for another target: "+c.want)
		assert.Empty(t, res.stdout)

		res = runCmd(t, nil, nil, append(c.target, "--dry-run", "--namespace", "a", "--checkpoint", ckpt, in)...)
		assert.Equal(t, exitOK, res.status, "%v: %s", c.target, res.stderr)
		assert.Contains(t, res.stdout, "skipped        5 records, settled by an earlier run")
	}
	assert.Equal(t, saved, readString(t, ckpt))
}

// An index named by --index is never the embedded one: a dry run refuses
// a checkpoint of the embedded index, as the run, once it has looked the
// host up, does.
func TestADryRunWithIndexRefusesACheckpointOfTheEmbeddedIndex(t *testing.T) {
	dir := t.TempDir()
	in, ckpt := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 5)), 0o600))
	res := runCmd(t, nil, nil, "--progress", "off", "--namespace", "a", "--checkpoint", ckpt, in)
	require.Equal(t, exitOK, res.status, res.stderr)

	t.Setenv("PINECONE_API_KEY", "test-key-for-upserttest")
	res = runCmd(t, nil, nil, "--index", "docs", "--dry-run", "--namespace", "a", "--checkpoint", ckpt, in)
	assert.Equal(t, exitUsage, res.status, res.stderr)
	assert.Contains(t, res.stderr, "pcupsert: the checkpoint "+ckpt+` was saved for another target: namespace "a" of the embedded loopback index, `+
		`and this run writes to namespace "a" of the index --index names; `)
}

// The target line reads back as it was written, whatever the namespace
// holds (spaces, quotes); a line that is not one is no checkpoint.
func TestACheckpointTargetReadsBackAsItWasWritten(t *testing.T) {
	for _, tgt := range []checkpointTarget{
		{host: "name.svc.pinecone.io", namespace: "__default__"},
		{host: embeddedHost, namespace: `a "b" c\n`},
	} {
		got, ok := parseTarget(tgt.String())
		assert.True(t, ok, tgt.String())
		assert.Equal(t, tgt, got)
	}
	got, ok := parseTarget(`target "h" ""`)
	assert.True(t, ok)
	assert.Equal(t, checkpointTarget{host: "h", namespace: "__default__"}, got, `"" is the default namespace`)
	for _, bad := range []string{`target "h"`, `target h "a"`, `target "" "a"`, `target "h" "a" x`, `target "h""a"`} {
		_, ok := parseTarget(bad)
		assert.False(t, ok, bad)
	}
	path := filepath.Join(t.TempDir(), "ckpt")
	for _, bad := range []string{
		"3\ninput 3 " + strings.Repeat("ab", 32) + "\ntarget \"h\" \"a\"\ntarget \"h\" \"a\"\n",
		"3\ninput 3 " + strings.Repeat("ab", 32) + "\ntarget \"h\"\n",
	} {
		require.NoError(t, os.WriteFile(path, []byte(bad), 0o600))
		_, err := readCheckpoint(path)
		assert.ErrorContains(t, err, "not a pcupsert checkpoint", bad)
	}
}

// A checkpoint of an earlier pcupsert, without the target line, of a
// finished load gets the target line at its next run, which settles
// nothing new (the library saves only when the count moves): the count,
// the identity and the reported line are kept. Its reruns then do not
// warn, and a run into another namespace is refused. (It once stayed
// without its target for good: every rerun warned, and the checkpoint
// given to a run into another namespace skipped every record, sent
// nothing and exited 0.)
func TestALegacyCheckpointOfAFinishedLoadGetsItsTargetOnTheNextRun(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	input := records(t, 3) + "not json\n"
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	legacy := checkpointFor(3, input) + "reported-through 4\n" // an earlier pcupsert's, load finished
	require.NoError(t, os.WriteFile(ckpt, []byte(legacy), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()
	args := append(remote(t, srv), "--progress", "off", "--checkpoint", ckpt, "--dead-letter", dl)

	res := runCmd(t, nil, nil, append(args, "--namespace", "a", in)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	require.Contains(t, res.stderr, "does not say which index and namespace it was saved for")
	assert.Equal(t, checkpointFor(3, input)+targetLine(srv, "a")+"reported-through 4\n", readString(t, ckpt), "the run names its target in the checkpoint")

	res = runCmd(t, nil, nil, append(args, "--namespace", "a", in)...)
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.NotContains(t, res.stderr, "does not say which index", "the warning comes once, not on every rerun")

	res = runCmd(t, nil, nil, append(args, "--namespace", "b", in)...)
	assert.Equal(t, exitUsage, res.status, "namespace b never got the 3 records it skips; stderr:\n%s", res.stderr)
	assert.Contains(t, res.stderr, "pcupsert: the checkpoint "+ckpt+" was saved for another target: ")
	assert.Zero(t, srv.Count("b"))
}

// A count-only checkpoint (an earlier pcupsert's: no identity, no target)
// owes its target line, but the save that writes it names the input too:
// a run interrupted before the input came (stdin idle) does not write it,
// which would give the checkpoint the identity of nothing read, matching
// every input. A run that reads the input to its end writes both, and a
// run on another input is then refused.
func TestALegacyCheckpointGetsItsTargetOnlyWithTheIdentityOfTheInputRead(t *testing.T) {
	dir := t.TempDir()
	ckpt, dl := filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	require.NoError(t, os.WriteFile(ckpt, []byte("3\n"), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()
	args := append(remote(t, srv), "--progress", "off", "--checkpoint", ckpt, "--dead-letter", dl)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	after := make(chan struct{})
	defer close(after)
	res := runCmd(t, ctx, &stallingReader{r: strings.NewReader(""), stalled: cancel, after: after}, args...)
	require.Equal(t, exitFailed, res.status, res.stderr)
	require.Contains(t, res.stderr, "interrupted at line 0 of stdin, while skipping")
	assert.Equal(t, "3\n", readString(t, ckpt), "nothing read: no identity, and no target line")

	input := records(t, 3)
	res = runCmd(t, nil, strings.NewReader(input), args...)
	require.Equal(t, exitOK, res.status, res.stderr)
	assert.Equal(t, checkpointFor(3, input)+targetLine(srv, ""), readString(t, ckpt))

	res = runCmd(t, nil, strings.NewReader(records(t, 5)[len(input):]+input), args...)
	assert.Equal(t, exitUsage, res.status, res.stderr)
	assert.Contains(t, res.stderr, "was saved for another input")
}

// A host spelled several ways is one host (the scheme, case, ":443" and
// a trailing "/" do not count), and a namespace of quotes, newlines or
// bytes that are not UTF-8 reads back from the checkpoint as written.
func TestAHostIsOneWhateverItsSpellingAndANamespaceReadsBackWhateverItHolds(t *testing.T) {
	for _, h := range []string{"https://Idx-P.svc.R.pinecone.io:443/", "idx-p.svc.r.pinecone.io", "HTTPS://idx-p.svc.r.pinecone.io"} {
		got, err := checkHost(h, "--host")
		require.NoError(t, err, h)
		assert.Equal(t, "idx-p.svc.r.pinecone.io", canonicalHost(got), h)
	}
	for _, ns := range []string{"a\"b", "x\ny", "\xff\xfe", " sp "} {
		tgt := checkpointTarget{host: "h", namespace: ns}
		got, ok := parseTarget(tgt.String())
		require.True(t, ok, ns)
		assert.Equal(t, tgt, got)
		path := filepath.Join(t.TempDir(), "ckpt")
		require.NoError(t, os.WriteFile(path, []byte("3\ninput 3 "+strings.Repeat("ab", 32)+"\n"+tgt.String()+"\nreported-through 4\n"), 0o600))
		c, err := readCheckpoint(path)
		require.NoError(t, err)
		assert.Equal(t, &tgt, c.target)
		assert.Equal(t, 4, c.reported)
	}
}

// README, "Replays and resumed runs": "The checkpoint is pointless with
// the embedded index, which is gone when pcupsert exits; pcupsert warns of
// it, and a run to a real index refuses such a checkpoint", and checkpoint.go:
// "The embedded index, a new one at each run, is "embedded loopback
// index", which no host is." A checkpoint of an earlier pcupsert (no target
// line) of a finished load into a real index, run once by mistake without
// --host (a shell without the key: the embedded index, with a warning),
// settles nothing: the records it skips were never in that new embedded
// index, so the target it owes cannot be the embedded one. That run wrote
// `target "embedded loopback index"` into the checkpoint, and the next,
// correct run to the real index was then refused (exit 2): one slip cost
// the whole load. The owed target is not paid with the embedded index;
// the run to the real index resumes.
func TestALegacyCheckpointRunOnceOnTheEmbeddedIndexIsNotStampedWithIt(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	input := records(t, 3)
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	legacy := checkpointFor(3, input) // an earlier pcupsert's: identity, no target; the load finished
	require.NoError(t, os.WriteFile(ckpt, []byte(legacy), 0o600))

	res := runCmd(t, nil, nil, "--progress", "off", "--checkpoint", ckpt, "--dead-letter", dl, in) // no --host: embedded
	require.Contains(t, res.stderr, "embedded loopback index")
	assert.NotContains(t, readString(t, ckpt), embeddedTarget, "the records it skips were never in the embedded index")

	srv := upserttest.NewServer()
	defer srv.Close()
	res = runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--checkpoint", ckpt, "--dead-letter", dl, in)...)
	assert.Equal(t, exitOK, res.status, "the run to the real index resumes its finished load; stderr:\n%s", res.stderr)
	assert.NotContains(t, res.stderr, "was saved for another target")
}

// The dead-letter namespace refusal is lazy, and a checkpoint of an
// earlier pcupsert (no target line) is stamped with the run's target at
// the end of a run that is not refused. The two combined: a legacy
// checkpoint of a finished load into namespace "a", whose dead-letter file
// holds a's letters, rerun by mistake with --namespace b. The run skips
// everything, is not refused (nothing to send or write), and writes
// `target ... "b"` into the checkpoint, though the file it checked
// (appendedLetters set in.refuse: mixedNamespaces) says the load was a's:
// from then on a run into "a", the right one, was refused, and runs into
// "b" skipped the 3 records b never got. A run whose dead-letter file
// contradicts its namespace does not pay the owed target, leaving the
// checkpoint as it was, so that the run into "a" resumes.
func TestALegacyCheckpointIsNotStampedWithANamespaceItsDeadLettersContradict(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	input := records(t, 3)
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	legacy := checkpointFor(3, input)
	require.NoError(t, os.WriteFile(ckpt, []byte(legacy), 0o600))
	require.NoError(t, os.WriteFile(dl, []byte(refusedLetterLine("q", "a")), 0o600)) // a's load left a letter
	srv := upserttest.NewServer()
	defer srv.Close()
	args := append(remote(t, srv), "--progress", "off", "--checkpoint", ckpt, "--dead-letter", dl)

	res := runCmd(t, nil, nil, append(args, "--namespace", "b", in)...)
	t.Logf("the rerun into b: status %d\n%s", res.status, res.stderr)
	assert.NotContains(t, readString(t, ckpt), targetLine(srv, "b"), "the dead-letter file says the load was a's")

	res = runCmd(t, nil, nil, append(args, "--namespace", "a", in)...)
	assert.Equal(t, exitOK, res.status, "the run into a resumes its finished load; stderr:\n%s", res.stderr)
	assert.NotContains(t, res.stderr, "was saved for another target")
}

// A lazily refused run with --json and --progress lines:
// exit 2, the refusal's message, no JSON report on stdout, nothing sent,
// no letter, the checkpoint unchanged; on stdin too, and when the refusal
// comes at a bad line.
func TestALazilyRefusedRunWritesNothingAndReportsNoSuccess(t *testing.T) {
	for _, grown := range []string{`{"id":"r3","values":[3,0.5,0.25]}` + "\n", "not json\n"} {
		for _, stdin := range []bool{false, true} {
			dir := t.TempDir()
			in, ckpt, dl := filepath.Join(dir, "b.ndjson"), filepath.Join(dir, "ck-b"), filepath.Join(dir, "dl.ndjson")
			input := records(t, 3)
			srv := upserttest.NewServer()
			saved := checkpointFor(3, input) + targetLine(srv, "b")
			require.NoError(t, os.WriteFile(in, []byte(input+grown), 0o600))
			require.NoError(t, os.WriteFile(ckpt, []byte(saved), 0o600))
			require.NoError(t, os.WriteFile(dl, []byte(refusedLetterLine("q", "a")), 0o600))
			args := append(remote(t, srv), "--json", "--progress", "lines", "--namespace", "b", "--checkpoint", ckpt, "--dead-letter", dl)
			var res result
			if stdin {
				res = runCmd(t, nil, strings.NewReader(input+grown), args...)
			} else {
				res = runCmd(t, nil, nil, append(args, in)...)
			}
			assert.Equal(t, exitUsage, res.status, res.stderr)
			assert.Contains(t, res.stderr, mixedNamespacesMessage(dl))
			assert.Empty(t, res.stdout)
			assert.Zero(t, srv.Stats().Requests)
			assert.Equal(t, saved, readString(t, ckpt))
			assert.Equal(t, refusedLetterLine("q", "a"), readString(t, dl))
			srv.Close()
		}
	}
}

// A legacy checkpoint (no reported line) whose skipped part
// holds bad lines: the lazily refused run leaves it as it was (the bad
// lines it skipped move reportedNow, but no save is made).
func TestARefusedRunLeavesALegacyCheckpointWithSkippedBadLines(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	rs := records(t, 4)
	lines := strings.SplitAfter(rs, "\n")
	input := lines[0] + "not json\n" + lines[1] + lines[2] + lines[3]
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()
	legacy := checkpointFor(3, input) + targetLine(srv, "b") // no reported line
	require.NoError(t, os.WriteFile(ckpt, []byte(legacy), 0o600))
	require.NoError(t, os.WriteFile(dl, []byte(refusedLetterLine("q", "a")), 0o600))
	res := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--namespace", "b", "--checkpoint", ckpt, "--dead-letter", dl, in)...)
	assert.Equal(t, exitUsage, res.status, res.stderr)
	assert.Equal(t, legacy, readString(t, ckpt))
	assert.Equal(t, refusedLetterLine("q", "a"), readString(t, dl))
	assert.Zero(t, srv.Stats().Requests)
}

// Parquet input, a bad row (no id) past the checkpoint's 3
// rows, with a dead-letter file of another namespace's letters: the run
// and its dry run are refused before reporting it; nothing sent or written.
func TestAParquetBadRowPastTheCheckpointIsRefusedLazily(t *testing.T) {
	dir := t.TempDir()
	ckpt, dl := filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	rows := exportRows(4, 1)
	rows[3].ID = ""
	in := writeParquet(t, rows)
	b, err := os.ReadFile(in)
	require.NoError(t, err)
	srv := upserttest.NewServer()
	defer srv.Close()
	saved := checkpointFor(3, string(b)) + targetLine(srv, "b")
	require.NoError(t, os.WriteFile(ckpt, []byte(saved), 0o600))
	require.NoError(t, os.WriteFile(dl, []byte(refusedLetterLine("q", "a")), 0o600))
	args := append(remote(t, srv), "--progress", "off", "--namespace", "b", "--checkpoint", ckpt, "--dead-letter", dl, in)
	for _, stderr := range refusedForLettersOfA(t, dl, args) {
		assert.NotContains(t, stderr, "row 4")
	}
	assert.Zero(t, srv.Stats().Requests)
	assert.Equal(t, saved, readString(t, ckpt))
	assert.Equal(t, refusedLetterLine("q", "a"), readString(t, dl))
}
