package upsert

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

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
		assert.Contains(t, pe.Error(), "the classifier panicked", "names the function that panicked")
	})
}

// A send function that panics is a bug in the caller's code (PanicError):
// it says nothing about the index. Five panicking batches in a row must not
// open the circuit breaker, which then fails the next batch unsent as "the
// index has answered nothing but server errors". Batches go one at a time
// (Flush after each), so that the order is fixed.
func TestPanicsOfTheSendFunctionDoNotOpenTheBreaker(t *testing.T) {
	ctx := context.Background()
	fi := newFakeIndex(nil)
	calls := 0
	send := func(ctx context.Context, ns string, batch []*pinecone.Vector) error {
		calls++ // one batch at a time
		if calls <= breakerThreshold {
			panic("caller's bug on the first batches")
		}
		return fi.Upsert(ctx, ns, batch)
	}
	w, err := NewWriter(ctx, WithUpsertFunc(send), WithBatchSize(10), WithConcurrency(1),
		withClock(newFakeClock()), withRand(maxRand))
	require.NoError(t, err)
	vs := vectors(100, 2)
	for i := 0; i < len(vs); i += 10 {
		for _, v := range vs[i : i+10] {
			require.NoError(t, w.Add(ctx, v))
		}
		require.NoError(t, w.Flush(ctx))
	}
	res, err := w.Close(ctx)
	require.Error(t, err)
	assert.Equal(t, 50, res.Upserted, "the batches after the panicking ones land")
	for _, f := range res.Failed {
		var pe *PanicError
		require.ErrorAs(t, f.Err, &pe, "record %s failed with %v, not its own panic", f.ID, f.Err)
	}
}

// progressVectors makes n valid dense vectors of dimension 2, with distinct ids.
func progressVectors(n int) []*pinecone.Vector {
	vs := make([]*pinecone.Vector, n)
	for i := range vs {
		vs[i] = &pinecone.Vector{Id: "v" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Values: &[]float32{1, 2}}
	}
	return vs
}

func noopUpsert(context.Context, string, []*pinecone.Vector) error { return nil }

// A panic of the progress function after the last request landed stops
// nothing and fails nothing, and the final call is not made: the call
// returns the panic, as it does the ack function's.
func TestAProgressPanicAfterEveryRecordLandedIsReturned(t *testing.T) {
	calls := 0
	res, err := All(context.Background(), progressVectors(10),
		WithUpsertFunc(noopUpsert), WithBatchSize(10), WithConcurrency(1),
		WithProgress(time.Nanosecond, func(p Progress) {
			calls++
			if !p.Final {
				panic("progress bar bug")
			}
		}))
	require.Equal(t, 10, res.Upserted, "the one batch landed before the progress call")
	require.Equal(t, 1, calls, "the panic came from the call after the last request")
	var pe *PanicError
	require.ErrorAs(t, err, &pe, "the progress function panicked during the run: the call must say so, not return %v", err)
}

// A panic of the final progress call is joined to the run's error when
// records failed for another cause, as the ack function's is.
func TestAFinalProgressPanicIsKeptBesideOtherFailures(t *testing.T) {
	vs := progressVectors(3)
	vs[1] = &pinecone.Vector{Id: "", Values: &[]float32{1, 2}} // invalid: empty id
	_, err := All(context.Background(), vs,
		WithUpsertFunc(noopUpsert),
		WithProgress(time.Hour, func(p Progress) {
			if p.Final {
				panic("progress bar bug")
			}
		}))
	require.ErrorIs(t, err, ErrInvalid, "the invalid record failed")
	var pe *PanicError
	assert.ErrorAs(t, err, &pe, "the final progress call panicked; the error must carry it beside the failures: %v", err)
}
