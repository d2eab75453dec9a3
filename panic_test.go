package upsert

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A send function that panics is a bug in the caller's code, on one of the
// library's goroutines: the process must survive, the batch fails with the
// panic as its error, and the other batches still land.
func TestAPanickingSendFunctionFailsItsBatch(t *testing.T) {
	ctx := context.Background()
	t.Run("UpsertFunc", func(t *testing.T) {
		fi := newFakeIndex(nil)
		send := func(ctx context.Context, ns string, batch []*pinecone.Vector) error {
			for _, v := range batch {
				if v.Id == "v7" {
					var m map[string]int
					//lint:ignore SA5000 a nil map: the bug this test plants (staticcheck reads this line, golangci-lint the nolint)
					m["boom"]++ //nolint:staticcheck // the same deliberate panic
				}
			}
			return fi.Upsert(ctx, ns, batch)
		}
		res, err := All(ctx, vectors(30, 2), WithUpsertFunc(send), WithBatchSize(10), withClock(newFakeClock()), withRand(maxRand))
		require.Error(t, err)
		require.Len(t, res.Failed, 10, "the batch holding v7 fails, once")
		var pe *PanicError
		require.ErrorAs(t, res.Failed[0].Err, &pe)
		assert.Contains(t, pe.Error(), "assignment to entry in nil map")
		assert.NotEmpty(t, pe.Stack)
		assert.True(t, res.Failed[0].MayHaveLanded, "the function may have sent the batch before it panicked")
		assert.Equal(t, 1, res.Failed[0].Attempts, "a panic is not retried: it would panic again")
		assert.Equal(t, 20, res.Upserted)
	})
	t.Run("RecordsFunc", func(t *testing.T) {
		recs := []*pinecone.IntegratedRecord{{"_id": "a", "text": "x"}, {"_id": "b", "text": "y"}}
		send := func(context.Context, string, []*pinecone.IntegratedRecord) error { panic(errors.New("transport bug")) }
		res, err := Records(ctx, slices.Values(recs), WithRecordsFunc(send), withClock(newFakeClock()))
		require.Error(t, err)
		require.Len(t, res.Failed, 2)
		var pe *PanicError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, "transport bug", pe.Value.(error).Error())
	})
	t.Run("a classifier", func(t *testing.T) {
		send := func(context.Context, string, []*pinecone.Vector) error { return errors.New("x") }
		classify := func(error) Class { panic("classifier bug") }
		res, err := All(ctx, vectors(3, 2), WithUpsertFunc(send), WithClassifier(classify), withClock(newFakeClock()))
		require.Error(t, err)
		require.Len(t, res.Failed, 3)
		var pe *PanicError
		require.ErrorAs(t, res.Failed[0].Err, &pe)
	})
}
