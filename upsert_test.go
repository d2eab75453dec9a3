package upsert

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
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

	"github.com/upsertlib/upsert/upserttest"
)

// requireAccounted checks the library's first promise: every record is
// stored with the values sent, or reported failed, or counted a duplicate.
func requireAccounted(t *testing.T, records []*pinecone.Vector, res Result, stored map[string]*pinecone.Vector) {
	t.Helper()
	failed := make(map[int]bool)
	for _, f := range res.Failed {
		require.False(t, failed[f.Index], "record %d reported twice", f.Index)
		failed[f.Index] = true
	}
	landed := 0
	for i, v := range records {
		if failed[i] || v == nil {
			continue
		}
		got, ok := stored[v.Id]
		if !ok {
			continue
		}
		landed++
		if got != v {
			assert.Equal(t, v.Values, got.Values, "record %d stored with other values", i)
		}
	}
	assert.Equal(t, len(records), res.Upserted+len(res.Failed)+res.Duplicates, "upserted + failed + duplicates = records")
	assert.Equal(t, res.Upserted, landed-res.Duplicates+countDupStored(records, failed, stored), "upserted records are stored")
}

// countDupStored counts duplicates whose id is stored through a later
// record, which requireAccounted counted as landed.
func countDupStored(records []*pinecone.Vector, failed map[int]bool, stored map[string]*pinecone.Vector) int {
	seen := make(map[string]int)
	n := 0
	for i, v := range records {
		if v == nil || failed[i] {
			continue
		}
		if _, ok := stored[v.Id]; ok {
			seen[v.Id]++
			if seen[v.Id] > 1 {
				n++
			}
		}
	}
	return n
}

func TestAllUpsertsEveryRecord(t *testing.T) {
	sizes := []struct {
		name string
		n    int
	}{
		{"no records", 0},
		{"one record", 1},
		{"fewer records than a batch", 99},
		{"many batches", 2500},
	}
	for _, tt := range sizes {
		t.Run(tt.name+" all land", func(t *testing.T) {
			fi := newFakeIndex(nil)
			recs := vectors(tt.n, 4)
			res, err := All(context.Background(), recs, testOpts(fi)...)
			require.NoError(t, err)
			assert.Equal(t, tt.n, res.Upserted)
			assert.Empty(t, res.Failed)
			assert.Len(t, fi.Stored(), tt.n)
			requireAccounted(t, recs, res, fi.Stored())
		})
	}
}

func TestAllRejectsBadOptionsBeforeSending(t *testing.T) {
	fi := newFakeIndex(nil)
	send := WithUpsertFunc(fi.Upsert)
	tests := []struct {
		name string
		opts []Option
		want string
	}{
		{"no index is an error", nil, "no index"},
		{"a nil index is an error", []Option{WithIndex(nil)}, "nil *pinecone.IndexConnection"},
		{"a zero index connection is an error", []Option{WithIndex(&pinecone.IndexConnection{})}, "with no host"},
		{"two sources are an error", []Option{send, WithUpsertFunc(fi.Upsert)}, "pass one"},
		{"a batch size of zero is an error", []Option{send, WithBatchSize(0)}, "WithBatchSize(0)"},
		{"a batch size over 1000 is an error", []Option{send, WithBatchSize(1001)}, "WithBatchSize(1001)"},
		{"a concurrency of zero is an error", []Option{send, WithConcurrency(0)}, "WithConcurrency(0)"},
		{"a negative timeout is an error", []Option{send, WithRequestTimeout(-time.Second)}, "WithRequestTimeout"},
		{"retries of a class that is never retried are an error", []Option{send, WithMaxRetries(ClassInvalid, 3)}, "only rate-limited"},
		{"negative retries are an error", []Option{send, WithMaxRetries(ClassServer, -1)}, "want 0 or more"},
		{"a backoff base above its max is an error", []Option{send, WithBackoff(time.Minute, time.Second)}, "WithBackoff"},
		{"a nil limiter is an error", []Option{send, WithLimiter(nil)}, "nil *Limiter"},
		{"a nil classifier is an error", []Option{send, WithClassifier(nil)}, "WithClassifier"},
		{"a nil logger is an error", []Option{send, WithLogger(nil)}, "WithLogger"},
		{"a max rate of zero is an error", []Option{send, WithMaxRate(0)}, "WithMaxRate(0)"},
		{"a negative max rate is an error", []Option{send, WithMaxRate(-5)}, "WithMaxRate(-5)"},
		{"a max rate that is not a number is an error", []Option{send, WithMaxRate(math.NaN())}, "WithMaxRate(NaN)"},
		{"an infinite max rate is an error", []Option{send, WithMaxRate(math.Inf(1))}, "WithMaxRate(+Inf)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := All(context.Background(), vectors(3, 2), tt.opts...)
			require.ErrorIs(t, err, ErrBadOption)
			assert.Contains(t, err.Error(), tt.want)
			assert.Zero(t, res.Upserted)
		})
	}
	assert.Empty(t, fi.Calls(), "nothing was sent")
}

func TestOptionsApplyInOrderAndTheLastValueWins(t *testing.T) {
	fi := newFakeIndex(nil)
	var first, second atomic.Int64
	res, err := All(context.Background(), vectors(40, 2), WithUpsertFunc(fi.Upsert), nil,
		WithBatchSize(20), WithBatchSize(5),
		WithObserver(Observer{RunDone: func(RunEvent) { first.Add(1) }}),
		WithObserver(Observer{RunDone: func(RunEvent) { second.Add(1) }}))
	require.NoError(t, err)
	assert.Equal(t, 40, res.Upserted)
	for _, c := range fi.Calls() {
		assert.LessOrEqual(t, len(c), 5, "the second WithBatchSize wins")
	}
	assert.Equal(t, int64(1), first.Load(), "each observer is added")
	assert.Equal(t, int64(1), second.Load(), "each observer is added")
}

func TestAllCutsBatchesByCountAndBytes(t *testing.T) {
	t.Run("batches never exceed the batch size", func(t *testing.T) {
		fi := newFakeIndex(nil)
		_, err := All(context.Background(), vectors(1000, 4), testOpts(fi, WithBatchSize(64))...)
		require.NoError(t, err)
		for _, c := range fi.Calls() {
			assert.LessOrEqual(t, len(c), 64)
		}
		assert.Len(t, fi.Calls(), 16)
	})
	t.Run("batches never exceed 2 MB however large the records", func(t *testing.T) {
		// 500 records of ~30 KB of metadata each: 15 MB in all.
		recs := vectors(500, 8)
		for _, v := range recs {
			withMetadata(v, map[string]any{"text": strings.Repeat("x", 30_000)})
		}
		var biggest atomic.Int64
		fi := newFakeIndex(nil)
		send := func(ctx context.Context, ns string, batch []*pinecone.Vector) error {
			biggest.Store(max(biggest.Load(), int64(encodedRequestSize(t, batch, ns))))
			return fi.Upsert(ctx, ns, batch)
		}
		res, err := All(context.Background(), recs, WithUpsertFunc(send), withClock(newFakeClock()), WithBatchSize(1000))
		require.NoError(t, err)
		assert.Equal(t, 500, res.Upserted)
		assert.LessOrEqual(t, biggest.Load(), int64(MaxRequestBytes))
		assert.Greater(t, biggest.Load(), int64(MaxRequestBytes*9/10), "batches are filled close to the limit")
	})
	t.Run("a record too large for any request fails alone, unsent", func(t *testing.T) {
		recs := vectors(3, 8)
		withMetadata(recs[1], map[string]any{"a": strings.Repeat("x", 30_000), "b": strings.Repeat("y", 30_000)})
		fi := newFakeIndex(nil)
		res, err := All(context.Background(), recs, testOpts(fi)...)
		require.ErrorIs(t, err, ErrInvalid)
		require.Len(t, res.Failed, 1)
		assert.Equal(t, "v1", res.Failed[0].ID)
		assert.Equal(t, 0, res.Failed[0].Attempts)
		assert.Contains(t, res.Failed[0].Err.Error(), "metadata is")
		assert.Equal(t, 2, res.Upserted)
	})
}

func TestAllRidesOutAnOutage(t *testing.T) {
	down := status.Error(codes.Unavailable, "down")
	t.Run("records an outage of seconds held back land when it ends", func(t *testing.T) {
		// The index answers, then fails 40 requests in a row: the first
		// five open the breaker, the rest are its probes, 100 ms apart.
		fi := newFakeIndex(func(call int, _ []string) error {
			if call > 0 && call <= 40 {
				return down
			}
			return nil
		})
		res, err := All(context.Background(), vectors(2000, 2), WithUpsertFunc(fi.Upsert), withClock(creepingClock{newFakeClock()}),
			withRand(maxRand), WithBatchSize(100), WithConcurrency(1))
		require.NoError(t, err, "no batch gave up: failures while the breaker was open spent no retries")
		assert.Equal(t, 2000, res.Upserted)
		assert.Len(t, fi.stored, 2000)
	})
	t.Run("a batch alone in flight spends one retry on an outage too short to open the breaker", func(t *testing.T) {
		// Four failures in a row, one short of the five that open the
		// breaker, all of the one batch in flight: one run of failures.
		fi := newFakeIndex(func(call int, _ []string) error {
			if call >= 1 && call <= 4 {
				return down
			}
			return nil
		})
		res, err := All(context.Background(), vectors(200, 2), testOpts(fi, WithBatchSize(100), WithConcurrency(1), WithMaxRetries(ClassServer, 2))...)
		require.NoError(t, err, "its second to fourth failures were the same outage's")
		assert.Equal(t, 200, res.Upserted)
		assert.Equal(t, 4, res.Stats.RetriesByClass[ClassServer], "resent after each failure")
	})
	t.Run("after a minute of outage, records fail without being sent", func(t *testing.T) {
		fi := newFakeIndex(func(call int, _ []string) error {
			if call < 2 {
				return nil
			}
			return down
		})
		res, err := All(context.Background(), vectors(5000, 2), testOpts(fi, WithBatchSize(100), WithConcurrency(1))...)
		require.ErrorIs(t, err, ErrServer)
		assert.Equal(t, 200, res.Upserted)
		require.Len(t, res.Failed, 4800)
		notSent := 0
		for _, f := range res.Failed {
			if errors.Is(f.Err, errOutageTooLong.Err) {
				notSent++
			}
		}
		assert.Greater(t, notSent, 4000, "most batches were never sent")
		assert.Less(t, len(fi.calls), 100, "one probe at a time, then none but the probes")
	})
	t.Run("an index that never answered is given up on as soon as the breaker opens", func(t *testing.T) {
		fi := newFakeIndex(func(int, []string) error { return down })
		res, err := All(context.Background(), vectors(5000, 2), testOpts(fi, WithBatchSize(100), WithConcurrency(1))...)
		require.ErrorIs(t, err, ErrServer)
		require.Len(t, res.Failed, 5000)
		notSent := 0
		for _, f := range res.Failed {
			if errors.Is(f.Err, errNeverAnswered.Err) && f.Attempts == 0 {
				notSent++
				assert.False(t, f.MayHaveLanded)
			}
		}
		assert.Greater(t, notSent, 4000, "most batches were never sent")
		assert.Less(t, len(fi.calls), 20, "a wrong host costs the five requests that open the breaker and a few probes, not five per batch")
	})
	t.Run("a batch pinned to no retries is not retried in an outage either", func(t *testing.T) {
		fi := newFakeIndex(func(call int, _ []string) error {
			if call == 0 {
				return nil
			}
			return down
		})
		res, err := All(context.Background(), vectors(2000, 2), testOpts(fi, WithBatchSize(100), WithMaxRetries(ClassServer, 0), WithConcurrency(1))...)
		require.ErrorIs(t, err, ErrServer)
		assert.Len(t, res.Failed, 1900)
		sent := map[string]int{}
		for _, ids := range fi.calls {
			sent[ids[0]]++
		}
		for id, n := range sent {
			assert.Equal(t, 1, n, "the batch of %s was sent once", id)
		}
	})
}

// creepingClock is virtual time in which a Sleep moves the clock by a
// millisecond at most, and returns early if it asked for more (callers
// check again and sleep on). On a fakeClock every Sleep moves the clock,
// so writers waiting side by side move it as many times over; on this one
// they move it about as one would, and an outage of 40 probes stays a few
// seconds long. A Sleep yields first, so that waiters do not run the
// clock on while the goroutine they wait for is not scheduled.
type creepingClock struct{ *fakeClock }

func (c creepingClock) Sleep(ctx context.Context, d time.Duration) error {
	runtime.Gosched()
	return c.fakeClock.Sleep(ctx, min(d, time.Millisecond))
}

func TestAllRetriesOnlyWhatFailed(t *testing.T) {
	t.Run("a 429 is retried after a backoff and lands", func(t *testing.T) {
		fi := newFakeIndex(func(call int, _ []string) error {
			if call < 2 {
				return status.Error(codes.ResourceExhausted, "slow down")
			}
			return nil
		})
		clk := newFakeClock()
		res, err := All(context.Background(), vectors(10, 2), WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand))
		require.NoError(t, err)
		assert.Equal(t, 10, res.Upserted)
		assert.Equal(t, 2, res.Stats.RetriesByClass[ClassRateLimited])
		assert.Equal(t, 2, res.Stats.ErrorsByClass[ClassRateLimited])
		assert.Equal(t, []int{0, 0, 1}, res.Stats.RetriesPerBatch)
		assert.Contains(t, clk.Sleeps(), 500*time.Millisecond, "a 429 waits twice the base")
		assert.Contains(t, clk.Sleeps(), time.Second)
	})
	t.Run("a 429 waits at least the index's Retry-After", func(t *testing.T) {
		fi := newFakeIndex(func(call int, _ []string) error {
			if call == 0 {
				return &pushbackError{err: status.Error(codes.ResourceExhausted, "slow down"), after: 7 * time.Second}
			}
			return nil
		})
		clk := newFakeClock()
		_, err := All(context.Background(), vectors(10, 2), WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand))
		require.NoError(t, err)
		assert.Contains(t, clk.Sleeps(), 7*time.Second)
	})
	t.Run("records fail as rate-limited once the retries are spent", func(t *testing.T) {
		fi := newFakeIndex(func(int, []string) error { return status.Error(codes.ResourceExhausted, "slow down") })
		res, err := All(context.Background(), vectors(5, 2), testOpts(fi, WithMaxRetries(ClassRateLimited, 3))...)
		require.ErrorIs(t, err, ErrRateLimited)
		require.Len(t, res.Failed, 5)
		for _, f := range res.Failed {
			assert.Equal(t, ClassRateLimited, f.Class)
			assert.Equal(t, 4, f.Attempts, "one attempt and three retries")
			assert.False(t, f.MayHaveLanded, "a 429 writes nothing")
			assert.ErrorIs(t, f.Err, ErrRateLimited)
		}
		assert.Len(t, fi.Calls(), 4)
	})
	t.Run("a batch refused more often than its retries lands while others land between its refusals", func(t *testing.T) {
		// A 429 asks for a slower pace, not for this batch to fail: the
		// index refuses the first batch up to six times, each time after
		// it took eight others since the run heard the last refusal
		// (RequestDone; else it takes it): with four in flight, some of
		// them were answered in between. (Counted from the refusal itself,
		// the others could all be answered before the run read it, and
		// none after: a flake under load.)
		var mu sync.Mutex
		refused, taken := 0, 8
		fi := newFakeIndex(func(_ int, ids []string) error {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case ids[0] != "v0":
				taken++
			case taken >= 8 && refused < 6:
				refused++
				return status.Error(codes.ResourceExhausted, "slow down")
			}
			return nil
		})
		heard := WithObserver(Observer{RequestDone: func(e RequestEvent) {
			if e.Err != nil && e.Err.Class == ClassRateLimited {
				mu.Lock()
				taken = 0
				mu.Unlock()
			}
		}})
		res, err := All(context.Background(), vectors(2000, 2), testOpts(fi, WithBatchSize(10), WithConcurrency(4), WithMaxRetries(ClassRateLimited, 1), heard)...)
		require.NoError(t, err, "only its first refusal spent a retry")
		assert.Equal(t, 2000, res.Upserted)
	})
	t.Run("a server error is retried the whole batch and may have landed", func(t *testing.T) {
		fi := newFakeIndex(func(int, []string) error { return status.Error(codes.Unavailable, "down") })
		res, err := All(context.Background(), vectors(5, 2), testOpts(fi)...)
		require.ErrorIs(t, err, ErrServer)
		require.Len(t, res.Failed, 5)
		assert.Equal(t, 5, res.Failed[0].Attempts, "one attempt and the default four retries")
		assert.True(t, res.Failed[0].MayHaveLanded)
	})
	t.Run("only the failed batch is resent", func(t *testing.T) {
		var failedOnce atomic.Bool
		fi := newFakeIndex(func(_ int, ids []string) error {
			if ids[0] == "v10" && failedOnce.CompareAndSwap(false, true) {
				return status.Error(codes.Unavailable, "flaky")
			}
			return nil
		})
		res, err := All(context.Background(), vectors(30, 2), testOpts(fi, WithBatchSize(10))...)
		require.NoError(t, err)
		assert.Equal(t, 30, res.Upserted)
		sent := make(map[string]int)
		for _, c := range fi.Calls() {
			for _, id := range c {
				sent[id]++
			}
		}
		for id, n := range sent {
			if strings.HasPrefix(id, "v1") && len(id) == 3 {
				assert.Equal(t, 2, n, "%s was in the failed batch", id)
			} else {
				assert.Equal(t, 1, n, "%s was in a batch that landed", id)
			}
		}
	})
}

func TestAllSplitsTimedOutBatches(t *testing.T) {
	t.Run("a batch that times out is split until the halves fit", func(t *testing.T) {
		fi := newFakeIndex(func(_ int, ids []string) error {
			if len(ids) > 10 {
				return context.DeadlineExceeded
			}
			return nil
		})
		recs := vectors(100, 2)
		res, err := All(context.Background(), recs, testOpts(fi, WithBatchSize(80), WithConcurrency(1))...)
		require.NoError(t, err)
		assert.Equal(t, 100, res.Upserted)
		requireAccounted(t, recs, res, fi.Stored())
		assert.Positive(t, res.Stats.Splits)
		assert.Equal(t, 0, res.Stats.Retries, "halves are not retries")
	})
	t.Run("halves are sent one after the other, first half first", func(t *testing.T) {
		fi := newFakeIndex(func(call int, ids []string) error {
			if call == 0 {
				return status.Error(codes.DeadlineExceeded, "deadline")
			}
			return nil
		})
		_, err := All(context.Background(), vectors(8, 2), testOpts(fi, WithBatchSize(8))...)
		require.NoError(t, err)
		calls := fi.Calls()
		require.Len(t, calls, 3)
		assert.Equal(t, []string{"v0", "v1", "v2", "v3"}, calls[1])
		assert.Equal(t, []string{"v4", "v5", "v6", "v7"}, calls[2])
	})
	t.Run("a single record that keeps timing out fails as a timeout that may have landed", func(t *testing.T) {
		fi := newFakeIndex(func(_ int, ids []string) error {
			if containsAny(ids, map[string]bool{"v3": true}) {
				return context.DeadlineExceeded
			}
			return nil
		})
		recs := vectors(8, 2)
		res, err := All(context.Background(), recs, testOpts(fi, WithBatchSize(8))...)
		require.ErrorIs(t, err, ErrTimeout)
		require.Len(t, res.Failed, 1)
		f := res.Failed[0]
		assert.Equal(t, "v3", f.ID)
		assert.Equal(t, ClassTimeout, f.Class)
		assert.True(t, f.MayHaveLanded)
		assert.Equal(t, 4+4, f.Attempts, "three splits to reach it, then one attempt and four retries")
		assert.Equal(t, 7, res.Upserted)
	})
	t.Run("the limiter remembers the size that timed out", func(t *testing.T) {
		fi := newFakeIndex(func(_ int, ids []string) error {
			if len(ids) > 40 {
				return context.DeadlineExceeded
			}
			return nil
		})
		// Five timeouts in a row open the breaker; on a creepingClock the
		// writers waiting on it do not move time past its minute.
		clk := creepingClock{newFakeClock()}
		lim := &Limiter{clock: clk}
		_, err := All(context.Background(), vectors(400, 2), WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand), WithLimiter(lim))
		require.NoError(t, err)
		assert.LessOrEqual(t, lim.State("").BatchSize, 50, "batches stay below the size that timed out")
	})
}

func TestAllBisectsInvalidBatches(t *testing.T) {
	bad := map[string]bool{"v7": true, "v42": true, "v43": true}
	fi := newFakeIndex(func(_ int, ids []string) error {
		if containsAny(ids, bad) {
			return status.Error(codes.InvalidArgument, "bad vector in request") // names no record
		}
		return nil
	})
	recs := vectors(100, 2)
	res, err := All(context.Background(), recs, testOpts(fi, WithBatchSize(50))...)
	require.ErrorIs(t, err, ErrInvalid)
	assert.ElementsMatch(t, []string{"v7", "v42", "v43"}, failedIDs(res)[ClassInvalid])
	assert.Equal(t, 97, res.Upserted)
	requireAccounted(t, recs, res, fi.Stored())
	for _, f := range res.Failed {
		assert.False(t, f.MayHaveLanded, "an invalid request writes nothing")
	}
	assert.Less(t, len(fi.Calls()), 40, "bisection costs O(bad · log n) requests")
	assert.Equal(t, 0, res.Stats.Retries, "invalid batches are never retried unchanged")
}

func TestAllCutsBatchesFormedBeforeACeilingToIt(t *testing.T) {
	// The lane's batch size is 400 while a ceiling of 100 is known: the
	// state right after a batch of 100 timed out, with batches of 400
	// already formed. They are cut before they are sent.
	lim := &Limiter{clock: newFakeClock()}
	ln := lim.lane("", MaxBatchSize)
	ln.batch.size, ln.batch.base.size, ln.seen.size = 400, 400, 400
	ln.batch.ceil, ln.batch.ceilUntil = 100, ln.clock.Now().Add(time.Hour)
	fi := newFakeIndex(nil)
	res, err := All(context.Background(), vectors(1200, 2), WithUpsertFunc(fi.Upsert), WithLimiter(lim))
	require.NoError(t, err)
	assert.Equal(t, 1200, res.Upserted)
	assert.Len(t, fi.Stored(), 1200)
	for _, call := range fi.Calls() {
		assert.LessOrEqual(t, len(call), 99, "no request carries the size known to be too large")
	}
}

func TestAllRecutsABatchThatACutMadeTooLargeWhileItWaited(t *testing.T) {
	// A lane capped at 1000 records/s saves up a tenth of a second's worth:
	// the first batch of 100 spends it; the second waits for tokens, and a
	// 429 elsewhere cuts the rate, and the size of a request with it (a
	// twentieth of a second's worth), while it waits.
	run := func(t *testing.T, opts ...Option) (Result, *fakeIndex) {
		clk := &cuttingClock{fakeClock: newFakeClock()}
		lim := &Limiter{clock: clk}
		ln := lim.lane("", MaxBatchSize)
		clk.ln = ln
		capAt(ln, clk.fakeClock, 1000)
		ln.batch.size, ln.batch.base.size = 100, 100
		clk.Advance(time.Second) // the cut during the wait is a new episode
		fi := newFakeIndex(nil)
		// A pinned batch that were sent back to be cut would come back
		// unchanged, for ever: the deadline ends that loop.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		opts = append([]Option{WithUpsertFunc(fi.Upsert), WithLimiter(lim), withClock(clk), withRand(maxRand), WithConcurrency(1)}, opts...)
		res, err := All(ctx, vectors(1000, 2), opts...)
		require.NoError(t, err)
		require.True(t, clk.cut, "the rate was cut while a batch waited")
		return res, fi
	}
	t.Run("a batch the limiter sized is cut to the new limit and sent without a retry", func(t *testing.T) {
		res, fi := run(t)
		assert.Equal(t, 1000, res.Upserted)
		assert.Len(t, fi.Stored(), 1000)
		assert.Zero(t, res.Stats.Retries, "the batch was never sent whole, so it is not retried")
		assert.Zero(t, res.Stats.ErrorsByClass[ClassRateLimited])
		// Which of the batches formed before the cut goes first is the
		// scheduler's choice; the one behind it waited through the cut.
		calls := fi.Calls()
		assert.Len(t, calls[0], 100, "the first batch went before the cut")
		for _, call := range calls[1:] {
			require.Less(t, len(call), 100, "batches formed before the cut went out in pieces of the new size: %v", callSizes(fi))
		}
	})
	t.Run("a pinned batch size is kept and waits for its tokens", func(t *testing.T) {
		res, fi := run(t, WithBatchSize(100))
		assert.Equal(t, 1000, res.Upserted)
		assert.Len(t, fi.Stored(), 1000)
		for _, call := range fi.Calls() {
			assert.Len(t, call, 100)
		}
	})
}

// callSizes returns how many records each request to fi carried.
func callSizes(fi *fakeIndex) []int {
	var n []int
	for _, ids := range fi.Calls() {
		n = append(n, len(ids))
	}
	return n
}

func TestAllChargesPineconesByteLimitWithTheRequestsItSends(t *testing.T) {
	srv := upserttest.NewServer()
	t.Cleanup(srv.Close)
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test-key"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "wide"})
	require.NoError(t, err)
	t.Cleanup(func() { idx.Close() })

	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	ln := lim.laneAt(laneID{host: indexHost(idx), key: "wide"}, MaxBatchSize) // the call's lane: of its index
	ln.setLimits(ServerlessLimits)
	b := ln.dims[dimBytes].bucket
	before := b.TokensAt(clk.Now())
	recs := vectors(20, 1536) // one request of 120 KiB
	res, err := All(context.Background(), recs, WithIndex(idx), WithLimiter(lim), withClock(clk))
	require.NoError(t, err)
	require.Equal(t, 20, res.Upserted)
	require.Equal(t, 1, srv.Stats().Requests)
	spent := before - b.TokensAt(clk.Now())
	assert.Equal(t, float64(encodedRequestSize(t, recs, "wide")), spent, "the byte bucket is charged with the request's wire size")
}

func TestAllSplitsTooLargeRequests(t *testing.T) {
	fi := newFakeIndex(func(_ int, ids []string) error {
		if len(ids) > 3 {
			return status.Error(codes.ResourceExhausted, "grpc: received message larger than max (3000000 vs. 2097152)")
		}
		return nil
	})
	res, err := All(context.Background(), vectors(20, 2), testOpts(fi, WithBatchSize(20))...)
	require.NoError(t, err)
	assert.Equal(t, 20, res.Upserted)
	assert.Equal(t, 0, res.Stats.ErrorsByClass[ClassRateLimited], "gRPC's size limit is not a rate limit")
	assert.Positive(t, res.Stats.ErrorsByClass[ClassTooLarge])
}

func TestAllStopsWhenTheIndexDeniesTheCaller(t *testing.T) {
	fi := newFakeIndex(func(int, []string) error { return status.Error(codes.Unauthenticated, "invalid api key") })
	recs := vectors(5000, 2)
	res, err := All(context.Background(), recs, testOpts(fi, WithBatchSize(10), WithConcurrency(2))...)
	require.ErrorIs(t, err, ErrDenied)
	assert.ErrorIs(t, err, ErrInvalid, "denied is permanent")
	assert.Len(t, res.Failed, 5000)
	assert.Less(t, len(fi.Calls()), 20, "the run stops instead of sending every batch")
	for _, f := range res.Failed {
		require.Equal(t, ClassDenied, f.Class)
	}
}

func TestAllStopsAtTheFirstQuotaAnswer(t *testing.T) {
	quota := status.Error(codes.ResourceExhausted, monthlyWriteUnitsMessage)
	var calls, afterQuota atomic.Int64
	var quotaSeen atomic.Bool
	blocked := make(chan struct{})
	fi := newFakeIndex(nil)
	send := func(ctx context.Context, ns string, batch []*pinecone.Vector) error {
		n := calls.Add(1)
		if quotaSeen.Load() {
			afterQuota.Add(1)
		}
		switch {
		case n <= 10:
			return fi.Upsert(ctx, ns, batch)
		case n == 11:
			// In flight when the quota answer comes: cut off by the stop.
			close(blocked)
			<-ctx.Done()
			return ctx.Err()
		default:
			<-blocked
			quotaSeen.Store(true)
			return quota
		}
	}
	recs := vectors(5000, 2)
	res, err := All(context.Background(), recs, WithUpsertFunc(send), withClock(newFakeClock()), withRand(maxRand), WithBatchSize(10), WithConcurrency(2))
	require.ErrorIs(t, err, ErrQuotaExceeded)
	assert.ErrorIs(t, err, ErrDenied, "a quota is a denial")
	requireAccounted(t, recs, res, fi.Stored())
	assert.Equal(t, 100, res.Upserted)
	assert.Zero(t, res.Stats.Retries, "no record is retried past the first quota answer")
	assert.LessOrEqual(t, afterQuota.Load(), int64(1), "no request goes out after the quota answer but one already on its way")
	cutOff := 0
	for _, f := range res.Failed {
		require.Equal(t, ClassQuotaExceeded, f.Class, "record %d", f.Index)
		if f.MayHaveLanded {
			cutOff++
		}
	}
	assert.Equal(t, 10, cutOff, "the request in flight when the run stopped may have landed")
}

func TestAllReportsEveryRecordWhenCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	fi := newFakeIndex(func(call int, _ []string) error {
		if call == 3 {
			cancel()
		}
		return nil
	})
	recs := vectors(10_000, 2)
	res, err := All(ctx, recs, testOpts(fi, WithBatchSize(10), WithConcurrency(1))...)
	require.ErrorIs(t, err, ErrCanceled)
	assert.NotErrorIs(t, err, ErrTimeout, "the caller's end is not a timeout")
	requireAccounted(t, recs, res, fi.Stored())
	assert.Positive(t, res.Upserted)
	assert.Less(t, len(fi.Calls()), 10, "no new requests after the cancel")
	for _, f := range res.Failed {
		require.Equal(t, ClassCanceled, f.Class)
	}
}

// Once the run stops, All looks at no further record: the rest of the
// slice fails as canceled without being checked (which made a cancel of
// two million records take seconds), and Result.Failed is still complete
// and in input order.
func TestAllStopsLookingAtRecordsWhenCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	fi := newFakeIndex(func(call int, _ []string) error {
		if call == 2 {
			cancel()
		}
		return nil
	})
	recs := vectors(10_000, 2)
	recs[9000] = nil                                // invalid, but never looked at
	recs[9500] = &pinecone.Vector{Id: recs[100].Id} // a duplicate of an early record, never looked at
	res, err := All(ctx, recs, testOpts(fi, WithBatchSize(10), WithConcurrency(1))...)
	require.ErrorIs(t, err, ErrCanceled)
	require.Len(t, res.Failed, len(recs)-res.Upserted-res.Duplicates)
	assert.True(t, slices.IsSortedFunc(res.Failed, func(a, b Failure) int { return a.Index - b.Index }), "in input order")
	for i, f := range res.Failed {
		require.Equal(t, ClassCanceled, f.Class, "failure %d (record %d)", i, f.Index)
		if f.Index >= 9000 {
			assert.Equal(t, recs[f.Index], f.Record)
		}
	}
	assert.Equal(t, len(res.Failed), res.Stats.Failed)
}

func TestAllValidatesRecordsAndSendsTheValidOnes(t *testing.T) {
	fi := newFakeIndex(nil)
	recs := vectors(6, 3)
	recs[1] = nil
	recs[2].Id = ""
	withMetadata(recs[4], map[string]any{"nested": map[string]any{"a": 1}})
	res, err := All(context.Background(), recs, testOpts(fi)...)
	require.ErrorIs(t, err, ErrInvalid)
	var re *RunError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 3, re.Failed)
	assert.Equal(t, 3, re.ByClass[ClassInvalid])
	var ue *Error
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, ClassInvalid, ue.Class)
	require.Len(t, res.Failed, 3)
	assert.Contains(t, res.Failed[0].Err.Error(), "record 1")
	assert.Contains(t, res.Failed[0].Err.Error(), "nil")
	assert.Contains(t, res.Failed[1].Err.Error(), "id is empty")
	assert.Contains(t, res.Failed[2].Err.Error(), `"nested" is an object`)
	assert.Equal(t, 3, res.Upserted)
}

func TestAllSendsTheLastOfDuplicateIDs(t *testing.T) {
	fi := newFakeIndex(nil)
	recs := vectors(4, 2)
	dup := vectors(1, 2)[0]
	dup.Id = "v1"
	(*dup.Values)[0] = 42
	recs = append(recs, dup)
	res, err := All(context.Background(), recs, testOpts(fi)...)
	require.NoError(t, err)
	assert.Equal(t, 4, res.Upserted)
	assert.Equal(t, 1, res.Duplicates)
	assert.Equal(t, float32(42), (*fi.Stored()["v1"].Values)[0], "the last one wins")
	total := 0
	for _, c := range fi.Calls() {
		total += len(c)
	}
	assert.Equal(t, 4, total, "the duplicate is sent once")
}

func TestAllSendsTheLastValidOccurrenceOfAnID(t *testing.T) {
	valid := func(id string, v float32) *pinecone.Vector {
		return &pinecone.Vector{Id: id, Values: &[]float32{v, 0}}
	}
	invalid := func(id string) *pinecone.Vector {
		return &pinecone.Vector{Id: id, Values: &[]float32{float32(math.NaN()), 0}}
	}
	tests := []struct {
		name       string
		records    []*pinecone.Vector
		want       map[string]float32 // id -> first value stored
		duplicates int
		invalid    []int
	}{{
		name:       "when the last occurrence is valid, it wins",
		records:    []*pinecone.Vector{valid("a", 1), valid("b", 1), valid("a", 2), valid("a", 3)},
		want:       map[string]float32{"a": 3, "b": 1},
		duplicates: 2,
	}, {
		name:       "when the last occurrence is invalid, the latest valid one before it is sent",
		records:    []*pinecone.Vector{valid("a", 1), valid("a", 2), invalid("a"), valid("b", 1)},
		want:       map[string]float32{"a": 2, "b": 1},
		duplicates: 1,
		invalid:    []int{2},
	}, {
		name:    "when no occurrence is valid, nothing is sent for the id",
		records: []*pinecone.Vector{invalid("a"), valid("b", 1), invalid("a")},
		want:    map[string]float32{"b": 1},
		invalid: []int{0, 2},
	}, {
		name:       "an invalid occurrence between valid ones does not count as a duplicate",
		records:    []*pinecone.Vector{valid("a", 1), invalid("a"), valid("a", 2)},
		want:       map[string]float32{"a": 2},
		duplicates: 1,
		invalid:    []int{1},
	}, {
		name:       "a nil record among repeated ids fails alone",
		records:    []*pinecone.Vector{valid("a", 1), nil, valid("a", 2), nil},
		want:       map[string]float32{"a": 2},
		duplicates: 1,
		invalid:    []int{1, 3},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fi := newFakeIndex(nil)
			res, _ := All(context.Background(), tt.records, testOpts(fi)...)
			stored := fi.Stored()
			got := make(map[string]float32, len(stored))
			for id, v := range stored {
				got[id] = (*v.Values)[0]
			}
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.duplicates, res.Duplicates)
			assert.Equal(t, len(tt.want), res.Upserted)
			var failed []int
			for _, f := range res.Failed {
				assert.Equal(t, ClassInvalid, f.Class)
				failed = append(failed, f.Index)
			}
			assert.ElementsMatch(t, tt.invalid, failed)
			sent := 0
			for _, c := range fi.Calls() {
				sent += len(c)
			}
			assert.Equal(t, len(tt.want), sent, "each id is sent once")
		})
	}
}

func TestAllUsesTheCustomClassifier(t *testing.T) {
	errQuota := errors.New("quota")
	fi := newFakeIndex(func(int, []string) error { return errQuota })
	classify := func(err error) Class {
		if errors.Is(err, errQuota) {
			return ClassInvalid
		}
		return Classify(err)
	}
	res, err := All(context.Background(), vectors(1, 2), testOpts(fi, WithClassifier(classify))...)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, err, errQuota, "the cause stays in the chain")
	assert.Equal(t, 1, res.Failed[0].Attempts, "an invalid record is not retried")
}

// A nil record fails as invalid before anything else looks at it: the
// caller's namespace function is never called with nil.
func TestANamespaceFunctionNeverSeesANilRecord(t *testing.T) {
	recs := vectors(3, 2)
	recs[1] = nil
	nsOf := func(v *pinecone.Vector) string { return "ns-" + v.Id[:1] }
	for name, run := range map[string]func() (Result, error){
		"All": func() (Result, error) {
			return All(context.Background(), recs, testOpts(newFakeIndex(nil), WithNamespaceOf(nsOf))...)
		},
		"Stream": func() (Result, error) {
			return Stream(context.Background(), slices.Values(recs), testOpts(newFakeIndex(nil), WithNamespaceOf(nsOf))...)
		},
	} {
		t.Run(name, func(t *testing.T) {
			res, err := run()
			require.ErrorIs(t, err, ErrInvalid)
			require.Len(t, res.Failed, 1)
			assert.Equal(t, 1, res.Failed[0].Index)
			assert.Equal(t, 2, res.Upserted)
		})
	}
}

// A refused batch's backoff spreads load: once the producer is done and
// every other batch left has landed, nothing is left to spread, and the
// batch goes out at once. A run whose last answer was a refusal waits its
// backoff out. Virtual time moves only when the test moves it.
func TestAllSendsARestingBatchOnceNothingElseIsLeft(t *testing.T) {
	refused := status.Error(codes.ResourceExhausted, "slow down")
	t.Run("the others landed: the refused batch goes at once", func(t *testing.T) {
		fi := newFakeIndex(func(call int, _ []string) error {
			if call == 0 {
				return refused // three batches land after it
			}
			return nil
		})
		clk := newGateClock()
		res, err := runOnGate(t, clk, func() (Result, error) {
			return All(context.Background(), vectors(40, 2), WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand),
				WithBatchSize(10), WithConcurrency(1))
		})
		require.NoError(t, err)
		assert.Equal(t, 40, res.Upserted)
		assert.Len(t, fi.Calls(), 5)
		assert.Zero(t, clk.Moved(), "no backoff was waited out")
	})
	t.Run("nothing landed since the refusal: its backoff is waited out", func(t *testing.T) {
		fi := newFakeIndex(func(call int, _ []string) error {
			if call == 0 {
				return refused
			}
			return nil
		})
		clk := newGateClock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			res, err := All(context.Background(), vectors(10, 2), WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand))
			assert.NoError(t, err)
			assert.Equal(t, 10, res.Upserted)
		}()
		require.Eventually(t, func() bool { return clk.Sleepers() == 1 }, 10*time.Second, time.Millisecond)
		time.Sleep(5 * time.Millisecond) // room for a wrong wake
		assert.Len(t, fi.Calls(), 1, "not sent again before its backoff ended")
		clk.Advance(500 * time.Millisecond) // a 429's first backoff at maxRand
		<-done
		assert.Len(t, fi.Calls(), 2)
	})
}

// runOnGate runs f and returns what it did; if f has not returned after
// ten seconds, it moves clk an hour on, once, so that a run waiting for it
// ends, and the test fails on what it asserts of clk.
func runOnGate(t *testing.T, clk *gateClock, f func() (Result, error)) (Result, error) {
	t.Helper()
	type out struct {
		res Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := f()
		done <- out{res, err}
	}()
	select {
	case o := <-done:
		return o.res, o.err
	case <-time.After(10 * time.Second):
		clk.Advance(time.Hour)
		o := <-done
		return o.res, o.err
	}
}

// A failure names its record's namespace, so that a dead letter of a run
// over many namespaces can be replayed into the right one, and says
// whether a resumed run sends it again (Resend): an invalid record is
// failed for good, one the run stopped before sending is not.
func TestFailuresNameTheirNamespaceAndWhetherTheyAreResent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent atomic.Int64
	send := func(_ context.Context, _ string, b []*pinecone.Vector) error {
		if sent.Add(1) == 1 {
			cancel() // the run stops after its first request
		}
		return nil
	}
	recs := vectors(300, 2)
	zero := []float32{0, 0}
	recs[0].Values = &zero // all-zero: invalid
	nsOf := WithNamespaceOf(func(v *pinecone.Vector) string { return "ns-" + v.Id[len(v.Id)-1:] })
	res, err := All(ctx, recs, WithUpsertFunc(send), nsOf, WithBatchSize(10), WithConcurrency(1),
		withClock(newFakeClock()), withRand(maxRand))
	require.ErrorIs(t, err, ErrCanceled)
	require.NotEmpty(t, res.Failed)
	var invalid, stopped int
	for _, f := range res.Failed {
		switch f.Class {
		case ClassInvalid:
			invalid++
			assert.Equal(t, "ns-"+f.ID[len(f.ID)-1:], f.Namespace)
			assert.False(t, f.Resend, "a rule broken: for good")
		case ClassCanceled:
			stopped++
			assert.True(t, f.Resend, "stopped: a resumed run sends it")
			if f.Namespace != "" { // "" only for records the run never looked at
				assert.Equal(t, "ns-"+f.ID[len(f.ID)-1:], f.Namespace)
			}
		}
	}
	assert.Equal(t, 1, invalid)
	assert.NotZero(t, stopped)

}

// An error that already is an *Error with a class keeps it, whatever a
// custom classifier would say: the classifier is for errors the library
// does not know.
func TestACustomClassifierIsNotAskedAboutAnErrorThatHasItsClass(t *testing.T) {
	fi := newFakeIndex(func(int, []string) error { return &Error{Class: ClassInvalid, Err: errors.New("refused")} })
	var asked atomic.Int64
	classify := func(error) Class { asked.Add(1); return ClassServer }
	res, err := All(context.Background(), vectors(1, 2), testOpts(fi, WithClassifier(classify))...)
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, 1, res.Failed[0].Attempts, "invalid: not retried as a server error")
	assert.Zero(t, asked.Load())
}
