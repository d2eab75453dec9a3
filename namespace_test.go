package upsert

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// "" and "__default__" are one namespace for Pinecone: one batch stream,
// one lane of the limiter, one id space.
func TestTheDefaultNamespaceHasOneName(t *testing.T) {
	recs := vectors(9, 2)
	// v0 again, under the other name: the last occurrence wins.
	recs = append(recs, &pinecone.Vector{Id: recs[0].Id, Values: &[]float32{9, 9}})
	// By position in the input (a Stream copies the records it takes, so
	// the pointers are not the caller's): even positions under "".
	calls := 0
	nsOf := func(*pinecone.Vector) string {
		calls++
		if (calls-1)%2 == 0 {
			return ""
		}
		return "__default__"
	}
	for _, call := range []struct {
		name string
		run  func(opts ...Option) (Result, error)
	}{
		{"All", func(opts ...Option) (Result, error) { return All(context.Background(), recs, opts...) }},
		{"Stream", func(opts ...Option) (Result, error) {
			return Stream(context.Background(), slices.Values(recs), opts...)
		}},
	} {
		t.Run(call.name, func(t *testing.T) {
			calls = 0
			var mu sync.Mutex
			var requests [][]string
			send := func(_ context.Context, ns string, batch []*pinecone.Vector) error {
				mu.Lock()
				defer mu.Unlock()
				ids := []string{ns}
				for _, v := range batch {
					ids = append(ids, v.Id)
				}
				requests = append(requests, ids)
				return nil
			}
			lim := NewLimiter()
			res, err := call.run(WithUpsertFunc(send), WithNamespaceOf(nsOf), WithBatchSize(10), WithLimiter(lim), withClock(newFakeClock()))
			require.NoError(t, err)
			assert.Equal(t, 1, res.Duplicates, "v0 under both names is one record")
			assert.Equal(t, 9, res.Upserted)
			require.Len(t, requests, 1, "one batch for both names: %v", requests)
			assert.Equal(t, "", requests[0][0], "sent under the name seen first")
			assert.Equal(t, 1, len(lim.lanes), "one lane of the limiter")
		})
	}
}
