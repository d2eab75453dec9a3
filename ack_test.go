package upsert

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"path/filepath"
	"runtime"
	"slices"
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

// ackLog is an acknowledgement function that checks, as acks come, that
// they are in input order from base, and keeps them.
type ackLog struct {
	base  int
	check func(Ack) error // called in the acknowledgement function; nil: none

	mu       sync.Mutex
	acks     []Ack
	calls    int
	problems []string
}

func (l *ackLog) f(acks []Ack) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if len(acks) == 0 {
		l.problems = append(l.problems, "an empty call")
	}
	for _, a := range acks {
		if want := l.base + len(l.acks); a.Position != want {
			l.problems = append(l.problems, fmt.Sprintf("ack of position %d where %d was due", a.Position, want))
		}
		if l.check != nil {
			if err := l.check(a); err != nil {
				l.problems = append(l.problems, fmt.Sprintf("position %d: %v", a.Position, err))
			}
		}
		l.acks = append(l.acks, a)
	}
}

func (l *ackLog) all() []Ack {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acks)
}

func (l *ackLog) requireClean(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.problems)
}

// requireAcksMatch checks acks against the run's result: one ack per
// record taken, a failure's ack carrying the very failure of Result.Failed
// (which keeps only the first failuresKept: the acks carry them all), as
// many landed as upserted.
func requireAcksMatch(t *testing.T, acks []Ack, res Result, base int) {
	t.Helper()
	require.Len(t, acks, res.Stats.Records, "one ack per record taken")
	require.Contains(t, []int{res.Stats.Failed, failuresKept}, len(res.Failed), "the failures a run with acks keeps")
	failed := make(map[int]Failure, len(res.Failed))
	for _, f := range res.Failed {
		failed[f.Index] = f
	}
	landed, replaced, failures := 0, 0, 0
	for i, a := range acks {
		require.Equal(t, base+i, a.Position)
		switch {
		case a.Failure != nil:
			failures++
			f := *a.Failure
			assert.Equal(t, a.Position, f.Index)
			assert.Equal(t, !modelFailedForGood(f), a.Resend, "position %d (%v, %d attempts)", a.Position, f.Class, f.Attempts)
			assert.Equal(t, a.Resend, f.Resend, "the failure says what its ack says")
			kept, ok := failed[a.Position]
			if !ok {
				require.Greater(t, res.Stats.Failed, failuresKept, "position %d acked failed, not in Result.Failed", a.Position)
				continue
			}
			assert.Equal(t, kept.Class, f.Class)
			assert.Equal(t, kept.Err, f.Err)
			assert.Equal(t, kept.MayHaveLanded, f.MayHaveLanded)
			delete(failed, a.Position)
		case a.Replaced:
			replaced++
		default:
			landed++
			assert.False(t, a.Resend)
		}
	}
	assert.Empty(t, failed, "every failure is acked")
	assert.Equal(t, res.Stats.Failed, failures, "every failure is acked")
	assert.Equal(t, res.Upserted, landed)
	assert.Equal(t, res.Duplicates, replaced)
}

// ackedResult returns res with Failed holding every failure, as the acks
// carried them, once checked against res (requireAcksMatch): a run with
// acks keeps only the first failuresKept.
func ackedResult(t *testing.T, res Result, log *ackLog) Result {
	t.Helper()
	acks := log.all()
	requireAcksMatch(t, acks, res, 0)
	res.Failed = nil
	for _, a := range acks {
		if a.Failure != nil {
			res.Failed = append(res.Failed, *a.Failure)
		}
	}
	return res
}

// faultyIndex is a fakeIndex that fails requests at random, as seed
// decides: rate limits and server errors (retried), timeouts (split), and
// a record that is always refused as invalid (bisected down to it).
func faultyIndex(seed maphash.Seed, pct int, poison string) *fakeIndex {
	return newFakeIndex(func(call int, ids []string) error {
		if slices.Contains(ids, poison) {
			return status.Error(codes.InvalidArgument, "Invalid request")
		}
		h := maphash.Comparable(seed, call)
		if int(h%100) >= pct {
			return nil
		}
		switch h / 100 % 3 {
		case 0:
			return status.Error(codes.ResourceExhausted, "slow down")
		case 1:
			return status.Error(codes.Unavailable, "down")
		default:
			return context.DeadlineExceeded
		}
	})
}

// The acks come in input order, each record's once, whatever the index
// does: retries, splits, bisected invalid records, records that fail
// before sending, retries that run out, across namespaces; a landed ack
// only once the index holds the record, a failed one carrying the failure
// that the observers already saw.
func TestAcksComeInInputOrderUnderFailures(t *testing.T) {
	for seed := range 12 {
		for _, entry := range []string{"Writer", "Stream"} {
			t.Run(fmt.Sprint(entry, seed), func(t *testing.T) {
				fi := faultyIndex(maphash.MakeSeed(), 40, "v17")
				recs := vectors(300, 2)
				recs[5] = nil                       // fails before sending
				recs[9] = &pinecone.Vector{Id: "x"} // no values: invalid
				var seen sync.Map                   // positions the observers saw fail
				log := &ackLog{check: func(a Ack) error {
					if a.Failure != nil {
						if _, ok := seen.Load(a.Position); !ok {
							return errors.New("acked failed before the observers saw the failure")
						}
						return nil
					}
					if _, ok := fi.Stored()[a.ID]; !ok && a.Landed() {
						return errors.New("acked landed, and the index does not hold it")
					}
					return nil
				}}
				opts := testOpts(fi, WithAcks(log.f), WithBatchSize(1+seed*7%40), WithConcurrency(1+seed%4),
					WithMaxRetries(ClassServer, seed%3), WithMaxRetries(ClassTimeout, 1), WithMaxDelay(time.Millisecond),
					WithNamespaceOf(func(v *pinecone.Vector) string { return fmt.Sprint("ns", len(v.Id)%3) }),
					WithObserver(Observer{Failure: func(f Failure) { seen.Store(f.Index, true) }}))
				res := runAcked(t, entry, recs, opts)
				log.requireClean(t)
				requireAcksMatch(t, log.all(), res, 0)
				require.NotEmpty(t, res.Failed)
			})
		}
	}
}

// runAcked writes recs through a Writer (one Add each, tagged with its
// position) or a Stream.
func runAcked(t *testing.T, entry string, recs []*pinecone.Vector, opts []Option) Result {
	t.Helper()
	if entry == "Stream" {
		res, _ := Stream(context.Background(), slices.Values(recs), opts...)
		return res
	}
	w, err := NewWriter(context.Background(), opts...)
	require.NoError(t, err)
	for i, v := range recs {
		require.NoError(t, w.AddTagged(context.Background(), v, i))
	}
	res, _ := w.Close(context.Background())
	return res
}

// With producers adding at the same time, every record taken is acked
// exactly once, and the records of each producer in the order it added
// them.
func TestAcksOfConcurrentAdds(t *testing.T) {
	type tag struct{ g, i int }
	log := &ackLog{}
	fi := faultyIndex(maphash.MakeSeed(), 20, "")
	w, err := NewWriter(context.Background(), testOpts(fi, WithAcks(log.f), WithMaxDelay(time.Millisecond))...)
	require.NoError(t, err)
	const producers, each = 8, 300
	var wg sync.WaitGroup
	for g := range producers {
		wg.Go(func() {
			for i := range each {
				v := &pinecone.Vector{Id: fmt.Sprintf("g%d-%d", g, i), Values: &[]float32{float32(i + 1), 1}}
				assert.NoError(t, w.AddTagged(context.Background(), v, &tag{g, i}))
			}
		})
	}
	wg.Wait()
	res, _ := w.Close(context.Background())
	log.requireClean(t)
	acks := log.all()
	requireAcksMatch(t, acks, res, 0)
	next := make([]int, producers)
	for _, a := range acks {
		tg := a.Tag.(*tag)
		require.Equal(t, next[tg.g], tg.i, "producer %d's records are acked in the order it added them", tg.g)
		require.Equal(t, fmt.Sprintf("g%d-%d", tg.g, tg.i), a.ID)
		next[tg.g]++
	}
	for g := range producers {
		assert.Equal(t, each, next[g], "every record of producer %d acked", g)
	}
}

// Through the real SDK into upserttest with faults (429s, 503s, timeouts
// whose writes land late, partial writes): no record is acked as landed
// before the server holds it.
func TestNoAckOfALandedRecordBeforeTheServerHasIt(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithFaults(upserttest.Chain(
		upserttest.RateLimitBurst(3, 4),
		upserttest.ErrorRate(codes.Unavailable, 0.1, 1),
		upserttest.PartialWrites(0.1, 2),
		upserttest.AmbiguousTimeouts(0.05, 30*time.Millisecond, 3),
	)))
	defer srv.Close()
	idx := indexConn(t, srv.Host(), "a")
	nsOf := func(v *pinecone.Vector) string { return fmt.Sprint("ns", len(v.Id)%3) }
	log := &ackLog{check: func(a Ack) error {
		if !a.Landed() {
			return nil
		}
		if _, ok := srv.Vector(fmt.Sprint("ns", len(a.ID)%3), a.ID); !ok {
			return errors.New("acked landed, and the server does not hold it")
		}
		return nil
	}}
	w, err := NewWriter(context.Background(), WithIndex(idx), WithAcks(log.f), WithNamespaceOf(nsOf),
		WithRequestTimeout(10*time.Millisecond), WithBackoff(time.Millisecond, 5*time.Millisecond), WithMaxDelay(time.Millisecond))
	require.NoError(t, err)
	recs := vectors(2000, 4)
	for i, v := range recs {
		require.NoError(t, w.AddTagged(context.Background(), v, i))
	}
	res, err := w.Close(context.Background())
	log.requireClean(t)
	requireAcksMatch(t, log.all(), res, 0)
	st := srv.Stats()
	assert.NotZero(t, st.Codes[codes.ResourceExhausted])
	assert.NotZero(t, st.Codes[codes.Unavailable])
	if err == nil {
		assert.Equal(t, len(recs), res.Upserted)
	}
}

// When the Writer's context ends mid-run, every record taken is acked,
// those that did not land as failed with ClassCanceled, to be sent again;
// a Stream's too.
func TestACancelMidRunAcksEveryRecord(t *testing.T) {
	// The index confirms the first requests and one in three later ones,
	// and holds the others until their context ends; the 12th request ends
	// the run's context.
	index := func(cancel context.CancelFunc) UpsertFunc {
		var calls atomic.Int64
		return func(ctx context.Context, _ string, batch []*pinecone.Vector) error {
			n := calls.Add(1)
			if n == 12 {
				cancel()
			}
			if n < 10 || n%3 == 0 {
				return nil
			}
			<-ctx.Done()
			return ctx.Err()
		}
	}
	check := func(t *testing.T, log *ackLog, res Result) {
		log.requireClean(t)
		acks := log.all()
		requireAcksMatch(t, acks, res, 0)
		canceled := 0
		for _, a := range acks {
			if a.Failure != nil {
				assert.Equal(t, ClassCanceled, a.Failure.Class)
				assert.True(t, a.Resend, "a canceled record is to be sent again")
				canceled++
			}
		}
		assert.NotZero(t, canceled)
		assert.NotZero(t, res.Upserted)
	}
	opts := func(log *ackLog, send UpsertFunc) []Option {
		return []Option{WithUpsertFunc(send), WithAcks(log.f), WithBatchSize(1), WithConcurrency(4), withClock(newFakeClock())}
	}
	t.Run("Writer", func(t *testing.T) {
		verifyNoLeak(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		log := &ackLog{}
		w, err := NewWriter(ctx, opts(log, index(cancel))...)
		require.NoError(t, err)
		taken := 0
		for i, v := range vectors(200, 2) {
			if w.AddTagged(context.Background(), v, i) == nil {
				taken++
			}
		}
		res, _ := w.Close(context.Background())
		assert.Equal(t, taken, res.Stats.Records)
		check(t, log, res)
	})
	t.Run("Stream", func(t *testing.T) {
		verifyNoLeak(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		log := &ackLog{}
		res, _ := Stream(ctx, slices.Values(vectors(200, 2)), opts(log, index(cancel))...)
		check(t, log, res)
	})
	t.Run("a Writer never closed", func(t *testing.T) {
		verifyNoLeak(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		log := &ackLog{}
		w, err := NewWriter(ctx, opts(log, index(func() {}))...)
		require.NoError(t, err)
		for i, v := range vectors(12, 2) { // 9 land, 3 wait: no Add waits for room
			require.NoError(t, w.AddTagged(context.Background(), v, i))
		}
		cancel()
		require.Eventually(t, func() bool { return len(log.all()) == 12 }, generous, time.Millisecond, "every record is acked without Close")
		log.requireClean(t)
	})
}

// A panic in the acknowledgement function does not kill the process: the
// function is not called again, the run stops, and the caller learns why.
func TestAPanickingAckFunctionStopsTheRun(t *testing.T) {
	boom := func(acks []Ack) {
		var m map[int]int
		//lint:ignore SA5000 a nil map: the bug this test plants (staticcheck reads this line, golangci-lint the nolint)
		m[acks[0].Position]++ //nolint:staticcheck // the same deliberate panic
	}
	requirePanicError := func(t *testing.T, err error) {
		t.Helper()
		var pe *PanicError
		require.ErrorAs(t, err, &pe)
		assert.Contains(t, pe.Error(), "the acknowledgement function panicked")
		assert.Contains(t, pe.Error(), "assignment to entry in nil map")
		assert.NotEmpty(t, pe.Stack)
		assert.ErrorIs(t, err, ErrCanceled)
	}
	t.Run("Writer", func(t *testing.T) {
		verifyNoLeak(t)
		var calls atomic.Int64
		f := func(acks []Ack) { calls.Add(1); boom(acks) }
		w, err := NewWriter(context.Background(), WithUpsertFunc(newFakeIndex(nil).Upsert), WithAcks(f), WithBatchSize(1))
		require.NoError(t, err)
		var addErr error
		for _, v := range vectors(1000, 2) {
			if addErr = w.AddTagged(context.Background(), v, nil); addErr != nil {
				break
			}
		}
		require.Eventually(t, func() bool { return w.in.r.runCtx.Err() != nil }, generous, time.Millisecond, "the run stops")
		if addErr == nil {
			addErr = w.Add(context.Background(), vectors(1, 2)[0])
		}
		requirePanicError(t, addErr)
		_, err = w.Close(context.Background())
		requirePanicError(t, err)
		assert.EqualValues(t, 1, calls.Load(), "the function is not called again")
	})
	t.Run("Stream", func(t *testing.T) {
		verifyNoLeak(t)
		_, err := Stream(context.Background(), generated(100_000, 2), WithUpsertFunc(noopIndex), WithAcks(boom), WithBatchSize(10))
		requirePanicError(t, err)
	})
	t.Run("on the last ack, with nothing else failed", func(t *testing.T) {
		_, err := Stream(context.Background(), slices.Values(vectors(1, 2)), WithUpsertFunc(noopIndex), WithAcks(boom))
		requirePanicError(t, err)
	})
}

// A slow acknowledgement function holds back the producer once the window
// is full, and no further: memory stays bounded.
func TestASlowAckFunctionHoldsTheProducerBackAtTheWindow(t *testing.T) {
	const window = 16
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	log := &ackLog{}
	slow := func(acks []Ack) {
		<-gate
		log.f(acks)
	}
	w, err := NewWriter(context.Background(), WithUpsertFunc(noopIndex), WithAcks(slow), WithAckWindow(window),
		WithBatchSize(4), WithMaxDelay(time.Hour))
	require.NoError(t, err)
	var added atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, v := range vectors(100, 2) {
			if w.AddTagged(context.Background(), v, i) == nil {
				added.Add(1)
			}
		}
	}()
	require.Eventually(t, func() bool { return added.Load() == window && w.in.busy() }, generous, time.Millisecond,
		"the producer takes the window's worth and waits")
	time.Sleep(2 * time.Millisecond)
	assert.EqualValues(t, window, added.Load(), "no more while the function is stuck")
	release()
	<-done
	res, err := w.Close(context.Background())
	require.NoError(t, err)
	log.requireClean(t)
	requireAcksMatch(t, log.all(), res, 0)
	assert.Equal(t, 100, res.Upserted)
}

// A window smaller than a batch does not stall the run: the oldest
// record's batch goes out before it is full.
func TestAWindowSmallerThanABatch(t *testing.T) {
	for _, entry := range []string{"Writer", "Stream"} {
		t.Run(entry, func(t *testing.T) {
			log := &ackLog{}
			opts := []Option{WithUpsertFunc(noopIndex), WithAcks(log.f), WithAckWindow(3), WithBatchSize(100), WithMaxDelay(time.Hour)}
			res := runAcked(t, entry, vectors(1000, 2), opts)
			log.requireClean(t)
			requireAcksMatch(t, log.all(), res, 0)
			assert.Equal(t, 1000, res.Upserted)
		})
	}
}

// A record replaced by a later record of its id is acked as replaced; a
// record that may be overwritten by an earlier one's late request carries
// its Stale.
func TestAcksOfDuplicatesAndStaleRecords(t *testing.T) {
	mk := func(id string, val float32) *pinecone.Vector {
		return &pinecone.Vector{Id: id, Values: &[]float32{val, 1}}
	}
	t.Run("replaced in its batch", func(t *testing.T) {
		fi := newFakeIndex(nil)
		log := &ackLog{}
		recs := []*pinecone.Vector{mk("a", 1), mk("b", 1), mk("a", 2), mk("c", 1)}
		res, err := Stream(context.Background(), slices.Values(recs), testOpts(fi, WithAcks(log.f))...)
		require.NoError(t, err)
		acks := log.all()
		requireAcksMatch(t, acks, res, 0)
		assert.True(t, acks[0].Replaced)
		assert.False(t, acks[0].Landed())
		assert.Equal(t, "a", acks[0].ID)
		assert.True(t, acks[2].Landed())
		assert.Equal(t, float32(2), (*fi.Stored()["a"].Values)[0])
	})
	t.Run("may be stale", func(t *testing.T) {
		idx := &lateIndex{stored: map[string]float32{}, id: "x"}
		log := &ackLog{}
		recs := []*pinecone.Vector{mk("x", 1), mk("y", 1), mk("z", 1), mk("x", 3)}
		res, err := Stream(context.Background(), slices.Values(recs), WithUpsertFunc(idx.Upsert), WithBatchSize(1), WithConcurrency(1),
			withClock(newFakeClock()), withRand(maxRand), WithAcks(log.f))
		require.NoError(t, err)
		acks := log.all()
		requireAcksMatch(t, acks, res, 0)
		require.NotNil(t, acks[3].Stale)
		assert.True(t, acks[3].Landed(), "it landed: the index may keep the earlier one")
		assert.Equal(t, res.MayBeStale[0], *acks[3].Stale)
		for _, a := range acks[:3] {
			assert.Nil(t, a.Stale)
		}
	})
}

// A resumed stream acks from the checkpoint's position on.
func TestAcksOfAResumedStreamStartAtTheCheckpoint(t *testing.T) {
	cp := FileCheckpoint(filepath.Join(t.TempDir(), "cp"))
	require.NoError(t, cp.Save(context.Background(), 40))
	log := &ackLog{base: 40}
	res, err := Stream(context.Background(), slices.Values(vectors(100, 2)), WithUpsertFunc(noopIndex), WithCheckpoint(cp), WithAcks(log.f))
	require.NoError(t, err)
	log.requireClean(t)
	requireAcksMatch(t, log.all(), res, 40)
	assert.Len(t, log.all(), 60)
}

// Flush returns once the acks of the records added before it have been
// delivered.
func TestFlushWaitsForTheAcks(t *testing.T) {
	log := &ackLog{}
	w, err := NewWriter(context.Background(), WithUpsertFunc(noopIndex), WithAcks(log.f), WithMaxDelay(time.Hour))
	require.NoError(t, err)
	for round := 1; round <= 3; round++ {
		for i, v := range vectors(50, 2) {
			v.Id = fmt.Sprint(round, "-", i)
			require.NoError(t, w.Add(context.Background(), v))
		}
		require.NoError(t, w.Flush(context.Background()))
		assert.Len(t, log.all(), 50*round)
	}
	_, err = w.Close(context.Background())
	require.NoError(t, err)
	log.requireClean(t)
}

// Integrated records are acked as vectors are.
func TestRecordsAreAcked(t *testing.T) {
	recs := []*pinecone.IntegratedRecord{{"_id": "a", "text": "x"}, {"id": 3}, {"_id": "b", "text": "y"}}
	send := func(context.Context, string, []*pinecone.IntegratedRecord) error { return nil }
	log := &ackLog{}
	res, err := Records(context.Background(), slices.Values(recs), WithRecordsFunc(send), WithAcks(log.f))
	require.Error(t, err)
	acks := log.all()
	requireAcksMatch(t, acks, res, 0)
	assert.Equal(t, []string{"a", "", "b"}, []string{acks[0].ID, acks[1].ID, acks[2].ID})
	require.NotNil(t, acks[1].Failure)
	assert.Equal(t, ClassInvalid, acks[1].Failure.Class)
}

func TestAckOptions(t *testing.T) {
	f := func([]Ack) {}
	send := WithUpsertFunc(noopIndex)
	_, err := All(context.Background(), vectors(1, 2), send, WithAcks(f))
	assert.ErrorIs(t, err, ErrBadOption, "All's result says what became of each record")
	_, err = NewWriter(context.Background(), send, WithAckWindow(10))
	assert.ErrorIs(t, err, ErrBadOption, "a window without acks")
	_, err = NewWriter(context.Background(), send, WithAcks(f), WithAckWindow(0))
	assert.ErrorIs(t, err, ErrBadOption)
	_, err = NewWriter(context.Background(), send, WithAcks(nil))
	assert.ErrorIs(t, err, ErrBadOption)
	w, err := NewWriter(context.Background(), send)
	require.NoError(t, err)
	require.NoError(t, w.AddTagged(context.Background(), vectors(1, 2)[0], "dropped"), "a tag without acks is dropped")
	res, err := w.Close(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, res.Upserted)
}

// The ring of slots grows past its first size and keeps what it holds.
func TestAckerGrowsItsRing(t *testing.T) {
	var got []int
	a := newAcker(ackOptions{f: func(acks []Ack) {
		for _, x := range acks {
			got = append(got, x.Tag.(int))
		}
	}, window: DefaultAckWindow}, func(*Error) {}, func([]Ack) {})
	const n = 1000
	for p := range n {
		a.take(p, p)
	}
	items := make([]item, n)
	for p := range items {
		items[p] = item{seq: n - 1 - p}
	}
	for _, it := range items { // settled last first: nothing is delivered until position 0
		a.settle([]item{it}, nil, nil, ackLanded, false)
	}
	require.NoError(t, a.wait(context.Background(), nil, nil, n, true))
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	assert.Equal(t, want, got)
}

// BenchmarkAcks measures the cost of acknowledgements: a Writer (one
// producer adding 100,000 records of 128 dimensions, already made) and a
// Stream, into a no-op sink, without acks, with them, and for the Writer
// with a pointer tag per record.
//
//	go test -run '^$' -bench BenchmarkAcks -benchmem -count 5 .
func BenchmarkAcks(b *testing.B) {
	recs := vectors(100_000, 128)
	tags := make([]int, len(recs))
	var acked atomic.Int64
	count := func(acks []Ack) { acked.Add(int64(len(acks))) }
	cases := []struct {
		name   string
		stream bool
		opts   []Option
		tagged bool
	}{
		{name: "Writer"},
		{name: "Writer+acks", opts: []Option{WithAcks(count)}},
		{name: "Writer+acks+tags", opts: []Option{WithAcks(count)}, tagged: true},
		{name: "Stream", stream: true},
		{name: "Stream+acks", stream: true, opts: []Option{WithAcks(count)}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			opts := append([]Option{WithUpsertFunc(noopIndex)}, c.opts...)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			for range b.N {
				acked.Store(0)
				res := benchAcksRun(b, c.stream, c.tagged, recs, tags, opts)
				if res.Upserted != len(recs) || len(c.opts) > 0 && acked.Load() != int64(len(recs)) {
					b.Fatalf("upserted %d, acked %d", res.Upserted, acked.Load())
				}
			}
			elapsed := time.Since(start)
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(b.N*len(recs))/elapsed.Seconds(), "records/s")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N*len(recs)), "allocs/record")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func benchAcksRun(b *testing.B, stream, tagged bool, recs []*pinecone.Vector, tags []int, opts []Option) Result {
	if stream {
		res, err := Stream(context.Background(), slices.Values(recs), opts...)
		if err != nil {
			b.Fatal(err)
		}
		return res
	}
	w, err := NewWriter(context.Background(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	for i, v := range recs {
		var tag any
		if tagged {
			tag = &tags[i]
		}
		if err := w.AddTagged(context.Background(), v, tag); err != nil {
			b.Fatal(err)
		}
	}
	res, err := w.Close(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return res
}

// BenchmarkAcker measures the acknowledgements alone, without the
// pipeline: a record taken with a pointer tag, settled in batches of 100
// (each batch after the next one, so that half the batches wait for an
// earlier one), delivered to a function that counts them.
//
//	go test -run '^$' -bench BenchmarkAcker -benchmem -count 5 .
func BenchmarkAcker(b *testing.B) {
	var acked int
	a := newAcker(ackOptions{f: func(acks []Ack) { acked += len(acks) }, window: DefaultAckWindow}, func(*Error) {}, func([]Ack) {})
	const batch = 100
	items := make([]item, 2*batch)
	tag := new(int)
	b.ReportAllocs()
	b.ResetTimer()
	pos := 0
	for range b.N / (2 * batch) {
		for i := range items {
			a.take(pos+i, tag)
			items[i] = item{seq: pos + i, id: "id"}
		}
		a.settle(items[batch:], nil, nil, ackLanded, false)
		a.settle(items[:batch], nil, nil, ackLanded, false)
		pos += len(items)
		if pos%(16*batch) == 0 {
			_ = a.wait(context.Background(), nil, nil, pos, false) // as the window would
		}
	}
	_ = a.wait(context.Background(), nil, nil, pos, true)
	b.StopTimer()
	if acked != pos {
		b.Fatalf("acked %d of %d", acked, pos)
	}
}

// The acks hand every failure to the caller, so a long-lived Writer given
// WithAcks keeps only the first failuresKept for its result, as with an
// observer's Failure function: its memory does not grow with its failures.
func TestAWriterWithAcksKeepsOnlyTheFirstThousandFailuresForItsResult(t *testing.T) {
	reject := func(context.Context, string, []*pinecone.Vector) error {
		return &Error{Class: ClassInvalid, Err: errors.New("metadata too large")}
	}
	var acked atomic.Int64
	w, err := NewWriter(context.Background(), WithUpsertFunc(reject), withClock(newFakeClock()), withRand(maxRand),
		WithAcks(func(as []Ack) {
			for _, a := range as {
				if a.Failure != nil {
					acked.Add(1)
				}
			}
		}))
	require.NoError(t, err)
	const n = 3000
	for _, v := range vectors(n, 2) {
		require.NoError(t, w.Add(context.Background(), v))
	}
	require.NoError(t, w.Flush(context.Background()))
	require.EqualValues(t, n, acked.Load(), "the caller got every failure in its ack")
	w.in.r.results.mu.Lock()
	held := len(w.in.r.results.failed)
	w.in.r.results.mu.Unlock()
	assert.Equal(t, failuresKept, held, "failures held while the Writer lives")
	res, err := w.Close(context.Background())
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, n, res.Stats.Failed, "Stats.Failed counts all")
	assert.Len(t, res.Failed, failuresKept)
}

// Failures whose acks were never delivered (the acknowledgement function
// panicked) reach the caller through the result, each once: the run kept
// only the first failuresKept, counting on the acks for the rest.
func TestFailuresOfAcksNeverDeliveredAreKeptForTheResult(t *testing.T) {
	reject := func(context.Context, string, []*pinecone.Vector) error {
		return &Error{Class: ClassInvalid, Err: errors.New("metadata too large")}
	}
	release := make(chan struct{})
	w, err := NewWriter(context.Background(), WithUpsertFunc(reject), withClock(newFakeClock()), withRand(maxRand),
		WithAcks(func([]Ack) {
			<-release
			panic("the acknowledgement function's bug")
		}))
	require.NoError(t, err)
	const n = 3000
	for _, v := range vectors(n, 2) {
		require.NoError(t, w.Add(context.Background(), v))
	}
	require.Eventually(t, func() bool { return w.in.r.stats.failed.Load() == n }, generous, time.Millisecond)
	close(release)
	res, err := w.Close(context.Background())
	var pe *PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, n, res.Stats.Failed)
	require.Len(t, res.Failed, n, "every failure, though its ack never came")
	for i, f := range res.Failed {
		require.Equal(t, i, f.Index, "each once, in input order")
		require.Equal(t, ClassInvalid, f.Class)
	}
}
