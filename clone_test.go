package upsert

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"sync"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// reused yields n records through one *pinecone.Vector whose values,
// sparse values and metadata are rewritten in place for each, as a decoder
// that reuses its buffers does.
func reused(n int) iter.Seq[*pinecone.Vector] {
	vals := make([]float32, 4)
	v := &pinecone.Vector{
		Values:       &vals,
		SparseValues: &pinecone.SparseValues{Indices: []uint32{0}, Values: []float32{0}},
		Metadata:     &structpb.Struct{Fields: map[string]*structpb.Value{"n": structpb.NewNumberValue(0)}},
	}
	return func(yield func(*pinecone.Vector) bool) {
		for i := range n {
			v.Id = fmt.Sprint("r", i)
			vals[0] = float32(i) + 1
			v.SparseValues.Indices[0], v.SparseValues.Values[0] = uint32(i), float32(i)
			v.Metadata.Fields["n"] = structpb.NewNumberValue(float64(i))
			if !yield(v) {
				return
			}
		}
	}
}

func requireEachRecordAsGiven(t *testing.T, n int, stored map[string]*pinecone.Vector) {
	t.Helper()
	require.Len(t, stored, n, "every record is stored under its own id")
	for i := range n {
		got := stored[fmt.Sprint("r", i)]
		require.NotNil(t, got, "r%d", i)
		assert.Equal(t, float32(i)+1, (*got.Values)[0], "values of r%d", i)
		assert.Equal(t, []uint32{uint32(i)}, got.SparseValues.Indices, "sparse values of r%d", i)
		assert.Equal(t, float64(i), got.Metadata.Fields["n"].GetNumberValue(), "metadata of r%d", i)
	}
}

// Stream and Writer copy each record as they take it: a producer may reuse
// or change a record as soon as Add returns or the iterator resumes.
func TestAProducerMayReuseItsRecord(t *testing.T) {
	const n = 1000
	t.Run("Stream", func(t *testing.T) {
		fi := newFakeIndex(nil)
		res, err := Stream(context.Background(), reused(n), WithUpsertFunc(fi.Upsert))
		require.NoError(t, err)
		assert.Equal(t, n, res.Upserted)
		requireEachRecordAsGiven(t, n, fi.Stored())
	})
	t.Run("Writer", func(t *testing.T) {
		fi := newFakeIndex(nil)
		w, err := NewWriter(context.Background(), WithUpsertFunc(fi.Upsert))
		require.NoError(t, err)
		for v := range reused(n) {
			require.NoError(t, w.Add(context.Background(), v))
		}
		res, err := w.Close(context.Background())
		require.NoError(t, err)
		assert.Equal(t, n, res.Upserted)
		requireEachRecordAsGiven(t, n, fi.Stored())
	})
	t.Run("Records", func(t *testing.T) {
		rec := pinecone.IntegratedRecord{"tags": []any{"x"}}
		seq := func(yield func(*pinecone.IntegratedRecord) bool) {
			for i := range n {
				rec["_id"], rec["chunk_text"] = fmt.Sprint("r", i), fmt.Sprint("text ", i)
				rec["tags"].([]any)[0] = fmt.Sprint("tag ", i)
				if !yield(&rec) {
					return
				}
			}
		}
		stored := map[string]pinecone.IntegratedRecord{}
		var mu sync.Mutex // requests are sent concurrently
		res, err := Records(context.Background(), seq, WithRecordsFunc(func(_ context.Context, _ string, b []*pinecone.IntegratedRecord) error {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range b {
				stored[(*r)["_id"].(string)] = *r
			}
			return nil
		}))
		require.NoError(t, err)
		assert.Equal(t, n, res.Upserted)
		require.Len(t, stored, n)
		for i := range n {
			r := stored[fmt.Sprint("r", i)]
			assert.Equal(t, fmt.Sprint("text ", i), r["chunk_text"])
			assert.Equal(t, []any{fmt.Sprint("tag ", i)}, r["tags"])
		}
	})
}

func TestCloneVectorIsDeepAndEqual(t *testing.T) {
	vals := []float32{1, 2}
	md, err := structpb.NewStruct(map[string]any{"s": "x", "l": []any{"a"}, "n": 1.5, "b": true})
	require.NoError(t, err)
	v := &pinecone.Vector{Id: "a", Values: &vals, SparseValues: &pinecone.SparseValues{Indices: []uint32{3}, Values: []float32{4}}, Metadata: md}
	c := cloneVector(v)
	assert.Equal(t, v.Id, c.Id)
	assert.Equal(t, *v.Values, *c.Values)
	assert.Equal(t, v.SparseValues, c.SparseValues)
	assert.True(t, proto.Equal(v.Metadata, c.Metadata))
	vals[0], v.SparseValues.Indices[0] = 9, 9
	md.Fields["s"] = structpb.NewStringValue("changed")
	md.Fields["l"].GetListValue().Values[0] = structpb.NewStringValue("changed")
	assert.Equal(t, float32(1), (*c.Values)[0])
	assert.Equal(t, uint32(3), c.SparseValues.Indices[0])
	assert.Equal(t, "x", c.Metadata.Fields["s"].GetStringValue())
	assert.Equal(t, "a", c.Metadata.Fields["l"].GetListValue().Values[0].GetStringValue())
	assert.Nil(t, cloneVector(nil))
	empty := &pinecone.Vector{Id: "e"}
	assert.Equal(t, empty, cloneVector(empty), "nil fields stay nil")
}

// cloneRecord keeps each value as JSON will send it: text of the caller's
// string types as a string (as the SDK sends it, and as the token
// estimate reads it), numbers and booleans of the caller's types as they
// are, pointers followed, a json.RawMessage's bytes copied, and any other
// type as the JSON it encodes to; the record encodes as the caller's did.
func TestCloneRecordKeepsEachValueAsJSONWillSendIt(t *testing.T) {
	s, n := "x", 7
	var nilText *string
	tests := []struct {
		name  string
		value any
		want  any
	}{
		{"a named string type", titleText("x"), "x"},
		{"a *string", &s, "x"},
		{"a number of the caller's type", docNumber(7), docNumber(7)},
		{"a *int", &n, 7},
		{"a json.RawMessage", json.RawMessage(`["a"]`), json.RawMessage(`["a"]`)},
		{"a list of a named string type", []titleText{"a"}, json.RawMessage(`["a"]`)},
		{"a []byte", []byte("ab"), json.RawMessage(`"YWI="`)},
		{"a type with its own MarshalText", markdownText("m"), json.RawMessage(`"m"`)},
		{"a struct", struct{ A string }{"x"}, json.RawMessage(`{"A":"x"}`)},
		{"a nil *string", nilText, json.RawMessage(`null`)},
		{"a []any holding a named string type", []any{titleText("x")}, []any{"x"}},
		{"a map holding a *string", map[string]any{"k": &s}, map[string]any{"k": "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &pinecone.IntegratedRecord{"_id": "a", "v": tt.value}
			c := cloneRecord(r)
			assert.Equal(t, tt.want, (*c)["v"])
			want, err := json.Marshal(r)
			require.NoError(t, err)
			got, err := json.Marshal(c)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got), "encoded as the caller's record")
		})
	}
	assert.Nil(t, cloneRecord(nil))
}

// A value that checkRecord refuses, so that it is never sent, is kept as
// the caller gave it, for the error to name its type or its fault: one
// that cannot be encoded, one whose encoding would alter text that is not
// valid UTF-8 (the JSON of the copy would hide it), and an id that is not
// text.
func TestCloneRecordKeepsAsGivenWhatIsRefused(t *testing.T) {
	notUTF8 := struct{ A string }{"caf\xe9"}
	unencodable := make(chan int)
	tests := []struct {
		name string
		rec  pinecone.IntegratedRecord
		key  string
	}{
		{"a struct holding text that is not UTF-8", pinecone.IntegratedRecord{"_id": "a", "v": notUTF8}, "v"},
		{"a value that cannot be encoded", pinecone.IntegratedRecord{"_id": "a", "v": unencodable}, "v"},
		{"an id that is not text", pinecone.IntegratedRecord{"_id": []byte("a")}, "_id"},
		{`an "id" that is not text`, pinecone.IntegratedRecord{"id": []byte("a")}, "id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cloneRecord(&tt.rec)
			assert.Equal(t, tt.rec[tt.key], (*c)[tt.key])
			_, _, err := checkRecord(c)
			assert.Error(t, err, "refused")
		})
	}
	t.Run(`"id" is a field like any other when "_id" is there`, func(t *testing.T) {
		c := cloneRecord(&pinecone.IntegratedRecord{"_id": "a", "id": []byte("a")})
		assert.Equal(t, json.RawMessage(`"YQ=="`), (*c)["id"])
	})
}

// The copy shares nothing the caller may change once Records took the
// record: text behind a pointer, a json.RawMessage's buffer, a list.
func TestCloneRecordSharesNothingTheCallerMayChange(t *testing.T) {
	s := "x"
	buf := json.RawMessage(`["a"]`)
	list := []titleText{"a"}
	strs := []string{"a"}
	r := &pinecone.IntegratedRecord{"_id": "a", "p": &s, "raw": buf, "list": list, "strs": strs, "any": []any{&s}}
	c := cloneRecord(r)
	before, err := json.Marshal(c)
	require.NoError(t, err)
	s, buf[2], list[0], strs[0] = "changed", 'z', "changed", "changed"
	after, err := json.Marshal(c)
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after))
}
