package upsert

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// textRecords makes n integrated records "t0".. with a short text.
func textRecords(n int) []*pinecone.IntegratedRecord {
	out := make([]*pinecone.IntegratedRecord, n)
	for i := range out {
		out[i] = &pinecone.IntegratedRecord{"_id": fmt.Sprint("t", i), "chunk_text": fmt.Sprint("text ", i)}
	}
	return out
}

// Pinecone takes at most 96 integrated records per request: Records
// refuses a batch size above that before sending anything (it once sent
// requests of 200, each refused whole and bisected until it fit).
func TestRecordsRefuseABatchSizeOver96(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	send := func(_ context.Context, _ string, b []*pinecone.IntegratedRecord) error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(b))
		return nil
	}
	res, err := Records(context.Background(), slices.Values(textRecords(400)),
		WithRecordsFunc(send), WithBatchSize(200), withClock(newFakeClock()), withRand(maxRand))
	require.ErrorIs(t, err, ErrBadOption)
	assert.ErrorContains(t, err, "WithBatchSize(200)")
	assert.Empty(t, sizes, "nothing is sent")
	assert.Zero(t, res.Upserted)

	res, err = Records(context.Background(), slices.Values(textRecords(400)),
		WithRecordsFunc(send), WithBatchSize(MaxRecordsBatchSize), withClock(newFakeClock()), withRand(maxRand))
	require.NoError(t, err)
	assert.Equal(t, 400, res.Upserted)
}

// Every field of an integrated record but its id is stored as the record's
// metadata, under the rules of metadata (40 KB per record; strings,
// numbers, booleans or lists of strings): a record that breaks one fails
// alone before sending, instead of taking its request of up to 96 down.
func TestIntegratedRecordFieldsFollowTheMetadataRules(t *testing.T) {
	tests := []struct {
		name string
		rec  *pinecone.IntegratedRecord
	}{
		{"a nested object", &pinecone.IntegratedRecord{"_id": "bad", "chunk_text": "x", "meta": map[string]any{"a": "b"}}},
		{"a null", &pinecone.IntegratedRecord{"_id": "bad", "chunk_text": "x", "author": nil}},
		{"a list of numbers", &pinecone.IntegratedRecord{"_id": "bad", "chunk_text": "x", "scores": []any{1.0, 2.0}}},
		{"over 40 KB of fields", &pinecone.IntegratedRecord{"_id": "bad", "chunk_text": "x", "body": strings.Repeat("y", 41_000)}},
	}
	for _, tt := range tests {
		t.Run("a record with "+tt.name+" is refused before sending", func(t *testing.T) {
			var mu sync.Mutex
			var sent []string
			send := func(_ context.Context, _ string, b []*pinecone.IntegratedRecord) error {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range b {
					sent = append(sent, (*r)["_id"].(string))
				}
				return nil
			}
			recs := []*pinecone.IntegratedRecord{{"_id": "ok-1", "chunk_text": "a"}, tt.rec, {"_id": "ok-2", "chunk_text": "b"}}
			res, err := Records(context.Background(), slices.Values(recs), WithRecordsFunc(send), withClock(newFakeClock()), withRand(maxRand))
			require.ErrorIs(t, err, ErrInvalid)
			require.Len(t, res.Failed, 1)
			assert.Equal(t, "bad", res.Failed[0].ID)
			assert.Zero(t, res.Failed[0].Attempts, "refused before sending")
			assert.Contains(t, res.Failed[0].Err.Error(), "record 1")
			assert.NotContains(t, sent, "bad")
			assert.Equal(t, 2, res.Upserted)
		})
	}
}

// Records copies each record as it is pulled, so that a producer may reuse
// its buffers once the iterator resumes: a field holding a json.RawMessage
// (a decoder's pre-encoded value) once kept sharing the producer's buffer,
// and what was sent was what the buffer held later.
func TestRecordsCopyARawMessageField(t *testing.T) {
	buf := []byte(`["a","b"]`)
	seq := func(yield func(*pinecone.IntegratedRecord) bool) {
		rec := &pinecone.IntegratedRecord{"_id": "r0", "chunk_text": "x", "tags": json.RawMessage(buf)}
		if !yield(rec) {
			return
		}
		copy(buf, `["x","y"]`) // the decoder reuses its buffer
	}
	var mu sync.Mutex
	var sent []string
	send := func(_ context.Context, _ string, b []*pinecone.IntegratedRecord) error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range b {
			j, err := json.Marshal(r)
			if err != nil {
				return err
			}
			sent = append(sent, string(j))
		}
		return nil
	}
	res, err := Records(context.Background(), iter.Seq[*pinecone.IntegratedRecord](seq), WithRecordsFunc(send), withClock(newFakeClock()), withRand(maxRand))
	require.NoError(t, err)
	assert.Equal(t, 1, res.Upserted)
	require.Len(t, sent, 1)
	assert.Contains(t, sent[0], `"tags":["a","b"]`, "the record as it was pulled")
}
