package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

	"github.com/upsertlib/upsert/upserttest"
)

// staleLetterLine is a may-be-stale letter of id, as an earlier run wrote it.
func staleLetterLine(id string, first float32, index int) string {
	return fmt.Sprintf(`{"id":%q,"values":[%g,1,1],"class":"may-be-stale","error":"e","may_have_landed":true,"index":%d,"earlier":0}`+"\n", id, first, index)
}

// Many records of exposed ids, several per id, some refused before
// sending, with concurrency, an interrupt and a resume, then a replay:
// every exposed id ends on the input's last valid record of it.
func TestExposedIDsInterruptedResumedAndReplayedEndOnTheirLastRecords(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	var b strings.Builder
	last := map[string]float32{}
	const n = 600
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("r%d", i)
		if i%3 == 0 {
			id = fmt.Sprintf("x%d", i%7)
		}
		if strings.HasPrefix(id, "x") && i%11 == 0 {
			fmt.Fprintf(&b, `{"id":%q,"values":[0,0,0]}`+"\n", id) // refused before sending
			continue
		}
		fmt.Fprintf(&b, `{"id":%q,"values":[%d,1,1]}`+"\n", id, i)
		last[id] = float32(i)
	}
	require.NoError(t, os.WriteFile(in, []byte(b.String()), 0o600))
	var pre strings.Builder
	for k := 0; k < 7; k++ {
		pre.WriteString(staleLetterLine(fmt.Sprintf("x%d", k), -1, 0))
	}
	require.NoError(t, os.WriteFile(dl, []byte(pre.String()), 0o600))

	ctx, cancel := context.WithCancel(context.Background())
	var seq atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		if int(seq.Add(1)) == 40 {
			once.Do(cancel)
			<-release
			return upserttest.Fault{Code: codes.Unavailable}
		}
		return upserttest.Fault{}
	}))
	defer srv.Close()
	args := append(remote(t, srv), "--progress", "off", "--batch-size", "5", "--concurrency", "4", "--checkpoint", ckpt, "--dead-letter", dl, in)
	res := runCmd(t, ctx, nil, args...)
	close(release)
	require.Equal(t, exitFailed, res.status, res.stderr)
	t.Logf("checkpoint after the interrupt: %q", readString(t, ckpt))
	res = runCmd(t, nil, nil, args...)
	require.Equal(t, exitFailed, res.status, res.stderr)
	require.Regexp(t, `^\d+\n`, readString(t, ckpt))

	res = runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", filepath.Join(dir, "dl2.ndjson"), dl)...)
	vs := srv.Vectors("__default__")
	for k := 0; k < 7; k++ {
		id := fmt.Sprintf("x%d", k)
		v, ok := vs[id]
		require.True(t, ok, id)
		assert.Equal(t, last[id], (*v.Values)[0], "%s ends on its last record after the replay", id)
	}
}

// A process killed mid-run with exposed ids: every record of an
// exposed id before the checkpoint has its letter on disk, and after the
// resume and a replay each id ends on its last record.
func TestAKilledRunWithExposedIDsLosesNoLetter(t *testing.T) {
	if testing.Short() {
		t.Skip("child process")
	}
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	var b strings.Builder
	type rec struct {
		id string
		v  float32
	}
	var input []rec
	const n = 1500
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("r%d", i)
		if i%3 == 0 {
			id = fmt.Sprintf("x%d", (i/3)%4)
		}
		fmt.Fprintf(&b, `{"id":%q,"values":[%d,1,1]}`+"\n", id, i)
		input = append(input, rec{id, float32(i)})
	}
	require.NoError(t, os.WriteFile(in, []byte(b.String()), 0o600))
	var pre strings.Builder
	for k := 0; k < 4; k++ {
		pre.WriteString(staleLetterLine(fmt.Sprintf("x%d", k), -1, 0))
	}
	require.NoError(t, os.WriteFile(dl, []byte(pre.String()), 0o600))
	srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		return upserttest.Fault{Delay: 3 * time.Millisecond}
	}))
	defer srv.Close()
	args := []string{"--host", srv.Host(), "--checkpoint", ckpt, "--dead-letter", dl, "--progress", "off", "--batch-size", "4", "--concurrency", "2", in}
	first, out := startChild(t, args...)
	saved := 0
	waitFor(t, "a checkpoint past 300", func() bool {
		if b, err := os.ReadFile(ckpt); err == nil {
			c, _, _ := strings.Cut(string(b), "\n")
			saved, _ = strconv.Atoi(c)
		}
		return saved > 300
	})
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	_ = first.Wait()
	b2, _ := os.ReadFile(ckpt)
	c, _, _ := strings.Cut(string(b2), "\n")
	saved, _ = strconv.Atoi(c)
	t.Logf("killed at checkpoint %d; stored %d; output %s", saved, srv.Count("__default__"), out.String())
	for k := 0; k < 4; k++ {
		id := fmt.Sprintf("x%d", k)
		var want float32 = -1
		for _, r := range input[:saved] {
			if r.id == id {
				want = r.v
			}
		}
		firsts, _ := lettersOf(t, dl, id)
		assert.Contains(t, firsts, want, "%s's last record before the checkpoint has its letter on disk", id)
	}
	out2, err := func() (string, error) {
		raw, _ := json.Marshal(args)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childArgs+"="+string(raw), "PINECONE_API_KEY=test-key-for-upserttest")
		o, err := cmd.CombinedOutput()
		return string(o), err
	}()
	t.Logf("resumed: %v %s", err, out2)
	res := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", filepath.Join(dir, "dl2.ndjson"), dl)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	vs := srv.Vectors("__default__")
	for k := 0; k < 4; k++ {
		id := fmt.Sprintf("x%d", k)
		var want float32
		for _, r := range input {
			if r.id == id {
				want = r.v
			}
		}
		assert.Equal(t, want, (*vs[id].Values)[0], id)
	}
	assert.Len(t, vs, n/3*2+4)
}

// A letter of a record whose requests ended without an answer (retries
// spent on timeouts, "may_have_landed":true) exposes a later record of its
// id, as a may-be-stale letter does, across a resume too: run 1 letters
// f's first record while z, before it, is left to resume; run 2 sends f's
// first record again and then its second (the input grew). Both landed
// without a letter once, and replaying the file put f's first record back
// over its last one.
func TestAResumedRunLettersALaterRecordOfAnIDWhoseTimedOutLetterItKeeps(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	input := `{"id":"a","values":[1,1,1]}
{"id":"z","values":[1,1,1]}
{"id":"f","values":[1,1,1]}
`
	// Records after f that land while f times out: the index answers
	// requests sent after f's first timeout, so each of f's timeouts is
	// its own and spends a retry (with only z's 429s between them, those
	// that follow one another spend none, as in an outage).
	for i := range 20 {
		input += fmt.Sprintf(`{"id":"b%d","values":[1,1,1]}`+"\n", i)
	}
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	// z is rate-limited until f's first record has spent its retries on
	// timeouts; then the run is interrupted: z is left to resume, the
	// checkpoint at 1 (a), f's record lettered.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var fAttempts atomic.Int32
	srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		switch {
		case slices.Contains(r.IDs, "z"):
			return upserttest.Fault{Code: codes.ResourceExhausted, RetryAfter: 100 * time.Millisecond}
		case slices.Contains(r.IDs, "f"):
			if fAttempts.Add(1) == 5 { // its last: it times out at 50ms
				time.AfterFunc(200*time.Millisecond, cancel)
			}
			return upserttest.Fault{Delay: 150 * time.Millisecond, Code: codes.Unavailable}
		case len(r.IDs) > 0 && strings.HasPrefix(r.IDs[0], "b"):
			return upserttest.Fault{Delay: 10 * time.Millisecond}
		}
		return upserttest.Fault{}
	}))
	defer srv.Close()
	args := append(remote(t, srv), "--progress", "off", "--batch-size", "1", "--concurrency", "2", "--timeout", "50ms",
		"--checkpoint", ckpt, "--dead-letter", dl, in)
	res := runCmd(t, ctx, nil, args...)
	require.Equal(t, exitFailed, res.status, res.stderr)
	require.FileExists(t, dl, res.stderr)
	firsts, _ := lettersOf(t, dl, "f")
	require.Equal(t, []float32{1}, firsts, "run 1 letters f's first record; stderr:\n%s", res.stderr)
	require.Regexp(t, `^1\n`, readString(t, ckpt), "the checkpoint stops at z, before f's record")
	raw, err := os.ReadFile(dl)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"may_have_landed":true`, "its requests ended without an answer")

	// The input grows (the same input), with f's second record.
	f, err := os.OpenFile(in, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"id":"w","values":[1,1,1]}` + "\n" + `{"id":"f","values":[2,1,1]}` + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())

	srv.SetFaults(nil) // the index is well
	res = runCmd(t, nil, nil, args...)
	require.Contains(t, res.stderr, "skipped the first 1 record", res.stderr)
	v, ok := srv.Vector("__default__", "f")
	require.True(t, ok)
	require.Equal(t, float32(2), (*v.Values)[0], "run 2 landed f's last record")

	// The index is quiet: replay the dead-letter file.
	res = runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", filepath.Join(dir, "dl2.ndjson"), dl)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	v, ok = srv.Vector("__default__", "f")
	require.True(t, ok)
	assert.Equal(t, float32(2), (*v.Values)[0], "the replay ends on f's last record, not run 1's letter of its first")
}

// A run that would append to a dead-letter file holding letters of
// another namespace is refused before anything is sent, with exit status
// 2: a replay sends every letter to the one --namespace it is given, so a
// file of two namespaces writes one tenant's records into the other's.
// Run 1 loads namespace "a" and leaves a may-be-stale letter of x; run 2,
// another load into namespace "b" with the same --dead-letter and its own
// new checkpoint, would append to it (its checkpoint settled nothing, and
// the file holds a letter whose record may have landed). (pcupsert once
// appended, lettered b's x as may be stale because of a's letter, and the
// replay of the file into "a" ended a's x on b's record and wrote b's
// "rej" into "a".) The file is left as it was, its replay into "a" ends
// on a's last record of x, and run 2 with another --dead-letter lands.
func TestAnEarlierDeadLetterFileOfAnotherNamespaceIsRefused(t *testing.T) {
	dir := t.TempDir()
	inA, inB, dl := filepath.Join(dir, "a.ndjson"), filepath.Join(dir, "b.ndjson"), filepath.Join(dir, "dl.ndjson")
	require.NoError(t, os.WriteFile(inA, []byte(`{"id":"x","values":[1,1,1]}
{"id":"y","values":[1,1,1]}
{"id":"z","values":[1,1,1]}
{"id":"x","values":[2,1,1]}
`), 0o600))
	require.NoError(t, os.WriteFile(inB, []byte(`{"id":"x","values":[9,1,1]}
{"id":"rej","values":[9,1,1]}
`), 0o600))
	// The first request carrying x ends without an answer (x's second
	// record may be stale); the first carrying rej is refused.
	var xOnce sync.Once
	var rejRefused atomic.Bool
	srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		var f upserttest.Fault
		if slices.Contains(r.IDs, "x") {
			xOnce.Do(func() { f = upserttest.Fault{Code: codes.DeadlineExceeded} })
		}
		if slices.Contains(r.IDs, "rej") && rejRefused.CompareAndSwap(false, true) {
			f = upserttest.Fault{Code: codes.InvalidArgument}
		}
		return f
	}))
	defer srv.Close()
	common := append(remote(t, srv), "--progress", "off", "--batch-size", "1", "--concurrency", "1")

	res := runCmd(t, nil, nil, append(common, "--namespace", "a", "--checkpoint", filepath.Join(dir, "ck-a"), "--dead-letter", dl, inA)...)
	require.Equal(t, exitFailed, res.status, res.stderr)
	require.Contains(t, res.stderr, "1 record that landed may be stale", res.stderr)
	before := readString(t, dl)

	requests := srv.Stats().Requests
	runB := append(common, "--namespace", "b", "--checkpoint", filepath.Join(dir, "ck-b"))
	res = runCmd(t, nil, nil, append(runB, "--dead-letter", dl, inB)...)
	assert.Equal(t, exitUsage, res.status, res.stderr)
	assert.Contains(t, res.stderr, "pcupsert: --dead-letter "+dl+` holds letters of namespace "a", and this run writes to namespace "b": `+
		"appending its letters would mix namespaces in one file, and a replay sends every letter to the one --namespace it is given; "+
		"nothing was sent; give another --dead-letter, or replay "+dl+" (with the --namespace of its letters) and remove it first\n")
	assert.Equal(t, requests, srv.Stats().Requests, "nothing was sent")
	assert.Zero(t, srv.Count("b"))
	assert.Equal(t, before, readString(t, dl), "the file is left as it was")

	// The index is quiet: replay the file, with run 1's namespace.
	res = runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--namespace", "a", "--dead-letter", filepath.Join(dir, "dl2.ndjson"), dl)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	v, ok := srv.Vector("a", "x")
	require.True(t, ok)
	assert.Equal(t, []float32{2, 1, 1}, *v.Values, "a's x ends on a's last record")
	_, ok = srv.Vector("a", "rej")
	assert.False(t, ok)

	res = runCmd(t, nil, nil, append(runB, "--dead-letter", filepath.Join(dir, "dl-b.ndjson"), inB)...)
	assert.Equal(t, exitFailed, res.status, "rej is refused; stderr:\n%s", res.stderr)
	assert.NotContains(t, res.stderr, "may be stale", "b's x is exposed by no letter of b")
	v, ok = srv.Vector("b", "x")
	require.True(t, ok)
	assert.Equal(t, []float32{9, 1, 1}, *v.Values)
}

// The letters of a dead-letter file expose ids in their own namespace
// alone (a letter without "namespace" is of the default one): an
// unanswered request to another namespace cannot touch the run's
// records. The others are named, for the refusal; a letter whose record
// may have landed counts whatever its namespace, since replacing the file
// would lose it.
func TestLettersOfAnotherNamespaceExposeNoIDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dl.ndjson")
	content := `{"id":"x","values":[1],"class":"may-be-stale","error":"e","may_have_landed":true,"index":1,"earlier":0,"namespace":"a"}
{"id":"x","values":[1],"class":"server","error":"e","index":4,"namespace":"b"}
{"id":"y","values":[1],"class":"timeout","error":"e","may_have_landed":true,"index":2}
{"id":"z","values":[1],"class":"server","error":"e","index":5,"namespace":"a"}
{"line":3,"raw":"not json","error":"line 3: invalid JSON at byte 2"}
`
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	e, err := exposedIDs(path, 0, "a")
	require.NoError(t, err)
	assert.Equal(t, map[letterKey]int{{"a", "x"}: 1, {"a", "z"}: 5}, e.ids)
	assert.Equal(t, map[string]bool{"b": true, "__default__": true}, e.others, "a bad line's letter names none")
	assert.True(t, e.late)

	e, err = exposedIDs(path, 0, "b")
	require.NoError(t, err)
	assert.Equal(t, map[letterKey]int{{"b", "x"}: 4}, e.ids)
	assert.True(t, e.late, "a's x and the default namespace's y may have landed")

	x := newExposure(map[letterKey]int{{"a", "x"}: 1}, 0, "b", nil, nil)
	assert.False(t, x.holds("x"), "x is exposed in a, not in b")
}

// The default namespace has two names, "" and "__default__": a run with
// either appends to a file whose letters name the default namespace
// (left out, or named "__default__" by another program) without refusal,
// and their ids expose its records.
func TestTheDefaultNamespaceIsOneNamespaceForTheDeadLetterFile(t *testing.T) {
	dir := t.TempDir()
	in, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "dl.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(`{"id":"x","values":[3,1,1]}`+"\n"), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()
	for i, letter := range []string{staleLetterLine("x", 2, 0), strings.Replace(staleLetterLine("x", 2, 0), `}`, `,"namespace":"__default__"}`, 1)} {
		for _, ns := range []string{"", "__default__"} {
			require.NoError(t, os.WriteFile(dl, []byte(letter), 0o600))
			res := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--namespace", ns,
				"--checkpoint", filepath.Join(dir, fmt.Sprintf("ck%d%s", i, ns)), "--dead-letter", dl, in)...)
			assert.Equal(t, exitFailed, res.status, "x is lettered as may be stale; letter %d, run %q: %s", i, ns, res.stderr)
			assert.Contains(t, res.stderr, "appending to it rather than replacing it")
			firsts, _ := lettersOf(t, dl, "x")
			assert.Equal(t, []float32{2, 3}, firsts, "letter %d, run %q", i, ns)
		}
	}
}

// refusedLetterLine is the letter of record id, refused for good by the
// index (no may_have_landed), in namespace ns, as ndjson.DeadLetters.Write
// spells it.
func refusedLetterLine(id, ns string) string {
	return `{"id":"` + id + `","values":[1,1,1],"class":"invalid","error":"refused","attempts":1,"may_have_landed":false,"index":0,"namespace":"` + ns + `"}` + "\n"
}

// mixedNamespacesMessage is the start of the refusal of a run of
// namespace b that would append to the dead-letter file dl of a's
// letters.
func mixedNamespacesMessage(dl string) string {
	return "pcupsert: --dead-letter " + dl + ` holds letters of namespace "a", and this run writes to namespace "b": `
}

// refusedForLettersOfA runs args as a dry run, then as a run, and checks
// that both are refused for dl, a dead-letter file of namespace a's
// letters, before they send or write anything: exit status 2, the message,
// no report. It returns their stderr, the dry run's first.
func refusedForLettersOfA(t *testing.T, dl string, args []string) (stderr [2]string) {
	t.Helper()
	for i, cmd := range [][]string{append([]string{"--dry-run"}, args...), args} {
		res := runCmd(t, nil, nil, cmd...)
		assert.Equal(t, exitUsage, res.status, "dry run %v; stdout:\n%s\nstderr:\n%s", i == 0, res.stdout, res.stderr)
		assert.Contains(t, res.stderr, mixedNamespacesMessage(dl), "dry run %v", i == 0)
		assert.Empty(t, res.stdout, "dry run %v: no report", i == 0)
		stderr[i] = res.stderr
	}
	return stderr
}

// A dry run refuses the command line a run refuses (exit status 2, the
// run's message): a run resumed from a checkpoint, with records past it to
// send, whose --dead-letter holds another namespace's letters. The dead
// letters are read, the file and the checkpoint left as they were, and the
// report (which said the run "would send" them) is not written. (The dry
// run once did not read the dead-letter file, reported the records it
// would send and exited 0, and the run then exited 2.)
func TestADryRunRefusesTheDeadLetterFileOfAnotherNamespaceAsTheRunDoes(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	input := records(t, 3)
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()
	// Run 1 of namespace b settled one record; tenant a's run left a letter
	// in the shared dead-letter file.
	saved := checkpointFor(1, input) + targetLine(srv, "b")
	require.NoError(t, os.WriteFile(ckpt, []byte(saved), 0o600))
	require.NoError(t, os.WriteFile(dl, []byte(refusedLetterLine("q", "a")), 0o600))
	args := append(remote(t, srv), "--progress", "off", "--namespace", "b", "--checkpoint", ckpt, "--dead-letter", dl, in)

	refusedForLettersOfA(t, dl, args)
	assert.Zero(t, srv.Count("b"), "nothing was sent")
	assert.Equal(t, saved, readString(t, ckpt))
	assert.Equal(t, refusedLetterLine("q", "a"), readString(t, dl))
}

// Two tenants' loads share the default dead-letter file (two loads in one
// directory): tenant a left a letter in it; tenant b's load, started
// fresh, lands everything and writes no letter. Its reruns (a retry
// wrapper, a cron job), which have nothing to send and nothing to append,
// are not refused for a's letter, and neither are their dry runs: the
// refusal is for a run that would send a record or write a letter into
// the file. (Every rerun once exited 2, the run "resuming" from a
// checkpoint and the file naming a: a finished load failed forever.) The
// file is left as it was.
func TestAFinishedLoadRunAgainIsNotRefusedForLettersItWillNeverAppendTo(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "b.ndjson"), filepath.Join(dir, "ck-b"), filepath.Join(dir, "pcupsert-failed.ndjson")
	input := records(t, 3) + "not json\n"
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()
	args := append(remote(t, srv), "--progress", "off", "--namespace", "b", "--checkpoint", ckpt, "--dead-letter", dl, in)

	res := runCmd(t, nil, nil, args...)
	require.Equal(t, exitFailed, res.status, "b's first run lands everything, line 4 is bad; stderr:\n%s", res.stderr)
	require.Equal(t, 3, srv.Count("b"))
	require.Equal(t, checkpointFor(3, input)+targetLine(srv, "b")+"reported-through 4\n", readString(t, ckpt))
	// Tenant a's run, with the same --dead-letter, replaced b's letter
	// with its own.
	require.NoError(t, os.WriteFile(dl, []byte(refusedLetterLine("q", "a")), 0o600))

	requests := srv.Stats().Requests
	for rerun := range 2 {
		res = runCmd(t, nil, nil, append([]string{"--dry-run"}, args...)...)
		assert.Equal(t, exitOK, res.status, "the dry run of rerun %d; stderr:\n%s", rerun, res.stderr)
		assert.Contains(t, res.stdout, "would send     0 records")
		res = runCmd(t, nil, nil, args...)
		assert.Equal(t, exitOK, res.status, "rerun %d of b's finished load (nothing to send, nothing to append); stderr:\n%s", rerun, res.stderr)
		assert.Contains(t, res.stderr, "skipped the first 3 records")
	}
	assert.Equal(t, requests, srv.Stats().Requests)
	assert.Equal(t, refusedLetterLine("q", "a"), readString(t, dl), "the file is left as it was")
	assert.Equal(t, checkpointFor(3, input)+targetLine(srv, "b")+"reported-through 4\n", readString(t, ckpt))
}

// A rerun of a finished load whose input grew since, by a record or by a
// bad line past the line its checkpoint reported through, would send that
// record or write that line's letter: with a dead-letter file of another
// namespace's letters it is refused (exit status 2, the message of a
// refusal at its start), as is its dry run, before anything is sent or
// written: the index gets no request, the file and the checkpoint are left
// as they were. Once the file is replayed and removed, the run lands the
// record, or letters the line.
func TestARunThatWouldSendOrLetterPastItsCheckpointIsRefusedTheFileOfAnotherNamespace(t *testing.T) {
	for _, grown := range []string{`{"id":"r3","values":[3,0.5,0.25]}` + "\n", "not json\n"} {
		t.Run(strings.TrimSpace(grown), func(t *testing.T) {
			dir := t.TempDir()
			in, ckpt, dl := filepath.Join(dir, "b.ndjson"), filepath.Join(dir, "ck-b"), filepath.Join(dir, "dl.ndjson")
			input := records(t, 3)
			srv := upserttest.NewServer()
			defer srv.Close()
			// b's load of its 3 records landed; then the input grew, and a's
			// run left a letter in the file.
			saved := checkpointFor(3, input) + targetLine(srv, "b")
			require.NoError(t, os.WriteFile(in, []byte(input+grown), 0o600))
			require.NoError(t, os.WriteFile(ckpt, []byte(saved), 0o600))
			require.NoError(t, os.WriteFile(dl, []byte(refusedLetterLine("q", "a")), 0o600))
			args := append(remote(t, srv), "--progress", "off", "--namespace", "b", "--checkpoint", ckpt, "--dead-letter", dl, in)

			for _, stderr := range refusedForLettersOfA(t, dl, args) {
				assert.NotContains(t, stderr, "line 4:", "the bad line is not reported")
			}
			assert.Zero(t, srv.Stats().Requests, "nothing was sent")
			assert.Equal(t, saved, readString(t, ckpt))
			assert.Equal(t, refusedLetterLine("q", "a"), readString(t, dl))

			require.NoError(t, os.Remove(dl)) // replayed into a
			res := runCmd(t, nil, nil, args...)
			if strings.HasPrefix(grown, "{") {
				assert.Equal(t, exitOK, res.status, res.stderr)
				assert.Equal(t, 1, srv.Count("b"))
			} else {
				assert.Equal(t, exitFailed, res.status, res.stderr)
				assert.Contains(t, readString(t, dl), `{"line":4,"raw":"not json"`)
			}
		})
	}
}

// A file of bad-line letters only names no namespace (it is appended to
// by a run of any); a namespace that is not UTF-8 is its base64 letters'.
func TestLettersOfBadLinesNameNoNamespaceAndABase64OneIsTheRunsOwn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dl")
	require.NoError(t, os.WriteFile(path, []byte(`{"line":3,"raw":"{\"id\":\"x\"}","error":"e"}`+"\n"+
		`{"id":"x","values":[1],"class":"timeout","error":"e","may_have_landed":true,"index":2,"namespace_base64":"//4="}`+"\n"), 0o600))
	e, err := exposedIDs(path, 0, "\xff\xfe")
	require.NoError(t, err)
	assert.Empty(t, e.others)
	assert.Equal(t, map[letterKey]int{{"\xff\xfe", "x"}: 2}, e.ids)
}
