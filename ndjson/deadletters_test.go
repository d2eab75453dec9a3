package ndjson_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
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
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/ndjson"
	"github.com/upsertlib/upsert/upserttest"
)

func tempPath(t *testing.T) string {
	return filepath.Join(t.TempDir(), "failed.ndjson")
}

// lines returns the file's lines, decoded as JSON objects.
func lines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "line %q", sc.Text())
		out = append(out, m)
	}
	return out
}

// readLetters reads every line of a dead-letter file with a Reader: the
// records, and the LineErrors of the lines that are not records.
func readLetters(t *testing.T, path string) (recs []*pinecone.Vector, bad []error) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r := ndjson.NewReader(f)
	for {
		v, err := r.Next()
		if err == io.EOF {
			return recs, bad
		}
		var le *ndjson.LineError
		if errors.As(err, &le) {
			bad = append(bad, err)
			continue
		}
		require.NoError(t, err)
		recs = append(recs, v)
	}
}

func rateLimited(index int, v *pinecone.Vector) upsert.Failure {
	return upsert.Failure{
		Index: index, ID: v.Id, Record: v, Class: upsert.ClassRateLimited,
		Err:      &upsert.Error{Class: upsert.ClassRateLimited, GRPCCode: codes.ResourceExhausted, Err: errors.New("slow down")},
		Attempts: 9, MayHaveLanded: true,
	}
}

func withNamespace(f upsert.Failure, ns string) upsert.Failure {
	f.Namespace = ns
	return f
}

// A run routed by WithNamespaceOf writes each letter with the namespace
// its record was routed to, so that a replay can send it back there; the
// letter still reads back as the record.
func TestDeadLettersOfARoutedRunHoldTheNamespace(t *testing.T) {
	recs := []*pinecone.Vector{{Id: "a-1", Values: floats(1, 2)}, {Id: "b-1", Values: floats(3, 4)}, {Id: "c-1", Values: floats(5, 6)}}
	nsOf := map[string]string{"a-1": "tenant-a", "b-1": "tenant-b", "c-1": ""}
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	refuse := func(context.Context, string, []*pinecone.Vector) error {
		return &upsert.Error{Class: upsert.ClassInvalid, StatusCode: 400}
	}
	_, err = upsert.All(context.Background(), recs, upsert.WithUpsertFunc(refuse), upsert.WithBatchSize(1),
		upsert.WithNamespaceOf(func(v *pinecone.Vector) string { return nsOf[v.Id] }),
		upsert.WithObserver(upsert.Observer{Failure: dl.Write}))
	require.Error(t, err, "every record is refused")
	require.NoError(t, dl.Close())

	got := map[string]any{}
	for _, l := range lines(t, path) {
		got[l["id"].(string)] = l["namespace"]
	}
	assert.Equal(t, map[string]any{"a-1": "tenant-a", "b-1": "tenant-b", "c-1": nil}, got,
		"each letter names its record's namespace; the default one is left out")
	replayed, bad := readLetters(t, path)
	assert.Empty(t, bad)
	assert.Len(t, replayed, len(recs), "a Reader ignores the namespace and reads the records back")
}

func TestCreateDeadLettersMakesAnOwnerOnlyFile(t *testing.T) {
	tests := []struct {
		name     string
		existing bool
	}{
		{"a new file has mode 0600", false},
		{"an existing 0644 file is truncated and set to 0600", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tempPath(t)
			if tt.existing {
				require.NoError(t, os.WriteFile(path, []byte("old content\n"), 0o644))
				require.NoError(t, os.Chmod(path, 0o644)) // whatever the umask
			}
			dl, err := ndjson.CreateDeadLetters(path)
			require.NoError(t, err)
			fi, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
			require.NoError(t, dl.Close())
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Empty(t, data)
		})
	}

	t.Run("a path in a missing directory is an error", func(t *testing.T) {
		_, err := ndjson.CreateDeadLetters(filepath.Join(t.TempDir(), "missing", "failed.ndjson"))
		assert.ErrorIs(t, err, os.ErrNotExist)
	})
}

// hexKey is a string type with a MarshalText of its own, which
// encoding/json does not call for a map key.
type hexKey string

func (k hexKey) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString([]byte(k))), nil }

func TestDeadLettersWrite(t *testing.T) {
	rec := &pinecone.Vector{Id: "a", Values: floats(0.1, 0.2), Metadata: metadata(t, map[string]any{"genre": "x"})}
	tests := []struct {
		name string
		f    upsert.Failure
		want string
	}{
		{
			"a record is written with its failure",
			rateLimited(17, rec),
			`{"id":"a","values":[0.1,0.2],"metadata":{"genre":"x"},"class":"rate-limited","error":"rate-limited (gRPC ResourceExhausted): slow down","attempts":9,"may_have_landed":true,"index":17}`,
		},
		{
			"a nil record is written with its index and error only",
			upsert.Failure{Index: 4, Class: upsert.ClassInvalid, Err: &upsert.Error{Class: upsert.ClassInvalid, Err: errors.New("record is nil")}},
			`{"index":4,"error":"invalid: record is nil"}`,
		},
		{
			"a record JSON cannot hold is written with its id and why",
			upsert.Failure{Index: 2, ID: "nan", Record: &pinecone.Vector{Id: "nan", Values: floats(float32(math.NaN()))}, Class: upsert.ClassInvalid,
				Err: &upsert.Error{Class: upsert.ClassInvalid, Err: errors.New("dense value 0 is NaN")}},
			`{"id":"nan","class":"invalid","error":"invalid: dense value 0 is NaN","attempts":0,"may_have_landed":false,"index":2,"record_error":"json: unsupported value: NaN"}`,
		},
		{
			"an integrated record is written whole under its own key",
			upsert.Failure{Index: 3, ID: "r1", Integrated: &pinecone.IntegratedRecord{"_id": "r1", "chunk_text": "hello", "class": "mine"},
				Class: upsert.ClassRateLimited, Err: &upsert.Error{Class: upsert.ClassRateLimited, StatusCode: 429}, Attempts: 9},
			`{"integrated_record":{"_id":"r1","chunk_text":"hello","class":"mine"},"class":"rate-limited","error":"rate-limited (HTTP 429)","attempts":9,"may_have_landed":false,"index":3}`,
		},
		{
			"a failure without an error gets its class as error",
			upsert.Failure{Index: 1, ID: "b", Record: &pinecone.Vector{Id: "b", Values: floats(1)}, Class: upsert.ClassCanceled},
			`{"id":"b","values":[1],"class":"canceled","error":"canceled","attempts":0,"may_have_landed":false,"index":1}`,
		},
		{
			"a record's namespace comes last",
			withNamespace(rateLimited(17, rec), "tenant-7"),
			`{"id":"a","values":[0.1,0.2],"metadata":{"genre":"x"},"class":"rate-limited","error":"rate-limited (gRPC ResourceExhausted): slow down","attempts":9,"may_have_landed":true,"index":17,"namespace":"tenant-7"}`,
		},
		{
			"the default namespace, by its other name, is left out",
			withNamespace(rateLimited(17, rec), "__default__"),
			`{"id":"a","values":[0.1,0.2],"metadata":{"genre":"x"},"class":"rate-limited","error":"rate-limited (gRPC ResourceExhausted): slow down","attempts":9,"may_have_landed":true,"index":17}`,
		},
		{
			"a record JSON cannot hold keeps its namespace",
			upsert.Failure{Index: 2, ID: "nan", Namespace: "tenant-7", Record: &pinecone.Vector{Id: "nan", Values: floats(float32(math.NaN()))}, Class: upsert.ClassInvalid,
				Err: &upsert.Error{Class: upsert.ClassInvalid, Err: errors.New("dense value 0 is NaN")}},
			`{"id":"nan","class":"invalid","error":"invalid: dense value 0 is NaN","attempts":0,"may_have_landed":false,"index":2,"record_error":"json: unsupported value: NaN","namespace":"tenant-7"}`,
		},
		{
			"a nil record's letter keeps its namespace",
			upsert.Failure{Index: 4, Namespace: "tenant-7", Class: upsert.ClassInvalid, Err: &upsert.Error{Class: upsert.ClassInvalid, Err: errors.New("record is nil")}},
			`{"index":4,"error":"invalid: record is nil","namespace":"tenant-7"}`,
		},
		{
			"an integrated record's letter keeps its namespace",
			upsert.Failure{Index: 3, ID: "r1", Namespace: "tenant-7", Integrated: &pinecone.IntegratedRecord{"_id": "r1", "chunk_text": "hello"},
				Class: upsert.ClassRateLimited, Err: &upsert.Error{Class: upsert.ClassRateLimited, StatusCode: 429}, Attempts: 9},
			`{"integrated_record":{"_id":"r1","chunk_text":"hello"},"class":"rate-limited","error":"rate-limited (HTTP 429)","attempts":9,"may_have_landed":false,"index":3,"namespace":"tenant-7"}`,
		},
		// JSON cannot hold bytes that are not UTF-8 (encoding/json writes
		// U+FFFD): an id or a namespace is kept as its exact bytes, in
		// base64, in place of the text, which would name another one.
		{
			"an id that is not UTF-8 is written as its bytes, without an id",
			upsert.Failure{Index: 2, ID: "caf\xe9", Record: &pinecone.Vector{Id: "caf\xe9", Values: floats(1)}, Class: upsert.ClassInvalid,
				Err: &upsert.Error{Class: upsert.ClassInvalid, Err: errors.New("id is not ASCII")}},
			`{"id_base64":"Y2Fm6Q==","class":"invalid","error":"invalid: id is not ASCII","attempts":0,"may_have_landed":false,"index":2,"record_error":"id is not valid UTF-8"}`,
		},
		{
			"a namespace that is not UTF-8 is written as its bytes",
			withNamespace(rateLimited(17, rec), "t\xe9nant"),
			`{"id":"a","values":[0.1,0.2],"metadata":{"genre":"x"},"class":"rate-limited","error":"rate-limited (gRPC ResourceExhausted): slow down","attempts":9,"may_have_landed":true,"index":17,"namespace_base64":"dOluYW50"}`,
		},
		{
			"a nil record's namespace that is not UTF-8 is written as its bytes",
			upsert.Failure{Index: 4, Namespace: "t\xe9nant", Class: upsert.ClassInvalid, Err: &upsert.Error{Class: upsert.ClassInvalid, Err: errors.New("record is nil")}},
			`{"index":4,"error":"invalid: record is nil","namespace_base64":"dOluYW50"}`,
		},
		// An integrated record whose text is not UTF-8 would be written
		// altered, without an error from encoding/json: it is written with
		// its id alone and why, as one that JSON cannot encode is.
		{
			"an integrated record whose text is not UTF-8 is written with its id alone",
			upsert.Failure{Index: 3, ID: "r1", Integrated: &pinecone.IntegratedRecord{"_id": "r1", "chunk_text": "caf\xe9"}, Class: upsert.ClassInvalid},
			`{"integrated_record":{"_id":"r1"},"class":"invalid","error":"invalid","attempts":0,"may_have_landed":false,"index":3,"record_error":"field \"chunk_text\" is not valid UTF-8"}`,
		},
		{
			"an integrated record whose id is not UTF-8 is written with its id's bytes alone",
			upsert.Failure{Index: 3, ID: "caf\xe9", Integrated: &pinecone.IntegratedRecord{"_id": "caf\xe9", "chunk_text": "hello"}, Class: upsert.ClassInvalid},
			`{"integrated_record":{},"id_base64":"Y2Fm6Q==","class":"invalid","error":"invalid","attempts":0,"may_have_landed":false,"index":3,"record_error":"field \"_id\" is not valid UTF-8"}`,
		},
		{
			"an integrated record's text that is not UTF-8 is found at any depth, in any type",
			upsert.Failure{Index: 3, ID: "r1", Integrated: &pinecone.IntegratedRecord{"_id": "r1", "chunk_text": "hello",
				"meta": struct {
					Tags []string `json:"tags"`
				}{[]string{"ok", "caf\xe9"}}}, Class: upsert.ClassInvalid},
			`{"integrated_record":{"_id":"r1"},"class":"invalid","error":"invalid","attempts":0,"may_have_landed":false,"index":3,"record_error":"field \"meta\"\"tags\"[1] is not valid UTF-8"}`,
		},
		{
			"an integrated record's map key is checked as JSON writes it: a string key as it is, not by its MarshalText",
			upsert.Failure{Index: 3, ID: "r1", Integrated: &pinecone.IntegratedRecord{"_id": "r1", "chunk_text": "hello",
				"f": map[hexKey]string{"caf\xe9": "x"}}, Class: upsert.ClassInvalid},
			`{"integrated_record":{"_id":"r1"},"class":"invalid","error":"invalid","attempts":0,"may_have_landed":false,"index":3,"record_error":"field \"f\"key \"caf\\xe9\" is not valid UTF-8"}`,
		},
		{
			"an integrated record's json.RawMessage that is not UTF-8 is not written",
			upsert.Failure{Index: 3, ID: "r1", Integrated: &pinecone.IntegratedRecord{"_id": "r1", "chunk_text": "hello", "raw": json.RawMessage("\"caf\xe9\"")}, Class: upsert.ClassInvalid},
			`{"integrated_record":{"_id":"r1"},"class":"invalid","error":"invalid","attempts":0,"may_have_landed":false,"index":3,"record_error":"field \"raw\" is not valid UTF-8"}`,
		},
		// A \ufffd that is not encoding/json's replacement of a bad byte is
		// the record's own text: the record is written whole.
		{
			"an integrated record's own \\ufffd escape, or text that reads \\ufffd, is written whole",
			upsert.Failure{Index: 3, ID: "r1", Integrated: &pinecone.IntegratedRecord{"_id": "r1", "chunk_text": `a \ufffd`, "raw": json.RawMessage(`"\ufffd"`)}, Class: upsert.ClassInvalid},
			`{"integrated_record":{"_id":"r1","chunk_text":"a \\ufffd","raw":"\ufffd"},"class":"invalid","error":"invalid","attempts":0,"may_have_landed":false,"index":3}`,
		},
		{
			"an error message that is not UTF-8 does not drop the integrated record",
			upsert.Failure{Index: 3, ID: "r1", Integrated: &pinecone.IntegratedRecord{"_id": "r1", "chunk_text": "hello"}, Class: upsert.ClassInvalid, Err: errors.New("caf\xe9")},
			`{"integrated_record":{"_id":"r1","chunk_text":"hello"},"class":"invalid","error":"caf\ufffd","attempts":0,"may_have_landed":false,"index":3}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tempPath(t)
			dl, err := ndjson.CreateDeadLetters(path)
			require.NoError(t, err)
			dl.Write(tt.f)
			assert.Equal(t, 1, dl.Count())
			require.NoError(t, dl.Close())
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, tt.want+"\n", string(data))
		})
	}
}

// A record whose metadata holds a NaN (refused by the library as invalid)
// is written with its id and "record_error" only, since JSON cannot hold
// it: structpb's AsMap would turn NaN into the string "NaN", and the letter
// would replay as a valid record with metadata the user never had.
func TestDeadLetterOfNaNMetadataDoesNotReplayAsAString(t *testing.T) {
	md := &structpb.Struct{Fields: map[string]*structpb.Value{
		"score": structpb.NewNumberValue(math.NaN()),
		"neg":   structpb.NewNumberValue(math.Inf(-1)),
	}}
	rec := &pinecone.Vector{Id: "nanmeta", Values: floats(1, 2), Metadata: md}
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	dl.Write(upsert.Failure{Index: 0, ID: rec.Id, Record: rec, Class: upsert.ClassInvalid,
		Err: &upsert.Error{Class: upsert.ClassInvalid, Err: errors.New(`metadata field "score" is NaN or infinite; numbers must be finite`)}})
	require.NoError(t, dl.Close())

	letters := lines(t, path)
	require.Len(t, letters, 1)
	assert.Equal(t, "nanmeta", letters[0]["id"])
	assert.NotContains(t, letters[0], "metadata")
	assert.NotContains(t, letters[0], "values")
	assert.Regexp(t, `^metadata field "(score|neg)": NaN or infinite`, letters[0]["record_error"])
	recs, _ := readLetters(t, path)
	require.Len(t, recs, 1)
	assert.Nil(t, recs[0].Metadata, "no metadata to replay as strings")
}

// A record refused for metadata that is not valid UTF-8 (Latin-1 text from
// a legacy database) is written with its id and "record_error" only:
// encoding/json would replace the bad bytes with U+FFFD, and the replay
// would land metadata the user never wrote, with no error anywhere.
func TestDeadLetterOfInvalidUTF8MetadataDoesNotReplayAsAnotherRecord(t *testing.T) {
	md := &structpb.Struct{Fields: map[string]*structpb.Value{
		"title": structpb.NewStringValue("caf\xe9"), // Latin-1 "café"
	}}
	rec := &pinecone.Vector{Id: "latin1", Values: floats(1, 2), Metadata: md}
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	dl.Write(upsert.Failure{Index: 0, ID: rec.Id, Record: rec, Class: upsert.ClassInvalid,
		Err: &upsert.Error{Class: upsert.ClassInvalid, Err: errors.New(`metadata field "title" is not valid UTF-8`)}})
	require.NoError(t, dl.Close())

	letters := lines(t, path)
	require.Len(t, letters, 1)
	assert.Equal(t, `metadata field "title": not valid UTF-8`, letters[0]["record_error"])
	recs, _ := readLetters(t, path)
	require.Len(t, recs, 1)
	assert.Equal(t, "latin1", recs[0].Id)
	assert.Nil(t, recs[0].Values, "the letter replays as no record but the failed one")
	assert.Nil(t, recs[0].Metadata)
}

// An integrated record that JSON cannot hold is written with its id alone
// and "record_error", as a record is, and takes no other letter with it:
// neither those written before it, in the buffer and counted, nor those
// written after it.
func TestAnUnencodableIntegratedLetterLosesNoOtherLetter(t *testing.T) {
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	dl.Write(rateLimited(0, &pinecone.Vector{Id: "before", Values: floats(1, 2)}))
	dl.Write(upsert.Failure{Index: 1, ID: "r1", Integrated: &pinecone.IntegratedRecord{"_id": "r1", "chunk_text": "x", "score": math.NaN()},
		Class: upsert.ClassRateLimited, Err: &upsert.Error{Class: upsert.ClassRateLimited, StatusCode: 429}, Attempts: 9})
	dl.Write(rateLimited(2, &pinecone.Vector{Id: "after", Values: floats(3, 4)}))
	require.NoError(t, dl.Close())
	assert.Equal(t, 3, dl.Count())

	recs, bad := readLetters(t, path)
	var ids []string
	for _, v := range recs {
		ids = append(ids, v.Id)
	}
	assert.Equal(t, []string{"before", "after"}, ids)
	require.Len(t, bad, 1, "the integrated record's letter, which a Reader does not read back")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, `{"integrated_record":{"_id":"r1"},"class":"rate-limited","error":"rate-limited (HTTP 429)","attempts":9,"may_have_landed":false,"index":1,"record_error":"json: unsupported value: NaN"}`,
		strings.Split(string(data), "\n")[1])
}

func TestDeadLettersReplay(t *testing.T) {
	recs := []*pinecone.Vector{
		{Id: "dense", Values: floats(0.1, -2.5e-8, 3)},
		{Id: "sparse", SparseValues: &pinecone.SparseValues{Indices: []uint32{1, 5}, Values: []float32{0.5, 0.25}}},
		{Id: "meta", Values: floats(1), Metadata: metadata(t, map[string]any{"n": 1.5, "tags": []any{"a"}})},
	}
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	for i, v := range recs {
		dl.Write(rateLimited(i, v))
	}
	dl.WriteBad(9, []byte(`{"id": oops`), errors.New("line 9: invalid JSON"))
	require.NoError(t, dl.Close())

	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r := ndjson.NewReader(f)
	for _, want := range recs {
		got, err := r.Next()
		require.NoError(t, err)
		requireSameRecord(t, want, got)
	}
	_, err = r.Next()
	var le *ndjson.LineError
	require.ErrorAs(t, err, &le, "a bad line's dead letter has no record")
	assert.ErrorIs(t, err, ndjson.ErrMissingID)
	_, err = r.Next()
	assert.Equal(t, io.EOF, err)
}

// The letter of a record that may be stale holds the record, so that
// replaying the file upserts it again, with the class "may-be-stale", the
// error given (or one saying what happened), and the earlier record's
// position.
func TestDeadLettersWriteStale(t *testing.T) {
	rec := &pinecone.Vector{Id: "x", Values: floats(3, 1), Metadata: metadata(t, map[string]any{"v": "new"})}
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	dl.WriteStale(upsert.Stale{Index: 3, ID: "x", Record: rec, Earlier: 0}, "line 4 (id \"x\"): may be stale")
	dl.WriteStale(upsert.Stale{Index: 5, ID: "nan", Record: &pinecone.Vector{Id: "nan", Values: floats(float32(math.NaN()))}, Earlier: 1}, "")
	dl.WriteStale(upsert.Stale{Index: 7, ID: "r1", Integrated: &pinecone.IntegratedRecord{"_id": "r1", "chunk_text": "hi"}, Earlier: 2}, "stale")
	dl.WriteStale(upsert.Stale{Index: 9, ID: "x", Namespace: "tenant-7", Record: rec, Earlier: 8}, "stale")
	dl.WriteStale(upsert.Stale{Index: 11, ID: "x", Namespace: "__default__", Record: rec, Earlier: 10}, "stale")
	assert.Equal(t, 5, dl.Count())
	require.NoError(t, dl.Close())

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	got := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	require.Len(t, got, 5)
	assert.Equal(t, `{"id":"x","values":[3,1],"metadata":{"v":"new"},"class":"may-be-stale","error":"line 4 (id \"x\"): may be stale","may_have_landed":true,"index":3,"earlier":0}`, got[0])
	assert.Equal(t, `{"id":"nan","class":"may-be-stale","error":"landed while a request carrying record 1, of the same id, had ended without an answer: the index may still apply it and keep that earlier record; upsert this one again once the index is quiet","may_have_landed":true,"index":5,"earlier":1,"record_error":"json: unsupported value: NaN"}`, got[1])
	assert.Equal(t, `{"integrated_record":{"_id":"r1","chunk_text":"hi"},"class":"may-be-stale","error":"stale","may_have_landed":true,"index":7,"earlier":2}`, got[2])
	// The namespace comes last, as in a failure's letter, so that a replay
	// of a run over several namespaces upserts it where it belongs.
	assert.Equal(t, `{"id":"x","values":[3,1],"metadata":{"v":"new"},"class":"may-be-stale","error":"stale","may_have_landed":true,"index":9,"earlier":8,"namespace":"tenant-7"}`, got[3])
	assert.Equal(t, `{"id":"x","values":[3,1],"metadata":{"v":"new"},"class":"may-be-stale","error":"stale","may_have_landed":true,"index":11,"earlier":10}`, got[4], "the default namespace is left out")
	assert.Equal(t, ndjson.StaleClass, lines(t, path)[0]["class"])

	// Replayed, the file upserts the record again.
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	v, err := ndjson.NewReader(f).Next()
	require.NoError(t, err)
	requireSameRecord(t, rec, v)
}

func TestDeadLettersWriteBadKeepsTheLine(t *testing.T) {
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	raw := `{"id":"a","values":[1,"x"]}` + "\t\"quoted\" <&>"
	dl.WriteBad(3, []byte(raw), errors.New("line 3: wrong type"))
	dl.WriteBad(4, nil, nil)
	assert.Equal(t, 2, dl.Count())
	require.NoError(t, dl.Close())
	assert.Equal(t, []map[string]any{
		{"line": 3.0, "raw": raw, "error": "line 3: wrong type"},
		{"line": 4.0, "raw": "", "error": ""},
	}, lines(t, path))
}

// A line that is not valid UTF-8 is kept byte for byte, in base64, with
// its text for reading; its letter has no "raw", which a reader that
// knows only "raw" would take for the line, altered.
func TestDeadLettersWriteBadKeepsTheBytesOfALineThatIsNotUTF8(t *testing.T) {
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	raw := "{\"id\":\"m\",\"metadata\":{\"k\":\"caf\xe9\"}}"
	dl.WriteBad(2, []byte(raw), errors.New("line 2: wrong type"))
	require.NoError(t, dl.Close())
	got := lines(t, path)
	require.Len(t, got, 1)
	assert.Equal(t, map[string]any{
		"line":       2.0,
		"raw_base64": base64.StdEncoding.EncodeToString([]byte(raw)),
		"raw_text":   "{\"id\":\"m\",\"metadata\":{\"k\":\"caf\uFFFD\"}}",
		"error":      "line 2: wrong type",
	}, got[0])

	letter, err := os.ReadFile(path)
	require.NoError(t, err)
	line, content, msg, ok := ndjson.BadLine(letter)
	require.True(t, ok)
	assert.Equal(t, 2, line)
	assert.Equal(t, raw, string(content), "the line's bytes, not its text")
	assert.Equal(t, "line 2: wrong type", msg)

	var older struct { // what BadLine read before "raw_base64"
		Raw *string `json:"raw"`
	}
	require.NoError(t, json.Unmarshal(letter, &older))
	assert.Nil(t, older.Raw, "a reader of \"raw\" alone finds no line to take for this one")
}

// A bad line that a Reader accepted (at most MaxLineBytes long) has a
// letter that a Reader reads back as that line, with its number, though
// the letter is longer than MaxLineBytes: its escapes (a quote takes 2
// bytes, a control character up to 6) or its error message make it so.
// Such a letter is written in base64, which a Reader accepts up to
// MaxBadLetterBytes. (A Reader refused it as a line longer than 64 MiB:
// the line and its number were lost on replay.) The lines are at a limit
// lowered to 256 KiB, past a Reader's 64 KiB buffer, and at MaxLineBytes
// itself in runs without -race or -short.
func TestTheLetterOfABadLineAReaderAcceptedReadsBackAsThatLine(t *testing.T) {
	require.Equal(t, ndjson.MaxBadLetterBytes, ndjson.BadLetterLimit(ndjson.MaxLineBytes))
	for _, limit := range []int{256 << 10, ndjson.MaxLineBytes} {
		if limit == ndjson.MaxLineBytes && (testing.Short() || raceEnabled) {
			continue // 64 MiB lines take seconds in -short and -race runs
		}
		longMsg := strings.Repeat("e", limit)
		tests := []struct {
			name    string
			raw     []byte
			msg     string
			wantMsg string // the message the letter keeps
			long    bool   // the letter is longer than limit
			base64  bool   // the letter holds the line in base64 alone
		}{
			{"a line of quotes, 2 bytes each escaped", bytes.Repeat([]byte(`x"`), limit/2), "line 1: not an object", "line 1: not an object", true, true},
			{"a line of control characters, 6 bytes each escaped", bytes.Repeat([]byte{1}, limit), "line 1: not an object", "line 1: not an object", true, true},
			{"a line that is not UTF-8", bytes.Repeat([]byte{0xe9}, limit), "line 1: wrong type", "line 1: wrong type", true, true},
			{"a short line with a long message, cut", []byte("x"), longMsg, longMsg[:1<<10] + "…", false, true},
			{"a line whose letter fits", bytes.Repeat([]byte("x"), limit-64), "line 1: not an object", "line 1: not an object", false, false},
		}
		if limit == ndjson.MaxLineBytes {
			tests = tests[:1] // the others take seconds more at this size
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s, at %d bytes", tt.name, limit), func(t *testing.T) {
				r := ndjson.NewReader(bytes.NewReader(append(slices.Clip(tt.raw), '\n')))
				r.SetMaxLineBytes(limit)
				_, err := r.Next()
				require.NotErrorIs(t, err, ndjson.ErrLineTooLong, "the line is within the limit")
				require.True(t, bytes.Equal(tt.raw, r.Raw()), "a Reader reads the line")

				path := tempPath(t)
				dl, err := ndjson.CreateDeadLetters(path)
				require.NoError(t, err)
				dl.SetMaxLineBytes(limit)
				dl.WriteBad(1, r.Raw(), errors.New(tt.msg))
				dl.WriteBad(2, []byte("next"), errors.New("line 2: not an object"))
				require.NoError(t, dl.Close())

				f, err := os.Open(path)
				require.NoError(t, err)
				defer f.Close()
				rr := ndjson.NewReader(f)
				rr.SetMaxLineBytes(limit)
				_, err = rr.Next()
				require.Error(t, err)
				require.NotErrorIs(t, err, ndjson.ErrLineTooLong, "a Reader refuses the letter")
				assert.Equal(t, tt.long, len(rr.Raw()) > limit, "the letter is %d bytes", len(rr.Raw()))
				assert.Equal(t, tt.base64, bytes.HasPrefix(rr.Raw(), []byte(`{"line":1,"raw_base64":`)) && !bytes.Contains(rr.Raw(), []byte(`"raw_text"`)))
				assert.LessOrEqual(t, len(rr.Raw()), ndjson.BadLetterLimit(limit))
				line, content, msg, ok := ndjson.BadLine(rr.Raw())
				require.True(t, ok, "the letter is not that of a bad line")
				assert.Equal(t, 1, line)
				assert.True(t, bytes.Equal(tt.raw, content), "the letter does not hold the line")
				assert.Equal(t, tt.wantMsg, msg)

				_, err = rr.Next() // the next letter, read as it was written
				require.NotErrorIs(t, err, io.EOF)
				line, content, _, ok = ndjson.BadLine(rr.Raw())
				assert.True(t, ok)
				assert.Equal(t, 2, line)
				assert.Equal(t, "next", string(content))
				_, err = rr.Next()
				assert.ErrorIs(t, err, io.EOF)
			})
		}
	}
}

// A line longer than MaxLineBytes is still too long for a Reader when it
// is no letter that a Reader accepts: not a letter, a letter longer than
// MaxBadLetterBytes, or one that holds a line longer than MaxLineBytes
// (edited by hand: it would give a line that does not read back). The
// Reader goes on with the next line. The limit is lowered to 256 KiB.
func TestALongLineThatIsNoLetterOfALineAReaderAcceptsIsTooLong(t *testing.T) {
	const limit = 256 << 10
	tests := []struct{ name, line string }{
		{"not a letter", `{"id":"a","metadata":{"s":"` + strings.Repeat("x", limit) + `"}}`},
		{"a letter of a line too long", `{"line":1,"raw":"` + strings.Repeat("x", limit+1) + `","error":""}`},
		{"a letter of a line too long, in base64", `{"line":1,"raw_base64":"` + base64.StdEncoding.EncodeToString(make([]byte, limit+1)) + `","error":""}`},
		{"a letter too long", `{"line":1,"raw":"x","error":"` + strings.Repeat("e", ndjson.BadLetterLimit(limit)) + `"}`},
		{"not JSON", `{"line":` + strings.Repeat("1", limit)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ndjson.NewReader(strings.NewReader(tt.line + "\n" + `{"id":"next"}` + "\n"))
			r.SetMaxLineBytes(limit)
			tooLongThenNext(t, r)
		})
	}
}

func TestDeadLettersConcurrentWrites(t *testing.T) {
	const writers, each = 16, 200
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				n := w*each + i
				v := &pinecone.Vector{Id: "id-" + strings.Repeat("x", n%50), Values: floats(float32(n))}
				if i%10 == 0 {
					dl.WriteBad(n, []byte("bad"), errors.New("bad"))
					continue
				}
				dl.Write(rateLimited(n, v))
			}
		})
	}
	wg.Wait()
	assert.Equal(t, writers*each, dl.Count())
	require.NoError(t, dl.Close())

	seen := make(map[float64]bool)
	for _, m := range lines(t, path) {
		n, ok := m["index"].(float64)
		if !ok {
			n = m["line"].(float64)
		}
		assert.False(t, seen[n], "letter %v written once", n)
		seen[n] = true
	}
	assert.Len(t, seen, writers*each, "every letter is a whole line")
}

func TestDeadLettersClose(t *testing.T) {
	t.Run("closing twice returns nil both times", func(t *testing.T) {
		dl, err := ndjson.CreateDeadLetters(tempPath(t))
		require.NoError(t, err)
		dl.Write(rateLimited(0, &pinecone.Vector{Id: "a", Values: floats(1)}))
		require.NoError(t, dl.Close())
		require.NoError(t, dl.Close())
		assert.Equal(t, 1, dl.Count())
	})

	t.Run("a letter written after Close is dropped and reported", func(t *testing.T) {
		path := tempPath(t)
		dl, err := ndjson.CreateDeadLetters(path)
		require.NoError(t, err)
		require.NoError(t, dl.Close())
		dl.Write(rateLimited(0, &pinecone.Vector{Id: "a", Values: floats(1)}))
		assert.Zero(t, dl.Count())
		assert.ErrorIs(t, dl.Close(), os.ErrClosed)
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Empty(t, data)
	})
}

// The API key given to the Pinecone client never reaches the dead letters,
// whether the index accepts the key and rejects records, or denies the key.
func TestDeadLettersHoldNoAPIKey(t *testing.T) {
	const planted = "pcsk_planted-key-7f3a9c"
	tests := []struct {
		name      string
		serverKey string
		class     upsert.Class
	}{
		{"records rejected by the index", planted, upsert.ClassInvalid},
		{"a key the index denies", "another-key", upsert.ClassDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := upserttest.NewServer(upserttest.WithAPIKey(tt.serverKey), upserttest.WithFaults(upserttest.RejectIDs("b")))
			t.Cleanup(srv.Close)
			pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: planted})
			require.NoError(t, err)
			idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "ns"})
			require.NoError(t, err)
			t.Cleanup(func() { idx.Close() })

			path := tempPath(t)
			dl, err := ndjson.CreateDeadLetters(path)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			recs := []*pinecone.Vector{{Id: "a", Values: floats(1)}, {Id: "b", Values: floats(2)}, {Id: "c", Values: floats(3)}}
			res, err := upsert.All(ctx, recs, upsert.WithIndex(idx), upsert.WithObserver(upsert.Observer{Failure: dl.Write}))
			require.Error(t, err)
			require.NoError(t, dl.Close())

			require.NotEmpty(t, res.Failed)
			assert.Equal(t, len(res.Failed), dl.Count())
			letters := lines(t, path)
			require.Len(t, letters, len(res.Failed))
			for _, l := range letters {
				assert.Equal(t, tt.class.String(), l["class"])
			}
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.NotContains(t, string(data), planted)
			assert.NotContains(t, string(data), planted[5:15])
		})
	}
}

func TestBadLineRecognisesItsOwnLetters(t *testing.T) {
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	dl.WriteBad(6, []byte(`not json, "quoted"`), errors.New("line 6: invalid JSON at byte 2"))
	dl.WriteBad(7, nil, errors.New("line 7: line longer than 64 MiB"))
	require.NoError(t, dl.Close())
	letters, err := os.ReadFile(path)
	require.NoError(t, err)
	letter := strings.Split(strings.TrimSpace(string(letters)), "\n")

	tests := []struct {
		name    string
		raw     string
		line    int
		content string
		msg     string
		ok      bool
	}{
		{"a letter of WriteBad", letter[0], 6, `not json, "quoted"`, "line 6: invalid JSON at byte 2", true},
		{"a letter of a line not kept", letter[1], 7, "", "line 7: line longer than 64 MiB", true},
		{"a letter of a line not UTF-8", `{"line":8,"raw_base64":"YWLpYw==","raw_text":"ab\ufffdc","error":"e"}`, 8, "ab\xe9c", "e", true},
		{"such a letter fixed by hand", `{"line":8,"raw":"fixed","raw_text":"ab\ufffdc","error":"e"}`, 8, "fixed", "e", true},
		{"such a letter with both: raw is the line", `{"line":8,"raw":"fixed","raw_base64":"YWLpYw==","error":"e"}`, 8, "fixed", "e", true},
		{"raw_base64 that is not base64", `{"line":8,"raw_base64":"not base64!","error":"e"}`, 0, "", "", false},
		{"neither raw nor raw_base64", `{"line":8,"raw_text":"abc","error":"e"}`, 0, "", "", false},
		{"a record", `{"id":"a","values":[1]}`, 0, "", "", false},
		{"a record letter", `{"id":"a","values":[1],"class":"invalid","error":"x","attempts":0,"may_have_landed":false,"index":3}`, 0, "", "", false},
		{"a record with fields named alike", `{"line":1,"raw":"x","error":"y","id":"a"}`, 0, "", "", false},
		{"not JSON", `{"line":`, 0, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, content, msg, ok := ndjson.BadLine([]byte(tt.raw))
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.line, line)
			assert.Equal(t, tt.content, string(content))
			assert.Equal(t, tt.msg, msg)
		})
	}
}

func TestAppendDeadLettersKeepsWhatTheFileHolds(t *testing.T) {
	path := tempPath(t)
	dl, err := ndjson.AppendDeadLetters(path) // creates it
	require.NoError(t, err)
	dl.WriteBad(1, []byte("first"), nil)
	require.NoError(t, dl.Close())
	dl, err = ndjson.AppendDeadLetters(path)
	require.NoError(t, err)
	dl.WriteBad(2, []byte("second"), nil)
	require.NoError(t, dl.Close())

	got := lines(t, path)
	require.Len(t, got, 2)
	assert.Equal(t, "first", got[0]["raw"])
	assert.Equal(t, "second", got[1]["raw"])
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

// AppendDeadLetters adds letters after those the file holds. A file whose
// last line has no newline (a run killed in the middle of a flush, a file
// edited by hand) gets one before the first new letter, which is not
// glued to that line: both records would then replay as one line of
// invalid JSON.
func TestAppendDeadLettersAfterAnUnterminatedLastLineKeepsEveryRecord(t *testing.T) {
	path := tempPath(t)
	require.NoError(t, os.WriteFile(path, []byte(`{"id":"old","values":[1,2]}`), 0o600))

	dl, err := ndjson.AppendDeadLetters(path)
	require.NoError(t, err)
	dl.Write(rateLimited(5, &pinecone.Vector{Id: "new", Values: floats(3, 4)}))
	require.NoError(t, dl.Close())
	assert.Equal(t, 1, dl.Count(), "the newline is not a letter")

	recs, bad := readLetters(t, path)
	assert.Empty(t, bad, "no line of the file is unreadable")
	var ids []string
	for _, v := range recs {
		ids = append(ids, v.Id)
	}
	assert.Equal(t, []string{"old", "new"}, ids)
}

// vectors makes n valid records of dimension 2, with ids "r0", "r1", ….
func vectors(n int) []*pinecone.Vector {
	vs := make([]*pinecone.Vector, n)
	for i := range vs {
		vs[i] = &pinecone.Vector{Id: "r" + strconv.Itoa(i), Values: floats(float32(i)+1, 0.5)}
	}
	return vs
}

// snoopingCheckpoint is a FileCheckpoint that, each time it saves a
// watermark, reads the dead-letter file as it is on disk at that moment:
// what a process killed right after the save would leave behind.
type snoopingCheckpoint struct {
	upsert.FileCheckpoint
	deadPath string

	mu    sync.Mutex
	saves []snoop
}

type snoop struct {
	n       int64
	letters map[int]bool // the indexes of the records whose letters are on disk
}

func (c *snoopingCheckpoint) Save(ctx context.Context, n int64) error {
	if err := c.FileCheckpoint.Save(ctx, n); err != nil {
		return err
	}
	data, err := os.ReadFile(c.deadPath)
	if err != nil {
		return err
	}
	s := snoop{n: n, letters: map[int]bool{}}
	for l := range strings.Lines(string(data)) {
		var letter struct{ Index int }
		if json.Unmarshal([]byte(l), &letter) == nil {
			s.letters[letter.Index] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.saves = append(c.saves, s)
	return nil
}

// The resumable backfill of the README, a checkpoint given through
// dl.Checkpoint and the failures to dl.Write, has the letter of every
// record that failed for good on disk before a save of the checkpoint
// passes the record: a process killed after the save, before Close,
// loses none of the records the resumed run skips. Without it, the
// letters waited in the buffer until Close.
func TestDeadLettersAreOnDiskWhenTheCheckpointPassesTheirRecords(t *testing.T) {
	dir := t.TempDir()
	deadPath := filepath.Join(dir, "failed.ndjson")
	dl, err := ndjson.CreateDeadLetters(deadPath)
	require.NoError(t, err)
	defer dl.Close() // the process is "killed" before: the saves are checked
	cp := &snoopingCheckpoint{FileCheckpoint: upsert.FileCheckpoint(filepath.Join(dir, "backfill.ckpt")), deadPath: deadPath}

	recs := vectors(20)
	recs[3].Values = floats(0, 0) // refused before sending
	refuse7 := func(_ context.Context, _ string, b []*pinecone.Vector) error {
		if slices.ContainsFunc(b, func(v *pinecone.Vector) bool { return v.Id == "r7" }) {
			return &upsert.Error{Class: upsert.ClassInvalid, StatusCode: 400} // refused by the index
		}
		return nil
	}
	res, err := upsert.Stream(context.Background(), slices.Values(recs), upsert.WithUpsertFunc(refuse7), upsert.WithBatchSize(4),
		upsert.WithCheckpoint(dl.Checkpoint(cp)), upsert.WithObserver(upsert.Observer{Failure: dl.Write}))
	require.ErrorIs(t, err, upsert.ErrInvalid)
	failed := map[int]bool{}
	for _, f := range res.Failed {
		require.False(t, f.Resend, "record %d failed for good", f.Index)
		failed[f.Index] = true
	}
	require.Equal(t, map[int]bool{3: true, 7: true}, failed)

	cp.mu.Lock()
	defer cp.mu.Unlock()
	require.NotEmpty(t, cp.saves)
	assert.EqualValues(t, len(recs), cp.saves[len(cp.saves)-1].n, "the last save passes every record")
	for _, s := range cp.saves {
		for i := range failed {
			if int64(i) < s.n {
				assert.True(t, s.letters[i], "the checkpoint was saved at %d, past record %d, whose letter was not on disk: "+
					"a crash now loses it (the resumed run skips it, no letter holds it)", s.n, i)
			}
		}
	}
}

// Sync puts every letter written before it on disk, whatever wrote it,
// without closing the file: the letters written after it still go to the
// file, and Close keeps them too.
func TestDeadLettersSyncPutsEveryLetterWrittenBeforeItOnDisk(t *testing.T) {
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	dl.Write(rateLimited(0, &pinecone.Vector{Id: "a", Values: floats(1)}))
	dl.WriteStale(upsert.Stale{Index: 1, ID: "b", Record: &pinecone.Vector{Id: "b", Values: floats(2)}}, "stale")
	dl.WriteBad(3, []byte("bad"), nil)

	require.NoError(t, dl.Sync())
	onDisk := lines(t, path) // read before Close
	require.Len(t, onDisk, 3)
	assert.Equal(t, "a", onDisk[0]["id"])
	assert.Equal(t, "b", onDisk[1]["id"])
	assert.Equal(t, "bad", onDisk[2]["raw"])

	dl.Write(rateLimited(4, &pinecone.Vector{Id: "c", Values: floats(3)}))
	require.NoError(t, dl.Sync())
	assert.Len(t, lines(t, path), 4, "a second Sync writes the letters since the first")
	require.NoError(t, dl.Close())
	assert.Len(t, lines(t, path), 4)
	assert.Equal(t, 4, dl.Count())
}

// After Close, Sync does nothing and says whether every letter is on
// disk: nil after a Close that wrote them all, the error of a letter
// dropped after Close otherwise.
func TestDeadLettersSyncAfterClose(t *testing.T) {
	tests := []struct {
		name       string
		afterClose bool // a letter is written after Close
		want       error
	}{
		{"after a Close that wrote every letter, nil", false, nil},
		{"after a letter dropped after Close, os.ErrClosed", true, os.ErrClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tempPath(t)
			dl, err := ndjson.CreateDeadLetters(path)
			require.NoError(t, err)
			dl.WriteBad(1, []byte("kept"), nil)
			require.NoError(t, dl.Close())
			if tt.afterClose {
				dl.WriteBad(2, []byte("dropped"), nil)
			}
			err = dl.Sync()
			if tt.want == nil {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, tt.want)
				assert.ErrorContains(t, err, path, "the error names the file")
			}
			assert.Len(t, lines(t, path), 1)
		})
	}
}

// Sync runs while letters are written, and while Close is called, and
// neither loses nor tears a letter.
func TestDeadLettersSyncWhileWriting(t *testing.T) {
	const writers, each = 8, 100
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				dl.Write(rateLimited(w*each+i, &pinecone.Vector{Id: "a", Values: floats(float32(i))}))
				if i%25 == 0 {
					assert.NoError(t, dl.Sync())
				}
			}
		})
	}
	wg.Wait()
	syncing := make(chan error)
	go func() { syncing <- dl.Sync() }()
	require.NoError(t, dl.Close())
	require.NoError(t, <-syncing, "a Sync racing Close returns nil, before or after it")
	assert.Len(t, lines(t, path), writers*each)
}

// A run resumed from a checkpoint sends again the records that failed with
// Resend set: once dl.Checkpoint has been called, dl.Write writes no letter
// of them (a replay of the file would send them twice, and could
// overwrite a newer record of their id), and Count does not count them.
// Without it, nothing sends them again: they are dead letters like the
// others. The failures for good, WriteStale and WriteBad are written
// either way.
func TestDeadLettersWriteSkipsResendFailuresOnlyForACheckpointedRun(t *testing.T) {
	denied := upsert.Failure{Index: 1, ID: "b", Record: &pinecone.Vector{Id: "b", Values: floats(2)}, Class: upsert.ClassDenied,
		Err: &upsert.Error{Class: upsert.ClassDenied, StatusCode: 403}, Resend: true}
	tests := []struct {
		name       string
		checkpoint func(dl *ndjson.DeadLetters) // called before the letters are written
		wantIDs    []any                        // the ids of the letters, in order
	}{
		{"without a checkpoint", func(*ndjson.DeadLetters) {}, []any{"a", "b", "c", nil}},
		{"with dl.Checkpoint", func(dl *ndjson.DeadLetters) {
			require.NotNil(t, dl.Checkpoint(upsert.FileCheckpoint(filepath.Join(t.TempDir(), "ckpt"))))
		}, []any{"a", "c", nil}},
		{"with dl.Checkpoint(nil), which changes nothing", func(dl *ndjson.DeadLetters) {
			require.Nil(t, dl.Checkpoint(nil))
		}, []any{"a", "b", "c", nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tempPath(t)
			dl, err := ndjson.CreateDeadLetters(path)
			require.NoError(t, err)
			tt.checkpoint(dl)
			dl.Write(rateLimited(0, &pinecone.Vector{Id: "a", Values: floats(1)}))
			dl.Write(denied)
			dl.WriteStale(upsert.Stale{Index: 2, ID: "c", Record: &pinecone.Vector{Id: "c", Values: floats(3)}}, "")
			dl.WriteBad(4, []byte("bad"), nil)
			assert.Equal(t, len(tt.wantIDs), dl.Count())
			require.NoError(t, dl.Close())
			var ids []any
			for _, l := range lines(t, path) {
				ids = append(ids, l["id"])
			}
			assert.Equal(t, tt.wantIDs, ids)
		})
	}
}

// A backfill stopped by the index (the key revoked), then resumed from its
// checkpoint, leaves each record landed or in the dead-letter file, never
// both: with dl.Checkpoint the file holds the record refused for good,
// and none of those that the resumed run sent.
func TestDeadLettersOfAResumedRunHoldNoRecordItSent(t *testing.T) {
	dir := t.TempDir()
	deadPath := filepath.Join(dir, "failed.ndjson")
	ckpt := upsert.FileCheckpoint(filepath.Join(dir, "backfill.ckpt"))
	recs := vectors(60)
	recs[5].Values = floats(0, 0) // refused for good
	var mu sync.Mutex
	landed := map[string]int{} // how many runs landed each record
	var requests atomic.Int64
	index := func(revokeAfter int64) func(context.Context, string, []*pinecone.Vector) error {
		return func(_ context.Context, _ string, b []*pinecone.Vector) error {
			if revokeAfter > 0 && requests.Add(1) > revokeAfter {
				return status.Error(codes.PermissionDenied, "key revoked")
			}
			mu.Lock()
			defer mu.Unlock()
			for _, v := range b {
				landed[v.Id]++
			}
			return nil
		}
	}
	run := func(index func(context.Context, string, []*pinecone.Vector) error) (upsert.Result, error) {
		dl, err := ndjson.AppendDeadLetters(deadPath)
		require.NoError(t, err)
		defer func() { require.NoError(t, dl.Close()) }()
		return upsert.Stream(context.Background(), slices.Values(recs), upsert.WithUpsertFunc(index),
			upsert.WithBatchSize(10), upsert.WithConcurrency(1),
			upsert.WithCheckpoint(dl.Checkpoint(ckpt)), upsert.WithObserver(upsert.Observer{Failure: dl.Write}))
	}

	res, err := run(index(2))
	require.ErrorIs(t, err, upsert.ErrDenied)
	require.True(t, slices.ContainsFunc(res.Failed, func(f upsert.Failure) bool { return f.Resend }), "records were left to the resumed run")
	_, err = run(index(0))
	require.NoError(t, err)

	letters := map[string]int{}
	for _, l := range lines(t, deadPath) {
		letters[l["id"].(string)]++
	}
	assert.Equal(t, map[string]int{"r5": 1}, letters, "the one record refused for good, once")
	for _, v := range recs {
		if v.Id != "r5" {
			assert.Positive(t, landed[v.Id], "record %s landed", v.Id)
		}
	}
	assert.Zero(t, landed["r5"])
}

// The checkpoint dl.Checkpoint returns loads what cp holds, and saves to
// cp once the letters are on disk; when they cannot be, the save fails
// with an error naming the dead-letter file and the cause, and cp keeps
// what it held.
func TestDeadLettersCheckpointSavesOnlyWhatIsOnDisk(t *testing.T) {
	tests := []struct {
		name       string
		afterClose bool // a letter is dropped after Close
		wantSaved  int64
	}{
		{"letters on disk: saved", false, 9},
		{"a letter lost: not saved", true, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			path := tempPath(t)
			cp := upsert.FileCheckpoint(filepath.Join(t.TempDir(), "ckpt"))
			require.NoError(t, cp.Save(ctx, 4))
			dl, err := ndjson.CreateDeadLetters(path)
			require.NoError(t, err)
			wrapped := dl.Checkpoint(cp)
			n, err := wrapped.Load(ctx)
			require.NoError(t, err)
			assert.EqualValues(t, 4, n)

			dl.Write(rateLimited(5, &pinecone.Vector{Id: "a", Values: floats(1)}))
			if tt.afterClose {
				require.NoError(t, dl.Close())
				dl.Write(rateLimited(7, &pinecone.Vector{Id: "b", Values: floats(2)}))
			}
			err = wrapped.Save(ctx, 9)
			if tt.afterClose {
				require.ErrorIs(t, err, os.ErrClosed)
				assert.ErrorContains(t, err, "dead-letter file "+path)
			} else {
				require.NoError(t, err)
			}
			saved, err := cp.Load(ctx)
			require.NoError(t, err)
			assert.Equal(t, tt.wantSaved, saved)
			assert.Len(t, lines(t, path), 1)
			dl.Close()
		})
	}
}

// Letters of records at the edges of what JSON holds (null, -0, the
// smallest and largest numbers, an empty key, HTML characters, U+2028,
// empty lists and objects, empty sparse values) read back as the same
// records, from Write and WriteStale alike: a replay sends what failed.
func TestLettersOfEdgeCaseRecordsReadBackAsTheSameRecords(t *testing.T) {
	md := &structpb.Struct{Fields: map[string]*structpb.Value{
		"null":    structpb.NewNullValue(),
		"t":       structpb.NewBoolValue(true),
		"f":       structpb.NewBoolValue(false),
		"negzero": structpb.NewNumberValue(math.Copysign(0, -1)),
		"sub":     structpb.NewNumberValue(5e-324),
		"max":     structpb.NewNumberValue(math.MaxFloat64),
		"big":     structpb.NewNumberValue(1 << 60),
		"":        structpb.NewStringValue("empty key"),
		"html":    structpb.NewStringValue("<a&b>\u2028\u2029\"\\\x01"),
		"list": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
			structpb.NewNullValue(), structpb.NewNumberValue(1.5), structpb.NewStringValue("x"),
			structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"deep": structpb.NewListValue(&structpb.ListValue{})}}),
		}}),
		"emptyobj": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{}}),
	}}
	recs := []*pinecone.Vector{
		{Id: "edge", Values: floats(math.MaxFloat32, math.SmallestNonzeroFloat32, float32(math.Copysign(0, -1)), 1e-40, 0.1), Metadata: md},
		{Id: "sparse-nil", SparseValues: &pinecone.SparseValues{}},
		{Id: "emptymeta", Values: floats(1), Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{}}},
		{Id: "quote\"\\<>&\u2028", Values: floats(1)},
	}
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	for i, v := range recs {
		dl.Write(rateLimited(i, v))
		dl.WriteStale(upsert.Stale{Index: i, ID: v.Id, Record: v, Earlier: 0}, "")
	}
	require.NoError(t, dl.Close())
	got, bad := readLetters(t, path)
	require.Empty(t, bad)
	require.Len(t, got, 2*len(recs))
	for i, v := range recs {
		requireSameRecord(t, v, got[2*i])
		requireSameRecord(t, v, got[2*i+1])
	}
}

// The library refuses an integrated record whose text is not valid UTF-8
// (Pinecone would store it altered), and its failure reaches dl.Write.
// encoding/json would write the text with U+FFFD in place of the bad
// bytes, without an error: the letter holds the record's id alone and
// "record_error" instead, as for a record whose metadata is not UTF-8,
// and never text the user did not write.
func TestTheIntegratedLetterOfTextThatIsNotUTF8HoldsItsIDAndWhy(t *testing.T) {
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	recs := []*pinecone.IntegratedRecord{{"_id": "r1", "chunk_text": "caf\xe9"}} // Latin-1 "café"
	_, err = upsert.Records(context.Background(), slices.Values(recs),
		upsert.WithRecordsFunc(func(context.Context, string, []*pinecone.IntegratedRecord) error { return nil }),
		upsert.WithObserver(upsert.Observer{Failure: dl.Write}))
	require.ErrorIs(t, err, upsert.ErrInvalid, "the library refuses the record")
	require.NoError(t, dl.Close())

	letters := lines(t, path)
	require.Len(t, letters, 1)
	assert.Equal(t, map[string]any{"_id": "r1"}, letters[0]["integrated_record"], "the text is not written altered")
	assert.Equal(t, `field "chunk_text" is not valid UTF-8`, letters[0]["record_error"])
}

// The library refuses a record whose id is not valid UTF-8 (Latin-1 from
// a legacy database), and its failure reaches dl.Write. Written as a JSON
// string, the id would read back as "caf\uFFFD", an id the input never
// had, which a replay would upsert without an error. The letter keeps the
// id's bytes in "id_base64" and has no "id": a Reader reports a line
// without an id.
func TestTheLetterOfAnIDThatIsNotUTF8KeepsItsBytesAndNamesNoOtherID(t *testing.T) {
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	rec := &pinecone.Vector{Id: "caf\xe9", Values: floats(1, 2)}
	_, err = upsert.All(context.Background(), []*pinecone.Vector{rec},
		upsert.WithUpsertFunc(func(context.Context, string, []*pinecone.Vector) error { return nil }),
		upsert.WithObserver(upsert.Observer{Failure: dl.Write}))
	require.ErrorIs(t, err, upsert.ErrInvalid)
	require.NoError(t, dl.Close())

	letters := lines(t, path)
	require.Len(t, letters, 1)
	assert.NotContains(t, letters[0], "id")
	b, err := base64.StdEncoding.DecodeString(letters[0]["id_base64"].(string))
	require.NoError(t, err)
	assert.Equal(t, rec.Id, string(b), "the id's exact bytes")
	assert.Equal(t, "id is not valid UTF-8", letters[0]["record_error"])

	recs, bad := readLetters(t, path)
	assert.Empty(t, recs, "the letter replays as no record")
	require.Len(t, bad, 1)
	assert.ErrorIs(t, bad[0], ndjson.ErrMissingID)
}

// WriteStale keeps an id that is not UTF-8 as Write does, for a record,
// for a nil one (the id alone) and for an integrated one, and writes an
// integrated record whose text is not UTF-8 with its id alone.
func TestWriteStaleKeepsTheBytesOfAnIDThatIsNotUTF8(t *testing.T) {
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	dl.WriteStale(upsert.Stale{Index: 1, ID: "caf\xe9", Record: &pinecone.Vector{Id: "caf\xe9", Values: floats(1)}}, "stale")
	dl.WriteStale(upsert.Stale{Index: 2, ID: "caf\xe9"}, "stale")
	dl.WriteStale(upsert.Stale{Index: 3, ID: "caf\xe9", Integrated: &pinecone.IntegratedRecord{"_id": "caf\xe9", "chunk_text": "hi"}}, "stale")
	dl.WriteStale(upsert.Stale{Index: 4, ID: "r1", Integrated: &pinecone.IntegratedRecord{"_id": "r1", "chunk_text": "caf\xe9"}}, "stale")
	require.NoError(t, dl.Close())

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, `{"id_base64":"Y2Fm6Q==","class":"may-be-stale","error":"stale","may_have_landed":true,"index":1,"earlier":0,"record_error":"id is not valid UTF-8"}
{"id_base64":"Y2Fm6Q==","class":"may-be-stale","error":"stale","may_have_landed":true,"index":2,"earlier":0}
{"integrated_record":{},"id_base64":"Y2Fm6Q==","class":"may-be-stale","error":"stale","may_have_landed":true,"index":3,"earlier":0,"record_error":"field \"_id\" is not valid UTF-8"}
{"integrated_record":{"_id":"r1"},"class":"may-be-stale","error":"stale","may_have_landed":true,"index":4,"earlier":0,"record_error":"field \"chunk_text\" is not valid UTF-8"}
`, string(data))
	recs, _ := readLetters(t, path)
	assert.Empty(t, recs, "no letter replays as a record of another id")
}

// landedSnoop is a checkpoint that, at each save, after it, records what a
// process killed at that moment would leave: the dead letters on disk and
// the ids the index holds.
type landedSnoop struct {
	upsert.FileCheckpoint
	deadPath string
	srv      *upserttest.Server
	ns       string

	mu    sync.Mutex
	saves []landedState
}

type landedState struct {
	n       int64
	letters map[int]bool // the indexes of the records whose letters are on disk
	landed  map[string]bool
}

func (c *landedSnoop) Save(ctx context.Context, n int64) error {
	if err := c.FileCheckpoint.Save(ctx, n); err != nil {
		return err
	}
	data, err := os.ReadFile(c.deadPath)
	if err != nil {
		return err
	}
	s := landedState{n: n, letters: map[int]bool{}, landed: map[string]bool{}}
	for l := range strings.Lines(string(data)) {
		var letter struct{ Index *int }
		if json.Unmarshal([]byte(l), &letter) == nil && letter.Index != nil {
			s.letters[*letter.Index] = true
		}
	}
	for id := range c.srv.Vectors(c.ns) {
		s.landed[id] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.saves = append(c.saves, s)
	return nil
}

// The README's resumable stream against the emulated index through the
// real SDK, with records refused for good, server errors whose retries run
// out, and the key revoked mid-run: at every save of the checkpoint (a
// crash right after it, dl never closed), each record below it has landed
// or has its letter on disk; the resumed run then leaves every record
// landed or in the file.
func TestACrashAfterAnySaveOfTheCheckpointLosesNoRecord(t *testing.T) {
	const ns = "docs"
	var revoked atomic.Bool
	revoke := func(r upserttest.Request) upserttest.Fault {
		if revoked.Load() || r.Seq > 12 {
			revoked.Store(true)
			return upserttest.Fault{Code: codes.PermissionDenied}
		}
		return upserttest.Fault{}
	}
	srv := upserttest.NewServer(upserttest.WithFaults(upserttest.Chain(
		upserttest.RejectIDs("r7", "r33", "r61"), revoke, upserttest.ErrorRate(codes.Unavailable, 0.3, 7))))
	t.Cleanup(srv.Close)
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "k"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: ns})
	require.NoError(t, err)
	t.Cleanup(func() { idx.Close() })

	dir := t.TempDir()
	deadPath := filepath.Join(dir, "failed.ndjson")
	cp := &landedSnoop{FileCheckpoint: upsert.FileCheckpoint(filepath.Join(dir, "ckpt")), deadPath: deadPath, srv: srv, ns: ns}
	recs := vectors(80)
	recs[20].Values = floats(0, 0) // refused before sending
	run := func() error {
		dl, err := ndjson.AppendDeadLetters(deadPath)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err = upsert.Stream(ctx, slices.Values(recs), upsert.WithIndex(idx), upsert.WithBatchSize(3), upsert.WithConcurrency(4),
			upsert.WithMaxRetries(upsert.ClassServer, 1), upsert.WithBackoff(time.Millisecond, 2*time.Millisecond),
			upsert.WithCheckpoint(dl.Checkpoint(cp)), upsert.WithObserver(upsert.Observer{Failure: dl.Write}))
		// "killed": the checks read what the saves left; Close only frees the descriptor.
		t.Cleanup(func() { dl.Close() })
		return err
	}
	check := func() {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		require.NotEmpty(t, cp.saves)
		for _, s := range cp.saves {
			for i := range int(s.n) {
				assert.True(t, s.landed[recs[i].Id] || s.letters[i],
					"saved at %d: record %d neither landed nor has a letter on disk", s.n, i)
			}
		}
	}
	require.ErrorIs(t, run(), upsert.ErrDenied)
	check()

	revoked.Store(false)
	srv.SetFaults(upserttest.RejectIDs("r7", "r33", "r61"))
	cp.saves = nil
	require.ErrorIs(t, run(), upsert.ErrInvalid)
	check()
	last := cp.saves[len(cp.saves)-1]
	assert.EqualValues(t, len(recs), last.n)
}

// Letters larger than the 256 KiB buffer, written from several goroutines
// while Sync runs, each arrive whole and read back as their records.
func TestLettersLargerThanTheBufferWrittenWhileSyncingArriveWhole(t *testing.T) {
	if testing.Short() {
		t.Skip("encodes and decodes 5 MB of letters: over a second under -race")
	}
	path := tempPath(t)
	dl, err := ndjson.CreateDeadLetters(path)
	require.NoError(t, err)
	big := strings.Repeat("é", 150<<10) // 300 KiB of text
	const workers, each = 4, 4
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				v := &pinecone.Vector{Id: "big", Values: floats(float32(w*each + i)), Metadata: metadata(t, map[string]any{"text": big})}
				dl.Write(rateLimited(w*each+i, v))
				assert.NoError(t, dl.Sync())
			}
		})
	}
	wg.Wait()
	require.NoError(t, dl.Close())
	recs, bad := readLetters(t, path)
	require.Empty(t, bad)
	require.Len(t, recs, workers*each)
	seen := map[float32]bool{}
	for _, v := range recs {
		assert.Equal(t, big, v.Metadata.Fields["text"].GetStringValue())
		seen[(*v.Values)[0]] = true
	}
	assert.Len(t, seen, workers*each, "every letter, once")
}
