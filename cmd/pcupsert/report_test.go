package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upserttest"
)

// figures are the counts of a final report, human or JSON, without the
// times (elapsed, latency, throughput), which differ from run to run.
type figures struct {
	RecordsRead, BadLines, Upserted, Failed, Duplicates int
	FailedByClass                                       map[string]int
	Requests, Retries                                   int
	RetriesByClass                                      map[string]int
	Splits                                              int
	ErrorsByCode                                        map[string]int
	Causes                                              []cause // without their hosts: the port differs
	Stored, DeadLetters, ExitStatus                     int
}

// jsonFigures takes the figures of a --json report.
func jsonFigures(s summary) figures {
	f := figures{
		RecordsRead: s.RecordsRead, BadLines: s.BadLines, Upserted: s.Upserted, Failed: s.Failed, Duplicates: s.Duplicates,
		FailedByClass: nonZero(s.FailedByClass), Requests: s.Requests, Retries: s.Retries, RetriesByClass: nonZero(s.RetriesByClass),
		Splits: s.Splits, ErrorsByCode: nonZero(s.ErrorsByCode), DeadLetters: s.DeadLetters.Count, ExitStatus: s.ExitStatus,
	}
	for _, c := range s.Causes {
		c.Host = ""
		f.Causes = append(f.Causes, c)
	}
	if s.Embedded != nil {
		f.Stored = s.Embedded.Stored
	}
	return f
}

func nonZero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// humanFigures reads the figures of a human report.
func humanFigures(t *testing.T, res result) figures {
	t.Helper()
	out := res.stdout
	atoi := func(s string) int {
		t.Helper()
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "%q in\n%s", s, out)
		return n
	}
	// counted reads "12 (rate-limited 3, server 9)".
	counted := func(row string) (int, map[string]int) {
		t.Helper()
		m := regexp.MustCompile(`^(\d+)(?: \((.*)\))?$`).FindStringSubmatch(reportValue(t, out, row))
		require.NotNil(t, m, "row %q in\n%s", row, out)
		by := map[string]int{}
		if m[2] != "" {
			for part := range strings.SplitSeq(m[2], ", ") {
				i := strings.LastIndexByte(part, ' ')
				by[part[:i]] = atoi(part[i+1:])
			}
		}
		return atoi(m[1]), by
	}
	f := figures{
		RecordsRead:  atoi(reportValue(t, out, "records read")),
		BadLines:     atoi(reportValue(t, out, "bad lines")),
		Upserted:     atoi(reportValue(t, out, "upserted")),
		Duplicates:   atoi(reportValue(t, out, "duplicates")),
		Requests:     atoi(reportValue(t, out, "requests")),
		Splits:       atoi(reportValue(t, out, "splits")),
		ErrorsByCode: map[string]int{},
		ExitStatus:   res.status,
	}
	f.Failed, f.FailedByClass = counted("failed")
	f.Retries, f.RetriesByClass = counted("retries")
	if codes := reportValue(t, out, "errors by code"); codes != "none" {
		for part := range strings.SplitSeq(codes, ", ") {
			code, n, _ := strings.Cut(part, " ")
			f.ErrorsByCode[code] = atoi(n)
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^  (\S+) ×(\d+) (request|record)s? +(before sending: )?(.*)$`).FindAllStringSubmatch(out, -1) {
		f.Causes = append(f.Causes, cause{Class: m[1], Count: atoi(m[2]), Unit: m[3], Message: m[5]})
	}
	if m := regexp.MustCompile(`(?m)^embedded index: holds (\d+) records?`).FindStringSubmatch(out); m != nil {
		f.Stored = atoi(m[1])
	}
	if m := regexp.MustCompile(`(?m)^dead letters: (\d+) in `).FindStringSubmatch(out); m != nil {
		f.DeadLetters = atoi(m[1])
	}
	return f
}

func TestTheJSONReportHasTheFiguresOfTheHumanOne(t *testing.T) {
	// Two bad lines, a record refused before sending, one the index
	// refuses (found by bisection), and 503s to retry. One request at a
	// time, of a fixed size, and the index's faults drawn by request
	// number: the two runs send the same requests.
	input := records(t, 400) + "not json\n" + `{"id":"zero","values":[0,0,0]}` + "\n" + `{"id":"typed","values":"x"}` + "\n"
	args := []string{"--progress", "off", "--fault", "503=0.15,reject=r42", "--batch-size", "40", "--concurrency", "1"}

	human := runCmd(t, nil, strings.NewReader(input), append(args, "--dead-letter", deadLetterPath(t))...)
	require.Equal(t, exitFailed, human.status, "stderr:\n%s", human.stderr)
	js := runCmd(t, nil, strings.NewReader(input), append(args, "--dead-letter", deadLetterPath(t), "--json")...)
	require.Equal(t, exitFailed, js.status, "stderr:\n%s", js.stderr)
	s := jsonReport(t, js)

	got, want := humanFigures(t, human), jsonFigures(s)
	assert.Equal(t, want, got)
	// The run had something to show in each figure.
	assert.Equal(t, 2, want.BadLines)
	assert.Equal(t, map[string]int{"invalid": 2}, want.FailedByClass)
	assert.Positive(t, want.RetriesByClass["server"])
	assert.Positive(t, want.Splits)
	assert.Equal(t, 4, want.DeadLetters)
	assert.Equal(t, 399, want.Stored)
	assert.Equal(t, s.ExitStatus, js.status, "the JSON's exit status is the process's")
}

// The JSON report says whether the run was interrupted, gave up
// (--max-failure-seconds) or stopped (a failure no retry can fix), and so
// does the human one, on its last line ("ended early: …"): the README
// says the report tells which, and a reader of the human form must not
// take a run cut short for one whose input ended.
func TestTheHumanReportSaysHowTheRunEnded(t *testing.T) {
	// Each setup returns the context, the arguments and the input of a
	// run that ends so.
	interrupted := func(t *testing.T) (context.Context, []string, io.Reader) {
		ctx, args := interruptInFlight(t)
		return ctx, args, strings.NewReader(records(t, 50))
	}
	failing := func(t *testing.T) (context.Context, []string, io.Reader) {
		srv := upserttest.NewServer(upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
			return upserttest.Fault{Code: codes.Unavailable}
		}))
		t.Cleanup(srv.Close)
		return nil, append(remote(t, srv), "--max-failure-seconds", "0.05"), strings.NewReader(records(t, 50))
	}
	denied := func(t *testing.T) (context.Context, []string, io.Reader) {
		srv := upserttest.NewServer(upserttest.WithAPIKey("another-key"))
		t.Cleanup(srv.Close)
		// One small request at a time: the denial of the first stops the
		// run long before it could read the input to its end.
		return nil, append(remote(t, srv), "--batch-size", "10", "--concurrency", "1"), strings.NewReader(records(t, 20000))
	}
	tests := []struct {
		name  string
		setup func(t *testing.T) (context.Context, []string, io.Reader)
		flag  func(s summary) bool
		want  string
	}{
		{"interrupted", interrupted, func(s summary) bool { return s.Interrupted }, "ended early: interrupted (a signal"},
		{"gave up", failing, func(s summary) bool { return s.GaveUp }, "ended early: gave up (--max-failure-seconds"},
		{"stopped", denied, func(s summary) bool { return s.Stopped }, "ended early: stopped (a failure no retry can fix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, args, in := tt.setup(t)
			human := runCmd(t, ctx, in, append(args, "--progress", "off", "--dead-letter", deadLetterPath(t))...)
			require.Equal(t, exitFailed, human.status, "stderr:\n%s", human.stderr)
			assert.Contains(t, human.stdout, tt.want)
			assert.Equal(t, 1, strings.Count(human.stdout, "ended early:"), "one reason:\n%s", human.stdout)

			ctx, args, in = tt.setup(t)
			js := runCmd(t, ctx, in, append(args, "--progress", "off", "--dead-letter", deadLetterPath(t), "--json")...)
			require.Equal(t, exitFailed, js.status, "stderr:\n%s", js.stderr)
			assert.True(t, tt.flag(jsonReport(t, js)), "the JSON report says it too")
		})
	}

	t.Run("a run whose input ended", func(t *testing.T) {
		res := runCmd(t, nil, strings.NewReader(records(t, 5)), "--progress", "off", "--dead-letter", deadLetterPath(t))
		require.Equal(t, exitOK, res.status, "stderr:\n%s", res.stderr)
		assert.NotContains(t, res.stdout, "ended early")
	})
}

// A record the library refuses before sending is named on stderr by its
// input line, as a line that is not JSON is: "pcupsert: line N (id …): why".
func TestRecordsRefusedBeforeSendingAreNamedByTheirLineAsBadLinesAre(t *testing.T) {
	tests := []struct {
		name   string
		record string
		args   []string
		rule   string
	}{
		{"all-zero dense values", `{"id":"bad","values":[0,0,0]}`, nil,
			"dense values are all zero; Pinecone requires at least one non-zero value"},
		{"a dimension unlike --dimension's", `{"id":"bad","values":[1,2]}`, []string{"--dimension", "3"},
			"has 2 dense values; the index's dimension is 3"},
		{"nested metadata", `{"id":"bad","values":[1,2,3],"metadata":{"a":{"b":1}}}`, nil, `metadata field "a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Line 2 is blank, so that lines and records are numbered
			// apart: the bad record is the library's record 2 (from 0) but
			// line 5.
			input := `{"id":"a","values":[1,2,3]}` + "\n\n" + `{"id":"typed","values":"x"}` + "\n" +
				`{"id":"b","values":[4,5,6]}` + "\n" + tt.record + "\n" + `{"id":"c","values":[7,8,9]}` + "\n"
			dl := deadLetterPath(t)
			res := runCmd(t, nil, strings.NewReader(input), append([]string{"--json", "--dead-letter", dl, "--progress", "off"}, tt.args...)...)
			require.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)

			named := regexp.MustCompile(`(?m)^pcupsert: line (\d+) \(id "([^"]*)"\): (.*)$`).FindAllStringSubmatch(res.stderr, -1)
			require.Len(t, named, 2, "the bad line and the invalid record, in one form; stderr:\n%s", res.stderr)
			assert.Equal(t, []string{"3", "typed"}, named[0][1:3])
			assert.True(t, strings.HasPrefix(named[0][3], "wrong type"), named[0][3])
			assert.Equal(t, []string{"5", "bad"}, named[1][1:3])
			assert.Contains(t, named[1][3], tt.rule)
			assert.NotRegexp(t, `record \d`, named[1][3], "not the library's numbering of the records")

			s := jsonReport(t, res)
			assert.Equal(t, 3, s.Upserted)
			assert.Equal(t, &embedded{Stored: 3, AsExpected: true}, s.Embedded)
			require.NotEmpty(t, s.Causes)
			last := s.Causes[len(s.Causes)-1]
			assert.Equal(t, cause{Class: "invalid", Count: 1, Unit: unitRecord, Message: last.Message}, last,
				"refused before sending: no host answered, one record counted")
			assert.Contains(t, last.Message, tt.rule)
			byID, byLine := letterErrors(t, dl)
			assert.Equal(t, "invalid: line 5 (id \"bad\"): "+named[1][3], byID["bad"], "the dead letter names it the same way")
			assert.Equal(t, "line 3 (id \"typed\"): "+named[0][3], byLine[3])
		})
	}
}

// Records that landed while a request carrying an earlier record of their
// id had ended without an answer may be stale: the index may still apply
// that request and keep the earlier record (Result.MayBeStale). The report
// says how many, on stdout ("may be stale", "may_be_stale") and stderr;
// each one has a dead letter, so that replaying the file upserts it
// again; and the run exits 1.
func TestRecordsThatMayBeStaleAreReported(t *testing.T) {
	// An index where the first request carrying x times out on the client.
	newIndex := func() *upserttest.Server {
		var once sync.Once
		srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
			var f upserttest.Fault
			if slices.Contains(r.IDs, "x") {
				once.Do(func() { f = upserttest.Fault{Code: codes.DeadlineExceeded} })
			}
			return f
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	input := `{"id":"x","values":[1,1,1]}
{"id":"y","values":[1,1,1]}
{"id":"z","values":[1,1,1]}
{"id":"x","values":[3,1,1]}
`
	args := []string{"--progress", "off", "--batch-size", "1", "--concurrency", "1"}

	// The library reports one such record for this input and index
	// (checked here, so that the test is about pcupsert).
	srv := newIndex()
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "k"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host()})
	require.NoError(t, err)
	defer idx.Close()
	mk := func(id string, v float32) *pinecone.Vector {
		return &pinecone.Vector{Id: id, Values: &[]float32{v, 1, 1}}
	}
	lib, err := upsert.Stream(context.Background(), slices.Values([]*pinecone.Vector{mk("x", 1), mk("y", 1), mk("z", 1), mk("x", 3)}),
		upsert.WithIndex(idx), upsert.WithBatchSize(1), upsert.WithConcurrency(1))
	require.NoError(t, err)
	require.Equal(t, 1, lib.Stats.MayBeStale)

	dl := deadLetterPath(t)
	res := runCmd(t, nil, strings.NewReader(input), append(append(remote(t, newIndex()), args...), "--json", "--dead-letter", dl)...)
	assert.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
	s := jsonReport(t, res)
	assert.Equal(t, 1, s.MayBeStale)
	assert.Equal(t, 4, s.Upserted, "it landed")
	assert.Equal(t, exitFailed, s.ExitStatus)
	assert.Equal(t, 1, s.DeadLetters.Count)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &m))
	assert.EqualValues(t, 1, m["may_be_stale"])
	assert.Contains(t, res.stderr, "1 record that landed may be stale")

	byID, _ := letterErrors(t, dl)
	assert.Regexp(t, `^line 4 \(id "x"\): landed while the request carrying line 1, an earlier record of its id, had ended without an answer`, byID["x"])
	data, err := os.ReadFile(dl)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"class":"may-be-stale"`)

	// Replaying the dead-letter file upserts the record as it was last.
	replay := newIndex()
	res = runCmd(t, nil, nil, append(remote(t, replay), "--progress", "off", "--dead-letter", deadLetterPath(t), dl)...)
	assert.Equal(t, exitOK, res.status, "stderr:\n%s", res.stderr)
	v, ok := replay.Vector("__default__", "x")
	require.True(t, ok)
	assert.Equal(t, []float32{3, 1, 1}, *v.Values)

	res = runCmd(t, nil, strings.NewReader(input), append(append(remote(t, newIndex()), args...), "--dead-letter", deadLetterPath(t))...)
	assert.Equal(t, exitFailed, res.status)
	assert.Regexp(t, `^1 \(landed, but an earlier write`, reportValue(t, res.stdout, "may be stale"))
}

// eioReader fails as a disk or a broken pipe does.
type eioReader struct{}

func (eioReader) Read([]byte) (int, error) {
	return 0, errors.New("read /mnt/export/part-7: input/output error")
}

// A read error after records were sent ends the run with its report, the
// error stated in it and on stderr, and exit status 1: the records read
// before it were sent, and a script must learn what became of them.
func TestAReadErrorAfterRecordsLandedStillWritesTheReport(t *testing.T) {
	srv := upserttest.NewServer()
	defer srv.Close()
	in := io.MultiReader(strings.NewReader(records(t, 500)), eioReader{})
	res := runCmd(t, nil, in, append(remote(t, srv), "--json", "--progress", "off", "--dead-letter", deadLetterPath(t))...)
	assert.Equal(t, exitFailed, res.status)
	assert.Contains(t, res.stderr, "pcupsert: reading stdin: read /mnt/export/part-7: input/output error; the rest of stdin was not read")
	require.Equal(t, 500, srv.Count("__default__"), "what was read before the error was sent")

	s := jsonReport(t, res)
	assert.Equal(t, 500, s.Upserted)
	assert.Equal(t, "reading stdin: read /mnt/export/part-7: input/output error", s.InputError)
	assert.Equal(t, exitFailed, s.ExitStatus)

	res = runCmd(t, nil, io.MultiReader(strings.NewReader(records(t, 5)), eioReader{}), "--progress", "off", "--dead-letter", deadLetterPath(t))
	assert.Equal(t, exitFailed, res.status)
	assert.Equal(t, "5", reportValue(t, res.stdout, "upserted"))
	assert.Contains(t, res.stdout, "input: reading stdin: read /mnt/export/part-7: input/output error; the rest of it was not read")
}

// The JSON report's collections are empty, not null, when nothing failed:
// `jq '.causes[]'` and `for c in r["causes"]` work on a clean run.
func TestTheJSONReportsCollectionsAreEmptyWhenNothingFailed(t *testing.T) {
	res := runCmd(t, nil, strings.NewReader(records(t, 3)), "--json", "--progress", "off", "--dead-letter", deadLetterPath(t))
	require.Equal(t, exitOK, res.status)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &m))
	assert.Equal(t, []any{}, m["causes"], "causes: %s", res.stdout)
	for _, k := range []string{"failed_by_class", "retries_by_class", "errors_by_code"} {
		assert.Equal(t, map[string]any{}, m[k], k)
	}
}

// After --max-failure-seconds gives up, the rest of the input is drained
// into the dead-letter file, bad lines included, and the report counts
// the bad lines the drain found: each dead letter is accounted for.
func TestBadLinesFoundAfterGivingUpAreCountedInTheReport(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		if r.Seq > 2 {
			return upserttest.Fault{Code: codes.Unavailable}
		}
		return upserttest.Fault{}
	}))
	defer srv.Close()
	dl := deadLetterPath(t)
	res := runCmd(t, nil, strings.NewReader(records(t, 5000)+"not json\n"), append(remote(t, srv),
		"--json", "--dead-letter", dl, "--progress", "off", "--batch-size", "100", "--max-failure-seconds", "0.3")...)
	require.Equal(t, exitFailed, res.status)
	s := jsonReport(t, res)
	require.True(t, s.GaveUp)
	require.Positive(t, s.NotSent, "the bad line, at the end, was read by the drain")
	_, byLine := letterErrors(t, dl)
	require.Equal(t, map[int]string{5001: "line 5001: invalid JSON at byte 2"}, byLine)
	assert.Equal(t, 1, s.BadLines, "the bad line in the dead-letter file is counted")
	assert.Equal(t, s.Failed+s.NotSent+s.BadLines, s.DeadLetters.Count, "each dead letter is accounted for")
}

// A Ctrl-C while the rest of an idle input is being drained into the
// dead-letter file, after --max-failure-seconds gave up, ends the run
// with its report: both are said, and every letter written is counted.
func TestAnInterruptWhileDrainingAfterGivingUpEndsTheRun(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		if r.Seq > 2 {
			return upserttest.Fault{Code: codes.Unavailable}
		}
		return upserttest.Fault{}
	}))
	defer srv.Close()
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dl := deadLetterPath(t)
	args := append(remote(t, srv), "--json", "--dead-letter", dl, "--progress", "off", "--batch-size", "100", "--max-failure-seconds", "0.2")
	done := make(chan result, 1)
	go func() { done <- runCmd(t, ctx, pr, args...) }()
	_, err := io.WriteString(pw, records(t, 500))
	require.NoError(t, err)
	time.Sleep(2 * time.Second) // gives up after 0.2 s of failures, then drains the idle input
	cancel()

	var res result
	select {
	case res = <-done:
	case <-time.After(5 * time.Second):
		pw.Close()
		<-done
		t.Fatal("the run did not end after the interrupt: the drain waits for input that may never come")
	}
	assert.Equal(t, exitFailed, res.status)
	assert.Contains(t, res.stderr, "gave up at line")
	assert.Contains(t, res.stderr, "interrupted while writing the rest of stdin to the dead-letter file, at line 500")
	s := jsonReport(t, res)
	assert.True(t, s.GaveUp)
	assert.True(t, s.Interrupted)
	assert.Equal(t, 200, s.Upserted)
	ids, _ := letters(t, dl)
	assert.Len(t, ids, 300)
	assert.Equal(t, s.Failed+s.NotSent, s.DeadLetters.Count)
}

// A run resumed after a crash that finishes cleanly tells of the dead
// letters that the runs it resumes left in the file it appends to, in the
// human report and in --json (dead_letters.earlier): its own figures say
// that nothing failed, and the user who reads only the last report must
// learn that the load has dead letters. Its exit status is that of its
// own records, 0: the runs that wrote those letters exited 1, and a
// finished load run again (a retry wrapper) must not fail forever.
func TestAResumedRunTellsOfTheDeadLettersOfTheEarlierRun(t *testing.T) {
	dir := t.TempDir()
	in, ckpt, dl := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "dl.ndjson")
	// r3 is refused before sending (all-zero values); the index denies
	// every record from r50 on, which stops the first run.
	input := strings.Replace(records(t, 100), `{"id":"r3","values":[3,0.5,0.25]}`, `{"id":"r3","values":[0,0,0]}`, 1)
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	srv := upserttest.NewServer(upserttest.WithFaults(deniedFrom))
	defer srv.Close()
	args := append(remote(t, srv), "--progress", "off", "--batch-size", "10", "--concurrency", "1", "--dead-letter", dl, "--checkpoint", ckpt, in)
	res := runCmd(t, nil, nil, args...)
	require.Equal(t, exitFailed, res.status, res.stderr)

	srv.SetFaults(nil)
	res = runCmd(t, nil, nil, args...)
	require.Equal(t, exitOK, res.status, res.stderr)
	ids, _ := letters(t, dl)
	require.Equal(t, []string{"r3"}, ids, "r3 never landed: its letter is in the file")
	require.Equal(t, "0", reportValue(t, res.stdout, "failed"))
	require.Contains(t, res.stdout, "earlier dead letters: 1 in "+dl+", written by earlier runs, kept and appended to (--checkpoint)\n")
	require.NotContains(t, res.stdout, "\ndead letters:", "none of this run's")

	res = runCmd(t, nil, nil, append([]string{"--json"}, args...)...) // the finished load, run again
	require.Equal(t, exitOK, res.status, res.stderr)
	s := jsonReport(t, res)
	require.Equal(t, deadLetterSummary{Path: dl, Count: 0, Earlier: 1}, s.DeadLetters)
}
