package upsert

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/upsertlib/upsert/upserttest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// counting yields recs and counts how many were pulled.
func counting(recs []*pinecone.Vector, pulled *atomic.Int64) iter.Seq[*pinecone.Vector] {
	return func(yield func(*pinecone.Vector) bool) {
		for _, v := range recs {
			pulled.Add(1)
			if !yield(v) {
				return
			}
		}
	}
}

func TestStreamUpsertsEveryRecord(t *testing.T) {
	fi := newFakeIndex(nil)
	recs := vectors(2500, 4)
	res, err := Stream(context.Background(), slices.Values(recs), testOpts(fi)...)
	require.NoError(t, err)
	assert.Equal(t, 2500, res.Upserted)
	assert.Equal(t, 2500, res.Stats.Records)
	requireAccounted(t, recs, res, fi.Stored())
}

func TestStreamKeepsTheLastOfDuplicateIDs(t *testing.T) {
	t.Run("a duplicate waiting in the same batch replaces the earlier record", func(t *testing.T) {
		fi := newFakeIndex(nil)
		recs := vectors(5, 2)
		dup := vectors(1, 2)[0]
		dup.Id = "v1"
		(*dup.Values)[0] = 42
		recs = append(recs, dup)
		res, err := Stream(context.Background(), slices.Values(recs), testOpts(fi)...)
		require.NoError(t, err)
		assert.Equal(t, 1, res.Duplicates)
		assert.Equal(t, 5, res.Upserted)
		assert.Equal(t, float32(42), (*fi.Stored()["v1"].Values)[0])
	})
	t.Run("a duplicate of a record in flight waits for it, and lands after it", func(t *testing.T) {
		release := make(chan struct{})
		started := make(chan struct{})
		var order []float32
		var mu sync.Mutex
		send := func(ctx context.Context, _ string, batch []*pinecone.Vector) error {
			if batch[0].Id == "v0" && (*batch[0].Values)[0] == 0 {
				close(started)
				<-release // the first v0 is slow
			}
			mu.Lock()
			defer mu.Unlock()
			for _, v := range batch {
				if v.Id == "v0" {
					order = append(order, (*v.Values)[0])
				}
			}
			return nil
		}
		first := vectors(1, 2)[0]
		second := vectors(1, 2)[0]
		(*second.Values)[0] = 7
		seq := func(yield func(*pinecone.Vector) bool) {
			if !yield(first) {
				return
			}
			<-started // the first one is in flight
			time.AfterFunc(20*time.Millisecond, func() { close(release) })
			yield(second)
		}
		res, err := Stream(context.Background(), seq, WithUpsertFunc(send), WithMaxDelay(time.Millisecond))
		require.NoError(t, err)
		assert.Equal(t, 2, res.Upserted)
		assert.Equal(t, []float32{0, 7}, order, "the later record is sent after the earlier one settled")
	})
}

func TestStreamBoundsMemoryWhileTheIndexStalls(t *testing.T) {
	release := make(chan struct{})
	var stalled atomic.Int64
	send := func(ctx context.Context, _ string, batch []*pinecone.Vector) error {
		stalled.Add(1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	recs := vectors(5000, 2)
	var pulled atomic.Int64
	done := make(chan Result)
	go func() {
		res, _ := Stream(context.Background(), counting(recs, &pulled), WithUpsertFunc(send),
			WithBatchSize(100), WithConcurrency(4))
		done <- res
	}()
	require.Eventually(t, func() bool { return stalled.Load() == 4 }, 5*time.Second, time.Millisecond)
	// The producer fills the queue after the fourth request stalls; wait
	// until it has stopped pulling, then check how much it holds.
	var held int64
	require.Eventually(t, func() bool {
		before := pulled.Load()
		time.Sleep(5 * time.Millisecond)
		held = pulled.Load()
		return held == before
	}, 5*time.Second, time.Millisecond, "a stalled index stops the producer")
	assert.LessOrEqual(t, held, int64((2*4+2)*100+2*100), "records held are bounded by the batches in flight")
	close(release)
	res := <-done
	assert.Equal(t, 5000, res.Upserted)
}

func TestWriter(t *testing.T) {
	ctx := context.Background()
	t.Run("records added from many goroutines all land, and Flush waits for them", func(t *testing.T) {
		fi := newFakeIndex(nil)
		w, err := NewWriter(ctx, WithUpsertFunc(fi.Upsert))
		require.NoError(t, err)
		recs := vectors(3000, 2)
		var wg sync.WaitGroup
		for g := range 3 {
			wg.Go(func() {
				for _, v := range recs[g*1000 : (g+1)*1000] {
					assert.NoError(t, w.Add(ctx, v))
				}
			})
		}
		wg.Wait()
		require.NoError(t, w.Flush(ctx))
		assert.Len(t, fi.Stored(), 3000, "Flush returns once every record added has landed")
		res, err := w.Close(ctx)
		require.NoError(t, err)
		assert.Equal(t, 3000, res.Upserted)
	})
	t.Run("a lone record is sent within the max delay without a Flush", func(t *testing.T) {
		fi := newFakeIndex(nil)
		w, err := NewWriter(ctx, WithUpsertFunc(fi.Upsert), WithMaxDelay(10*time.Millisecond))
		require.NoError(t, err)
		require.NoError(t, w.Add(ctx, vectors(1, 2)[0]))
		require.Eventually(t, func() bool { return len(fi.Stored()) == 1 }, time.Second, time.Millisecond)
		_, err = w.Close(ctx)
		require.NoError(t, err)
	})
	t.Run("Close twice is safe and Add after Close is an error", func(t *testing.T) {
		fi := newFakeIndex(nil)
		w, err := NewWriter(ctx, WithUpsertFunc(fi.Upsert))
		require.NoError(t, err)
		require.NoError(t, w.Add(ctx, vectors(1, 2)[0]))
		res1, err1 := w.Close(ctx)
		res2, err2 := w.Close(ctx)
		assert.Equal(t, res1, res2)
		assert.Equal(t, err1, err2)
		assert.ErrorIs(t, w.Add(ctx, vectors(1, 2)[0]), ErrClosed)
		assert.ErrorIs(t, w.Flush(ctx), ErrClosed)
	})
	t.Run("failures reach the observer as they happen", func(t *testing.T) {
		fi := newFakeIndex(func(_ int, ids []string) error {
			return status.Error(codes.InvalidArgument, "bad")
		})
		var mu sync.Mutex
		var seen []string
		obs := Observer{Failure: func(f Failure) {
			mu.Lock()
			seen = append(seen, f.ID)
			mu.Unlock()
		}}
		w, err := NewWriter(ctx, WithUpsertFunc(fi.Upsert), WithObserver(obs))
		require.NoError(t, err)
		require.NoError(t, w.Add(ctx, vectors(1, 2)[0]))
		require.NoError(t, w.Flush(ctx))
		mu.Lock()
		assert.Equal(t, []string{"v0"}, seen, "before Close")
		mu.Unlock()
		res, err := w.Close(ctx)
		require.ErrorIs(t, err, ErrInvalid)
		assert.Len(t, res.Failed, 1)
	})
	t.Run("Add returns the context's error when the index cannot take more", func(t *testing.T) {
		block := make(chan struct{})
		send := func(ctx context.Context, _ string, batch []*pinecone.Vector) error {
			select {
			case <-block:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		w, err := NewWriter(ctx, WithUpsertFunc(send), WithBatchSize(1), WithConcurrency(1))
		require.NoError(t, err)
		actx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		var addErr error
		for _, v := range vectors(100, 2) {
			if addErr = w.Add(actx, v); addErr != nil {
				break
			}
		}
		assert.ErrorIs(t, addErr, context.DeadlineExceeded)
		close(block)
		res, err := w.Close(ctx)
		require.NoError(t, err)
		assert.Positive(t, res.Upserted, "what was taken in still lands")
	})
}

func TestStreamResumesFromItsCheckpoint(t *testing.T) {
	recs := vectors(20_000, 2)
	sends := make(map[string]int)
	var mu sync.Mutex
	var requests atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	send := func(ctx context.Context, _ string, batch []*pinecone.Vector) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, v := range batch {
			sends[v.Id]++
		}
		// The first run is interrupted midway, once the first batch has
		// landed (the scheduler may run the batches in any order).
		if requests.Add(1) >= 60 && sends["v0"] > 0 {
			cancel()
		}
		return nil
	}
	cp := FileCheckpoint(filepath.Join(t.TempDir(), "checkpoint"))
	opts := []Option{WithUpsertFunc(send), WithBatchSize(100), WithCheckpoint(cp)}

	first, err := Stream(ctx, slices.Values(recs), opts...)
	require.ErrorIs(t, err, ErrCanceled)
	mark, err := cp.Load(context.Background())
	require.NoError(t, err)
	assert.Positive(t, mark, "the first run saved how far it got (upserted %d, failed %d, first failed %d)", first.Upserted, len(first.Failed), first.Failed[0].Index)
	assert.LessOrEqual(t, int(mark), first.Upserted)

	second, err := Stream(context.Background(), slices.Values(recs), opts...)
	require.NoError(t, err)
	assert.Equal(t, int(mark), second.Stats.Skipped, "the second run skips what the first settled")
	assert.Equal(t, len(recs), int(mark)+second.Upserted)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, len(recs), len(sends), "every record landed")
	extra := 0
	for _, n := range sends {
		assert.LessOrEqual(t, n, 2, "a record is sent again at most once")
		extra += n - 1
	}
	assert.Equal(t, first.Upserted-int(mark), extra, "only records past the watermark are sent twice")
	final, err := cp.Load(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int64(len(recs)), final)
}

func TestWatermarkAdvancesOverSettledPositions(t *testing.T) {
	w := &watermark{base: 10}
	for _, p := range []int{11, 12, 75, 9} {
		w.done([]item{{seq: p}})
	}
	assert.Equal(t, 10, w.value(), "position 10 has not settled")
	w.done([]item{{seq: 10}})
	assert.Equal(t, 13, w.value())
	for p := 13; p < 75; p++ {
		w.done([]item{{seq: p}})
	}
	assert.Equal(t, 76, w.value())
	assert.LessOrEqual(t, len(w.bits), 1, "settled words are dropped")
}

func TestFileCheckpoint(t *testing.T) {
	ctx := context.Background()
	cp := FileCheckpoint(filepath.Join(t.TempDir(), "cp"))
	n, err := cp.Load(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "a missing file is a fresh start")
	require.NoError(t, cp.Save(ctx, 12345))
	n, err = cp.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(12345), n)
}

func TestNamespacesHaveTheirOwnBatchesAndLimiter(t *testing.T) {
	var mu sync.Mutex
	perNS := make(map[string]int)
	refused := 0
	send := func(ctx context.Context, ns string, batch []*pinecone.Vector) error {
		mu.Lock()
		defer mu.Unlock()
		for _, v := range batch {
			if want := nsOf(v); want != ns {
				return fmt.Errorf("record %s sent to %s, want %s", v.Id, ns, want)
			}
		}
		if ns == "tenant-a" && refused < 3 {
			// Its first three requests refused: a single 429 among the
			// first answers may be the index's usual share, and two may
			// be answered apart (an acceptance between, when the requests
			// in flight come back out of order); three among the first
			// answers start an episode in any order.
			refused++
			return status.Error(codes.ResourceExhausted, "slow down")
		}
		perNS[ns] += len(batch)
		return nil
	}
	lim := &Limiter{clock: newFakeClock()}
	recs := vectors(1000, 2)
	res, err := All(context.Background(), recs, WithUpsertFunc(send), WithNamespaceOf(nsOf),
		WithLimiter(lim), withClock(newFakeClock()))
	require.NoError(t, err)
	assert.Equal(t, 1000, res.Upserted)
	assert.Less(t, lim.State("tenant-a").Rate, 1e18, "a 429 in one namespace caps its rate")
	assert.Greater(t, lim.State("tenant-b").Rate, 1e18, "and not the other's")
}

func nsOf(v *pinecone.Vector) string {
	var n int
	_, _ = fmt.Sscanf(v.Id, "v%d", &n)
	return []string{"tenant-a", "tenant-b"}[n%2]
}

func TestRecords(t *testing.T) {
	ctx := context.Background()
	mk := func(n int) []*pinecone.IntegratedRecord {
		out := make([]*pinecone.IntegratedRecord, n)
		for i := range out {
			out[i] = &pinecone.IntegratedRecord{"_id": fmt.Sprintf("r%d", i), "chunk_text": fmt.Sprint("text ", i)}
		}
		return out
	}
	t.Run("records go in batches of at most 96 and all land", func(t *testing.T) {
		var mu sync.Mutex
		stored := make(map[string]bool)
		largest := 0
		send := func(ctx context.Context, _ string, batch []*pinecone.IntegratedRecord) error {
			mu.Lock()
			defer mu.Unlock()
			largest = max(largest, len(batch))
			for _, r := range batch {
				stored[(*r)["_id"].(string)] = true
			}
			return nil
		}
		res, err := Records(ctx, slices.Values(mk(1000)), WithRecordsFunc(send))
		require.NoError(t, err)
		assert.Equal(t, 1000, res.Upserted)
		assert.Len(t, stored, 1000)
		assert.LessOrEqual(t, largest, MaxRecordsBatchSize)
	})
	t.Run("a record without an id fails alone", func(t *testing.T) {
		recs := mk(3)
		delete(*recs[1], "_id")
		res, err := Records(ctx, slices.Values(recs), WithRecordsFunc(func(context.Context, string, []*pinecone.IntegratedRecord) error { return nil }))
		require.ErrorIs(t, err, ErrInvalid)
		require.Len(t, res.Failed, 1)
		assert.Equal(t, recs[1], res.Failed[0].Integrated, "a copy of the record as given")
		assert.Contains(t, res.Failed[0].Err.Error(), `"_id"`)
		assert.Equal(t, 2, res.Upserted)
	})
	t.Run("a record with a string that is not UTF-8 fails alone instead of landing altered", func(t *testing.T) {
		// encoding/json would replace the bad bytes with U+FFFD: the text
		// embedded would not be the text given.
		recs := mk(3)
		(*recs[1])["chunk_text"] = "caf\xe9"
		(*recs[2])["chunk_text"] = "a real \ufffd is fine"
		var sent []string
		res, err := Records(ctx, slices.Values(recs), WithRecordsFunc(func(_ context.Context, _ string, b []*pinecone.IntegratedRecord) error {
			for _, r := range b {
				sent = append(sent, (*r)["_id"].(string))
			}
			return nil
		}))
		require.ErrorIs(t, err, ErrInvalid)
		require.Len(t, res.Failed, 1)
		assert.Equal(t, "r1", res.Failed[0].ID)
		assert.Contains(t, res.Failed[0].Err.Error(), `field "chunk_text" is not valid UTF-8`)
		assert.ElementsMatch(t, []string{"r0", "r2"}, sent)
	})
	t.Run("a function for the other kind is a bad option", func(t *testing.T) {
		_, err := Records(ctx, slices.Values(mk(1)), WithUpsertFunc(newFakeIndex(nil).Upsert))
		assert.ErrorIs(t, err, ErrBadOption)
		_, err = All(ctx, vectors(1, 2), WithRecordsFunc(func(context.Context, string, []*pinecone.IntegratedRecord) error { return nil }))
		assert.ErrorIs(t, err, ErrBadOption)
	})
	t.Run("a nil sequence is a bad option, not a panic", func(t *testing.T) {
		_, err := Records(ctx, nil, WithRecordsFunc(func(context.Context, string, []*pinecone.IntegratedRecord) error { return nil }))
		assert.ErrorIs(t, err, ErrBadOption)
		_, err = Stream(ctx, nil, WithUpsertFunc(newFakeIndex(nil).Upsert))
		assert.ErrorIs(t, err, ErrBadOption)
	})
}

// A stream replaces a record still waiting in its batch by a later one of
// the same id (replacePending), and adds the size difference to the
// batch's bytes without checking the cap: a batch filled close to 2 MB
// goes over it when the later record is larger, and the request is over
// Pinecone's (and gRPC's) limit.
func TestAReplacedRecordNeverPushesItsBatchOverTheRequestSize(t *testing.T) {
	const dim = 5000 // about 20 KB a record: 99 fill a request
	mk := func(id string) *pinecone.Vector {
		vals := make([]float32, dim)
		for j := range vals {
			vals[j] = float32(j+1) / 7
		}
		return &pinecone.Vector{Id: id, Values: &vals}
	}
	recs := []*pinecone.Vector{mk("dup")}
	for i := range 98 {
		recs = append(recs, mk(fmt.Sprint("r", i)))
	}
	// The same id again, 30 KB larger: it replaces the first, in place.
	recs = append(recs, withMetadata(mk("dup"), map[string]any{"body": strings.Repeat("x", 30_000)}))
	recs = append(recs, mk("after"))

	var mu sync.Mutex
	var sizes []int
	send := func(_ context.Context, _ string, b []*pinecone.Vector) error {
		n := encodedRequestSize(t, b, defaultNamespace) // what go-pinecone v5 sends for ""
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, n)
		return nil
	}
	res, err := Stream(context.Background(), slices.Values(recs),
		WithUpsertFunc(send), WithBatchSize(MaxBatchSize), withClock(newFakeClock()), withRand(maxRand))
	require.NoError(t, err)
	assert.Equal(t, 100, res.Upserted)
	for _, n := range sizes {
		assert.LessOrEqual(t, n, MaxRequestBytes, "no request is over 2 MB; sent %v", sizes)
	}
}

// A record a Stream pulled but could not take, because the run stopped,
// names the run's one namespace, as All's untaken records do: its dead
// letter replays into the right namespace.
func TestARecordAStreamPulledButCouldNotTakeNamesTheRunsNamespace(t *testing.T) {
	srv := upserttest.NewServer()
	defer srv.Close()
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test-key"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"})
	require.NoError(t, err)
	defer idx.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	recs := vectors(4, 2)
	seq := func(yield func(*pinecone.Vector) bool) {
		for i, v := range recs {
			if i == 2 {
				cancel() // the caller stops: the record pulled next cannot be taken
			}
			if !yield(v) {
				return
			}
		}
	}

	res, err := Stream(ctx, seq, WithIndex(idx), WithMaxDelay(time.Hour))

	require.ErrorIs(t, err, ErrCanceled)
	require.NotEmpty(t, res.Failed)
	for _, f := range res.Failed {
		assert.Equal(t, "docs", f.Namespace, "record %d (%s), %v", f.Index, f.ID, f.Err)
	}
}

// A record a stream pulled but could not take in, the run having stopped,
// fails in the namespace its record is routed to, as the records taken in
// do: a caller resending failures by namespace sends it to the right one.
func TestARecordPulledAfterTheRunStoppedFailsInItsNamespace(t *testing.T) {
	denied := &Error{Class: ClassDenied, StatusCode: 401, Err: errors.New("Unauthorized")}
	check := func(t *testing.T, res Result, err error) {
		require.ErrorIs(t, err, ErrDenied)
		require.NotEmpty(t, res.Failed)
		for _, f := range res.Failed {
			assert.Equal(t, "tenant-a", f.Namespace, "failure of %s (resend %v): %v", f.ID, f.Resend, f.Err)
		}
	}
	t.Run("Records", func(t *testing.T) {
		res, err := Records(context.Background(), slices.Values(textRecordsOf(5000)),
			WithRecordsFunc(func(context.Context, string, []*pinecone.IntegratedRecord) error { return denied }),
			WithBatchSize(1), WithConcurrency(1),
			WithNamespaceOf(func(*pinecone.IntegratedRecord) string { return "tenant-a" }),
			withClock(newFakeClock()), withRand(maxRand))
		check(t, res, err)
	})
	t.Run("Stream", func(t *testing.T) {
		vs := make([]*pinecone.Vector, 5000)
		for i := range vs {
			vs[i] = &pinecone.Vector{Id: fmt.Sprint("v", i), Values: &[]float32{1, 2}}
		}
		res, err := Stream(context.Background(), slices.Values(vs),
			WithUpsertFunc(func(context.Context, string, []*pinecone.Vector) error { return denied }),
			WithBatchSize(1), WithConcurrency(1),
			WithNamespaceOf(func(*pinecone.Vector) string { return "tenant-a" }),
			withClock(newFakeClock()), withRand(maxRand))
		check(t, res, err)
	})
}

// An iterator that watches ctx stops when it ends: the records it pulled
// landed, but the input may not be whole, so the call says it was
// canceled rather than done. An input that ends of itself, ctx alive, is
// done.
func TestAStreamWhoseInputStopsForTheCancelSaysCanceled(t *testing.T) {
	for _, tt := range []struct {
		name     string
		cancelAt int // records yielded before the cancel; -1: never
		wantErr  error
	}{
		{"the input stops for the cancel", 30, ErrCanceled},
		{"the input ends, ctx alive", -1, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			fi := newFakeIndex(nil)
			seq := func(yield func(*pinecone.Vector) bool) {
				for i, v := range vectors(100, 2) {
					if i == tt.cancelAt {
						// Every record pulled landed: nothing fails for the cancel.
						require.Eventually(t, func() bool { return len(fi.Stored()) == i }, 5*time.Second, time.Millisecond)
						cancel()
					}
					if ctx.Err() != nil || !yield(v) {
						return
					}
				}
			}
			res, err := Stream(ctx, seq, testOpts(fi, WithBatchSize(10))...)
			if tt.wantErr == nil {
				require.NoError(t, err)
				assert.Equal(t, 100, res.Upserted)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			assert.Equal(t, tt.cancelAt, res.Upserted, "every record pulled landed")
		})
	}
	t.Run("records pulled that did not land: their *RunError alone", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		fi := newFakeIndex(nil)
		seq := func(yield func(*pinecone.Vector) bool) {
			for i, v := range vectors(100, 2) {
				if i == 35 { // 30 landed, 5 wait in a partial batch
					require.Eventually(t, func() bool { return len(fi.Stored()) == 30 }, 5*time.Second, time.Millisecond)
					cancel()
				}
				if ctx.Err() != nil || !yield(v) {
					return
				}
			}
		}
		res, err := Stream(ctx, seq, testOpts(fi, WithBatchSize(10), WithMaxDelay(time.Hour))...)
		require.ErrorIs(t, err, ErrCanceled)
		assert.Len(t, res.Failed, 5)
		re, ok := err.(*RunError)
		require.True(t, ok, "the error is a %T, not the *RunError of the 5 records that did not land: %v", err, err)
		assert.Equal(t, 5, re.Failed)
	})
}
