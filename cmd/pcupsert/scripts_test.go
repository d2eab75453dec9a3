package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert/ndjson"
	"github.com/upsertlib/upsert/upserttest"
)

// jsonReport parses the --json report of a run.
func jsonReport(t *testing.T, res result) summary {
	t.Helper()
	var s summary
	dec := json.NewDecoder(strings.NewReader(res.stdout))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&s), "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	assert.False(t, dec.More(), "one JSON object on stdout")
	return s
}

// remote runs the command against srv as a real index, with an API key.
func remote(t *testing.T, srv *upserttest.Server) []string {
	t.Setenv("PINECONE_API_KEY", "test-key-for-upserttest")
	return []string{"--host", srv.Host()}
}

func TestJSONReportHasTheFiguresOfTheRun(t *testing.T) {
	dl := deadLetterPath(t)
	input := records(t, 300) + "not json\n"
	res := runCmd(t, nil, strings.NewReader(input), "--json", "--dead-letter", dl, "--progress", "off",
		"--fault", "503=0.2,reject=r7", "--batch-size", "50")
	require.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
	s := jsonReport(t, res)

	assert.Equal(t, "stdin", s.Input)
	assert.Equal(t, "ndjson", s.Format)
	assert.Equal(t, 300, s.RecordsRead)
	assert.Equal(t, 1, s.BadLines)
	assert.Equal(t, 299, s.Upserted)
	assert.Equal(t, 1, s.Failed)
	assert.Equal(t, map[string]int{"invalid": 1}, s.FailedByClass)
	assert.Positive(t, s.Retries)
	assert.Equal(t, s.Retries, s.RetriesByClass["server"])
	assert.Equal(t, s.Retries, s.ErrorsByCode["Unavailable"])
	assert.Positive(t, s.Splits, "the rejected record is isolated by bisection")
	assert.Positive(t, s.Requests)
	assert.Positive(t, s.LatencySeconds.P50)
	assert.Equal(t, &embedded{Stored: 299, AsExpected: true}, s.Embedded)
	assert.Equal(t, deadLetterSummary{Path: dl, Count: 2}, s.DeadLetters)
	assert.Equal(t, exitFailed, s.ExitStatus)
	require.NotEmpty(t, s.Causes)
	assert.Equal(t, "server", s.Causes[0].Class)
	assert.Equal(t, "upserttest: injected fault: Unavailable", s.Causes[0].Message, "the index's own words")
	assert.Equal(t, s.Host, s.Causes[0].Host)
	assert.True(t, strings.HasPrefix(s.Host, "http://127.0.0.1:"))
	assert.NotContains(t, res.stdout, "records read", "no human report with --json")
}

func TestTheReportNamesTheCauses(t *testing.T) {
	res := runCmd(t, nil, strings.NewReader(records(t, 300)), "--dead-letter", deadLetterPath(t), "--progress", "off",
		"--fault", "503=0.3,reject=r5", "--batch-size", "50")
	require.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
	assert.Regexp(t, `^from http://127\.0\.0\.1:\d+$`, reportValue(t, res.stdout, "causes"))
	assert.Regexp(t, `(?m)^  server ×\d+ +upserttest: injected fault: Unavailable$`, res.stdout)
	assert.Regexp(t, `(?m)^  invalid ×\d+ +Invalid request: a record in the request was rejected \(upserttest.RejectIDs\)$`, res.stdout)
}

func TestMaxFailureSecondsGivesUpOnAnIndexThatWentDown(t *testing.T) {
	// The index takes the first two requests, then answers UNAVAILABLE to
	// everything: a young outage, which the library would wait out for a
	// minute.
	srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		if r.Seq > 2 {
			return upserttest.Fault{Code: codes.Unavailable}
		}
		return upserttest.Fault{}
	}))
	defer srv.Close()
	dl := deadLetterPath(t)
	start := time.Now()
	res := runCmd(t, nil, strings.NewReader(records(t, 5000)), append(remote(t, srv),
		"--json", "--dead-letter", dl, "--progress", "off", "--batch-size", "100", "--max-failure-seconds", "0.3")...)

	assert.Less(t, time.Since(start), 10*time.Second, "gives up, instead of waiting out the outage")
	require.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
	assert.Contains(t, res.stderr, "gave up at line")
	s := jsonReport(t, res)
	assert.True(t, s.GaveUp)
	assert.Equal(t, 200, s.Upserted)
	assert.Equal(t, 5000, s.RecordsRead+s.NotSent, "what was not read is accounted for too")
	assert.Equal(t, s.RecordsRead-s.Upserted, s.Failed)

	ids, _ := letters(t, dl)
	assert.Len(t, ids, 5000-200, "every record not sent is a dead letter")
	stored := srv.Vectors("__default__")
	for _, id := range ids {
		assert.NotContains(t, stored, id)
	}
	assert.Len(t, stored, 200)
}

func TestDryRunSendsNothing(t *testing.T) {
	srv := upserttest.NewServer()
	defer srv.Close()
	input := records(t, 2500) + "{\"id\":\"short\",\"values\":[1]}\n" + "oops\n"
	res := runCmd(t, nil, strings.NewReader(input), append(remote(t, srv), "--dry-run", "--json", "--batch-size", "500", "--namespace", "docs", "--dimension", "3")...)

	assert.Equal(t, exitFailed, res.status, "a bad line and an invalid record fail the check")
	assert.Zero(t, srv.Stats().Requests, "no request reaches the index")
	var rep dryRunReport
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep), res.stdout)
	assert.Equal(t, dryRunReport{
		DryRun: true, Input: "stdin", Format: "ndjson", RecordsRead: 2501, BadLines: 1, Invalid: 1,
		Records: 2500, Batches: 5, BatchSize: 500, Namespaces: map[string]int{"docs": 2500}, ExitStatus: exitFailed,
	}, rep)
	assert.Contains(t, res.stderr, `line 2501 (id "short"): has 1 dense values; the index's dimension is 3`)
	assert.Contains(t, res.stderr, "line 2502: invalid JSON")
	assert.NoFileExists(t, defaultDeadLetter)
}

func TestAParquetFileRoundTrips(t *testing.T) {
	md := `{"genre":"drama","year":1999}`
	rows := []parquetRow{
		{ID: "dense", Values: []float32{0.1, 0.2, 0.3}, Metadata: &md},
		{ID: "hybrid", Values: []float32{1, 2, 3}, SparseValues: &parquetSparse{Indices: []uint32{4, 9}, Values: []float32{0.5, 0.25}}},
		{ID: "", Values: []float32{1, 1, 1}},                                     // no id: a bad row
		{ID: "bad-metadata", Values: []float32{1, 1, 1}, Metadata: ptr("[1,2]")}, // not an object
	}
	for i := range 1000 {
		rows = append(rows, parquetRow{ID: fmt.Sprint("r", i), Values: []float32{float32(i), 1, 2}})
	}
	path := filepath.Join(t.TempDir(), "vectors.parquet")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, parquet.Write(f, rows))
	require.NoError(t, f.Close())

	srv := upserttest.NewServer()
	defer srv.Close()
	dl := deadLetterPath(t)
	res := runCmd(t, nil, nil, append(remote(t, srv), "--json", "--dead-letter", dl, "--progress", "off", "--namespace", "docs", path)...)
	require.Equal(t, exitFailed, res.status, "two bad rows; stderr:\n%s", res.stderr)
	s := jsonReport(t, res)
	assert.Equal(t, "parquet", s.Format, "chosen by the extension")
	assert.Equal(t, 1002, s.Upserted)
	assert.Equal(t, 2, s.BadLines)
	assert.Contains(t, res.stderr, "row 3: missing or empty id")
	assert.Contains(t, res.stderr, `row 4 (id "bad-metadata"): wrong type: column "metadata" is not a JSON object`)

	assert.Equal(t, 1002, srv.Count("docs"))
	v, ok := srv.Vector("docs", "dense")
	require.True(t, ok)
	assert.Equal(t, []float32{0.1, 0.2, 0.3}, *v.Values)
	assert.Equal(t, map[string]any{"genre": "drama", "year": float64(1999)}, v.Metadata.AsMap())
	v, ok = srv.Vector("docs", "hybrid")
	require.True(t, ok)
	assert.Equal(t, &pinecone.SparseValues{Indices: []uint32{4, 9}, Values: []float32{0.5, 0.25}}, v.SparseValues)

	_, bad := letters(t, dl)
	assert.Len(t, bad, 2, "the bad rows are dead letters")

	// --format overrides the extension.
	res = runCmd(t, nil, nil, "--dry-run", "--format", "ndjson", path)
	assert.Equal(t, exitFailed, res.status)
	assert.Contains(t, res.stderr, "line 1: invalid JSON")
}

func ptr[T any](v T) *T { return &v }

func TestReplayingDeadLettersKeepsBadLinesAsTheyWere(t *testing.T) {
	first := deadLetterPath(t)
	input := records(t, 3) + "not json\n"
	res := runCmd(t, nil, strings.NewReader(input), "--dead-letter", first, "--progress", "off")
	require.Equal(t, exitFailed, res.status)
	want, err := os.ReadFile(first)
	require.NoError(t, err)
	assert.Equal(t, `{"line":4,"raw":"not json","error":"line 4: invalid JSON at byte 2"}`+"\n", string(want))

	second := deadLetterPath(t)
	res = runCmd(t, nil, nil, "--dead-letter", second, "--progress", "off", first)
	assert.Equal(t, exitFailed, res.status)
	assert.Contains(t, res.stderr, "line 4: invalid JSON at byte 2 (a bad line replayed from a dead letter, kept as it was)")
	got, err := os.ReadFile(second)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "the letter is the same, not wrapped in another")

	// A bad line fixed in the dead-letter file is a record again.
	fixed := filepath.Join(t.TempDir(), "fixed.ndjson")
	require.NoError(t, os.WriteFile(fixed, bytes.ReplaceAll(want, []byte(`"raw":"not json"`), []byte(`"raw":"{\"id\":\"x\",\"values\":[1,2,3]}"`)), 0o600))
	res = runCmd(t, nil, nil, "--dead-letter", deadLetterPath(t), "--progress", "off", fixed)
	assert.Equal(t, exitOK, res.status, "stderr:\n%s", res.stderr)
	assert.Equal(t, "1", reportValue(t, res.stdout, "upserted"))
}

// longLine is a reader of a line of n bytes of 'x' and its "\n", without
// holding it.
func longLine(n int) io.Reader {
	return io.MultiReader(io.LimitReader(xs{}, int64(n)), strings.NewReader("\n"))
}

type xs struct{}

func (xs) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// A line longer than 64 MiB gets a dead letter with an empty "raw" (the
// line is not kept) and its rule as error. Replaying the dead-letter file
// reports that line with that rule, not as "missing or empty id", which
// would send the user looking for an id problem in a line that never had
// one read, and writes the letter again unchanged.
func TestAReplayedLetterOfATooLongLineKeepsItsRule(t *testing.T) {
	first := deadLetterPath(t)
	in := io.MultiReader(strings.NewReader(records(t, 1)), longLine(64<<20+10), strings.NewReader(`{"id":"after","values":[1,2,3]}`+"\n"))
	res := runCmd(t, nil, in, "--dead-letter", first, "--progress", "off")
	require.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
	require.Contains(t, res.stderr, "line 2: line longer than 64 MiB")
	want, err := os.ReadFile(first)
	require.NoError(t, err)
	require.Equal(t, `{"line":2,"raw":"","error":"line 2: line longer than 64 MiB"}`+"\n", string(want))

	second := deadLetterPath(t)
	res = runCmd(t, nil, nil, "--dead-letter", second, "--progress", "off", first)
	assert.Equal(t, exitFailed, res.status)
	assert.Contains(t, res.stderr, "line 2: line longer than 64 MiB (a bad line replayed from a dead letter, kept as it was)", "stderr:\n%s", res.stderr)
	assert.NotContains(t, res.stderr, "missing or empty id")
	got, err := os.ReadFile(second)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "the replayed letter keeps the rule")
}

func TestAResumedRunDoesNotReportTheInterruptedOnesAgain(t *testing.T) {
	dir := t.TempDir()
	ckpt, dl, in := filepath.Join(dir, "ckpt"), filepath.Join(dir, "failed.ndjson"), filepath.Join(dir, "in.ndjson")
	lines := strings.SplitAfter(records(t, 6), "\n")
	// A bad line among the records an earlier run settled, one after.
	input := lines[0] + "bad before\n" + strings.Join(lines[1:4], "") + "bad after\n" + strings.Join(lines[4:], "")
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	require.NoError(t, os.WriteFile(ckpt, []byte("3\n"), 0o600))
	earlier := `{"line":2,"raw":"bad before","error":"line 2: invalid JSON at byte 1"}` + "\n"
	require.NoError(t, os.WriteFile(dl, []byte(earlier), 0o600))

	res := runCmd(t, nil, nil, "--checkpoint", ckpt, "--dead-letter", dl, "--progress", "off", in)
	assert.Equal(t, exitFailed, res.status, "a new bad line")
	assert.NotContains(t, res.stderr, "line 2:", "reported by the earlier run")
	assert.Contains(t, res.stderr, "line 6: invalid JSON")
	assert.Contains(t, res.stderr, "skipped the first 3 records of "+in+", which the checkpoint says a previous run settled, and 1 bad line it reported")
	assert.Equal(t, "3 (settled by an earlier run: --checkpoint)", reportValue(t, res.stdout, "skipped"))
	assert.Equal(t, "1", reportValue(t, res.stdout, "bad lines"))
	assert.Equal(t, "3", reportValue(t, res.stdout, "upserted"))
	got, err := os.ReadFile(dl)
	require.NoError(t, err)
	assert.Equal(t, earlier+`{"line":6,"raw":"bad after","error":"line 6: invalid JSON at byte 1"}`+"\n", string(got),
		"the earlier run's letters are kept, and the new one added")
}

func TestAnInterruptedRunWithACheckpointLeavesItsRecordsToTheNext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dl := deadLetterPath(t)
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	res := runCmd(t, ctx, cancelAtEOF{strings.NewReader(records(t, 50)), cancel}, "--dead-letter", dl, "--progress", "off", "--checkpoint", ckpt)
	assert.Equal(t, exitFailed, res.status)
	assert.Contains(t, res.stderr, "left to the next run with the same --checkpoint")
	assert.Equal(t, "50 (canceled 50)", reportValue(t, res.stdout, "failed"))
	assert.Equal(t, "50 (canceled; not dead letters: run again with the same --checkpoint)", reportValue(t, res.stdout, "left to resume"))
	assert.NoFileExists(t, dl, "the resumed run sends them: as dead letters they would be sent twice")
}

func TestInvalidRecordsAreNamedByTheirLine(t *testing.T) {
	input := records(t, 2) + "\n" + "not json\n" + `{"id":"nan","values":[1,2]}` + "\n"
	dl := deadLetterPath(t)
	res := runCmd(t, nil, strings.NewReader(input), "--dead-letter", dl, "--progress", "off")
	assert.Equal(t, exitFailed, res.status)
	// The embedded index learns its dimension from the first record it
	// stores, so the library sends this one and the index refuses it.
	assert.Contains(t, res.stderr, `pcupsert: line 5 (id "nan"): the index refused it: Vector dimension 2 does not match the dimension of the index 3`)
	data, err := os.ReadFile(dl)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"error":"invalid: line 5 (id \"nan\"): the index refused it: Vector dimension 2`)
}

func TestTheEmbeddedIndexTakesItsDimensionFromTheFlag(t *testing.T) {
	// Dead letters of records that an index of dimension 3 refused.
	var b strings.Builder
	for _, id := range []string{"w1", "w2"} {
		require.NoError(t, ndjson.Encode(&b, &pinecone.Vector{Id: id, Values: &[]float32{1, 2}}))
	}
	res := runCmd(t, nil, strings.NewReader(b.String()), "--json", "--dead-letter", deadLetterPath(t), "--progress", "off", "--dimension", "3")
	require.Equal(t, exitFailed, res.status)
	s := jsonReport(t, res)
	assert.Equal(t, 0, s.Upserted, "as a real index would, it refuses them")
	assert.Equal(t, map[string]int{"invalid": 2}, s.FailedByClass)
	require.NotEmpty(t, s.Causes)
	// The library asks the index its dimension and refuses them before
	// sending, as it would with a real index.
	assert.Equal(t, "has 2 dense values; the index's dimension is 3", s.Causes[0].Message)
	assert.Zero(t, s.Requests)

	res = runCmd(t, nil, strings.NewReader(b.String()), "--dimension", "3", "--host", "http://127.0.0.1:1")
	assert.Equal(t, exitUsage, res.status)
}

func TestTheProgressBarOfAFileShowsAPercentage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.ndjson")
	require.NoError(t, os.WriteFile(path, []byte(records(t, 4000)), 0o600))
	res := runCmd(t, nil, nil, "--dead-letter", deadLetterPath(t), "--progress", "bar", "--rate", "2000", "--batch-size", "100", path)
	require.Equal(t, exitOK, res.status, "stderr:\n%s", res.stderr)
	assert.Contains(t, res.stderr, "100% |")
	assert.Contains(t, res.stderr, "(4000/4000,")
	assert.Regexp(t, `\d+% \|[^|]*\| \(\d+/4000, \d+ rec/s\) \[\d+s:\d+s\]`, res.stderr, "a bar under way, with its ETA")
}

// failingWriter fails every write, as stdout does on a full disk or a
// closed pipe.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// A report that could not be written fails the run: a script reading it
// must not take a missing report for success.
func TestAReportNotWrittenFailsTheRun(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"summary", []string{"--progress", "off"}, "writing the summary"},
		{"summary as JSON", []string{"--progress", "off", "--json"}, "writing the summary"},
		{"dry run", []string{"--dry-run", "--dimension", "3"}, "writing the report"},
		{"dry run as JSON", []string{"--dry-run", "--json", "--dimension", "3"}, "writing the report"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			status := run(context.Background(), tt.args, strings.NewReader(records(t, 20)), failingWriter{}, &stderr)
			assert.Equal(t, exitFailed, status)
			assert.Contains(t, stderr.String(), tt.want)
		})
	}
}

// A checkpoint past the end of the input (the input is not the one the
// checkpoint was saved for: another file, or a shorter one) fails the run:
// none of its records was sent, and an exit status of 0 would say they
// landed. (pcupsert once dropped upsert.ErrCheckpointPastEnd and exited 0.)
func TestACheckpointPastTheEndOfTheInputFailsTheRun(t *testing.T) {
	dir := t.TempDir()
	ckpt, dl, in := filepath.Join(dir, "ckpt"), filepath.Join(dir, "failed.ndjson"), filepath.Join(dir, "in.ndjson")
	// The checkpoint of an earlier, longer input (or of another file).
	require.NoError(t, os.WriteFile(ckpt, []byte("10\n"), 0o600))
	require.NoError(t, os.WriteFile(in, []byte(records(t, 3)+"not json\n"), 0o600))

	res := runCmd(t, nil, nil, "--checkpoint", ckpt, "--dead-letter", dl, "--progress", "off", in)
	assert.NotEqual(t, exitOK, res.status, "none of the 3 records was sent, nor the bad line reported")
	assert.Contains(t, res.stderr, "checkpoint", "the error says the checkpoint does not fit the input")
	assert.NotContains(t, res.stderr, "which the checkpoint says a previous run settled")
}
