package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
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
	assert.Regexp(t, `^from http://127\.0\.0\.1:\d+ \(requests are counted`, reportValue(t, res.stdout, "causes"))
	assert.Regexp(t, `(?m)^  server ×\d+ requests? +upserttest: injected fault: Unavailable$`, res.stdout)
	assert.Regexp(t, `(?m)^  invalid ×\d+ requests? +Invalid request: a record in the request was rejected \(upserttest.RejectIDs\)$`, res.stdout)
}

// The causes say what they count: the index's answers are counted in
// failed requests, and one record the index refuses fails several, as
// its request is split until it is alone; the rules broken before sending
// are counted in records.
func TestTheCausesSayWhatTheyCount(t *testing.T) {
	input := records(t, 16) + `{"id":"zero","values":[0,0,0]}` + "\n"
	args := []string{"--progress", "off", "--fault", "reject=r5", "--batch-size", "8", "--concurrency", "1"}
	human := runCmd(t, nil, strings.NewReader(input), append(args, "--dead-letter", deadLetterPath(t))...)
	require.Equal(t, exitFailed, human.status, "stderr:\n%s", human.stderr)
	js := runCmd(t, nil, strings.NewReader(input), append(args, "--dead-letter", deadLetterPath(t), "--json")...)
	s := jsonReport(t, js)

	assert.Equal(t, map[string]int{"invalid": 2}, s.FailedByClass, "r5 and zero")
	require.Len(t, s.Causes, 2)
	refused, rejected := s.Causes[0], s.Causes[1]
	assert.Equal(t, unitRequest, refused.Unit)
	assert.Greater(t, refused.Count, 1, "one record, several requests: the batch and its halves")
	assert.Equal(t, cause{Class: "invalid", Count: 1, Unit: unitRecord, Message: rejected.Message}, rejected)

	assert.Regexp(t, `^from http://127\.0\.0\.1:\d+ \(requests are counted: one is split and sent again, so one record can fail several\)$`,
		reportValue(t, human.stdout, "causes"))
	assert.Regexp(t, fmt.Sprintf(`(?m)^  invalid ×%d requests +Invalid request: a record in the request was rejected`, refused.Count), human.stdout)
	assert.Regexp(t, `(?m)^  invalid ×1 record +before sending: dense values are all zero`, human.stdout)
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
	assert.Contains(t, res.stderr, `line 2501 (id "short"): has 1 dense value; the index's dimension is 3`)
	assert.Contains(t, res.stderr, "line 2502: invalid JSON")
	assert.NoFileExists(t, defaultDeadLetter)
}

// A run names the first maxNoticesShown bad lines and invalid records on
// stderr, then sends the user to its dead-letter file, which holds them
// all. A dry run writes no dead-letter file (or leaves an older run's,
// which does not hold these lines): it names every one, since stderr is
// the only place that does and finding them is what it is run for.
func TestADryRunNamesEveryBadLineAndSendsTheUserToNoDeadLetterFile(t *testing.T) {
	dl := deadLetterPath(t)
	in := records(t, 3) + strings.Repeat("not json\n", 12)
	res := runCmd(t, nil, strings.NewReader(in), "--dry-run", "--dead-letter", dl)
	require.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
	assert.NoFileExists(t, dl, "a dry run writes no letter")
	assert.NotContains(t, res.stderr, "see "+dl, "the dry run points to a dead-letter file it never wrote")
	for line := 4; line <= 15; line++ {
		assert.Contains(t, res.stderr, fmt.Sprintf("line %d: invalid JSON", line))
	}

	run := runCmd(t, nil, strings.NewReader(in), "--progress", "off", "--dead-letter", dl)
	require.Equal(t, exitFailed, run.status, "stderr:\n%s", run.stderr)
	assert.Contains(t, run.stderr, "line 13: invalid JSON", "the tenth")
	assert.NotContains(t, run.stderr, "line 14: invalid JSON")
	assert.Contains(t, run.stderr, "more bad lines and invalid records: see "+dl)
	_, bad := letters(t, dl)
	assert.Len(t, bad, 12, "the dead-letter file holds them all")
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

// parquetRow is a row of Pinecone's import layout as parquet-go writes it
// from a Go struct.
type parquetRow struct {
	ID           string         `parquet:"id"`
	Values       []float32      `parquet:"values,list"`
	SparseValues *parquetSparse `parquet:"sparse_values,optional"`
	Metadata     *string        `parquet:"metadata,optional"`
}

type parquetSparse struct {
	Indices []uint32  `parquet:"indices,list"`
	Values  []float32 `parquet:"values,list"`
}

// writeParquet writes rows to a Parquet file and returns its path.
func writeParquet[T any](t *testing.T, rows []T, opts ...parquet.WriterOption) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "in.parquet")
	f, err := os.Create(path)
	require.NoError(t, err)
	w := parquet.NewGenericWriter[T](f, opts...)
	_, err = w.Write(rows)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())
	return path
}

// pyarrow writes list elements as nullable. A null inside "values" makes
// a bad row, named by its number with the rule, and its dead letter shows
// the null; it is not read as 0.
type nullableElementsRow struct {
	ID     string     `parquet:"id"`
	Values []*float32 `parquet:"values,list"`
}

func TestANullInsideParquetValuesIsABadRowNotAZero(t *testing.T) {
	f := func(x float32) *float32 { return &x }
	path := writeParquet(t, []nullableElementsRow{
		{"a", []*float32{f(1), nil, f(3)}},
		{"b", []*float32{f(1), f(2), f(4)}},
	})
	srv := upserttest.NewServer()
	defer srv.Close()
	dl := deadLetterPath(t)
	res := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", dl, path)...)
	if v, ok := srv.Vector("__default__", "a"); ok {
		t.Errorf("row 1 landed as %v: its null became a value", *v.Values)
	}
	assert.Equal(t, exitFailed, res.status)
	assert.Contains(t, res.stderr, `row 1 (id "a"): wrong type: column "values": null at index 1, want float32`)
	_, ok := srv.Vector("__default__", "b")
	assert.True(t, ok, "the valid row lands")
	letter, err := os.ReadFile(dl)
	require.NoError(t, err)
	assert.Contains(t, string(letter), `"raw":"{\"id\":\"a\",\"values\":[1,null,3]}"`, "the dead letter shows the row as read")
}

// Sparse indices written as list<int64> (what pandas and pyarrow make of
// Python ints) are checked against uint32's range: an index that is
// negative or too large makes a bad row instead of wrapping (-1 landing as
// 4294967295).
type sparse64 struct {
	Indices []int64   `parquet:"indices,list"`
	Values  []float32 `parquet:"values,list"`
}

type sparse64Row struct {
	ID           string    `parquet:"id"`
	SparseValues *sparse64 `parquet:"sparse_values,optional"`
}

func TestAParquetSparseIndexOutOfRangeIsABadRowNotWrapped(t *testing.T) {
	path := writeParquet(t, []sparse64Row{
		{"ok", &sparse64{[]int64{1, 4_294_967_295}, []float32{1, 2}}},
		{"neg", &sparse64{[]int64{-1, 7}, []float32{1, 2}}},
		{"big", &sparse64{[]int64{3, 5_000_000_000}, []float32{1, 2}}},
	})
	srv := upserttest.NewServer()
	defer srv.Close()
	res := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", deadLetterPath(t), path)...)
	for _, id := range []string{"neg", "big"} {
		if v, ok := srv.Vector("__default__", id); ok {
			t.Errorf("%s landed with indices %v, not those of the file", id, v.SparseValues.Indices)
		}
	}
	assert.Equal(t, exitFailed, res.status)
	assert.Contains(t, res.stderr, `row 2 (id "neg"): wrong type: column "sparse_values.indices": a number not representable as uint32 at index 0`)
	assert.Contains(t, res.stderr, `row 3 (id "big"): wrong type: column "sparse_values.indices": a number not representable as uint32 at index 1`)
	v, ok := srv.Vector("__default__", "ok")
	require.True(t, ok)
	assert.Equal(t, []uint32{1, 4_294_967_295}, v.SparseValues.Indices)
}

// A "metadata" column that is a struct (what pyarrow makes of a column of
// dicts) is the records' metadata, a field a key. A null field is a key
// the row does not have (pyarrow writes a key missing from a row's dict as
// null), a null struct a row without metadata, and a null inside a list a
// bad row.
type metaStruct struct {
	Genre *string   `parquet:"genre,optional"`
	Year  int64     `parquet:"year"`
	Score float64   `parquet:"score"`
	Draft bool      `parquet:"draft"`
	Tags  []*string `parquet:"tags,list"`
}

type metaStructRow struct {
	ID       string      `parquet:"id"`
	Values   []float32   `parquet:"values,list"`
	Metadata *metaStruct `parquet:"metadata,optional"`
}

func TestAParquetMetadataStructIsTheRecordsMetadata(t *testing.T) {
	path := writeParquet(t, []metaStructRow{
		{"a", []float32{1, 2, 3}, &metaStruct{ptr("drama"), 1999, 0.5, true, []*string{ptr("x"), ptr("y")}}},
		{"no-genre", []float32{1, 2, 3}, &metaStruct{nil, 2001, 1, false, nil}},
		{"no-metadata", []float32{1, 2, 3}, nil},
		{"null-tag", []float32{1, 2, 3}, &metaStruct{ptr("drama"), 1999, 0.5, true, []*string{ptr("x"), nil}}},
	})
	srv := upserttest.NewServer()
	defer srv.Close()
	res := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", deadLetterPath(t), path)...)
	assert.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
	assert.Contains(t, res.stderr, `row 4 (id "null-tag"): wrong type: column "metadata.tags": null at index 1, want string`)
	assert.Equal(t, 3, srv.Count("__default__"))

	v, ok := srv.Vector("__default__", "a")
	require.True(t, ok)
	require.NotNil(t, v.Metadata)
	assert.Equal(t, map[string]any{"genre": "drama", "year": float64(1999), "score": 0.5, "draft": true, "tags": []any{"x", "y"}}, v.Metadata.AsMap())
	v, ok = srv.Vector("__default__", "no-genre")
	require.True(t, ok)
	require.NotNil(t, v.Metadata)
	assert.Equal(t, map[string]any{"year": float64(2001), "score": float64(1), "draft": false, "tags": []any{}}, v.Metadata.AsMap(), "a null field is left out")
	v, ok = srv.Vector("__default__", "no-metadata")
	require.True(t, ok)
	assert.Empty(t, v.Metadata.AsMap())
}

// A per-row value that the schema allows but a record cannot hold (a
// double too large for a float32) makes a bad row: the other rows, those
// of its batch and those after, land.
type doubleValuesRow struct {
	ID     string    `parquet:"id"`
	Values []float64 `parquet:"values,list"`
}

func TestAParquetValueThatCannotBeConvertedIsABadRowAndTheOtherRowsLand(t *testing.T) {
	var rows []doubleValuesRow
	for i := range 600 {
		v := []float64{float64(i + 1), 0.5, 0.25}
		if i == 299 {
			v[1] = 1e300
		}
		rows = append(rows, doubleValuesRow{fmt.Sprint("r", i), v})
	}
	path := writeParquet(t, rows)
	srv := upserttest.NewServer()
	defer srv.Close()
	res := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--json", "--dead-letter", deadLetterPath(t), path)...)
	assert.Equal(t, exitFailed, res.status)
	assert.Contains(t, res.stderr, `row 300 (id "r299"): wrong type: column "values": a number not representable as float32 at index 1`)
	assert.Equal(t, 599, srv.Count("__default__"), "every other row lands")
	v, ok := srv.Vector("__default__", "r0")
	require.True(t, ok)
	assert.Equal(t, []float32{1, 0.5, 0.25}, *v.Values, "doubles are read as float32")
}

// A file whose columns are not of the layout's types is refused when it
// is opened, before anything is sent, with a message naming the column,
// its type and the type wanted: a "values" column of strings is a wrong
// schema, not 600 bad rows, and a "values" column that is not a list is
// not rows "with neither dense nor sparse values".
type stringValuesRow struct {
	ID     string   `parquet:"id"`
	Values []string `parquet:"values,list"`
}

type scalarValuesRow struct {
	ID     string  `parquet:"id"`
	Values float32 `parquet:"values"`
}

type floatIndicesRow struct {
	ID           string `parquet:"id"`
	SparseValues struct {
		Indices []float32 `parquet:"indices,list"`
		Values  []float32 `parquet:"values,list"`
	} `parquet:"sparse_values"`
}

type sparseListRow struct {
	ID           string    `parquet:"id"`
	SparseValues []float32 `parquet:"sparse_values,list"`
}

type intIDRow struct {
	ID     int64     `parquet:"id"`
	Values []float32 `parquet:"values,list"`
}

type intMetadataRow struct {
	ID       string    `parquet:"id"`
	Values   []float32 `parquet:"values,list"`
	Metadata int64     `parquet:"metadata"`
}

type timeMetadataRow struct {
	ID       string    `parquet:"id"`
	Values   []float32 `parquet:"values,list"`
	Metadata struct {
		Genre string    `parquet:"genre"`
		When  time.Time `parquet:"when"`
	} `parquet:"metadata"`
}

func TestAParquetFileNotInTheLayoutIsRefusedNamingTheColumnAndItsType(t *testing.T) {
	var strs []stringValuesRow
	for i := range 600 {
		strs = append(strs, stringValuesRow{fmt.Sprint("r", i), []string{"1", "0.5", "0.25"}})
	}
	for _, c := range []struct {
		name string
		path string
		want string
	}{
		{"values of strings", writeParquet(t, strs),
			`column "values" is list<string>; want a list of numbers, such as list<float>`},
		{"values not a list", writeParquet(t, []scalarValuesRow{{"a", 1}, {"b", 2}}),
			`column "values" is float; want a list of numbers, such as list<float>`},
		{"sparse indices of floats", writeParquet(t, []floatIndicesRow{{ID: "a"}}),
			`column "sparse_values.indices" is list<float>; want a list of integers, such as list<uint32> or list<int64>`},
		{"sparse values not a struct", writeParquet(t, []sparseListRow{{"a", []float32{1}}}),
			`column "sparse_values" is list<float>; want a struct of "indices", a list of integers such as list<uint32>, and "values", a list of numbers such as list<float>`},
		{"id not a string", writeParquet(t, []intIDRow{{1, []float32{1}}}),
			`column "id" is int64; want a string`},
		{"metadata a number", writeParquet(t, []intMetadataRow{{"a", []float32{1}, 1}}),
			`column "metadata" is int64; want a JSON object as a string, or a struct`},
		{"metadata with a timestamp", writeParquet(t, []timeMetadataRow{{ID: "a", Values: []float32{1}}}),
			`column "metadata": field "when" is timestamp; a struct metadata column takes strings, numbers, booleans and lists of strings`},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := upserttest.NewServer()
			defer srv.Close()
			res := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", deadLetterPath(t), c.path)...)
			assert.Equal(t, exitFailed, res.status)
			assert.Contains(t, res.stderr, "pcupsert: reading "+c.path+": not Pinecone's import layout: "+c.want+"\n")
			assert.NotContains(t, res.stderr, "row ", "no row is reported")
			assert.Zero(t, srv.Stats().Requests, "nothing is sent")
		})
	}
}

// A "metadata" column of JSON strings (Pinecone's import layout) whose
// string is not valid Unicode -- a \u escape of a lone UTF-16 surrogate,
// or a byte that is not UTF-8 -- makes a bad row, as NDJSON makes a bad
// line of the same metadata: encoding/json would decode either into U+FFFD
// without an error, and the record land with metadata the file does not
// hold.
func TestAParquetMetadataStringThatIsNotValidUnicodeIsABadRowNotUpsertedAltered(t *testing.T) {
	path := writeParquet(t, []parquetRow{
		{ID: "ok", Values: []float32{1, 2}, Metadata: ptr(`{"k":"fine"}`)},
		{ID: "surrogate", Values: []float32{1, 2}, Metadata: ptr(`{"k":"\ud800"}`)},
		{ID: "latin1", Values: []float32{1, 2}, Metadata: ptr("{\"k\":\"caf\xe9\"}")},
	})
	srv := upserttest.NewServer()
	defer srv.Close()
	dl := deadLetterPath(t)
	res := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", dl, path)...)

	_, ok := srv.Vector("__default__", "ok")
	require.True(t, ok, "the valid row lands; stderr:\n%s", res.stderr)
	for _, id := range []string{"surrogate", "latin1"} {
		if v, ok := srv.Vector("__default__", id); ok {
			t.Errorf("row %q landed with metadata %q, which the file does not hold (U+FFFD in place of what it held)", id, v.Metadata.AsMap())
		}
	}
	assert.Equal(t, exitFailed, res.status, "two rows whose metadata cannot be upserted as given; stderr:\n%s", res.stderr)
	const rule = `wrong type: field "metadata" holds a string that is not valid Unicode`
	assert.Contains(t, res.stderr, `row 2 (id "surrogate"): `+rule)
	assert.Contains(t, res.stderr, `row 3 (id "latin1"): `+rule)
	_, bad := letters(t, dl)
	assert.Len(t, bad, 2, "the two rows are dead letters")
}

// The dead letter of a bad Parquet row ({"line":N,"raw":<the row as
// JSON>,...}) holds the JSON object of a "metadata" column of JSON strings
// -- the layout of Pinecone's bulk import -- as an object, as NDJSON takes
// metadata, not as a JSON string, which the NDJSON reader refuses: the
// letter replayed unfixed reports the rule the row broke, and fixed, lands.
func TestTheLetterOfABadParquetRowHoldsItsJSONMetadataAsAnObjectSoThatOnceFixedItLands(t *testing.T) {
	f := func(x float32) *float32 { return &x }
	type row struct {
		ID       string     `parquet:"id"`
		Values   []*float32 `parquet:"values,list"`
		Metadata *string    `parquet:"metadata,optional"`
	}
	path := writeParquet(t, []row{
		{"good", []*float32{f(1), f(2), f(3)}, ptr(`{"genre":"x"}`)},
		{"a", []*float32{f(1), nil, f(3)}, ptr(`{"genre":"x"}`)},
	})
	srv := upserttest.NewServer()
	defer srv.Close()
	dl := deadLetterPath(t)
	res := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", dl, path)...)
	require.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
	require.Contains(t, res.stderr, `row 2 (id "a"): wrong type: column "values": null at index 1, want float32`)
	letter, err := os.ReadFile(dl)
	require.NoError(t, err)
	require.Contains(t, string(letter), `[1,null,3]`, "the letter: %s", letter)

	// Replayed as it is, the letter breaks the rule the row broke.
	unfixed := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", deadLetterPath(t), dl)...)
	assert.Equal(t, exitFailed, unfixed.status)
	assert.Contains(t, unfixed.stderr, `line 2 (id "a"): wrong type: field "values": null at index 1, want float32`)

	// Fix the one fault the error names, and replay.
	fixed := filepath.Join(t.TempDir(), "fixed.ndjson")
	require.NoError(t, os.WriteFile(fixed, bytes.Replace(letter, []byte(`[1,null,3]`), []byte(`[1,2,3]`), 1), 0o600))
	replay := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", deadLetterPath(t), fixed)...)
	assert.Equal(t, exitOK, replay.status, "the fixed row is upserted; letter:\n%s\nstderr:\n%s", letter, replay.stderr)
	v, ok := srv.Vector("__default__", "a")
	if assert.True(t, ok, "the fixed row lands") {
		assert.Equal(t, map[string]any{"genre": "x"}, v.Metadata.AsMap())
	}
}

// nullType is the Parquet type pyarrow writes for a column of Arrow's null
// type (INT32 annotated NULL/UNKNOWN): what pyarrow infers for a column, or
// a struct field, that is None in every row, and list<null> for lists that
// are all empty.
type nullType struct{ parquet.Type }

func (nullType) LogicalType() *format.LogicalType {
	return &format.LogicalType{Value: new(format.NullType)}
}
func (nullType) String() string { return "NULL" }

func nullLeaf() parquet.Node { return parquet.Optional(parquet.Leaf(nullType{parquet.Int32Type})) }

// A column, or a field of a struct "metadata" column, that is null in every
// row of the file, which pyarrow writes with Parquet's NULL type (Arrow's
// null type, inferred from a column of None, or list<null> from lists all
// empty), is absent from every row, as README has a null field of the
// metadata struct be a key the row does not have, and sparse_values and
// metadata be optional: the file is not refused, and its rows land.
func TestAParquetColumnOfTheNullTypeIsAbsentFromEveryRow(t *testing.T) {
	for _, c := range []struct {
		name   string
		schema parquet.Group
		row    map[string]any
	}{
		{"metadata field always None", parquet.Group{
			"id": parquet.String(), "values": parquet.List(parquet.Leaf(parquet.FloatType)),
			"metadata": parquet.Optional(parquet.Group{"genre": parquet.Optional(parquet.String()), "subtitle": nullLeaf()}),
		}, map[string]any{"id": "a", "values": []float32{1, 2}, "metadata": map[string]any{"genre": "drama", "subtitle": nil}}},
		{"metadata list field always empty (list<null>)", parquet.Group{
			"id": parquet.String(), "values": parquet.List(parquet.Leaf(parquet.FloatType)),
			"metadata": parquet.Optional(parquet.Group{"genre": parquet.Optional(parquet.String()), "tags": parquet.Optional(parquet.List(nullLeaf()))}),
		}, map[string]any{"id": "a", "values": []float32{1, 2}, "metadata": map[string]any{"genre": "drama", "tags": []any{}}}},
		{"sparse_values column always None", parquet.Group{
			"id": parquet.String(), "values": parquet.List(parquet.Leaf(parquet.FloatType)), "sparse_values": nullLeaf(),
		}, map[string]any{"id": "a", "values": []float32{1, 2}, "sparse_values": nil}},
		{"metadata column always None", parquet.Group{
			"id": parquet.String(), "values": parquet.List(parquet.Leaf(parquet.FloatType)), "metadata": nullLeaf(),
		}, map[string]any{"id": "a", "values": []float32{1, 2}, "metadata": nil}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "in.parquet")
			f, err := os.Create(path)
			require.NoError(t, err)
			w := parquet.NewWriter(f, parquet.NewSchema("schema", c.schema))
			require.NoError(t, w.Write(c.row))
			require.NoError(t, w.Close())
			require.NoError(t, f.Close())

			srv := upserttest.NewServer()
			defer srv.Close()
			res := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", deadLetterPath(t), path)...)
			assert.Equal(t, exitOK, res.status, "stderr:\n%s", res.stderr)
			v, ok := srv.Vector("__default__", "a")
			if assert.True(t, ok, "the row lands") {
				md := v.Metadata.AsMap()
				assert.NotContains(t, md, "subtitle", "a null field is a key the row does not have")
				if m, ok := c.row["metadata"].(map[string]any); ok {
					assert.Equal(t, "drama", md["genre"])
					if _, ok := m["tags"]; ok {
						assert.Equal(t, []any{}, md["tags"], "an empty list<null> is an empty list")
					}
				}
			}
		})
	}
}

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

// A bad line that was two records glued together, "fixed" in its letter by
// a newline between them, is a bad line again, named by its rule, rather
// than its first record alone (its second was dropped, neither upserted
// nor reported, and the run exited 0). A letter stands for one line of the
// input: its records are not handed on, as they would share its one line
// number in messages, letters and the checkpoint. Its letter is written
// again with that content, and the records, each on a line of its own in
// the file, land.
func TestAFixedLetterHoldingTwoLinesIsABadLineNotItsFirstRecord(t *testing.T) {
	dir := t.TempDir()
	fixed, dl := filepath.Join(dir, "fixed.ndjson"), filepath.Join(dir, "dl2.ndjson")
	two := `{"id":"a","values":[1,2,3]}` + "\n" + `{"id":"b","values":[4,5,6]}`
	letter := `{"line":4,"raw":"{\"id\":\"a\",\"values\":[1,2,3]}\n{\"id\":\"b\",\"values\":[4,5,6]}","error":"line 4: invalid JSON at byte 28"}` + "\n"
	require.NoError(t, os.WriteFile(fixed, []byte(letter), 0o600))
	res := runCmd(t, nil, nil, "--json", "--progress", "off", "--dead-letter", dl, fixed)
	s := jsonReport(t, res)
	assert.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
	assert.Equal(t, 1, s.BadLines)
	assert.Zero(t, s.Upserted, "neither record, rather than a without b")
	assert.Contains(t, res.stderr, "line 4: a dead letter's line holds 2 lines; want one record: put each on a line of its own in the file")
	line, content, _, ok := ndjson.BadLine(bytes.TrimSpace([]byte(readString(t, dl))))
	require.True(t, ok, "a letter of a bad line")
	assert.Equal(t, 4, line, "named by its original line")
	assert.Equal(t, two, string(content), "the letter holds both records, to be fixed")

	// Each on a line of its own in the file, both land; blank lines
	// around one record in a letter are no second record.
	blanks := `{"line":5,"raw":"\n{\"id\":\"c\",\"values\":[7,8,9]}\n","error":"line 5: invalid JSON at byte 1"}`
	require.NoError(t, os.WriteFile(fixed, []byte(two+"\n"+blanks+"\n"), 0o600))
	res = runCmd(t, nil, nil, "--json", "--progress", "off", "--dead-letter", dl, fixed)
	s = jsonReport(t, res)
	assert.Equal(t, exitOK, res.status, "stderr:\n%s", res.stderr)
	assert.Equal(t, 3, s.Upserted)
}

// A bad line that is not UTF-8 (metadata "caf\xe9") keeps its bytes in its
// letter: replaying the dead-letter file reads that line again, bad as it
// was, and letters it again unchanged, rather than upserting a record
// whose metadata the input never held ("caf\uFFFD", what a JSON string
// makes of the byte).
func TestAReplayedLetterOfANonUTF8LineIsNotUpsertedAltered(t *testing.T) {
	dir := t.TempDir()
	in, dl1, dl2 := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "dl1.ndjson"), filepath.Join(dir, "dl2.ndjson")
	badLine := "{\"id\":\"m1\",\"values\":[1,2],\"metadata\":{\"k\":\"caf\xe9\"}}"
	require.NoError(t, os.WriteFile(in, []byte("{\"id\":\"a\",\"values\":[1,2]}\n"+badLine+"\n"), 0o600))

	first := runCmd(t, nil, nil, "--progress", "off", "--dead-letter", dl1, in)
	require.Equal(t, exitFailed, first.status, "line 2 is not UTF-8: a bad line; stderr:\n%s", first.stderr)
	_, bad := letters(t, dl1)
	require.Equal(t, []int{1}, bad, "line 2's letter")
	want, err := os.ReadFile(dl1)
	require.NoError(t, err)
	_, content, _, ok := ndjson.BadLine(bytes.TrimSpace(want))
	require.True(t, ok, "the letter of a bad line: %s", want)
	assert.Equal(t, badLine, string(content), "the letter holds the line's bytes")

	replay := runCmd(t, nil, nil, "--progress", "off", "--json", "--dead-letter", dl2, dl1)
	s := jsonReport(t, replay)
	assert.Equal(t, exitFailed, replay.status, "the bad line was not fixed: it is still bad; stderr:\n%s", replay.stderr)
	assert.Equal(t, 1, s.BadLines, "the replayed letter is the bad line it was")
	assert.Equal(t, 0, s.Upserted, "a record the input never held (its metadata altered to U+FFFD) was upserted")
	assert.Contains(t, replay.stderr, "line 2 (id \"m1\"): wrong type")
	got, err := os.ReadFile(dl2)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "the letter is written again unchanged")
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
	ctx, args := interruptInFlight(t)
	dl := deadLetterPath(t)
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	res := runCmd(t, ctx, strings.NewReader(records(t, 50)), append(args, "--dead-letter", dl, "--progress", "off", "--checkpoint", ckpt)...)
	assert.Equal(t, exitFailed, res.status)
	assert.Contains(t, res.stderr, "left to the next run with the same --checkpoint")
	assert.Equal(t, "50 (canceled 50)", reportValue(t, res.stdout, "failed"))
	assert.Equal(t, "50 of the failed (canceled 50): not dead letters; the next run with the same --checkpoint sends them again",
		reportValue(t, res.stdout, "left to resume"))
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

// The progress of a resumed run counts the records it sends, and leaves
// those the checkpoint skips out of its total too, saying how many: a
// resumed run that finishes ends at 100%, and its ETA is that of the
// records it sends. (pcupsert once counted this run's records against the
// whole input's, and a finished resume ended on "66% 2000/3000".)
func TestTheProgressOfAResumedRunEndsAtAHundredPercent(t *testing.T) {
	dir := t.TempDir()
	in, ckpt := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "ckpt")
	input := records(t, 3000)
	require.NoError(t, os.WriteFile(in, []byte(input), 0o600))
	require.NoError(t, os.WriteFile(ckpt, []byte(checkpointFor(1000, input)), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()

	res := runCmd(t, nil, nil, append(remote(t, srv), "--checkpoint", ckpt, "--dead-letter", filepath.Join(dir, "dl"),
		"--progress", "lines", in)...)
	require.Equal(t, exitOK, res.status, res.stderr)
	lines := regexp.MustCompile(`(?m)^pcupsert: (\d+)% (\d+)/(\d+) \(and (\d+) skipped\) `).FindAllStringSubmatch(res.stderr, -1)
	require.NotEmpty(t, lines, "a final progress line; stderr:\n%s", res.stderr)
	last := lines[len(lines)-1]
	require.Equal(t, []string{"100", "2000", "2000", "1000"}, last[1:], "final progress line %q", last[0])
}

// A gzip-compressed input is refused, exit status 2, naming the formats
// pcupsert reads, whether a file or stdin, and nothing is sent: read as
// NDJSON, each of its lines was a bad line.
func TestAGzipInputIsRefusedNamingTheFormats(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := io.WriteString(zw, records(t, 100))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	dir := t.TempDir()
	in := filepath.Join(dir, "in.ndjson.gz")
	require.NoError(t, os.WriteFile(in, gz.Bytes(), 0o600))
	srv := upserttest.NewServer()
	defer srv.Close()

	for _, tt := range []struct {
		name  string
		stdin io.Reader
		args  []string
	}{
		{"a file", nil, []string{in}},
		{"stdin", bytes.NewReader(gz.Bytes()), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dl := filepath.Join(t.TempDir(), "dl")
			res := runCmd(t, nil, tt.stdin, append(remote(t, srv), append([]string{"--progress", "off", "--dead-letter", dl}, tt.args...)...)...)
			assert.Equal(t, exitUsage, res.status, res.stderr)
			assert.Contains(t, res.stderr, "the input is gzip-compressed; pcupsert reads NDJSON, not compressed, or Parquet")
			assert.NoFileExists(t, dl, "no bad lines")
			assert.Empty(t, res.stdout)
		})
	}
	assert.Zero(t, srv.Stats().Requests, "nothing was sent")
}

// A row of a struct "metadata" column whose string is not UTF-8 is a bad
// row, as with a column of JSON strings: its letter keeps the row's exact
// bytes, values and metadata, so that once fixed it is upserted on replay.
// It was an invalid record, whose letter held the id alone.
func TestAStructMetadataStringThatIsNotUTF8IsABadRowWhoseLetterKeepsTheRow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.parquet")
	f, err := os.Create(path)
	require.NoError(t, err)
	w := parquet.NewWriter(f, parquet.NewSchema("schema", parquet.Group{
		"id":       parquet.String(),
		"values":   parquet.List(parquet.Leaf(parquet.FloatType)),
		"metadata": parquet.Optional(parquet.Group{"genre": parquet.Optional(parquet.String())}),
	}))
	require.NoError(t, w.Write(map[string]any{"id": "ok", "values": []float32{1, 2}, "metadata": map[string]any{"genre": "drama"}}))
	require.NoError(t, w.Write(map[string]any{"id": "latin1", "values": []float32{3, 4}, "metadata": map[string]any{"genre": "caf\xe9"}}))
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())

	srv := upserttest.NewServer()
	defer srv.Close()
	dl := deadLetterPath(t)
	res := runCmd(t, nil, nil, append(remote(t, srv), "--progress", "off", "--dead-letter", dl, path)...)
	require.Equal(t, exitFailed, res.status, "stderr:\n%s", res.stderr)
	_, landed := srv.Vector("__default__", "latin1")
	require.False(t, landed)

	letter, err := os.ReadFile(dl)
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(letter))
	require.True(t, sc.Scan(), "one letter")
	_, content, _, isBad := ndjson.BadLine(sc.Bytes())
	assert.True(t, isBad, "the row is a bad row (as a JSON-string metadata column's is), not an invalid record; letter: %s\nstderr:\n%s", letter, res.stderr)
	assert.Contains(t, string(content), `"values":[3,4]`, "the letter keeps the row, so that it can be fixed and replayed; letter: %s", letter)
	assert.Contains(t, string(content), "caf\xe9", "the letter keeps the metadata as the file holds it; letter: %s", letter)
}
