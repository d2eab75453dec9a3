package ndjson_test

import (
	"bytes"
	"errors"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/upsertlib/upsert/ndjson"
)

// raceEnabled is set by race_test.go in -race builds.
var raceEnabled bool

func metadata(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	require.NoError(t, err)
	return s
}

func floats(fs ...float32) *[]float32 { return &fs }

// readAll reads every record of input, failing the test on any error.
func readAll(t *testing.T, input string) []*pinecone.Vector {
	t.Helper()
	r := ndjson.NewReader(strings.NewReader(input))
	var vs []*pinecone.Vector
	for {
		v, err := r.Next()
		if err == io.EOF {
			return vs
		}
		require.NoError(t, err)
		vs = append(vs, v)
	}
}

// requireSameRecord checks that got equals want exactly, float bits and
// metadata included.
func requireSameRecord(t *testing.T, want, got *pinecone.Vector) {
	t.Helper()
	require.Equal(t, want.Id, got.Id)
	require.Equal(t, want.Values == nil, got.Values == nil, "values present")
	if want.Values != nil {
		require.Equal(t, bits(*want.Values), bits(*got.Values))
	}
	require.Equal(t, want.SparseValues == nil, got.SparseValues == nil, "sparse values present")
	if want.SparseValues != nil {
		require.Equal(t, want.SparseValues.Indices, got.SparseValues.Indices)
		require.Equal(t, bits(want.SparseValues.Values), bits(got.SparseValues.Values))
	}
	require.True(t, proto.Equal(want.Metadata, got.Metadata), "metadata: want %v, got %v", want.Metadata, got.Metadata)
}

func bits(fs []float32) []uint32 {
	out := make([]uint32, len(fs))
	for i, f := range fs {
		out[i] = math.Float32bits(f)
	}
	return out
}

func TestEncodeThenReadGivesTheSameRecord(t *testing.T) {
	tests := []struct {
		name string
		v    *pinecone.Vector
	}{
		{"an id alone survives", &pinecone.Vector{Id: "a"}},
		{"dense values keep every float32 bit", &pinecone.Vector{Id: "dense", Values: floats(
			0.1, -0.2, 1e-45, math.MaxFloat32, -math.MaxFloat32, float32(math.Copysign(0, -1)), 3, 1.0/3)}},
		{"empty dense values stay present", &pinecone.Vector{Id: "empty", Values: &[]float32{}}},
		{"sparse values keep indices and values", &pinecone.Vector{Id: "sparse",
			SparseValues: &pinecone.SparseValues{Indices: []uint32{1, 5, math.MaxUint32}, Values: []float32{0.5, 0.25, 1e-7}}}},
		{"metadata of every kind survives", &pinecone.Vector{Id: "meta", Values: floats(1), Metadata: metadata(t, map[string]any{
			"genre": "x", "year": 2024, "score": 0.125, "big": 1e21, "ok": true,
			"tags": []any{"a", "b"}, "html": "<b>&amp;</b>", "unicode": "héllo ✓"})}},
		{"empty metadata stays present", &pinecone.Vector{Id: "meta0", Values: floats(1), Metadata: metadata(t, map[string]any{})}},
		{"an id with quotes and unicode survives", &pinecone.Vector{Id: `a"b\c é`, Values: floats(1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, ndjson.Encode(&buf, tt.v))
			require.True(t, bytes.HasSuffix(buf.Bytes(), []byte("\n")))
			require.Equal(t, 1, bytes.Count(buf.Bytes(), []byte("\n")), "one line")
			got := readAll(t, buf.String())
			require.Len(t, got, 1)
			requireSameRecord(t, tt.v, got[0])
		})
	}
}

func TestEncodeWritesTheDocumentedFormat(t *testing.T) {
	v := &pinecone.Vector{
		Id:           "a",
		Values:       floats(0.1, 0.2),
		SparseValues: &pinecone.SparseValues{Indices: []uint32{1, 5}, Values: []float32{0.5, 0.25}},
		Metadata:     metadata(t, map[string]any{"genre": "x"}),
	}
	var buf bytes.Buffer
	require.NoError(t, ndjson.Encode(&buf, v))
	assert.Equal(t, `{"id":"a","values":[0.1,0.2],"sparse_values":{"indices":[1,5],"values":[0.5,0.25]},"metadata":{"genre":"x"}}`+"\n", buf.String())
}

func TestEncodeRefusesWhatJSONCannotHold(t *testing.T) {
	tests := []struct {
		name string
		v    *pinecone.Vector
	}{
		{"a nil record", nil},
		{"a NaN value", &pinecone.Vector{Id: "nan", Values: floats(float32(math.NaN()))}},
		{"an infinite sparse value", &pinecone.Vector{Id: "inf", SparseValues: &pinecone.SparseValues{Indices: []uint32{1}, Values: []float32{float32(math.Inf(1))}}}},
		{"an id that is not UTF-8", &pinecone.Vector{Id: "caf\xe9", Values: floats(1)}},
		{"a metadata string that is not UTF-8", &pinecone.Vector{Id: "s", Values: floats(1), Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			"title": structpb.NewStringValue("caf\xe9")}}}},
		{"a metadata key that is not UTF-8", &pinecone.Vector{Id: "k", Values: floats(1), Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			"caf\xe9": structpb.NewBoolValue(true)}}}},
		{"a string that is not UTF-8 deep in metadata", &pinecone.Vector{Id: "d", Values: floats(1), Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			"a": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"tags": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue("ok"), structpb.NewStringValue("caf\xe9")}})}})}}}},
		{"a metadata value of a typed nil kind", &pinecone.Vector{Id: "n", Values: floats(1), Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			"title": {Kind: (*structpb.Value_StringValue)(nil)}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is an error and writes nothing", func(t *testing.T) {
			var buf bytes.Buffer
			require.Error(t, ndjson.Encode(&buf, tt.v))
			assert.Zero(t, buf.Len())
		})
	}
}

// Encode's doc: it fails, writing nothing, for a record that JSON cannot
// hold; otherwise a Reader returns a record equal to v. A NaN or infinite
// metadata number, at any depth, is one: structpb's AsMap would write it as
// the string "NaN" or "Infinity". The error names the field, not the value.
func TestEncodeRefusesNaNMetadata(t *testing.T) {
	for name, md := range map[string]*structpb.Struct{
		"a NaN number": {Fields: map[string]*structpb.Value{"score": structpb.NewNumberValue(math.NaN())}},
		"an infinite number in a list of an object": {Fields: map[string]*structpb.Value{"a": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"scores": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1), structpb.NewNumberValue(math.Inf(-1))}})}})}},
	} {
		t.Run(name, func(t *testing.T) {
			rec := &pinecone.Vector{Id: "nanmeta", Values: floats(1), Metadata: md}
			var buf bytes.Buffer
			err := ndjson.Encode(&buf, rec)
			require.Error(t, err, "wrote %q", buf.String())
			assert.Zero(t, buf.Len())
			assert.Contains(t, err.Error(), "NaN or infinite")
			assert.Regexp(t, `metadata field ("score"|"a"\."scores"\[1\]): `, err.Error())
		})
	}
}

func TestReaderReportsEachBadLineWithItsNumber(t *testing.T) {
	const secret = "s3cr3t"
	tests := []struct {
		name   string
		line   string
		want   error
		wantID string
	}{
		{"invalid JSON is a syntax error", `{"id":"a", ` + secret, ndjson.ErrSyntax, ""},
		{"a bare word is a syntax error", secret, ndjson.ErrSyntax, ""},
		{"trailing text after the object is a syntax error", `{"id":"a"} ` + secret, ndjson.ErrSyntax, ""},
		{"a missing id is reported", `{"values":[1,2]}`, ndjson.ErrMissingID, ""},
		{"an empty id is reported", `{"id":"","values":[1]}`, ndjson.ErrMissingID, ""},
		{"a null id is reported", `{"id":null,"values":[1]}`, ndjson.ErrMissingID, ""},
		{"a numeric id is a wrong type", `{"id":7,"values":[1]}`, ndjson.ErrWrongType, ""},
		{"string values are a wrong type", `{"id":"a","values":"` + secret + `"}`, ndjson.ErrWrongType, "a"},
		{"a string among values is a wrong type", `{"id":"a","values":[1,"` + secret + `"]}`, ndjson.ErrWrongType, "a"},
		{"a number too large for float32 is a wrong type", `{"id":"a","values":[1e300]}`, ndjson.ErrWrongType, "a"},
		{"a negative sparse index is a wrong type", `{"id":"a","sparse_values":{"indices":[-1],"values":[1]}}`, ndjson.ErrWrongType, "a"},
		{"a null among values is a wrong type, not a zero", `{"id":"a","values":[1,null,2]}`, ndjson.ErrWrongType, "a"},
		{"a null sparse index is a wrong type", `{"id":"a","sparse_values":{"indices":[1,null],"values":[1,2]}}`, ndjson.ErrWrongType, "a"},
		{"a null sparse value is a wrong type", `{"id":"a","sparse_values":{"indices":[1,2],"values":[null,2]}}`, ndjson.ErrWrongType, "a"},
		{"a null sparseValues index is a wrong type", `{"id":"a","sparseValues":{"indices":[null],"values":[1]}}`, ndjson.ErrWrongType, "a"},
		{"a null sparseValues value is a wrong type", `{"id":"a","sparseValues":{"indices":[1],"values":[null]}}`, ndjson.ErrWrongType, "a"},
		{"sparse values under both names are a wrong type", `{"id":"a","sparse_values":{"indices":[1],"values":[1]},"sparseValues":{"indices":[2],"values":[2]}}`, ndjson.ErrWrongType, "a"},
		{"string metadata is a wrong type", `{"id":"a","values":[1],"metadata":"` + secret + `"}`, ndjson.ErrWrongType, "a"},
		{"an array line is a wrong type", `[1,2,3]`, ndjson.ErrWrongType, ""},
		{"a string line is a wrong type", `"` + secret + `"`, ndjson.ErrWrongType, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			input := `{"id":"first","values":[1]}` + "\n\n" + tt.line + "\n" + `{"id":"last","values":[2]}` + "\n"
			r := ndjson.NewReader(strings.NewReader(input))

			v, err := r.Next()
			require.NoError(t, err)
			assert.Equal(t, "first", v.Id)

			_, err = r.Next()
			var le *ndjson.LineError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, 3, le.Line, "the blank line counts")
			assert.Equal(t, 3, r.Line())
			assert.ErrorIs(t, err, tt.want)
			assert.Equal(t, tt.wantID, le.ID)
			assert.Equal(t, tt.line, string(r.Raw()), "Raw gives the line as is")
			assert.NotContains(t, err.Error(), secret[:3], "the message quotes nothing of the line")
			assert.Contains(t, err.Error(), "line 3")

			v, err = r.Next()
			require.NoError(t, err, "the reader goes on after a bad line")
			assert.Equal(t, "last", v.Id)
			assert.Equal(t, 4, r.Line())

			_, err = r.Next()
			assert.Equal(t, io.EOF, err)
		})
	}
}

func TestReaderTakesNullWhereTheFormatAllowsIt(t *testing.T) {
	input := `{"id":"null","values":[1,2],"metadata":{"genre":null},"sparse_values":null}` + "\n" +
		`{"id":"b","values":null}` + "\n"
	r := ndjson.NewReader(strings.NewReader(input))
	v, err := r.Next()
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2}, *v.Values)
	assert.Nil(t, v.SparseValues)
	assert.Contains(t, v.Metadata.Fields, "genre")
	v, err = r.Next()
	require.NoError(t, err)
	assert.Nil(t, v.Values, "null values are no values, as when absent")
}

// Pinecone's REST API spells the field "sparseValues" (POST
// /vectors/upsert): a hybrid record exported that way is read with its
// sparse values, not landed with its sparse half silently dropped.
func TestReaderDoesNotSilentlyDropSparseValuesSpelledAsTheRESTAPIDoes(t *testing.T) {
	line := `{"id":"hybrid","values":[0.1,0.2],"sparseValues":{"indices":[2,7],"values":[0.4,0.5]}}`
	v, err := ndjson.NewReader(strings.NewReader(line + "\n")).Next()
	require.NoError(t, err)
	require.NotNil(t, v.SparseValues, "the record's sparse values were dropped without a word")
	assert.Equal(t, []uint32{2, 7}, v.SparseValues.Indices)
	assert.Equal(t, []float32{0.4, 0.5}, v.SparseValues.Values)
	var buf bytes.Buffer
	require.NoError(t, ndjson.Encode(&buf, v))
	assert.Contains(t, buf.String(), `"sparse_values":{"indices":[2,7],"values":[0.4,0.5]}`, "written with the format's own name")
}

func TestLineErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		err  *ndjson.LineError
		want string
	}{
		{"names the line", &ndjson.LineError{Line: 3, Err: ndjson.ErrMissingID}, "line 3: missing or empty id"},
		{"names the id when there is one", &ndjson.LineError{Line: 9, ID: "doc-1", Err: ndjson.ErrWrongType}, `line 9 (id "doc-1"): wrong type`},
		{"shortens a long id", &ndjson.LineError{Line: 1, ID: strings.Repeat("x", 500), Err: ndjson.ErrSyntax}, `line 1 (id "` + strings.Repeat("x", 80) + `…"): invalid JSON`},
		{"shortens a long id between characters", &ndjson.LineError{Line: 1, ID: "x" + strings.Repeat("é", 100), Err: ndjson.ErrSyntax}, `line 1 (id "x` + strings.Repeat("é", 39) + `…"): invalid JSON`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.err.Error())
			assert.ErrorIs(t, tt.err, tt.err.Err)
		})
	}
}

func TestReaderLineEndings(t *testing.T) {
	tests := []struct {
		name  string
		input string
		ids   []string
	}{
		{"empty input gives no record", "", nil},
		{"blank lines are skipped", "\n  \n\t\n" + `{"id":"a"}` + "\n\n", []string{"a"}},
		{"CRLF endings are accepted", `{"id":"a"}` + "\r\n" + `{"id":"b"}` + "\r\n", []string{"a", "b"}},
		{"the last line needs no newline", `{"id":"a"}` + "\n" + `{"id":"b"}`, []string{"a", "b"}},
		{"extra fields such as a dead letter's are ignored", `{"id":"a","values":[1],"class":"rate-limited","error":"x","attempts":3,"may_have_landed":true,"index":17}`, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ids []string
			for _, v := range readAll(t, tt.input) {
				ids = append(ids, v.Id)
			}
			assert.Equal(t, tt.ids, ids)
		})
	}
}

// A file saved by a Windows tool (Notepad, PowerShell 5's Out-File -Encoding
// utf8) starts with a UTF-8 byte order mark: the first record is read, not
// lost to an "invalid JSON" error, and Raw leaves the mark out, so that the
// dead letter of a bad first line replays once fixed.
func TestReaderSkipsALeadingUTF8BOM(t *testing.T) {
	input := "\xEF\xBB\xBF" + `{"id":"first","values":[1,2]}` + "\r\n" + `{"id":"second","values":[3,4]}` + "\r\n"
	r := ndjson.NewReader(strings.NewReader(input))
	v, err := r.Next()
	require.NoError(t, err, "the first record of a file with a BOM")
	assert.Equal(t, "first", v.Id)
	assert.Equal(t, `{"id":"first","values":[1,2]}`, string(r.Raw()))
	v, err = r.Next()
	require.NoError(t, err)
	assert.Equal(t, "second", v.Id)
}

func TestReaderRawIsTheLineWithoutItsEnding(t *testing.T) {
	r := ndjson.NewReader(strings.NewReader("{\"id\":\"a\"}\r\n\n{\"id\":\"b\"}"))
	_, err := r.Next()
	require.NoError(t, err)
	assert.Equal(t, `{"id":"a"}`, string(r.Raw()))
	_, err = r.Next()
	require.NoError(t, err)
	assert.Equal(t, `{"id":"b"}`, string(r.Raw()))
	assert.Equal(t, 3, r.Line())
}

// repeat is an io.Reader of s repeated n times, without holding it all.
func repeat(s string, n int) io.Reader {
	total := int64(len(s) * n)
	return io.LimitReader(&cycle{s: strings.Repeat(s, 1+64<<10/len(s))}, total)
}

type cycle struct {
	s   string
	off int
}

func (c *cycle) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], c.s[c.off:])
		n += k
		c.off = (c.off + k) % len(c.s)
	}
	return n, nil
}

func TestReaderLongLines(t *testing.T) {
	t.Run("a line longer than the read buffer is read whole", func(t *testing.T) {
		const n = 300_000 // about 1.2 MB of values
		in := io.MultiReader(strings.NewReader(`{"id":"long","values":[`), repeat("0.5,", n), strings.NewReader("1]}\n"+`{"id":"next"}`))
		r := ndjson.NewReader(in)
		v, err := r.Next()
		require.NoError(t, err)
		assert.Len(t, *v.Values, n+1)
		v, err = r.Next()
		require.NoError(t, err)
		assert.Equal(t, "next", v.Id)
	})

	t.Run("a line of exactly MaxLineBytes is accepted", func(t *testing.T) {
		if testing.Short() || raceEnabled {
			t.Skip("decoding 64 MiB of JSON takes seconds in -short and -race runs")
		}
		head, tail := `{"id":"big","metadata":{"s":"`, `"}}`
		fill := ndjson.MaxLineBytes - len(head) - len(tail)
		for _, bom := range []string{"", "\xEF\xBB\xBF"} { // a BOM is not part of the line
			in := io.MultiReader(strings.NewReader(bom+head), repeat("x", fill), strings.NewReader(tail+"\r\n"))
			v, err := ndjson.NewReader(in).Next()
			require.NoError(t, err, "BOM %q", bom)
			assert.Len(t, v.Metadata.Fields["s"].GetStringValue(), fill)
		}
	})

	t.Run("a longer line is an error and the reader goes on", func(t *testing.T) {
		in := io.MultiReader(strings.NewReader(`{"id":"big","metadata":{"s":"`), repeat("x", ndjson.MaxLineBytes), strings.NewReader("\"}}\n"+`{"id":"next"}`+"\n"))
		r := ndjson.NewReader(in)
		tooLongThenNext(t, r)
		assert.Equal(t, 2, r.Line())
	})
}

type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }

func TestReaderReturnsReadErrorsAsIs(t *testing.T) {
	boom := errors.New("boom")
	r := ndjson.NewReader(io.MultiReader(strings.NewReader(`{"id":"a"}`+"\n"+`{"id":"b`), failingReader{boom}))
	v, err := r.Next()
	require.NoError(t, err)
	assert.Equal(t, "a", v.Id)
	_, err = r.Next()
	assert.Equal(t, boom, err)
}

// A line with a string that is not valid Unicode, wherever it is, is a bad
// line (ErrWrongType): a byte that is not UTF-8 (a Latin-1 "é" in a file
// that is not UTF-8) or a \u escape of a lone UTF-16 surrogate (half an
// emoji cut by a JavaScript or Java substring). encoding/json alone would
// decode either as U+FFFD without an error, upserting metadata that is not
// what the line says and making different values one. Raw keeps the line as
// it is, for the dead letters.
func TestReaderRefusesStringsThatAreNotValidUnicodeInsteadOfReplacingThem(t *testing.T) {
	for name, line := range map[string]string{
		"a lone surrogate escape": `{"id":"a","values":[1],"metadata":{"title":"half an emoji \ud83d"}}`,
		"a Latin-1 byte":          "{\"id\":\"a\",\"values\":[1],\"metadata\":{\"city\":\"Montr\xe9al\"}}",
	} {
		t.Run(name, func(t *testing.T) {
			r := ndjson.NewReader(strings.NewReader("\n" + line + "\n"))
			v, err := r.Next()
			var le *ndjson.LineError
			require.ErrorAs(t, err, &le, "the line was read as %v", v)
			assert.Equal(t, 2, le.Line)
			assert.ErrorIs(t, err, ndjson.ErrWrongType)
			assert.Contains(t, err.Error(), `field "metadata"`)
			assert.Equal(t, line, string(r.Raw()))
		})
	}
}

// Escapes of valid Unicode are read as what they stand for: a surrogate
// pair is one character, and an escaped backslash before "u" is no escape.
func TestReaderTakesEscapesOfValidUnicode(t *testing.T) {
	line := `{"id":"\u0061","values":[1],"metadata":{"emoji":"\ud83d\ude00","text":"\\ud83d"}}` + "\n"
	v, err := ndjson.NewReader(strings.NewReader(line)).Next()
	require.NoError(t, err)
	assert.Equal(t, "a", v.Id)
	assert.Equal(t, "😀", v.Metadata.Fields["emoji"].GetStringValue())
	assert.Equal(t, `\ud83d`, v.Metadata.Fields["text"].GetStringValue())
}

// The record's field names are matched exactly, as the format spells them:
// a field of the line's own spelled "ID" (a database primary key exported
// next to the record's id) is a field other than the record's, ignored, and
// does not replace the id, as encoding/json's case-insensitive matching
// alone would have it do.
func TestReaderDoesNotTakeTheIDFromAFieldSpelledID(t *testing.T) {
	line := `{"id":"doc-1#chunk-3","values":[0.1,0.2],"ID":"doc-1"}` + "\n"
	v, err := ndjson.NewReader(strings.NewReader(line)).Next()
	require.NoError(t, err)
	assert.Equal(t, "doc-1#chunk-3", v.Id, "the record's id was replaced by another field's")
}

// A line that gives one of the record's fields twice ({"id":"a",...,"id":"b"},
// as a naive exporter that appends fields to a template writes) is a bad
// line (ErrWrongType) naming the field, as one with sparse values under both
// of their names: which is meant cannot be told. encoding/json alone would
// take the last one without a word. An id given twice is not reported as the
// line's id.
func TestReaderRefusesALineThatGivesTheIDTwice(t *testing.T) {
	line := `{"id":"a","values":[1,2],"id":"b"}` + "\n"
	v, err := ndjson.NewReader(strings.NewReader(line)).Next()
	var le *ndjson.LineError
	require.ErrorAs(t, err, &le, "the line was read as id %q", idOf(v))
	assert.Equal(t, 1, le.Line)
	assert.ErrorIs(t, err, ndjson.ErrWrongType)
	assert.Contains(t, err.Error(), `field "id" given twice`)
	assert.Empty(t, le.ID)
}

// A line whose sparse values give "indices" or "values" twice is a bad
// line (ErrWrongType) naming the member, as one that gives a field of the
// record twice: encoding/json alone would take the last one without a word
// (matching the names whatever their case, as it does), and other JSON
// readers the first, so that the line would be two records depending on
// the tool. Sparse values that give each member once are read, whatever
// else they hold.
func TestReaderRefusesSparseValuesThatGiveAMemberTwice(t *testing.T) {
	tests := []struct {
		name string
		line string
		want string // what the error names; "" for a line that is read
	}{
		{"values twice", `{"id":"a","sparse_values":{"indices":[1,2],"values":[0.1,0.2],"values":[0.3,0.4]}}`, `field "sparse_values.values" given twice`},
		{"indices twice", `{"id":"a","sparse_values":{"indices":[1,2],"indices":[3,4],"values":[0.1,0.2]}}`, `field "sparse_values.indices" given twice`},
		{"under the REST API's name", `{"id":"a","sparseValues":{"values":[0.1],"indices":[1],"values":[0.3]}}`, `field "sparseValues.values" given twice`},
		{"spelled otherwise, as encoding/json matches", `{"id":"a","sparse_values":{"indices":[1],"values":[0.1],"Values":[0.3]}}`, `field "sparse_values.values" given twice`},
		{"spelled with an escape", `{"id":"a","sparse_values":{"indices":[1],"values":[0.1],"valu\u0065s":[0.3]}}`, `field "sparse_values.values" given twice`},
		{"each once, with another member", `{"id":"a","sparse_values":{"indices":[1],"values":[0.1],"indexes":[2]}}`, ""},
		{"each once, in another order", `{"id":"a","sparseValues":{"values":[0.1],"indices":[1]}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := ndjson.NewReader(strings.NewReader(tt.line + "\n")).Next()
			if tt.want == "" {
				require.NoError(t, err)
				assert.Equal(t, &pinecone.SparseValues{Indices: []uint32{1}, Values: []float32{0.1}}, v.SparseValues)
				return
			}
			var le *ndjson.LineError
			require.ErrorAs(t, err, &le, "the line was read as %v", v)
			assert.ErrorIs(t, err, ndjson.ErrWrongType)
			assert.Contains(t, err.Error(), tt.want)
			assert.Equal(t, "a", le.ID)
		})
	}
}

func idOf(v *pinecone.Vector) string {
	if v == nil {
		return ""
	}
	return v.Id
}

// A line holding the JSON literal null is not a JSON object: ErrWrongType,
// as for an array or a string line, and not ErrMissingID.
func TestReaderReportsANullLineAsNotAnObject(t *testing.T) {
	_, err := ndjson.NewReader(strings.NewReader("null\n")).Next()
	var le *ndjson.LineError
	require.ErrorAs(t, err, &le)
	assert.ErrorIs(t, err, ndjson.ErrWrongType, "got %v", err)
	assert.NotErrorIs(t, err, ndjson.ErrMissingID)
}

// A null among a record's numbers is looked for without decoding them a
// second time: a line without one costs no allocation per value, even when
// "null" appears elsewhere in it (an id, or a metadata string such as
// "nullable" or "annulled").
func TestReaderDoesNotAllocatePerValueWhenALineMentionsNull(t *testing.T) {
	values := strings.Repeat("1,", 1<<20) + "1"
	plain := `{"id":"a","values":[` + values + `],"metadata":{"tag":"valuable"}}` + "\n"
	mention := `{"id":"a","values":[` + values + `],"metadata":{"tag":"nullable"}}` + "\n"
	mallocs := func(line string) uint64 {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		v, err := ndjson.NewReader(strings.NewReader(line)).Next()
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		require.Len(t, *v.Values, 1<<20+1)
		return after.Mallocs - before.Mallocs
	}
	base, withWord := mallocs(plain), mallocs(mention)
	assert.Less(t, withWord, base+10_000, "a metadata string containing \"null\" cost %d allocations more", withWord-base)
}

// tooLongThenNext asserts that r reads its first line as too long, keeping
// none of it, and then the record "next".
func tooLongThenNext(t *testing.T, r *ndjson.Reader) {
	t.Helper()
	_, err := r.Next()
	var le *ndjson.LineError
	require.ErrorAs(t, err, &le)
	assert.ErrorIs(t, err, ndjson.ErrLineTooLong)
	assert.Equal(t, 1, le.Line)
	assert.Nil(t, r.Raw())
	v, err := r.Next()
	require.NoError(t, err)
	assert.Equal(t, "next", v.Id)
}
