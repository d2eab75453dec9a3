package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
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
	"github.com/upsertlib/upsert/ndjson"
	"github.com/upsertlib/upsert/upserttest"
)

// result is what one run of the command left.
type result struct {
	status         int
	stdout, stderr string
}

// runCmd runs the command in-process with stdin as input.
func runCmd(t *testing.T, ctx context.Context, stdin io.Reader, args ...string) result {
	t.Helper()
	if ctx == nil {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		ctx = c
	}
	var stdout, stderr bytes.Buffer
	status := run(ctx, args, stdin, &stdout, &stderr)
	return result{status, stdout.String(), stderr.String()}
}

// records returns n records as NDJSON, with ids r0, r1, ...
func records(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		require.NoError(t, ndjson.Encode(&b, &pinecone.Vector{Id: fmt.Sprintf("r%d", i), Values: &[]float32{float32(i), 0.5, 0.25}}))
	}
	return b.String()
}

// reportValue returns the value of a row of the final report.
func reportValue(t *testing.T, stdout, row string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(row) + `\s{2,}(.*)$`).FindStringSubmatch(stdout)
	require.NotNil(t, m, "report row %q in\n%s", row, stdout)
	return m[1]
}

// letters reads a dead-letter file: its records and its bad lines.
func letters(t *testing.T, path string) (ids []string, badLines []int) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r := ndjson.NewReader(f)
	for {
		v, err := r.Next()
		if err == io.EOF {
			return ids, badLines
		}
		if err != nil {
			badLines = append(badLines, r.Line())
			continue
		}
		ids = append(ids, v.Id)
	}
}

func deadLetterPath(t *testing.T) string {
	return filepath.Join(t.TempDir(), "failed.ndjson")
}

func TestRecordsOnStdinLandInTheEmbeddedIndex(t *testing.T) {
	dl := deadLetterPath(t)
	res := runCmd(t, nil, strings.NewReader(records(t, 2500)), "--dead-letter", dl, "--namespace", "docs")

	assert.Equal(t, exitOK, res.status, "stderr:\n%s", res.stderr)
	assert.Contains(t, res.stderr, "no PINECONE_API_KEY/--host: writing to an embedded loopback index at http://127.0.0.1:")
	assert.Contains(t, res.stderr, "read 2500 records from stdin")
	assert.Regexp(t, `2500 done .* rec/s retries 0 429s 0`, res.stderr, "the final progress line")
	for row, want := range map[string]string{"records read": "2500", "bad lines": "0", "upserted": "2500", "failed": "0", "duplicates": "0", "errors by code": "none"} {
		assert.Equal(t, want, reportValue(t, res.stdout, row), row)
	}
	for _, row := range []string{"requests", "retries", "splits", "latency p50/p95/p99", "batch size mean", "elapsed", "throughput"} {
		reportValue(t, res.stdout, row)
	}
	assert.Contains(t, res.stdout, "embedded index: holds 2500 records, as many as upserted")
	assert.NoFileExists(t, dl, "no dead-letter file when nothing failed")
}

func TestMaxRateCapsTheRun(t *testing.T) {
	res := runCmd(t, nil, strings.NewReader(records(t, 1000)), "--dead-letter", deadLetterPath(t), "--progress", "off",
		"--batch-size", "100", "--max-rate", "10000", "--json")
	require.Equal(t, exitOK, res.status, "stderr:\n%s", res.stderr)
	s := jsonReport(t, res)
	assert.Equal(t, 1000, s.Upserted)
	// Ten requests of 100 at 10,000 a second: the last starts 90 ms after
	// the first, however fast the embedded index answers.
	assert.GreaterOrEqual(t, s.UpsertingSeconds, 0.09)
}

func TestBadLinesGoToTheDeadLetterFileWhileTheRestLands(t *testing.T) {
	input := `{"id":"a","values":[1,2]}
{"id":"b","values":[1,"two"]}

{"values":[1,2]}
not json at all
{"id":"c","values":[3,4]}
`
	dl := deadLetterPath(t)
	res := runCmd(t, nil, strings.NewReader(input), "--dead-letter", dl, "--progress", "off")

	assert.Equal(t, exitFailed, res.status)
	assert.Contains(t, res.stderr, `line 2 (id "b"): wrong type`)
	assert.Contains(t, res.stderr, "line 4: missing or empty id")
	assert.Contains(t, res.stderr, "line 5: invalid JSON")
	assert.NotContains(t, res.stderr, "not json", "a bad line's content is not shown")
	assert.Contains(t, res.stderr, "read 2 records from stdin (3 bad lines)")
	assert.Equal(t, "3", reportValue(t, res.stdout, "bad lines"))
	assert.Equal(t, "2", reportValue(t, res.stdout, "upserted"))
	assert.Contains(t, res.stdout, "embedded index: holds 2 records, as many as upserted")
	assert.Contains(t, res.stdout, "dead letters: 3 in "+dl)

	data, err := os.ReadFile(dl)
	require.NoError(t, err)
	assert.Contains(t, string(data), `{"line":5,"raw":"not json at all","error":"line 5: invalid JSON at byte 2"}`)
	ids, bad := letters(t, dl)
	assert.Empty(t, ids)
	assert.Equal(t, []int{1, 2, 3}, bad, "each bad line has its own dead letter")
	fi, err := os.Stat(dl)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

func TestFailedRecordsReplayFromTheDeadLetterFile(t *testing.T) {
	first := deadLetterPath(t)
	res := runCmd(t, nil, strings.NewReader(records(t, 300)),
		"--dead-letter", first, "--fault", "reject=r7|r123", "--progress", "off")
	require.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
	assert.Equal(t, "298", reportValue(t, res.stdout, "upserted"))
	assert.Equal(t, "2 (invalid 2)", reportValue(t, res.stdout, "failed"))
	assert.Contains(t, reportValue(t, res.stdout, "errors by code"), "InvalidArgument")
	assert.Contains(t, res.stdout, "dead letters: 2 in "+first)
	ids, _ := letters(t, first)
	assert.ElementsMatch(t, []string{"r7", "r123"}, ids)

	second := deadLetterPath(t)
	res = runCmd(t, nil, nil, "--dead-letter", second, "--progress", "off", first)
	assert.Equal(t, exitOK, res.status, "stderr:\n%s", res.stderr)
	assert.Contains(t, res.stderr, "read 2 records from "+first)
	assert.Equal(t, "2", reportValue(t, res.stdout, "upserted"))
	assert.Contains(t, res.stdout, "embedded index: holds 2 records, as many as upserted")
	assert.NoFileExists(t, second)
}

func TestRetriedFaultsAreReported(t *testing.T) {
	res := runCmd(t, nil, strings.NewReader(records(t, 1000)),
		"--dead-letter", deadLetterPath(t), "--fault", "429=0.3,503=0.2", "--batch-size", "50", "--progress", "off")
	require.Equal(t, exitOK, res.status, "stderr:\n%s", res.stderr)
	assert.Equal(t, "1000", reportValue(t, res.stdout, "upserted"))
	assert.Regexp(t, `^\d+ \(rate-limited \d+, server \d+\)$`, reportValue(t, res.stdout, "retries"))
	assert.Regexp(t, `^ResourceExhausted \d+, Unavailable \d+$`, reportValue(t, res.stdout, "errors by code"))
}

// interruptInFlight returns the arguments of a run against an index that
// holds its first request, and a context that ends, as a Ctrl-C does,
// once that request arrives: every record of the input handed over, in
// a request of --batch-size 50 left without an answer.
func interruptInFlight(t *testing.T) (context.Context, []string) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	release := make(chan struct{})
	var once sync.Once
	srv := upserttest.NewServer(upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
		once.Do(cancel)
		<-release
		return upserttest.Fault{Code: codes.Unavailable}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before Close, which waits for the request
	return ctx, append(remote(t, srv), "--batch-size", "50")
}

func TestAnInterruptedRunSendsWhatIsLeftToTheDeadLetterFile(t *testing.T) {
	ctx, args := interruptInFlight(t)
	dl := deadLetterPath(t)
	start := time.Now()
	res := runCmd(t, ctx, strings.NewReader(records(t, 50)), append(args, "--dead-letter", dl, "--progress", "off")...)

	assert.Less(t, time.Since(start), 5*time.Second, "returns promptly")
	assert.Equal(t, exitFailed, res.status)
	assert.Contains(t, res.stderr, "interrupted")
	assert.Equal(t, "50 (canceled 50)", reportValue(t, res.stdout, "failed"))
	ids, _ := letters(t, dl)
	assert.Len(t, ids, 50)
}

func TestTheAPIKeyAppearsNowhere(t *testing.T) {
	const planted = "pcsk_PLANTED_3c1f_do_not_print"
	input := records(t, 200) + `{"id":"bad","values":"x"}` + "\n"

	// check runs the command and looks for the key in every output.
	check := func(t *testing.T, args ...string) result {
		t.Helper()
		dl := deadLetterPath(t)
		res := runCmd(t, nil, strings.NewReader(input), append([]string{"--dead-letter", dl, "--log-level", "debug", "--progress", "lines"}, args...)...)
		assert.NotContains(t, res.stdout, planted)
		assert.NotContains(t, res.stderr, planted)
		data, err := os.ReadFile(dl)
		require.NoError(t, err, "the bad line makes a dead-letter file")
		assert.NotContains(t, string(data), planted)
		return res
	}

	t.Run("a real client writing to a host that takes the key", func(t *testing.T) {
		srv := upserttest.NewServer(upserttest.WithAPIKey(planted), upserttest.WithFaults(upserttest.RejectIDs("r5")))
		t.Cleanup(srv.Close)
		t.Setenv("PINECONE_API_KEY", planted)
		res := check(t, "--host", srv.Host())
		assert.Equal(t, exitFailed, res.status)
		assert.Contains(t, res.stderr, "writing to "+srv.Host())
		assert.Equal(t, 199, srv.Count("__default__"))
		assert.Equal(t, "199", reportValue(t, res.stdout, "upserted"))
	})

	t.Run("a real client denied by the host", func(t *testing.T) {
		srv := upserttest.NewServer(upserttest.WithAPIKey("another-key"))
		t.Cleanup(srv.Close)
		t.Setenv("PINECONE_API_KEY", planted)
		res := check(t, "--host", srv.Host())
		assert.Equal(t, exitFailed, res.status)
		// The denial stops the run, and with it the reading of the
		// input: how much was read depends on how fast the first answer
		// came. Every record read is reported, and what was not read is
		// said.
		read, err := strconv.Atoi(reportValue(t, res.stdout, "records read"))
		require.NoError(t, err)
		assert.Positive(t, read)
		assert.Equal(t, fmt.Sprintf("%d (denied %d)", read, read), reportValue(t, res.stdout, "failed"))
		if read < 200 {
			assert.Contains(t, res.stderr, "the rest of it was not read")
		}
	})

	t.Run("the key without a host uses the embedded index", func(t *testing.T) {
		t.Setenv("PINECONE_API_KEY", planted)
		res := check(t, "--fault", "reject=r9")
		assert.Contains(t, res.stderr, "embedded loopback index")
		assert.Equal(t, "199", reportValue(t, res.stdout, "upserted"))
	})
}

func TestMaskingWriter(t *testing.T) {
	tests := []struct {
		name, key, in, want string
	}{
		{"hides the key", "s3cret-key", "error: bad key s3cret-key\n", "error: bad key [API key]\n"},
		{"leaves other text alone", "s3cret-key", "12.3k rec/s\n", "12.3k rec/s\n"},
		{"leaves text alone for a key too short to be real", "k", "12.3k rec/s\n", "12.3k rec/s\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			n, err := io.WriteString(&maskingWriter{w: &buf, mask: masker(tt.key)}, tt.in)
			require.NoError(t, err)
			assert.Equal(t, len(tt.in), n)
			assert.Equal(t, tt.want, buf.String())
		})
	}
}

func TestHelpListsEveryFlag(t *testing.T) {
	res := runCmd(t, nil, nil, "--help")
	assert.Equal(t, exitOK, res.status)
	assert.Contains(t, res.stdout, "Usage: pcupsert [flags] [file]")
	var o options
	newFlagSet(&o).VisitAll(func(f *flag.Flag) {
		assert.Regexp(t, `\n  --`+f.Name+`[ \n]`, res.stdout, "flag %s", f.Name)
	})
	assert.Contains(t, res.stdout, "(default pcupsert-failed.ndjson)")
	assert.Contains(t, res.stdout, "(default 30s)")
	assert.Contains(t, res.stdout, "metadata as a JSON object in a string or as a struct of its fields",
		"a struct metadata column is read too (TestAParquetMetadataStructIsTheRecordsMetadata)")
	assert.Contains(t, res.stdout, "Ctrl-C, SIGTERM or SIGHUP", "the signals that stop a run with its report (TestSIGHUPStopsARunWithItsReport)")
	assert.Contains(t, res.stdout, "(with --checkpoint, what was read\n    \tand did not land is left to the next run",
		"--max-failure-seconds with --checkpoint leaves what was read to the next run")
	assert.Empty(t, res.stderr)
}

func TestQuantityAgreesWithItsNumber(t *testing.T) {
	tests := []struct {
		n    int
		noun string
		want string
	}{
		{0, "record", "0 records"},
		{1, "record", "1 record"},
		{2, "record", "2 records"},
		{1, "batch", "1 batch"},
		{3, "batch", "3 batches"},
		{1, "request", "1 request"},
		{7, "request", "7 requests"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, quantity(tt.n, tt.noun))
	}
}

// Counts in the messages and reports agree with their nouns: "1 record",
// "1 batch", not "1 records", "1 batches".
func TestOneOfAThingIsSingular(t *testing.T) {
	input := `{"id":"a","values":[1,2,3]}` + "\n"
	res := runCmd(t, nil, strings.NewReader(input), "--dry-run", "--progress", "off")
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.Contains(t, res.stdout, "would send     1 record in at least 1 batch of up to 1000\n")
	assert.Contains(t, res.stdout, `namespace "__default__": 1 record`+"\n")

	res = runCmd(t, nil, strings.NewReader(input), "--progress", "off", "--dead-letter", deadLetterPath(t))
	assert.Equal(t, exitOK, res.status, res.stderr)
	assert.Contains(t, res.stderr, "pcupsert: read 1 record from stdin\n")
	assert.Contains(t, res.stdout, "embedded index: holds 1 record, as many as upserted\n")
}

func TestUsageErrorsExitWithStatus2(t *testing.T) {
	t.Setenv("PINECONE_API_KEY", "")
	dl := deadLetterPath(t)
	require.NoError(t, os.WriteFile(dl, []byte(records(t, 1)), 0o600))
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"an unknown flag", []string{"--bogus"}, "flag provided but not defined: -bogus"},
		{"two input files", []string{"a", "b"}, "want at most one input file"},
		{"a progress mode that does not exist", []string{"--progress", "fancy"}, `--progress "fancy"`},
		{"a log level that does not exist", []string{"--log-level", "loud"}, `--log-level "loud"`},
		{"a batch size above Pinecone's limit", []string{"--batch-size", "1001"}, "--batch-size 1001"},
		{"a concurrency out of range", []string{"--concurrency", "-1"}, "--concurrency -1"},
		{"a zero timeout", []string{"--timeout", "0s"}, "--timeout 0s"},
		{"a negative max rate", []string{"--max-rate", "-1"}, "--max-rate -1"},
		{"an unknown fault", []string{"--fault", "418=0.5"}, `unknown fault "418"`},
		{"a fault share above 1", []string{"--fault", "429=2"}, "want a share from 0 to 1"},
		{"a namespace Pinecone does not allow", []string{"--namespace", "café"}, `--namespace: namespace "café" has a non-ASCII byte at offset 3`},
		{"both --host and --index", []string{"--host", "http://127.0.0.1:1", "--index", "x"}, "not both"},
		{"a host without the API key", []string{"--host", "http://127.0.0.1:1"}, "need the API key"},
		{"the dead-letter file as input", []string{"--dead-letter", dl, dl}, "is the dead-letter file"},
		{"an input file that does not exist", []string{filepath.Join(t.TempDir(), "missing.ndjson")}, "missing.ndjson: no such file or directory"},
		{"the checkpoint as input", []string{"--checkpoint", dl, dl}, dl + " is the checkpoint, which would be replaced while it is read"},
		{"a dead-letter file in a directory that does not exist", []string{"--dead-letter", filepath.Join(dl, "x"), "-"},
			"--dead-letter " + filepath.Join(dl, "x") + ": cannot be written there: "},
		{"a directory as the dead-letter file", []string{"--dead-letter", t.TempDir(), "-"}, "cannot be written there: it is a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runCmd(t, nil, strings.NewReader(""), tt.args...)
			assert.Equal(t, exitUsage, res.status)
			assert.Contains(t, res.stderr, tt.want)
			assert.Contains(t, res.stderr, "Run 'pcupsert --help' for usage.")
			assert.Empty(t, res.stdout)
		})
	}

	t.Run("fault injection with a real index", func(t *testing.T) {
		t.Setenv("PINECONE_API_KEY", "k")
		res := runCmd(t, nil, strings.NewReader(""), "--host", "http://127.0.0.1:1", "--fault", "429=0.1")
		assert.Equal(t, exitUsage, res.status)
		assert.Contains(t, res.stderr, "embedded index only")
	})

	t.Run("a host the SDK cannot dial", func(t *testing.T) {
		t.Setenv("PINECONE_API_KEY", "k")
		res := runCmd(t, nil, strings.NewReader(""), "--host", "https://example.com/some/path")
		assert.Equal(t, exitUsage, res.status)
		assert.Contains(t, res.stderr, "want an index host")
	})
}

// --timeout is valid as any positive duration, and --fault timeout=P
// answers a tenth after it: past about 2,330,000h that sum overflowed
// time.Duration, and upserttest.AmbiguousTimeouts panicked on the
// negative delay, killing the command. The fault takes a --timeout up to
// maxFaultTimeout, and a longer one is a usage error naming both flags
// (one that passed it would wait for that answer for centuries); the
// --timeout alone is still taken.
func TestAHugeTimeoutWithATimeoutFaultDoesNotPanic(t *testing.T) {
	var res result
	require.NotPanics(t, func() {
		res = runCmd(t, nil, strings.NewReader(records(t, 2)), "--timeout", "2500000h", "--fault", "timeout=0.1",
			"--progress", "off", "--dead-letter", deadLetterPath(t))
	})
	assert.Equal(t, exitUsage, res.status, "stderr:\n%s", res.stderr)
	assert.Contains(t, res.stderr, `--fault: "timeout=0.1": --timeout 2500000h0m0s is too long`)

	res = runCmd(t, nil, strings.NewReader(records(t, 2)), "--timeout", "2500000h", "--progress", "off", "--dead-letter", deadLetterPath(t))
	assert.Equal(t, exitOK, res.status, "stderr:\n%s", res.stderr)
	res = runCmd(t, nil, strings.NewReader(records(t, 2)), "--timeout", maxFaultTimeout.String(), "--fault", "timeout=0",
		"--progress", "off", "--dead-letter", deadLetterPath(t))
	assert.Equal(t, exitOK, res.status, "the longest --timeout the fault takes; stderr:\n%s", res.stderr)
}

// --dry-run checks the command line as well as the input, so that a
// script can run it before the real load: a dry run that exits 0 for a
// command line that the run refuses with exit status 2 says the load
// would go when it would not. It makes the checks of the index that need
// no network (checkTarget), with the run's message; --dimension with
// --host stays allowed, since it is what the dry run checks records
// against.
func TestADryRunRefusesTheCommandLinesTheRealRunRefuses(t *testing.T) {
	const key = "test-key-for-upserttest"
	tests := []struct {
		name string
		key  string
		args []string
		want string
	}{
		{"a host without the API key", "", []string{"--host", "http://127.0.0.1:1"}, "need the API key"},
		{"an index without the API key", "", []string{"--index", "my-index"}, "need the API key"},
		{"fault injection with a real index", key, []string{"--host", "http://127.0.0.1:1", "--fault", "429=0.1"}, "embedded index only"},
		{"a rate with a real index", key, []string{"--index", "my-index", "--rate", "10"}, "embedded index only"},
		{"a host the SDK cannot dial", key, []string{"--host", "https://example.com/some/path"}, "want an index host"},
		{"plain http to a host that is not loopback", key, []string{"--host", "http://192.0.2.1"}, "plain http is for a loopback host only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PINECONE_API_KEY", tt.key)
			real := runCmd(t, nil, strings.NewReader(records(t, 2)), append(tt.args, "--progress", "off", "--dead-letter", deadLetterPath(t))...)
			require.Equal(t, exitUsage, real.status, "the real run refuses it; stderr:\n%s", real.stderr)
			dry := runCmd(t, nil, strings.NewReader(records(t, 2)), append(tt.args, "--dry-run")...)
			assert.Equal(t, exitUsage, dry.status, "stdout:\n%s\nstderr:\n%s", dry.stdout, dry.stderr)
			assert.Contains(t, dry.stderr, tt.want)
			assert.Empty(t, dry.stdout, "no report")
		})
	}

	t.Run("the dimension with a host", func(t *testing.T) {
		t.Setenv("PINECONE_API_KEY", key)
		dry := runCmd(t, nil, strings.NewReader(records(t, 2)), "--host", "http://127.0.0.1:1", "--dimension", "3", "--dry-run")
		assert.Equal(t, exitOK, dry.status, "stderr:\n%s", dry.stderr)
	})
}

// Re-feeding the dead-letter file through stdin (pcupsert < pcupsert-failed.ndjson,
// the default --dead-letter) is refused as a usage error, as the file given
// by path is: writing dead letters would truncate it while it is read, and
// every record past the reader's first buffer would be lost without a word.
func TestStdinThatIsTheDeadLetterFileIsNotTruncatedWhileRead(t *testing.T) {
	dl := deadLetterPath(t)
	content := "not json\n" + records(t, 3)
	require.NoError(t, os.WriteFile(dl, []byte(content), 0o600))
	stdin, err := os.Open(dl)
	require.NoError(t, err)
	defer stdin.Close()

	res := runCmd(t, nil, stdin, "--dead-letter", dl, "--progress", "off", "--json")
	assert.Equal(t, exitUsage, res.status, "stderr:\n%s", res.stderr)
	assert.Contains(t, res.stderr, "stdin is the dead-letter file "+dl)
	got, err := os.ReadFile(dl)
	require.NoError(t, err)
	assert.Equal(t, content, string(got), "the file is left as it was")
}

func TestStatusLine(t *testing.T) {
	stats := upsert.Stats{Retries: 12, ErrorsByClass: map[upsert.Class]int{upsert.ClassRateLimited: 3}}
	half := func() (int, float64) { return 500_000, 0.5 } // half the input read: a million records in all
	tests := []struct {
		name  string
		p     upsert.Progress
		input func() (int, float64)
		want  string
	}{
		{"a file under way shows the percentage of the estimated total, rate and ETA",
			upsert.Progress{Total: -1, Done: 450_000, Rate: 12_345, Stats: stats}, half,
			"45% 450000/1000000 12.3k rec/s ETA 45s retries 12 429s 3"},
		{"a finished run shows no ETA",
			upsert.Progress{Total: -1, Done: 10, Rate: 950, Final: true}, func() (int, float64) { return 10, 1 },
			"100% 10/10 950 rec/s retries 0 429s 0"},
		{"stdin, of unknown length, shows counts only",
			upsert.Progress{Total: -1, Done: 1_500_000, Rate: 1_500_000}, func() (int, float64) { return 1_500_000, -1 },
			"1500000 done 1.50M rec/s retries 0 429s 0"},
		{"failures are shown when there are some",
			upsert.Progress{Total: -1, Done: 2, Stats: upsert.Stats{Failed: 1}}, func() (int, float64) { return 4, 1 },
			"50% 2/4 0 rec/s retries 0 429s 0 failed 1"},
		{"a resumed run leaves the records its checkpoint skips out of the total, and its ETA",
			upsert.Progress{Total: -1, Done: 100_000, Rate: 10_000, Stats: upsert.Stats{Skipped: 800_000}}, half,
			"50% 100000/200000 (and 800000 skipped) 10.0k rec/s ETA 10s retries 0 429s 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, newStatus(tt.p, tt.input).line())
		})
	}
}

// Lines show each report once: the final one, which repeats the last when
// nothing moved since, is not printed twice.
func TestProgressLinesShowARepeatedFinalReportOnce(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress("lines", false, newConsole(&buf), func() (int, float64) { return 100, 1 })
	p.show(upsert.Progress{Total: -1, Done: 50, Rate: 100})
	p.show(upsert.Progress{Total: -1, Done: 100, Rate: 100})
	p.show(upsert.Progress{Total: -1, Done: 100, Rate: 100, Final: true})
	assert.Equal(t, "pcupsert: 50% 50/100 100 rec/s ETA 1s retries 0 429s 0\n"+
		"pcupsert: 100% 100/100 100 rec/s retries 0 429s 0\n", buf.String())
}

func TestConsoleRedrawsTheBarBelowMessages(t *testing.T) {
	var buf bytes.Buffer
	con := newConsole(&buf)
	p := newProgress("bar", false, con, func() (int, float64) { return 100, 0.5 })
	p.show(upsert.Progress{Total: -1, Done: 50})
	fmt.Fprintln(con, "a log line")
	p.show(upsert.Progress{Total: -1, Done: 200, Final: true})
	fmt.Fprintln(con, "after")

	out := buf.String()
	first := strings.Index(out, "25%")
	msg := strings.Index(out, "a log line\n")
	require.True(t, first >= 0 && msg > first, "the bar (25%% of the 200 estimated), then the message:\n%q", out)
	assert.Contains(t, out[msg:], "25%", "the bar is drawn again below the message")
	assert.Contains(t, out, "100%", "the final bar")
	assert.True(t, strings.HasSuffix(out, "\nafter\n"), "a message after the final bar goes below it: %q", out)
}

func TestTimedOutBatchesAreSplitAndLand(t *testing.T) {
	res := runCmd(t, nil, strings.NewReader(records(t, 300)), "--dead-letter", deadLetterPath(t),
		"--fault", "timeout=0.3", "--timeout", "200ms", "--batch-size", "50", "--progress", "off")
	require.Equal(t, exitOK, res.status, "stderr:\n%s", res.stderr)
	assert.Equal(t, "300", reportValue(t, res.stdout, "upserted"))
	assert.NotEqual(t, "0", reportValue(t, res.stdout, "splits"))
	assert.Regexp(t, `^DeadlineExceeded \d+$`, reportValue(t, res.stdout, "errors by code"))
	assert.Contains(t, res.stdout, "embedded index: holds 300 records, as many as upserted")
}

func TestReportChecksWhatTheEmbeddedIndexHolds(t *testing.T) {
	tests := []struct {
		name          string
		stored        int
		mayHaveLanded int
		repeated      int
		want          string
		ok            bool
	}{
		{"as many as upserted is right", 10, 0, 0, "embedded index: holds 10 records, as many as upserted\n", true},
		{"more, explained by records that may have landed, is right", 12, 3, 0, "embedded index: holds 12 records, 2 more than upserted: failed records that may have landed did\n", true},
		{"more than may have landed is a mismatch", 12, 1, 0, "embedded index: holds 12 records but 10 were upserted: MISMATCH\n", false},
		{"fewer is a mismatch", 9, 0, 0, "embedded index: holds 9 records but 10 were upserted: MISMATCH\n", false},
		{"fewer, explained by ids sent again, is right", 8, 0, 2, "embedded index: holds 8 records, 2 fewer than upserted: records of an id upserted again replaced the earlier ones\n", true},
		{"fewer than ids sent again explain is a mismatch", 7, 0, 2, "embedded index: holds 7 records but 10 were upserted: MISMATCH\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok := storedAsExpected(tt.stored, 10, tt.mayHaveLanded, tt.repeated)
			s := summary{Upserted: 10, Embedded: &embedded{Stored: tt.stored, AsExpected: ok}}
			var buf bytes.Buffer
			require.NoError(t, s.write(&buf))
			_, tail, _ := strings.Cut(buf.String(), "rec/s\n")
			assert.Equal(t, tt.want, tail)
			assert.Equal(t, tt.ok, ok)
		})
	}
}

// The records a checkpoint skips settle with no event of the library:
// the watchdog of --max-failure-seconds must not count them as waiting, or
// a resumed run whose input is slow is given up while nothing waits.
func TestTheWatchdogDoesNotWaitOnTheCheckpointsRecords(t *testing.T) {
	in := &input{src: newNDJSONSource(strings.NewReader(records(t, 5)), -1), unit: "line", skip: 3}
	w := &watchdog{limit: time.Second}
	in.onRead = w.read
	for range in.records(context.Background()) {
	}
	assert.Equal(t, 2, w.waiting, "the two records after the checkpoint's three")
}

// A record replaced by a later one of its id settles with no event, so the
// watchdog cannot count it as settled: it gives up only once requests
// fail, measured from the first failure since the last landing, never on a
// slow input whose records all landed.
func TestTheWatchdogGivesUpOnlyOnFailures(t *testing.T) {
	w := &watchdog{limit: time.Second}
	obs := w.observer()
	w.read()
	w.read() // the same id again: replaced, with no event
	obs.RequestDone(upsert.RequestEvent{Records: 1})
	assert.False(t, w.idle(time.Now().Add(time.Hour)), "the input is slow, nothing fails: not stuck")

	w.read()
	obs.RequestDone(upsert.RequestEvent{Records: 1, Err: &upsert.Error{Class: upsert.ClassServer, Err: errors.New("unavailable")}})
	assert.False(t, w.idle(time.Now().Add(time.Second/2)), "failing for half the limit")
	assert.True(t, w.idle(time.Now().Add(2*time.Second)), "failing, nothing landing, for the limit")

	obs.RequestDone(upsert.RequestEvent{Records: 1})
	assert.False(t, w.idle(time.Now().Add(time.Hour)), "a landing ends the failures")

	w.read()
	obs.RequestDone(upsert.RequestEvent{Records: 1, Err: &upsert.Error{Class: upsert.ClassInvalid, Err: errors.New("bad record")}})
	obs.Failure(upsert.Failure{Class: upsert.ClassInvalid})
	assert.False(t, w.idle(time.Now().Add(time.Hour)), "a refused record is no failure of the index")
}

// A run whose input holds a record replaced in its batch by a later one of
// its id (which settles with no event, and so looks like it waits), and a
// record the index refuses (a failed request, but no sign of an index
// that is down), is not given up by --max-failure-seconds while its input
// pauses: nothing waits, and the index works.
func TestMaxFailureSecondsDoesNotGiveUpOnAPausedInput(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithFaults(upserttest.RejectIDs("bad")))
	defer srv.Close()
	pr, pw := io.Pipe()
	defer pw.Close()
	args := append(remote(t, srv), "--json", "--progress", "off", "--dead-letter", deadLetterPath(t), "--max-failure-seconds", "0.2")
	done := make(chan result, 1)
	go func() { done <- runCmd(t, nil, pr, args...) }()

	// The refused record last, so that the last request fails.
	_, err := io.WriteString(pw, `{"id":"a","values":[1,2,3]}
{"id":"a","values":[1,2,4]}
{"id":"b","values":[1,2,3]}
{"id":"bad","values":[1,2,3]}
`)
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for srv.Stats().Codes[codes.InvalidArgument] < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.Equal(t, 2, srv.Count("__default__"), "a and b landed")
	time.Sleep(600 * time.Millisecond) // the input pauses for three times the limit
	_, err = io.WriteString(pw, `{"id":"c","values":[1,2,3]}`+"\n")
	require.NoError(t, err)
	require.NoError(t, pw.Close())

	res := <-done
	s := jsonReport(t, res)
	require.Equal(t, 1, s.Duplicates, "the run had a replaced duplicate")
	assert.False(t, s.GaveUp, "stderr:\n%s", res.stderr)
	assert.Zero(t, s.NotSent)
	assert.Equal(t, 3, s.Upserted, "a, b and c")
	assert.Equal(t, 1, s.Failed, "bad")
	assert.Equal(t, 3, srv.Count("__default__"))
}

// A --max-failure-seconds that makes no usable duration (under a
// millisecond, past a billion seconds, +Inf) is a usage error before
// anything starts, not a crash of the watchdog's ticker once the index is
// open. Run in a child process: a panic on the watchdog's goroutine would
// kill the test binary.
func TestAMaxFailureSecondsThatIsNoDurationIsAUsageError(t *testing.T) {
	in := filepath.Join(t.TempDir(), "in.ndjson")
	require.NoError(t, os.WriteFile(in, []byte(records(t, 2)), 0o600))
	for _, v := range []string{"1e-10", "0.0009", "1e11", "+Inf", "NaN", "-1"} {
		t.Run(v, func(t *testing.T) {
			res := runChild(t, "--progress", "off", "--dead-letter", deadLetterPath(t), "--max-failure-seconds", v, in)
			assert.NotContains(t, res.stderr, "panic:", "no crash")
			assert.Equal(t, exitUsage, res.status, "stderr:\n%s", res.stderr)
			assert.Contains(t, res.stderr, "--max-failure-seconds")
			assert.NotContains(t, res.stderr, "embedded loopback index", "nothing was opened")
		})
	}
	for _, v := range []string{"0", "0.001", "1e9"} {
		_, err := parseArgs([]string{"--max-failure-seconds", v})
		assert.NoError(t, err, v)
	}
}

// --rate NaN or +Inf is a usage error (NaN once passed "rate < 0" and
// made the embedded index panic).
func TestANaNRateIsAUsageError(t *testing.T) {
	for _, v := range []string{"NaN", "+Inf"} {
		var res result
		require.NotPanics(t, func() {
			res = runCmd(t, nil, strings.NewReader(records(t, 2)), "--progress", "off", "--dead-letter", deadLetterPath(t), "--rate", v)
		})
		assert.Equal(t, exitUsage, res.status, v)
		assert.Contains(t, res.stderr, "--rate")
	}
}

// A Ctrl-C while the input is idle (a pipe whose producer waits: tail -f,
// a slow export) ends the run at once: the input is read on a goroutine
// of its own, and the run does not wait for its read. The report is
// printed and the dead letters written so far are on disk.
func TestAnInterruptEndsTheRunWhileTheInputIsIdle(t *testing.T) {
	srv := upserttest.NewServer()
	defer srv.Close()
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dl := deadLetterPath(t)
	args := append(remote(t, srv), "--progress", "off", "--dead-letter", dl)
	done := make(chan result, 1)
	go func() { done <- runCmd(t, ctx, pr, args...) }()

	_, err := io.WriteString(pw, records(t, 10)+"not json\n")
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for srv.Count("__default__") < 10 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.Equal(t, 10, srv.Count("__default__"), "the records written so far landed")
	time.Sleep(100 * time.Millisecond) // for the answer to come back

	cancel() // Ctrl-C; the producer writes nothing more
	select {
	case res := <-done:
		assert.Equal(t, exitFailed, res.status)
		assert.Contains(t, res.stderr, "interrupted at line 11 of stdin")
		// Upserted, unless the answer was still on its way: then
		// canceled, and a dead letter.
		upserted, err := strconv.Atoi(reportValue(t, res.stdout, "upserted"))
		require.NoError(t, err)
		failed := "0"
		if upserted < 10 {
			failed = fmt.Sprintf("%d (canceled %d)", 10-upserted, 10-upserted)
		}
		assert.Equal(t, failed, reportValue(t, res.stdout, "failed"))
		assert.Equal(t, "1", reportValue(t, res.stdout, "bad lines"))
		_, byLine := letterErrors(t, dl)
		assert.Equal(t, map[int]string{11: "line 11: invalid JSON at byte 2"}, byLine)
	case <-time.After(3 * time.Second):
		pw.Close() // let the run end, for the test's sake
		<-done
		t.Fatal("the run did not end within 3 s of the interrupt: it waits for input that may never come")
	}
}

// A run that a refusal no retry can fix stops (a key the index refuses)
// ends though the input is idle: it waited, once, for the next line of a
// pipe whose producer waits, or its end, for a record it would refuse.
func TestARunStoppedByARefusalEndsWhileTheInputIsIdle(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithAPIKey("another-key"))
	defer srv.Close()
	pr, pw := io.Pipe()
	defer pw.Close()
	args := append(remote(t, srv), "--progress", "off", "--dead-letter", deadLetterPath(t))
	done := make(chan result, 1)
	go func() { done <- runCmd(t, nil, pr, args...) }()

	_, err := io.WriteString(pw, records(t, 10)) // then the producer waits
	require.NoError(t, err)
	select {
	case res := <-done:
		assert.Equal(t, exitFailed, res.status, res.stderr)
		assert.Contains(t, res.stdout, "ended early: stopped")
	case <-time.After(5 * time.Second):
		pw.Close() // let the run end, for the test's sake
		<-done
		t.Fatal("the run stopped by a 401 waited for input that may never come")
	}
}

// What the reading goroutine read ahead of the run when the run ends is
// not the run's: not counted, not reported, not handed on, as if it had
// not been read (a resumed run reads it again).
func TestWhatWasReadAheadOfAnInterruptedRunIsNotTheRuns(t *testing.T) {
	var bad []int
	in := &input{src: newNDJSONSource(strings.NewReader(records(t, 1)+"not json\n"+records(t, 3)), -1), unit: "line",
		onBad: func(b *badEntry) { bad = append(bad, b.pos) }}
	defer in.stopReading(true)
	ctx, cancel := context.WithCancel(context.Background())
	v, ok := in.next(ctx)
	require.True(t, ok)
	assert.Equal(t, "r0", v.Id)
	// Let the goroutine read everything ahead.
	require.Eventually(t, func() bool { return len(in.items) == cap(in.items) || len(in.items) == 5 }, 5*time.Second, time.Millisecond)
	cancel()
	_, ok = in.next(ctx)
	assert.False(t, ok)
	assert.Equal(t, 1, in.read)
	assert.Equal(t, 1, in.pos, "the run stopped at line 1")
	assert.Empty(t, bad, "the bad line read ahead is not reported")
	assert.Zero(t, in.bad)
	assert.False(t, in.ended)
}

// A run whose records all settled (they failed for good in an outage, say)
// and whose input then paused is not waiting on anything. When the input
// resumes, the records just read have not waited at all: the watchdog must
// not give them up at its next tick because of failures that ended long
// ago (tail -f | pcupsert --max-failure-seconds 300: an outage at night, an
// idle input, the index back in the morning, and the first record read
// gives the run up and drains everything after it to the dead-letter file
// without sending it). A record read when none waits starts afresh.
func TestTheWatchdogDoesNotGiveUpOnRecordsReadAfterEverythingSettled(t *testing.T) {
	w := &watchdog{limit: 100 * time.Millisecond}
	obs := w.observer()
	w.read()
	obs.RequestDone(upsert.RequestEvent{Records: 1, Err: &upsert.Error{Class: upsert.ClassServer, Err: errors.New("unavailable")}})
	obs.Failure(upsert.Failure{Class: upsert.ClassServer}) // failed for good: nothing waits
	time.Sleep(250 * time.Millisecond)                     // the input pauses
	require.False(t, w.idle(time.Now()), "nothing waits")

	w.read() // the input resumes
	assert.False(t, w.idle(time.Now()), "a record read just now has not waited for the limit: the run must not give up on it")
}

// A record read after the input paused for longer than the limit gets the
// limit to land, even when a record replaced by a later one of its id
// (which settles with no event) keeps the watchdog's count of waiting
// records above 0: the first record of the morning after a night's outage
// once gave the run up at the next tick.
func TestTheWatchdogGivesARecordReadAfterAPauseItsTimeEvenWhenAnIDCameTwice(t *testing.T) {
	now := time.Date(2026, 12, 6, 23, 0, 0, 0, time.UTC)
	w := &watchdog{limit: time.Minute, now: func() time.Time { return now }}
	obs := w.observer()
	w.read()
	w.read() // "a" twice in one batch: the first is replaced, with no event
	obs.RequestDone(upsert.RequestEvent{Records: 1})
	w.read() // "down": fails for good in the outage
	obs.RequestDone(upsert.RequestEvent{Records: 1, Err: &upsert.Error{Class: upsert.ClassServer, Err: errors.New("unavailable")}})
	obs.Failure(upsert.Failure{})

	now = now.Add(8 * time.Hour) // the input pauses for the night
	w.read()                     // the index is back, and a record comes
	assert.False(t, w.idle(now.Add(time.Minute/2)), "the record read has its time to land")
	obs.RequestDone(upsert.RequestEvent{Records: 1})
	assert.False(t, w.idle(now.Add(time.Hour)), "it landed")

	w.read() // and if the index were still down, the run is given up a limit after the read
	obs.RequestDone(upsert.RequestEvent{Records: 1, Err: &upsert.Error{Class: upsert.ClassServer, Err: errors.New("unavailable")}})
	assert.True(t, w.idle(now.Add(2*time.Minute)))
}

// A gzip-compressed input is a usage error, exit status 2, whether it is
// a file or stdin, and whether the run sends or is a --dry-run (stdin
// under --dry-run, sniffed as it is read, exited 1).
func TestGzipOnStdinIsAUsageErrorInADryRunToo(t *testing.T) {
	gz := "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage"
	dir := t.TempDir()
	f := filepath.Join(dir, "in.ndjson")
	require.NoError(t, os.WriteFile(f, []byte(gz), 0o600))
	res := runCmd(t, nil, nil, "--dry-run", "--progress", "off", f)
	require.Equal(t, exitUsage, res.status, "a gzip file: stderr:\n%s", res.stderr)
	res = runCmd(t, nil, strings.NewReader(gz), "--dry-run", "--progress", "off")
	require.Equal(t, exitUsage, res.status, "gzip on stdin, as a file is: stderr:\n%s", res.stderr)
}

// A dry run refuses the command lines a run refuses: a --dead-letter or
// --checkpoint that cannot be written needs no network to check. It once
// exited 0 on a --dead-letter in a missing directory.
func TestADryRunRefusesAPathTheRunCannotWrite(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	for name, args := range map[string][]string{
		"dead letter": {"--dead-letter", filepath.Join(missing, "failed.ndjson")},
		"checkpoint":  {"--checkpoint", filepath.Join(missing, "ckpt"), "--dead-letter", deadLetterPath(t)},
	} {
		t.Run(name, func(t *testing.T) {
			real := runCmd(t, nil, strings.NewReader(records(t, 2)), append(args, "--progress", "off")...)
			require.Equal(t, exitUsage, real.status, "the run refuses it; stderr:\n%s", real.stderr)
			dry := runCmd(t, nil, strings.NewReader(records(t, 2)), append(args, "--dry-run")...)
			assert.Equal(t, exitUsage, dry.status, "the dry run takes what the run refuses\nstdout:\n%s\nstderr:\n%s", dry.stdout, dry.stderr)
		})
	}
}
