package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert/upserttest"
)

// A checkpoint holds the count of records settled and the identity of the
// input: the SHA-256 of its first bytes, and how many.
func TestACheckpointNamesItsInput(t *testing.T) {
	dir := t.TempDir()
	ckpt, in := filepath.Join(dir, "ckpt"), filepath.Join(dir, "in.ndjson")
	input := records(t, 3)
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	res := runCmd(t, nil, nil, "--checkpoint", ckpt, "--progress", "off", "--dead-letter", filepath.Join(dir, "dl"), in)
	require.Equal(t, exitOK, res.status, res.stderr)
	got, err := os.ReadFile(ckpt)
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("3\n%v\n", idOf([]byte(input))), string(got))
	assert.Regexp(t, `^3\ninput 102 [0-9a-f]{64}\n$`, string(got), "the whole input, of 102 bytes")
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
	assert.Regexp(t, `^5\ninput \d+ [0-9a-f]{64}\n$`, readString(t, ckpt))

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
// by class, apart from the dead letters; with an index that answers
// nothing but 503s, the run's records are left to resume but those whose
// retries ran out.
func TestTheReportTellsWhatIsLeftToResume(t *testing.T) {
	dir := t.TempDir()
	ckpt, dl, in := filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson"), filepath.Join(dir, "in.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 3000)), 0o600))
	res := runCmd(t, nil, nil, "--fault", "503=1", "--progress", "off", "--checkpoint", ckpt, "--dead-letter", dl, in)
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
