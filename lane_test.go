package upsert

import (
	"context"
	"fmt"
	"math"
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
)

// capAt puts ln in the state of a lane that measured the index at r
// records/s at clk's time, out of slow start.
func capAt(ln *lane, clk *fakeClock, r float64) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	now := clk.Now()
	c := &ln.dims[dimRecords].ctl
	c.level, c.limit, c.depth = r, r, 0
	c.cutAt, c.followed, c.origin = now, now, now
	ln.dims[dimRecords].apply(now, ln.tuning)
	ln.conc.slowStart, ln.batch.slowStart = false, false
}

// measuredLane puts a lane of a Limiter on clk in the state a 429 episode
// left it in: its record rate measured at level records/s, back at the
// level (the plateau of the curve), as one call leaves it when it ends.
func measuredLane(ln *lane, clk *fakeClock, level float64) {
	capAt(ln, clk, level)
	ln.mu.Lock()
	defer ln.mu.Unlock()
	c := &ln.dims[dimRecords].ctl
	c.episodes, c.capacity = 1, level
}

// cutTo cuts ln's record rate to r at now, as an episode would.
func (ln *lane) cutTo(now time.Time, r float64) {
	c := &ln.dims[dimRecords].ctl
	c.level, c.limit, c.depth = r, r, 0
	c.cutAt, c.followed, c.origin, c.cutSeq = now, now, now, ln.use.issued
	ln.pushback.cuts++
	ln.signals.rates.fire()
	ln.dims[dimRecords].apply(now, ln.tuning)
}

// cuttingClock halves the lane's rate during the first sleep, as a 429
// would while a goroutine waits on its reservation.
type cuttingClock struct {
	*fakeClock
	ln  *lane
	cut bool
}

func (c *cuttingClock) Sleep(ctx context.Context, d time.Duration) error {
	if !c.cut {
		c.cut = true
		c.ln.mu.Lock()
		c.ln.cutTo(c.Now(), c.ln.dims[dimRecords].ctl.limit/2)
		c.ln.mu.Unlock()
		// The cut closed the head's wake channel; let its watcher cancel
		// the sleep's context before sleeping.
		<-ctx.Done()
	}
	return c.fakeClock.Sleep(ctx, d)
}

var (
	errRateLimited = &Error{Class: ClassRateLimited, GRPCCode: codes.ResourceExhausted}
	errServer      = &Error{Class: ClassServer, GRPCCode: codes.Unavailable}
)

// capLane returns a lane on a fake clock capped at r records/s.
func capLane(r float64) (*lane, *fakeClock) {
	clk := newFakeClock()
	ln := newLane(clk, MaxBatchSize, &defaultTuning)
	capAt(ln, clk, r)
	return ln, clk
}

func req(n int) request { return request{n: n} }

func TestLaneRechecksAReservationAfterACut(t *testing.T) {
	ctx := context.Background()
	clk := &cuttingClock{fakeClock: newFakeClock()}
	ln := newLane(clk, MaxBatchSize, &defaultTuning)
	clk.ln = ln
	capAt(ln, clk.fakeClock, 1000) // a tenth of a second of tokens: 100
	clk.Advance(time.Second)       // which the bucket saves up
	start := clk.Now()
	_, err := ln.waitRate(ctx, req(100), false) // empties the bucket
	require.NoError(t, err)
	_, err = ln.waitRate(ctx, req(100), false) // waits 100 ms at 1000/s, but the rate is halved meanwhile
	require.NoError(t, err)
	require.Len(t, clk.Sleeps(), 2, "the cut woke the waiter, which slept again")
	assert.InDelta(t, 0.2, clk.Now().Sub(start).Seconds(), 0.01, "the wait is the one of the new rate")
}

func TestLaneNeverWaitsForEverOnALimitUnderZero(t *testing.T) {
	for _, limit := range []float64{0, -5, math.NaN()} {
		ln, clk := capLane(1000)
		ln.mu.Lock()
		d := &ln.dims[dimRecords]
		d.ctl.limit = limit // whatever a controller got wrong
		d.apply(clk.Now(), ln.tuning)
		ln.mu.Unlock()
		clk.Advance(time.Second)
		p, err := ln.acquire(context.Background(), req(int(2*defaultTuning.minRecords)))
		require.NoError(t, err, "limit %v", limit)
		ln.release(p, nil)
		for _, d := range clk.Sleeps() {
			assert.Less(t, d, time.Minute, "limit %v: the floor's wait, not rate.InfDuration", limit)
		}
	}
}

func TestLaneSendsBackABatchThatACutMadeTooLarge(t *testing.T) {
	ctx := context.Background()
	ln, clk := capLane(2000)
	p, err := ln.acquireOrRecut(ctx, req(100))
	require.NoError(t, err, "a batch within the limit is admitted")
	ln.release(p, nil)
	ln.mu.Lock()
	ln.cutTo(clk.Now(), 1000) // while a batch of 100 waits its turn
	ln.mu.Unlock()
	require.Less(t, ln.sendLimit(), 100, "a twentieth of a second at 1000/s")
	_, err = ln.acquireOrRecut(ctx, req(100))
	assert.ErrorIs(t, err, errStaleBatch, "not admitted: it would wait for its tokens at the new rate with the queue behind it")
	_, err = ln.acquire(ctx, req(100))
	assert.NoError(t, err, "a pinned size is admitted whatever the limit")
}

func TestLaneSendsBackABatchFormedBeforeTheFirstCut(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	ln := newLane(clk, MaxBatchSize, &defaultTuning)
	ln.mu.Lock()
	ln.batch.trial = sizeStats{size: MaxBatchSize, sent: 1} // slow start's trial, formed
	ln.cutTo(clk.Now(), 200)                                // then the first cut: no request has waited for its tokens yet
	ln.mu.Unlock()
	require.Equal(t, MaxBatchSize, ln.sendLimit(), "a rate that held nothing back shapes no batch")
	_, err := ln.acquireOrRecut(ctx, req(MaxBatchSize))
	require.ErrorIs(t, err, errStaleBatch, "not five seconds at the head of the queue saving up its tokens")
	assert.Empty(t, clk.Sleeps())
	assert.Less(t, ln.sendLimit(), 100, "its wait made the rate binding: batches are cut to it")
	p, err := ln.acquireOrRecut(ctx, req(ln.sendLimit()))
	require.NoError(t, err, "the batch cut again is admitted")
	ln.release(p, nil)
}

func TestLaneNeverSpendsTokensFromBeforeACut(t *testing.T) {
	ctx := context.Background()
	ln, clk := capLane(1000)
	ln.conc.set(1, 0)
	held, err := ln.acquire(ctx, req(1))
	require.NoError(t, err)
	got := make(chan permit)
	go func() {
		p, err := ln.acquire(ctx, req(90)) // gets tokens, then waits for the slot
		if err == nil {
			got <- p
		}
	}()
	require.Eventually(t, func() bool {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return ln.signals.slots.ch != nil
	}, time.Second, time.Millisecond)
	ln.mu.Lock()
	ln.cutTo(clk.Now(), 500)
	ln.mu.Unlock()
	ln.release(held, nil) // frees the slot
	p := <-got
	assert.NotEmpty(t, clk.Sleeps(), "the waiter waited again for tokens at the new rate")
	ln.release(p, nil)
}

// A batch that waited for a slot of the lane while the per-minute limits
// fell under it goes back to be cut (errStaleBatch), not out at the size
// cut under the limit before, and gives the slot back.
func TestLaneRecutsABatchThePerMinuteLimitsFellUnderWhileItWaitedForASlot(t *testing.T) {
	ctx := context.Background()
	ln := newLane(newFakeClock(), MaxBatchSize, &defaultTuning)
	ln.conc.set(1, 0)
	held, err := ln.acquire(ctx, req(1))
	require.NoError(t, err)
	var over atomic.Bool
	got := make(chan error)
	go func() {
		q := req(90)
		q.overLimit = over.Load
		p, err := ln.acquireOrRecut(ctx, q) // gets its tokens, then waits for the slot
		if err == nil {
			ln.release(p, nil)
		}
		got <- err
	}()
	require.Eventually(t, func() bool {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return ln.signals.slots.ch != nil
	}, time.Second, time.Millisecond)
	over.Store(true) // a refusal of the request in flight lowered the limit
	ln.release(held, &Error{Class: ClassRateLimited, Limit: LimitEmbedTokens})
	require.ErrorIs(t, <-got, errStaleBatch)
	p, err := ln.acquire(ctx, req(1))
	require.NoError(t, err, "the slot was given back")
	ln.release(p, nil)
}

func TestLaneSpendsWhatItSavedAtTheFirstCut(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	ln := newLane(clk, MaxBatchSize, &defaultTuning)
	ln.setLimits(IndexLimits{RequestsPerSecond: 100})
	for range 2 { // two refusals among the first answers are an episode
		p, err := ln.acquire(ctx, req(1))
		require.NoError(t, err)
		clk.Advance(10 * time.Millisecond)
		ln.release(p, &Error{Class: ClassRateLimited, Limit: LimitRequests})
	}
	require.Equal(t, 1, ln.dims[dimRequests].ctl.episodes)
	require.Empty(t, clk.Sleeps())
	p, err := ln.acquire(ctx, req(1))
	require.NoError(t, err)
	ln.release(p, nil)
	assert.NotEmpty(t, clk.Sleeps(), "the tokens saved under the known limit went with the cut: the index's bucket is empty")
}

func TestLaneRateBindsOnlyWhenTheLaneSendsNearIt(t *testing.T) {
	for _, tt := range []struct {
		name   string
		perSec float64 // records sent per second over the last second
		waited bool    // a request waited for its tokens just now
		binds  bool
	}{
		{"a wave of requests waited, under a rate not reached on average", 200, true, false},
		{"the lane sends at the rate and requests wait", 950, true, true},
		{"the lane sends at the rate, nothing waited", 950, false, false},
	} {
		ln, clk := capLane(1000)
		start := clk.Now()
		for i := range 10 {
			ln.dims[dimRecords].ctl.send(start.Add(time.Duration(i)*100*time.Millisecond), tt.perSec/10)
		}
		clk.Advance(time.Second)
		if tt.waited {
			ln.dims[dimRecords].waited = clk.Now()
		}
		assert.Equal(t, tt.binds, ln.rateBinds(clk.Now(), ln.measureWindow(clk.Now())), tt.name)
	}
}

func TestLaneSizesBatchesSoItsRequestsInFlightCarryTheRate(t *testing.T) {
	for _, tt := range []struct {
		name      string
		roundTrip time.Duration
		want      int
	}{
		// Four in flight at 400 ms (one write slot queueing them) make
		// ten requests a second: batches of 1.5 × 400 ÷ 10.
		{"a long round trip", 400 * time.Millisecond, 60},
		{"a short one: a twentieth of a second's worth carries it", 10 * time.Millisecond, 20},
	} {
		ln, clk := capLane(400)
		ln.mu.Lock()
		ln.dims[dimRecords].waited = clk.Now() // the rate holds requests back
		ln.seen.roundTrip = float64(tt.roundTrip)
		ln.mu.Unlock()
		assert.Equal(t, tt.want, ln.sendLimit(), tt.name)
	}
	t.Run("a writer of a shared lane carries its part", func(t *testing.T) {
		ln, _, _ := sharedLane(t, newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 4)))
		ln.mu.Lock()
		defer ln.mu.Unlock()
		require.InDelta(t, 0.25, ln.share.frac, 1e-9)
		ln.seen.roundTrip = float64(800 * time.Millisecond)
		assert.InDelta(t, 5/0.25, ln.sizeCaps().carry, 1e-9, "its five requests a second, as the lane's four writers make twenty")
	})
}

// Under a capped rate the batch size follows the rate's every move; the
// latencies a concurrency level was measured over are forgotten only when
// the size drifts out of tuning.sizeBand of the size they were measured at.
func TestLaneKeepsAConcurrencyEpochThroughSmallChangesOfSize(t *testing.T) {
	ln, clk := capLane(2000)
	ln.mu.Lock()
	ln.dims[dimRecords].waited = clk.Now() // the rate holds requests back: a twentieth of a second's worth
	ln.batch.size, ln.batch.slowStart, ln.batch.lookedDown = MaxBatchSize, false, true
	ln.mu.Unlock()
	measured := func() int {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return ln.conc.base.n
	}
	resize := func(r float64) int {
		ln.mu.Lock()
		ln.dims[dimRecords].ctl.limit = r
		ln.conc.base.add(100 * time.Millisecond)
		ln.mu.Unlock()
		size, _ := ln.nextBatch()
		return size
	}
	require.Equal(t, 100, resize(2000))
	require.Equal(t, 1, measured())
	for i, r := range []float64{2100, 2200, 2400, 2300, 1700} { // sizes 105 to 85: within a quarter of 100
		assert.Equal(t, int(r/20), resize(r))
		assert.Equal(t, i+2, measured(), "size %d keeps the epoch", int(r/20))
	}
	assert.Equal(t, 130, resize(2600))
	assert.Zero(t, measured(), "a size 30%% above the epoch's starts it again")
	assert.Equal(t, 140, resize(2800))
	assert.Equal(t, 1, measured(), "within a quarter of 130, the size the new epoch is measured at")
}

// A 429 of a request sent before the cut the lane made for its episode,
// or while the index still refuses what came before that cut, is the
// lane's overshoot: the lane says so, and the batch spends no retry on it.
// A timeout is the index's load (concurrency sheds a quarter) unless a
// request sent after it was answered in good time: a quick answer to one
// sent before it, ahead of it in the index's queue, clears nothing. A
// timeout the batch size counts against a size no answer measured (the
// start's, or a halving not answered yet) is the size's alone to shed.
func TestLaneJudgesATimeoutByTheRequestsSentAfterIt(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name      string
		quick     int  // which of the three requests is answered in good time: 0, the first sent; 2, the last; -1 none
		sizedAt   int  // the concurrency when the size was adopted; 0: the start's size
		halved    bool // the size is a halving by timeouts
		wantLimit int
		sizeCount bool // the batch size counts it against the size adopted
	}{
		{"the quick answer was to a request sent before it: the queue's", 0, 4, false, 6, false},
		{"a request sent after it was quick: the size's or the tail's", 2, 4, false, 8, true},
		{"the queue's, at no more in flight than when the size was adopted: both's", 0, 8, false, 6, true},
		{"the queue's, at the start's size: the size's alone", 0, 0, false, 8, true},
		{"no answer, at a measured size: both's", -1, 8, false, 6, true},
		{"no answer, at a halving no batch of it answered: the size's alone", -1, 8, true, 8, true},
	} {
		clk := newFakeClock()
		ln := newLane(clk, MaxBatchSize, &defaultTuning)
		ln.mu.Lock()
		ln.conc.slowStart, ln.conc.limit, ln.conc.base.level = false, 8, 8
		ln.batch.slowStart, ln.batch.sizedAt, ln.batch.halved = false, tt.sizedAt, tt.halved
		ln.mu.Unlock()
		q := request{n: 100, timeout: 2 * time.Second}
		var sent [3]permit
		for i := range sent {
			p, err := ln.acquire(ctx, q)
			require.NoError(t, err)
			sent[i] = p
			clk.Advance(time.Millisecond)
		}
		clk.Advance(100 * time.Millisecond)
		if tt.quick >= 0 {
			ln.release(sent[tt.quick], nil)
		}
		clk.Advance(2 * time.Second)
		ln.release(sent[1], &Error{Class: ClassTimeout})
		assert.Equal(t, tt.wantLimit, ln.concurrency(), tt.name)
		assert.Equal(t, tt.sizeCount, ln.batch.timeouts == 1, "the size counted it: %s", tt.name)
	}
}

// One request in flight at a time leaves the index idle while the next
// travels to it. Until the batch size's first search is over, one alone
// measures the sizes tried without a queue; and a second request waiting
// in one slot must not push the tail into the timeout.
func TestLaneKeepsTwoInFlightOnceTheSizeIsSearched(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name       string
		slowStart  bool
		lookedDown bool
		latencies  []time.Duration
		want       int
	}{
		{"the size searched, three answers whose tail fits twice: two in flight", false, true, ms(100, 100, 100), 2},
		{"the size below the start not looked at yet: one", false, false, ms(100, 100, 100), 1},
		{"the size's slow start: one", true, true, ms(100, 100, 100), 1},
		{"two answers: one", false, true, ms(100, 100), 1},
		{"two of them would take more than three quarters of the timeout: one", false, true, ms(800, 800, 800), 1},
		// The index's spread is still its prior (0.3) after three answers.
		{"their mean a standard error higher would: one", false, true, ms(340, 340, 340), 1},
		{"their own spread, wider than the index's, would: one", false, true, ms(20, 60, 180), 1},
	} {
		clk := newFakeClock()
		ln := newLane(clk, MaxBatchSize, &defaultTuning)
		ln.mu.Lock()
		ln.conc.slowStart, ln.conc.limit, ln.conc.base.level = false, 1, 1
		ln.batch.slowStart, ln.batch.lookedDown = tt.slowStart, tt.lookedDown
		ln.mu.Unlock()
		for _, latency := range tt.latencies {
			p, err := ln.acquire(ctx, request{n: 100, timeout: 2 * time.Second})
			require.NoError(t, err)
			clk.Advance(latency)
			ln.release(p, nil)
		}
		assert.Equal(t, tt.want, ln.concurrency(), tt.name)
	}
}

func TestLaneTellsABatchWhichRefusalsWereTheLanes(t *testing.T) {
	ctx := context.Background()
	ln, clk := capLane(1000)
	before, err := ln.acquire(ctx, req(1))
	require.NoError(t, err)
	ln.mu.Lock()
	ln.cutTo(clk.Now(), 500)
	ln.dims[dimRecords].ctl.episodes = 1
	ln.mu.Unlock()
	clk.Advance(time.Millisecond)
	assert.True(t, ln.release(before, errRateLimited).cutFor, "sent before the cut")
	draining, err := ln.acquire(ctx, req(1))
	require.NoError(t, err)
	assert.True(t, ln.release(draining, errRateLimited).cutFor, "sent after it, while the index has accepted nothing since")
	accepted, err := ln.acquire(ctx, req(1))
	require.NoError(t, err)
	assert.False(t, ln.release(accepted, nil).cutFor)
	refused, err := ln.acquire(ctx, req(1))
	require.NoError(t, err)
	assert.False(t, ln.release(refused, errRateLimited).cutFor, "once the index accepts again, a refusal is the batch's")
}

func TestLaneTellsABatchWhatItsFailureFollows(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	ln := newLane(clk, MaxBatchSize, &defaultTuning)
	send := func(e *Error) failureNote {
		p, err := ln.acquire(ctx, req(1))
		require.NoError(t, err)
		clk.Advance(time.Millisecond)
		return ln.release(p, e)
	}
	send(nil)
	first := send(errServer)
	assert.False(t, first.followsFailure, "the first failure of a run may be the batch's own")
	second := send(errServer)
	assert.True(t, second.followsFailure, "a second in a row is the index failing")

	refused := send(errRateLimited)
	assert.True(t, refused.refused)
	send(nil)
	again := send(errRateLimited)
	assert.Equal(t, refused.successes+1, again.successes, "one request landed between the two refusals")
}

// A batch spends no retry on a young outage (but for its own timeouts,
// once the index answered a request sent after its first), on a failure
// that follows another (its own or another request's) in a run of
// failures, on a 429 after others landed since its last one, nor, up to a
// bound, on the lane's overshoot; every other failure spends one.
func TestABatchSpendsRetriesOnlyOnItsOwnFailures(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	type step struct {
		note failureNote
		free bool
	}
	for _, tt := range []struct {
		name  string
		steps []step
	}{
		{"a young outage", []step{{failureNote{young: true}, true}}},
		{"a server error outside an outage", []step{{failureNote{}, false}}},
		{"failures again in one run: the first spends, not the next", []step{
			{failureNote{}, false}, {failureNote{followsFailure: true}, true}, {failureNote{followsFailure: true}, true},
		}},
		{"a failure in a new run spends again", []step{{failureNote{}, false}, {failureNote{}, false}}},
		{"the lane's overshoot, twice at most", []step{
			{failureNote{cutFor: true}, true}, {failureNote{cutFor: true}, true}, {failureNote{cutFor: true}, false},
		}},
		{"a 429 spends, and again when nothing landed since", []step{
			{failureNote{refused: true, successes: 7}, false}, {failureNote{refused: true, successes: 7}, false},
		}},
		{"a timeout in a young outage, nothing answered since the batch's first", []step{
			{failureNote{young: true, timeout: &timeoutNote{at: at(1), answered: at(0)}}, true},
			{failureNote{young: true, timeout: &timeoutNote{at: at(3), answered: at(1)}}, true},
		}},
		{"a timeout once the index answered a request sent after the batch's first: its own", []step{
			{failureNote{young: true, timeout: &timeoutNote{at: at(1), answered: at(0)}}, true},
			{failureNote{young: true, timeout: &timeoutNote{at: at(3), answered: at(2)}}, false},
		}},
		{"a timeout outside an outage", []step{{failureNote{timeout: &timeoutNote{at: at(1)}}, false}}},
		{"timeouts again in one run: the first spends, not the next, unless the index answered since", []step{
			{failureNote{timeout: &timeoutNote{at: at(1), answered: at(0)}}, false},
			{failureNote{followsFailure: true, timeout: &timeoutNote{at: at(3), answered: at(0)}}, true},
			{failureNote{followsFailure: true, timeout: &timeoutNote{at: at(5), answered: at(2)}}, false},
		}},
		{"answers that ended an outage since the batch's first timeout say nothing of it", []step{
			{failureNote{young: true, timeout: &timeoutNote{at: at(1), answered: at(0)}}, true},
			{failureNote{young: true, timeout: &timeoutNote{at: at(5), answered: at(3), closed: at(2)}}, true},
			{failureNote{young: true, timeout: &timeoutNote{at: at(7), answered: at(6), closed: at(2)}}, false},
		}},
		{"a 429 after others landed since the batch's last one spends none", []step{
			{failureNote{refused: true, successes: 7}, false}, {failureNote{refused: true, successes: 9}, true},
			{failureNote{refused: true, successes: 9}, false}, {failureNote{refused: true, successes: 10}, true},
		}},
	} {
		var b batchFailures
		for i, st := range tt.steps {
			assert.Equal(t, st.free, b.free(st.note, 2), "%s: failure %d", tt.name, i+1)
		}
	}
}

// A 429's backoff grows with every refusal of the batch, whether or not
// it spent a retry, but for those of retries a wake sent before their
// backoff ended; other classes' with the retries spent.
func TestABatchBacksOffFromEveryRefusal(t *testing.T) {
	var b batchFailures
	for i, tt := range []struct {
		note        failureNote
		woke        bool // the retry this failure answered went out early
		spent, step int
	}{
		{failureNote{refused: true, successes: 1}, false, 0, 0},
		{failureNote{refused: true, successes: 5}, false, 1, 1}, // others landed: spent none
		{failureNote{refused: true, successes: 9}, false, 1, 2},
		{failureNote{refused: true, successes: 12}, true, 1, 2}, // asked before its backoff ended
		{failureNote{refused: true, successes: 12, cutFor: true}, false, 1, 3},
	} {
		b.woke = tt.woke
		b.free(tt.note, 8)
		assert.Equal(t, tt.step, b.backoffStep(ClassRateLimited, tt.spent), "refusal %d", i+1)
	}
	assert.Equal(t, 2, b.backoffStep(ClassServer, 2))
}

func TestLaneKeepsItsSlots(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	ln := newLane(clk, MaxBatchSize, &defaultTuning)
	var ps []permit
	for range defaultTuning.startConcurrency {
		p, err := ln.acquire(ctx, req(1))
		require.NoError(t, err)
		ps = append(ps, p)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err := ln.acquire(wctx, req(1))
	assert.ErrorIs(t, err, context.DeadlineExceeded, "no fifth request while four are in flight")
	own := make(chan struct{}, 8)
	_, err = ln.acquire(ctx, request{n: 1, slots: own})
	assert.NoError(t, err, "the caller's own slots are its own")
	for _, p := range ps {
		ln.release(p, nil)
	}
	assert.Zero(t, ln.state().InFlight-1)
}

// A caller's own slot frees only once its request's answer is counted, so
// that the request sent in it is never answered first: with one slot, a
// failure that follows a success must find the success counted.
func TestLaneFreesACallersSlotAfterTheAnswer(t *testing.T) {
	ctx := context.Background()
	ln := newLane(newFakeClock(), MaxBatchSize, &defaultTuning)
	own := make(chan struct{}, 1)
	for i := range 2000 {
		p, err := ln.acquire(ctx, request{n: 1, slots: own})
		require.NoError(t, err)
		released := make(chan struct{})
		go func() {
			ln.release(p, nil)
			close(released)
		}()
		next, err := ln.acquire(ctx, request{n: 1, slots: own})
		require.NoError(t, err)
		ln.mu.Lock()
		successes := ln.seen.successes
		ln.mu.Unlock()
		require.Equal(t, uint64(2*i+1), successes, "round %d: the slot freed before its answer was counted", i)
		<-released
		ln.release(next, nil)
	}
}

func TestLaneCutsTheRateA429Names(t *testing.T) {
	for _, tt := range []struct {
		limit Limit
		dim   int
	}{
		{LimitUnknown, dimRecords},
		{LimitRequests, dimRequests},
		{LimitInferenceRequests, dimRequests},
		{LimitBytes, dimBytes},
		{LimitEmbedTokens, -1},
	} {
		t.Run(tt.limit.String(), func(t *testing.T) {
			ctx := context.Background()
			clk := newFakeClock()
			ln := newLane(clk, MaxBatchSize, &defaultTuning)
			ln.setLimits(ServerlessLimits)
			before := [dimCount]float64{}
			for i := range ln.dims {
				before[i] = ln.dims[i].ctl.limit
			}
			for range 3 { // two refusals among the first answers are an episode
				p, err := ln.acquire(ctx, request{n: 10, bytes: 1000})
				require.NoError(t, err)
				clk.Advance(10 * time.Millisecond)
				ln.release(p, &Error{Class: ClassRateLimited, Limit: tt.limit})
			}
			for i := range ln.dims {
				if i == tt.dim {
					assert.Less(t, ln.dims[i].ctl.limit, before[i], "dimension %d is cut", i)
				} else {
					assert.Equal(t, before[i], ln.dims[i].ctl.limit, "dimension %d is not", i)
				}
			}
		})
	}
}

func TestLaneStartsAtTheIndexsKnownLimits(t *testing.T) {
	// requestsIn counts the requests of one record and bytes bytes that
	// the lane admits over d of fake time, each answered at once.
	requestsIn := func(ln *lane, clk *fakeClock, bytes int, d time.Duration) int {
		end, n := clk.Now().Add(d), 0
		for {
			p, err := ln.acquire(context.Background(), request{n: 1, bytes: bytes})
			require.NoError(t, err)
			ln.release(p, nil)
			if clk.Now().After(end) {
				return n
			}
			n++
		}
	}
	t.Run("a tenth above 100 requests a second, with a tenth of a second saved up", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk, MaxBatchSize, &defaultTuning)
		ln.setLimits(IndexLimits{RequestsPerSecond: 100})
		n := requestsIn(ln, clk, 0, time.Second)
		assert.InDelta(t, 110+11, n, 2)
	})
	t.Run("a tenth above 50 MB a second", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk, MaxBatchSize, &defaultTuning)
		ln.setLimits(IndexLimits{BytesPerSecond: 50e6})
		n := requestsIn(ln, clk, 1e6, time.Second)
		assert.InDelta(t, 55+5, n, 2)
	})
	t.Run("a limit that binds with no 429 is probed above: it is not a ceiling", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk, MaxBatchSize, &defaultTuning)
		ln.setLimits(IndexLimits{RequestsPerSecond: 100})
		requestsIn(ln, clk, 0, 2*defaultTuning.recovery)
		assert.Greater(t, requestsIn(ln, clk, 0, time.Second), 200)
	})
	t.Run("no known limits: no caps", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk, MaxBatchSize, &defaultTuning)
		ln.setLimits(IndexLimits{})
		for i := range ln.dims {
			assert.False(t, ln.dims[i].ctl.capped())
		}
	})
	t.Run("a lane shared by a later call keeps what it learned", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk, MaxBatchSize, &defaultTuning)
		ln.setLimits(ServerlessLimits)
		ln.dims[dimRequests].ctl.limit = 42
		ln.setLimits(ServerlessLimits)
		assert.Equal(t, 42.0, ln.dims[dimRequests].ctl.limit)
	})
}

func TestLaneBreaker(t *testing.T) {
	ctx := context.Background()
	serverErr := &Error{Class: ClassServer, GRPCCode: codes.Unavailable}
	newOpenLane := func(t *testing.T, clk *fakeClock) *lane {
		ln := newLane(clk, MaxBatchSize, &defaultTuning)
		ln.conc.set(10, 0)
		first, err := ln.acquire(ctx, req(10))
		require.NoError(t, err)
		ln.release(first, nil) // the index answers, then fails
		var ps []permit
		for range breakerThreshold {
			p, err := ln.acquire(ctx, req(10))
			require.NoError(t, err)
			ps = append(ps, p)
		}
		for _, p := range ps {
			ln.release(p, serverErr)
		}
		require.True(t, ln.state().Paused, "five server errors in a row open the breaker")
		return ln
	}
	t.Run("a probe of an earlier outage answered late leaves the next outage's probe alone", func(t *testing.T) {
		clk := newFakeClock()
		ln := newOpenLane(t, clk)
		old, err := ln.acquire(ctx, req(10)) // the first outage's probe, which hangs
		require.NoError(t, err)
		require.NotZero(t, old.probe)
		ln.mu.Lock()
		ln.closeBreaker(clk.Now(), clk.Now()) // the index answers another request
		ln.mu.Unlock()
		require.False(t, ln.state().Paused)
		var ps []permit
		for range breakerThreshold { // and fails again
			p, err := ln.acquire(ctx, req(10))
			require.NoError(t, err)
			ps = append(ps, p)
		}
		for _, p := range ps {
			ln.release(p, serverErr)
		}
		probe, err := ln.acquire(ctx, req(10))
		require.NoError(t, err)
		require.NotZero(t, probe.probe, "the second outage's probe")
		ln.release(old, serverErr) // the first outage's probe fails at last
		ln.mu.Lock()
		defer ln.mu.Unlock()
		assert.True(t, ln.breaker.probing, "one probe at a time: the second's is still out")
	})
	t.Run("the next request waits for the probe time and goes as the probe; a success closes it", func(t *testing.T) {
		clk := newFakeClock()
		ln := newOpenLane(t, clk)
		before := clk.Now()
		p, err := ln.acquire(ctx, req(10))
		require.NoError(t, err)
		assert.NotZero(t, p.probe)
		assert.GreaterOrEqual(t, clk.Now().Sub(before), probeEvery)
		ln.release(p, serverErr)
		assert.True(t, ln.state().Paused, "a failed probe keeps it open")
		p2, err := ln.acquire(ctx, req(10))
		require.NoError(t, err)
		assert.NotZero(t, p2.probe)
		ln.release(p2, nil)
		assert.False(t, ln.state().Paused)
		p3, err := ln.acquire(ctx, req(10))
		require.NoError(t, err)
		assert.Zero(t, p3.probe)
		ln.release(p3, nil)
	})
	t.Run("while the probe is out, others wait until the outage is a minute old, then fail unsent", func(t *testing.T) {
		clk := newFakeClock()
		ln := newOpenLane(t, clk)
		opened := clk.Now()
		probe, err := ln.acquire(ctx, req(10))
		require.NoError(t, err)
		require.NotZero(t, probe.probe)
		_, err = ln.acquire(ctx, req(10))
		assert.ErrorIs(t, err, errOutageTooLong)
		assert.GreaterOrEqual(t, clk.Now().Sub(opened), outagePatience)
	})
	t.Run("a long outage is probed less and less often, up to a cap", func(t *testing.T) {
		var b breaker
		now := newFakeClock().Now()
		b.open, b.openedAt = true, now
		assert.Equal(t, probeEvery, b.probeWait(now.Add(time.Second)))
		assert.Greater(t, b.probeWait(now.Add(probeFastFor+time.Second)), probeEvery)
		assert.Equal(t, probeMax, b.probeWait(now.Add(time.Hour)))
	})
	t.Run("answers to requests sent before the failures began neither reset the count nor close it", func(t *testing.T) {
		for _, tt := range []struct {
			name      string
			sentAfter time.Duration // when the successful request was sent, from the first failure's send
			open      bool
		}{
			{"sent before: admitted before the outage", -time.Millisecond, true},
			{"sent after: the index answers again", time.Millisecond, false},
		} {
			t.Run(tt.name, func(t *testing.T) {
				var b breaker
				now := newFakeClock().Now()
				b.success(now) // the index answered
				sent := now.Add(time.Second)
				for i := range breakerThreshold {
					if i == 2 {
						b.success(sent.Add(tt.sentAfter))
					}
					b.failure(sent, sent, false, 0)
				}
				assert.Equal(t, tt.open, b.open)
				if tt.open {
					assert.True(t, b.young(sent), "its failures spend no retries")
					assert.False(t, b.success(sent.Add(-time.Millisecond)), "an old request's answer does not close it")
					assert.True(t, b.success(sent.Add(time.Millisecond)), "a newer one does")
				}
			})
		}
	})
	t.Run("an outage is young for a minute, once the index had answered", func(t *testing.T) {
		var b breaker
		now := newFakeClock().Now()
		for range breakerThreshold {
			b.failure(now, now, false, 0)
		}
		require.True(t, b.open)
		assert.False(t, b.young(now), "an index that never answered is dead or misconfigured")
		b.success(now)
		for range breakerThreshold {
			b.failure(now, now, false, 0)
		}
		assert.True(t, b.young(now.Add(outagePatience-time.Second)))
		assert.False(t, b.young(now.Add(outagePatience)))
		b.success(now)
		assert.False(t, b.young(now.Add(outagePatience)), "a closed breaker is no outage")
	})
	t.Run("a run of failures is waited out before the breaker opens, once the index had answered, for a minute", func(t *testing.T) {
		var b breaker
		now := newFakeClock().Now()
		b.failure(now, now, false, 0)
		b.failure(now, now, false, 0)
		assert.False(t, b.followsFailure(now), "an index that never answered")
		b.success(now)
		assert.False(t, b.followsFailure(now), "no run under way")
		b.failure(now, now, false, 0)
		assert.False(t, b.followsFailure(now), "the first failure of a run")
		b.failure(now, now, false, 0)
		assert.True(t, b.followsFailure(now), "a second failure without a success between")
		assert.False(t, b.followsFailure(now.Add(outagePatience)), "a run older than outagePatience spends retries again")
		b.success(now.Add(time.Millisecond))
		b.failure(now, now.Add(time.Millisecond), false, 0)
		assert.False(t, b.followsFailure(now), "a success ends the run")
	})
	t.Run("it gives up on an index at once if it never answered, after a minute if it did", func(t *testing.T) {
		var b breaker
		now := newFakeClock().Now()
		assert.Nil(t, b.gaveUp(now), "closed")
		for range breakerThreshold {
			b.failure(now, now, false, 0)
		}
		assert.Equal(t, errNeverAnswered, b.gaveUp(now))
		b.success(now)
		for range breakerThreshold {
			b.failure(now, now, false, 0)
		}
		late := now.Add(outagePatience)
		b.failure(late.Add(-probeMax), late.Add(-probeMax), true, 0) // the probes keep failing
		assert.Nil(t, b.gaveUp(now.Add(outagePatience-time.Second)))
		assert.Equal(t, errOutageTooLong, b.gaveUp(late))
		var slow breaker
		for range breakerThreshold {
			slow.failure(now, now, false, 1)
		}
		assert.Nil(t, slow.gaveUp(now), "not at once after timeouts: the index may answer smaller requests")
		slow.failure(late.Add(-probeMax), late.Add(-probeMax), true, 1)
		assert.Equal(t, errOutageTooLong, slow.gaveUp(late), "but after a minute of them")
		var large breaker
		for range breakerThreshold {
			large.failure(now, now, false, 100)
		}
		large.failure(late.Add(-probeMax), late.Add(-probeMax), true, 50)
		assert.False(t, large.probesAlone(now), "a batch probes within the minute")
		assert.True(t, large.probesAlone(late), "one record after it")
		assert.Nil(t, large.gaveUp(late), "timeouts of batches after a minute: the probe of one record decides")
		large.failure(late.Add(probeMax), late.Add(probeMax), true, 1)
		assert.Equal(t, errOutageTooLong, large.gaveUp(late.Add(probeMax)), "it timed out too")
	})
	t.Run("a verdict no failure bore out for two probe periods waits for the next probe, which decides", func(t *testing.T) {
		var b breaker
		now := newFakeClock().Now()
		b.success(now)
		for range breakerThreshold {
			b.failure(now, now, false, 0)
		}
		idle := now.Add(10 * time.Minute) // the lane sat idle: a Limiter between calls
		assert.Nil(t, b.gaveUp(idle), "stale")
		ok, probe, _ := b.admit(idle)
		require.True(t, ok && probe)
		assert.Nil(t, b.gaveUp(idle), "the probe out decides, not the old verdict")
		b.failure(idle.Add(time.Second), idle, true, 0)
		assert.Equal(t, errOutageTooLong, b.gaveUp(idle.Add(time.Second)), "the probe failed: still down")
	})
}

func TestRetryBudget(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newRetryBudget(now)
	for range int(budgetMax) {
		ok, _ := b.take(now)
		require.True(t, ok)
	}
	ok, wait := b.take(now)
	assert.False(t, ok, "an empty budget makes a retry wait")
	assert.Equal(t, time.Second/budgetPerSecond, wait, "time alone refills the budget")
	for range 5 {
		b.success(now)
	}
	ok, _ = b.take(now)
	assert.True(t, ok, "five successes earn a retry")
	ok, _ = b.take(now.Add(time.Second / budgetPerSecond))
	assert.True(t, ok, "and so does time")
}

// lane returns l's lane of key for calls that know no host (laneAt).
func (l *Limiter) lane(key string, maxBatch int) *lane {
	return l.laneAt(laneID{key: key}, maxBatch)
}

// laneAt returns l's lane of id, made on first use, without a route's hold
// on it: as a route of a call that has ended left it.
func (l *Limiter) laneAt(id laneID, maxBatch int) *lane {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.laneLocked(id, maxBatch)
}

func TestLimiterLearnsPerNamespace(t *testing.T) {
	lim := &Limiter{clock: newFakeClock()}
	a := lim.lane("a", MaxBatchSize)
	for range 2 {
		p, err := a.acquire(context.Background(), req(1))
		require.NoError(t, err)
		a.release(p, errRateLimited)
	}
	assert.False(t, math.IsInf(lim.State("a").Rate, 1), "two 429s cap a namespace's rate")
	assert.True(t, math.IsInf(lim.State("b").Rate, 1), "another namespace is untouched")
	assert.Same(t, a, lim.lane("a", MaxBatchSize), "a namespace keeps its state")
	assert.Same(t, lim.lane(namespaceKey(""), MaxBatchSize), lim.lane(namespaceKey("__default__"), MaxBatchSize), "the default namespace has two names")
}

func TestZeroLimiterIsReady(t *testing.T) {
	var lim Limiter
	st := lim.State("")
	assert.Equal(t, defaultTuning.startConcurrency, st.Concurrency)
	assert.Equal(t, defaultTuning.startBatch, st.BatchSize)
	assert.True(t, math.IsInf(st.Rate, 1), "no rate cap until the index pushes back")
}

func TestLimiterForgetsIdleNamespaces(t *testing.T) {
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	for i := range 10 * minLanes {
		lim.lane(fmt.Sprint("ns-", i), MaxBatchSize)
		clk.Advance(laneIdle / minLanes)
	}
	assert.Less(t, len(lim.lanes), 4*minLanes, "a Limiter that meets ever new namespaces stays bounded")
	busy := lim.lane("busy", MaxBatchSize)
	p, err := busy.acquire(context.Background(), req(1))
	require.NoError(t, err)
	clk.Advance(2 * laneIdle)
	for i := range 10 * minLanes {
		lim.lane(fmt.Sprint("later-", i), MaxBatchSize)
	}
	assert.Same(t, busy, lim.lane("busy", MaxBatchSize), "a namespace with a request in flight is kept")
	busy.release(p, nil)
}

func TestLimiterHoldsAboutMaxLanesWhateverTheirAge(t *testing.T) {
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	busy := lim.lane("busy", MaxBatchSize)
	p, err := busy.acquire(context.Background(), req(1))
	require.NoError(t, err)
	most := 0
	var last *lane
	for i := range 20 * maxLanes {
		ln := lim.lane(fmt.Sprint("ns-", i), MaxBatchSize)
		last = ln
		q, err := ln.acquire(context.Background(), req(1))
		require.NoError(t, err)
		ln.release(q, nil)
		clk.Advance(time.Millisecond) // a run, far from laneIdle
		most = max(most, len(lim.lanes))
	}
	assert.LessOrEqual(t, most, maxLanes, "a run over ever new namespaces stays bounded")
	assert.Same(t, busy, lim.lane("busy", MaxBatchSize), "the least recently used lane is kept while a request is in flight")
	assert.Same(t, last, lim.lane(fmt.Sprint("ns-", 20*maxLanes-1), MaxBatchSize), "the most recent lanes are kept")
	busy.release(p, nil)
}

// A refusal that closes the breaker after an outage is measured against
// what the index took before the outage, not the nothing it took while
// down: the breaker marks the outage before the rates measure, and their
// windows reach back past it.
func TestLaneMeasuresARefusalAfterAnOutageByTheRateBeforeIt(t *testing.T) {
	ctx := context.Background()
	ln, clk := capLane(1000)
	ln.conc.set(10, 0)
	c := &ln.dims[dimRecords].ctl
	c.episodes, c.capacity = 1, 1250 // climbing back after a cut
	send := func(e *Error) {
		p, err := ln.acquire(ctx, req(10))
		require.NoError(t, err)
		clk.Advance(10 * time.Millisecond)
		ln.release(p, e)
	}
	for range 100 { // a second at 1000 records/s
		send(nil)
	}
	c.recent.add(true) // two refusals: the probe's is the third, an episode
	c.recent.add(true)
	for range breakerThreshold {
		send(errServer)
	}
	require.True(t, ln.state().Paused)
	clk.Advance(1500 * time.Millisecond) // longer than any window
	send(errRateLimited)                 // the probe
	require.False(t, ln.state().Paused)
	assert.Greater(t, c.limit, 500.0,
		"cut under the rate the index took before the outage, not to the floor")
}

// ms returns the durations of so many milliseconds.
func ms(v ...int) []time.Duration {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x) * time.Millisecond
	}
	return d
}

func TestLaneCutsTheByteRateUnderItsFloorForSmallRecords(t *testing.T) {
	for _, tt := range []struct {
		name        string
		recordBytes int
		floor       float64 // the least byte limit a cut may set
	}{
		{"small records: ten records' bytes", 60, 10 * 60},
		{"large records: the byte floor", 4000, defaultTuning.minBytes},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			clk := newFakeClock()
			ln := newLane(clk, MaxBatchSize, &defaultTuning)
			// An index that refuses every byte-rate request: the cuts go as
			// low as the lane lets them.
			for range 200 {
				p, err := ln.acquire(ctx, request{n: 10, bytes: 10 * tt.recordBytes})
				require.NoError(t, err)
				clk.Advance(10 * time.Millisecond)
				ln.release(p, &Error{Class: ClassRateLimited, Limit: LimitBytes})
				clk.Advance(time.Second)
			}
			limit := ln.dims[dimBytes].ctl.limit
			assert.GreaterOrEqual(t, limit, tt.floor*0.99, "never under the floor")
			assert.Less(t, limit, 1.5*tt.floor, "down to the floor, not held above it")
		})
	}
}

// Asking a Limiter's state makes no lane: the route that sends through a
// namespace makes it, with its kind's batch cap (96 integrated records a
// request). An observer that asked before the first request once left a
// records lane capped at 1,000.
func TestLimiterStateMakesNoLane(t *testing.T) {
	lim := NewLimiter()
	assert.Equal(t, 100, lim.State("docs").BatchSize, "the start of an unseen namespace")
	assert.Empty(t, lim.lanes)

	var largest atomic.Int64
	send := func(_ context.Context, _ string, b []*pinecone.IntegratedRecord) error {
		for n := int64(len(b)); ; {
			if old := largest.Load(); n <= old || largest.CompareAndSwap(old, n) {
				return nil
			}
		}
	}
	recs := make([]*pinecone.IntegratedRecord, 5000)
	for i := range recs {
		recs[i] = &pinecone.IntegratedRecord{"_id": fmt.Sprint("r", i), "text": "t"}
	}
	asked := Observer{StartRun: func(ctx context.Context, e RunEvent) context.Context {
		_ = e.LimiterState()
		return ctx
	}}
	res, err := Records(context.Background(), slices.Values(recs), WithRecordsFunc(send), WithLimiter(lim), WithObserver(asked))
	require.NoError(t, err)
	assert.Equal(t, len(recs), res.Upserted)
	assert.LessOrEqual(t, largest.Load(), int64(MaxRecordsBatchSize))
	assert.Positive(t, largest.Load())
}

// A Writer holds its route, and so its lane, for its whole life: another
// call on the same Limiter that meets more than maxLanes namespaces must
// not evict it (it once did, nothing being in flight, and the next call
// writing the Writer's namespace got a fresh lane: one namespace paced
// through two lanes, each with the whole rate).
func TestLimiterKeepsALaneACallsRouteHolds(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	fi := newFakeIndex(nil)
	hot := func(*pinecone.Vector) string { return "hot" }
	a, err := NewWriter(ctx, WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand), WithLimiter(lim), WithNamespaceOf(hot))
	require.NoError(t, err)
	defer a.Close(ctx) //nolint:errcheck
	vs := vectors(maxLanes+100, 4)
	require.NoError(t, a.Add(ctx, vs[0]))
	require.NoError(t, a.Flush(ctx))
	laneA := a.in.r.routes.byKey["hot"].lane
	clk.Advance(time.Millisecond) // "hot" is the least recently used lane

	// Another call spreads over many namespaces, through the same Limiter.
	_, err = All(ctx, vs[1:], WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand), WithLimiter(lim),
		WithNamespaceOf(func(v *pinecone.Vector) string { return "spread-" + v.Id }))
	require.NoError(t, err)

	b, err := NewWriter(ctx, WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand), WithLimiter(lim), WithNamespaceOf(hot))
	require.NoError(t, err)
	defer b.Close(ctx) //nolint:errcheck
	require.NoError(t, b.Add(ctx, vs[1]))
	require.NoError(t, b.Flush(ctx))
	laneB := b.in.r.routes.byKey["hot"].lane
	assert.True(t, laneA == laneB, "two live Writers on one namespace and one Limiter pace it through two lanes")
}

// A Limiter keeps one lane per kind and namespace: vectors written to a
// namespace named "records:x" once shared the lane of integrated records
// written to "x", so the two kinds' batch sizes and rates mixed.
func TestLimiterKeepsVectorsAndRecordsInTheirOwnLanes(t *testing.T) {
	key := func(k *kind, ns string) string { return k.laneKey(namespaceKey(ns)) }
	assert.Equal(t, "docs", key(vectorKind, "docs"), "an ordinary namespace's vectors keep their key")
	assert.Equal(t, "", key(vectorKind, defaultNamespace))
	assert.Equal(t, "records:docs", key(recordKind, "docs"))
	seen := map[string]string{}
	for _, c := range []struct {
		k  *kind
		ns string
	}{
		{vectorKind, "x"}, {vectorKind, "records:x"}, {vectorKind, "vectors:x"}, {vectorKind, "vectors:records:x"},
		{vectorKind, "vectors:vectors:x"}, {vectorKind, ""}, {vectorKind, "records:"}, {vectorKind, "vectors:"},
		{recordKind, "x"}, {recordKind, "records:x"}, {recordKind, "vectors:x"}, {recordKind, ""}, {recordKind, "records:"},
	} {
		name := fmt.Sprintf("%s in %q", map[*kind]string{vectorKind: "vectors", recordKind: "records"}[c.k], c.ns)
		k := key(c.k, c.ns)
		require.NotContains(t, seen, k, "%s shares the lane of %s", name, seen[k])
		seen[k] = name
	}

	lim := NewLimiter()
	ctx := context.Background()
	_, err := All(ctx, vectors(10, 4), WithUpsertFunc(newFakeIndex(nil).Upsert), WithLimiter(lim),
		WithNamespaceOf(func(*pinecone.Vector) string { return "records:x" }))
	require.NoError(t, err)
	recs := []*pinecone.IntegratedRecord{{"_id": "r", "text": "t"}}
	_, err = Records(ctx, slices.Values(recs), WithRecordsFunc(func(context.Context, string, []*pinecone.IntegratedRecord) error { return nil }),
		WithLimiter(lim), WithNamespaceOf(func(*pinecone.IntegratedRecord) string { return "x" }))
	require.NoError(t, err)
	assert.Len(t, lim.lanes, 2)
}

// Failures are counted in the order their requests were sent: a request
// sent after the ones that fail late succeeded, so the index answers. Five
// stragglers sent before that success (requests hung in a blip that time
// out afterwards) are no outage and must not open the breaker.
func TestBreakerIgnoresFailuresOfRequestsSentBeforeTheLastSuccess(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var b breaker
	b.success(t0.Add(10 * time.Second)) // sent after the stragglers, answered
	now := t0.Add(30 * time.Second)
	for i := range breakerThreshold {
		b.failure(now, t0.Add(time.Duration(i)*time.Second), false, 1)
	}
	assert.False(t, b.open, "the index answered a request sent after every one of these")
	ok, _, _ := b.admit(now)
	assert.True(t, ok)
}

// A request that passed the rate wait and waits for a slot must not go out
// in the slot freed by a 429 whose Retry-After asks the lane to pause:
// it is sent after the index asked for the wait, and must wait it out.
func TestLaneHonoursRetryAfterForTheRequestWaitingForASlot(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	ln := newLane(clk, MaxBatchSize, &defaultTuning)
	ln.conc.set(1, 0)
	first, err := ln.acquire(ctx, req(1))
	require.NoError(t, err)
	type admitted struct {
		p   permit
		err error
	}
	next := make(chan admitted, 1)
	go func() {
		p, err := ln.acquire(ctx, req(1))
		next <- admitted{p, err}
	}()
	require.Eventually(t, func() bool {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return ln.signals.slots.ch != nil
	}, time.Second, time.Millisecond, "the second request waits for the slot")
	refusedAt := clk.Now()
	ln.release(first, &Error{Class: ClassRateLimited, RetryAfter: 10 * time.Second})
	a := <-next
	require.NoError(t, a.err)
	assert.GreaterOrEqual(t, a.p.start.Sub(refusedAt), 10*time.Second, "sent before the index's Retry-After ended")
	ln.release(a.p, nil)
}

// signalClock is a fakeClock that, once armed, closes slept at its first
// Sleep: some request is waiting (here, for the breaker's probe).
type signalClock struct {
	*fakeClock
	mu    sync.Mutex
	armed bool
	slept chan struct{}
}

func (c *signalClock) arm() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.slept = true, make(chan struct{})
	return c.slept
}

func (c *signalClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	if c.armed {
		c.armed = false
		close(c.slept)
	}
	c.mu.Unlock()
	return c.fakeClock.Sleep(ctx, d)
}

// A Limiter carries its breaker from call to call. A call ten minutes
// after an outage the breaker gave up on sends its records: the old
// verdict waits for a probe, rather than failing every request but the
// probe unsent for an outage that ended long ago.
func TestANewCallLongAfterAnOutageSendsItsRecords(t *testing.T) {
	clk := &signalClock{fakeClock: newFakeClock()}
	lim := &Limiter{clock: clk}
	down := status.Error(codes.Unavailable, "down")
	var recovered atomic.Bool
	fi := newFakeIndex(func(call int, _ []string) error {
		if call < 2 || recovered.Load() {
			return nil
		}
		return down
	})
	// The first call meets an outage of over a minute: the breaker gives up.
	first, err := All(context.Background(), vectors(2000, 2), WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand),
		WithLimiter(lim), WithBatchSize(100), WithConcurrency(1))
	require.ErrorIs(t, err, ErrServer)
	require.NotEmpty(t, first.Failed)
	require.ErrorIs(t, first.Failed[len(first.Failed)-1].Err, errOutageTooLong.Err, "precondition: the breaker gave up in the first call")

	// Ten minutes later the index is up again and the service calls again.
	clk.Advance(10 * time.Minute)
	recovered.Store(true)
	slept := clk.arm()
	moved := make(chan struct{}) // another batch waited, failed or was sent
	var moveOnce sync.Once
	signal := func() { moveOnce.Do(func() { close(moved) }) }
	var sends atomic.Int64
	send := func(ctx context.Context, ns string, b []*pinecone.Vector) error {
		if sends.Add(1) == 1 {
			// The first request (the probe, if the breaker is still
			// open) stays in flight until another batch has done
			// something: waited, failed or been sent.
			select {
			case <-moved:
			case <-slept:
			}
		} else {
			signal()
		}
		return fi.Upsert(ctx, ns, b)
	}
	second, err := All(context.Background(), vectors(30, 2), WithUpsertFunc(send), withClock(clk), withRand(maxRand),
		WithLimiter(lim), WithBatchSize(10), WithConcurrency(2),
		WithObserver(Observer{Failure: func(Failure) { signal() }}))
	require.NoError(t, err, "the index is up: no record of this call should fail for an outage that ended ten minutes ago")
	assert.Equal(t, 30, second.Upserted)
}

// A lane is shared by every call that writes one namespace of one index
// through one Limiter. A request of a call with its own slots
// (WithConcurrency) waits for one of them before it queues, not at the
// head: the requests of another call, whose slots are free, are admitted
// meanwhile. Else a backfill with WithConcurrency(1) on a slow index would
// pace a concurrent adaptive writer of the same index to one request per
// round trip of the backfill.
func TestLaneAdmitsARequestWithFreeSlotsPastOneWaitingForAnotherCallsSlot(t *testing.T) {
	ctx := context.Background()
	ln := newLane(newFakeClock(), MaxBatchSize, &defaultTuning)
	slotsA := make(chan struct{}, 1) // call A: WithConcurrency(1)
	inFlight, err := ln.acquire(ctx, request{n: 1, slots: slotsA})
	require.NoError(t, err)

	nextA := make(chan permit, 1)
	go func() {
		p, err := ln.acquire(ctx, request{n: 1, slots: slotsA}) // waits for A's one slot
		if err == nil {
			nextA <- p
		}
	}()
	time.Sleep(20 * time.Millisecond) // A's second request reaches its wait for A's slot

	// Call B, adaptive: the lane's own slots are free (4 at first).
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pb, err := ln.acquire(bctx, request{n: 1})
	assert.NoError(t, err, "B's request waited for A's request in flight, though B's slots are free")

	ln.release(inFlight, nil)
	select {
	case p := <-nextA:
		ln.release(p, nil)
	case <-time.After(2 * time.Second):
		t.Fatal("A's second request was never admitted")
	}
	if err == nil {
		ln.release(pb, nil)
	}
}

// The converse of TestLaneAdmitsARequestWithFreeSlotsPastOneWaitingForAnotherCallsSlot:
// a request of an adaptive call waiting at the head for a slot of the lane
// does not hold back a request of another call with free slots of its own
// (WithConcurrency). It did: a Writer with WithConcurrency(8) beside an
// adaptive backfill on the same namespace sent one request per round trip
// of the backfill.
func TestLaneAdmitsARequestWithItsOwnFreeSlotPastOneWaitingForASlotOfTheLane(t *testing.T) {
	ctx := context.Background()
	ln := newLane(newFakeClock(), MaxBatchSize, &defaultTuning)
	// Call B, adaptive: every slot of the lane in flight (4 at first).
	var inFlight []permit
	for range ln.concurrency() {
		p, err := ln.acquire(ctx, request{n: 1})
		require.NoError(t, err)
		inFlight = append(inFlight, p)
	}
	nextB := make(chan permit, 1)
	go func() {
		p, err := ln.acquire(ctx, request{n: 1}) // waits for a slot of the lane, at the head
		if err == nil {
			nextB <- p
		}
	}()
	require.Eventually(t, func() bool {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return !ln.head.empty() && ln.signals.slots.ch != nil
	}, 2*time.Second, time.Millisecond, "B's next request waits for a slot at the head")

	// Call A, WithConcurrency(8): its slots are free.
	slotsA := make(chan struct{}, 8)
	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	pa, err := ln.acquire(actx, request{n: 1, slots: slotsA})
	assert.NoError(t, err, "A's request, its own slots free, waited for B's requests in flight")

	for _, p := range inFlight {
		ln.release(p, nil)
	}
	select {
	case p := <-nextB:
		ln.release(p, nil)
	case <-time.After(2 * time.Second):
		t.Fatal("B's next request was never admitted")
	}
	if err == nil {
		ln.release(pa, nil)
	}
}

// A Retry-After pauses every request of the namespace, whatever the answer
// that carries it: an overloaded index's 503, or gRPC pushback on
// UNAVAILABLE, as well as a 429. The next request waits it out, and
// LimiterState.Paused tells.
func TestLimiterPausesTheNamespaceOnAServerErrorsRetryAfter(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	ln := newLane(clk, MaxBatchSize, &defaultTuning)
	p, err := ln.acquire(ctx, req(10))
	require.NoError(t, err)
	ln.release(p, &Error{Class: ClassServer, RetryAfter: 2 * time.Second})
	assert.True(t, ln.state().Paused, "the index asked for 2 s")
	before := clk.Now()
	q, err := ln.acquire(ctx, req(10))
	require.NoError(t, err)
	ln.release(q, nil)
	assert.GreaterOrEqual(t, clk.Now().Sub(before), 2*time.Second, "the next request waits out the Retry-After")
}

// A Limiter holds about maxLanes lanes for a service that writes to ever
// new namespaces at any pace, as its doc promises: a sweep that forgets
// only the idle lanes and leaves just under maxLanes looks again at
// maxLanes, where the least recently used go, not at twice what it left
// (which let a thousand new namespaces every ten minutes, laneIdle, hold
// about two thousand lanes).
func TestLimiterHoldsAboutMaxLanesForAServiceOverEverNewNamespaces(t *testing.T) {
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	most := 0
	for i := range 20 * maxLanes {
		lim.lane(fmt.Sprint("ns-", i), MaxBatchSize)
		clk.Advance(laneIdle / 1000) // a thousand new namespaces every ten minutes
		most = max(most, len(lim.lanes))
	}
	assert.LessOrEqual(t, most, maxLanes, "a service over ever new namespaces stays about maxLanes")
}

// A batch size that leaves sizeBand (a cut makes the record rate bind and
// the batches shrink) resets the concurrency's epoch in nextBatch, which
// may abandon the trial of a lower level and raise the limit back. That
// wakes the request waiting for a slot at once, as an answer that gives
// room does, not at the next answer (a round trip, or a request timeout on
// a slow index) with the queue behind it.
func TestLaneWakesTheSlotWaiterWhenABatchSizeChangeRaisesTheConcurrency(t *testing.T) {
	ctx := context.Background()
	ln, clk := capLane(200)
	ln.mu.Lock()
	ln.conc.base = levelStats{level: 8}
	ln.conc.trial = levelStats{level: 4} // trying a lower level
	ln.conc.limit = 4
	ln.mu.Unlock()
	var held []permit
	for range 4 {
		p, err := ln.acquire(ctx, req(1))
		require.NoError(t, err)
		held = append(held, p)
	}
	got := make(chan permit, 1)
	go func() {
		p, err := ln.acquire(ctx, req(1))
		if err == nil {
			got <- p
		}
	}()
	require.Eventually(t, func() bool {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return !ln.head.empty() && ln.signals.slots.ch != nil
	}, 2*time.Second, time.Millisecond, "the fifth request waits for a slot")

	ln.mu.Lock()
	ln.dims[dimRecords].waited = clk.Now() // the record rate binds: batches are cut to its size
	ln.mu.Unlock()
	size, _ := ln.nextBatch()
	require.Less(t, size, 80, "the batch size left the band")
	require.Equal(t, 8, ln.concurrency(), "the lower level's trial was abandoned")

	select {
	case p := <-got:
		held = append(held, p)
	case <-time.After(2 * time.Second):
		t.Error("four of eight slots free, and the head still waits for one")
	}
	for _, p := range held {
		ln.release(p, nil)
	}
	select {
	case p := <-got:
		ln.release(p, nil)
	default:
	}
}

// One Limiter may serve calls into several indexes (WithLimiter). Its
// lanes are keyed by the index's host and the namespace when the call
// knows its host (WithIndex): what it learns of a namespace of one index
// (the breaker, a 429 cut, a Retry-After) does not apply to the same
// namespace of another. Here index A is down, and the next call into
// healthy index B sends all its records.
func TestLimiterKeepsWhatItLearnedOfOneIndexFromAnother(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	idxA := fakeIndexConn(t, "http://127.0.0.1:1", true)
	idxB := fakeIndexConn(t, "http://127.0.0.1:2", false)
	opts := func(idx *pinecone.IndexConnection) []Option {
		return []Option{WithIndex(idx), WithLimiter(lim), withClock(clk), withRand(maxRand), WithMaxRetries(ClassServer, 0)}
	}
	_, err := All(ctx, vectors(500, 4), opts(idxA)...)
	require.Error(t, err, "index A is down")
	require.True(t, lim.State("ns").Paused, "A's outage opened the breaker of namespace ns")

	res, err := All(ctx, vectors(50, 4), opts(idxB)...)
	assert.NoError(t, err, "index B is up")
	assert.Equal(t, 50, res.Upserted, "B's records were failed by A's breaker")
	assert.Len(t, lim.lanes, 2, "a lane of ns for each index")
}

// A Limiter that serves several indexes has a lane of a namespace for
// each; its State of the namespace is that of the index that sent last.
func TestLimiterStateIsOfTheIndexThatSentLast(t *testing.T) {
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	send := func(host string, e *Error) {
		ln := lim.holdLane(laneID{host: host, key: "ns"}, MaxBatchSize)
		p, err := ln.acquire(context.Background(), req(1))
		require.NoError(t, err)
		ln.release(p, e)
		clk.Advance(time.Millisecond)
	}
	send("a.svc.pinecone.io", &Error{Class: ClassRateLimited, RetryAfter: time.Minute})
	assert.True(t, lim.State("ns").Paused, "a paused for a minute")
	send("b.svc.pinecone.io", nil)
	assert.False(t, lim.State("ns").Paused, "b, which sent last, is not paused")
}

// A route takes its lane from the Limiter with its hold on it, in one step
// under the Limiter's mutex (holdLane): another call making a lane cannot
// sweep in between, take the new lane for quiet and, beyond maxLanes,
// forget it while the route is about to send through it; the namespace
// would be paced through two lanes, each with the whole rate (see
// TestLimiterKeepsALaneACallsRouteHolds). Here a sweep comes right after
// the making of a lane, every other lane held.
func TestLimiterKeepsALaneBetweenItsMakingAndItsRoutesHold(t *testing.T) {
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	hold := func(key string) *lane { return lim.holdLane(laneID{key: key}, MaxBatchSize) }
	for i := range maxLanes - 1 { // a Writer over many namespaces holds their routes
		hold(fmt.Sprint("held-", i))
		clk.Advance(time.Millisecond)
	}
	k := hold("k") // call X's route makes its lane...
	clk.Advance(time.Millisecond)
	hold("m") // ...and call Y's makes another, which sweeps
	assert.True(t, k == lim.lane("k", MaxBatchSize), "a lane a route holds was forgotten: namespace k now has two lanes")
}

// A Limiter kept between calls (WithLimiter, or one a Writer and a later
// All share) sits idle between them. The rate's curve climbs only while
// the limit holds requests back, so the next call starts where the last
// one left the curve, not a minute further along it, where the record
// rate would be thousands of times what the index took (rateControl.rest).
func TestAnIdleGapBetweenCallsDoesNotClimbTheRateCurve(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	ln := lim.holdLane(laneID{key: "ns"}, MaxBatchSize)
	measuredLane(ln, clk, 1000)

	// The first call ends; the service calls again a minute later.
	clk.Advance(time.Minute)
	var ps []permit
	for range 3 { // the bucket holds 100 records: the later ones wait
		p, err := ln.acquire(ctx, req(100))
		require.NoError(t, err)
		ps = append(ps, p)
	}
	clk.Advance(20 * time.Millisecond)
	ln.release(ps[0], nil)

	ln.mu.Lock()
	limit := ln.dims[dimRecords].ctl.limit
	ln.mu.Unlock()
	assert.Less(t, limit, 2*1000.0,
		"after an idle minute the first answer of the next call moved the record rate from 1000/s to %.4g/s", limit)
	for _, p := range ps[1:] {
		ln.release(p, nil)
	}
}

// giveUpClock is a fakeClock whose Sleeps, while giveUp is set, wait
// their whole time and then end the caller's context: a caller that gave
// up on a request while it waited.
type giveUpClock struct {
	*fakeClock
	giveUp context.CancelFunc
}

func (c *giveUpClock) Sleep(ctx context.Context, d time.Duration) error {
	if c.giveUp == nil {
		return c.fakeClock.Sleep(ctx, d)
	}
	c.Advance(d)
	c.giveUp()
	return ctx.Err()
}

// A rest is time with nothing in flight and no request at a head. A
// request that waited at the head seconds for its tokens and was given up
// (a call sharing the Limiter stopped) was held back by the rate: the next
// request does not count that wait as a rest, as it did once (the curve
// held still over it).
func TestTheTimeARequestWaitedAtTheHeadIsNoRestOfTheLane(t *testing.T) {
	ctx := context.Background()
	clk := &giveUpClock{fakeClock: newFakeClock()}
	lim := &Limiter{clock: clk}
	ln := lim.holdLane(laneID{key: "ns"}, MaxBatchSize)
	measuredLane(ln, clk.fakeClock, 1000)
	ln.mu.Lock()
	ln.dims[dimRecords].ctl.climbed.at = clk.Now()
	ln.mu.Unlock()

	p, err := ln.acquire(ctx, req(100))
	require.NoError(t, err)
	clk.Advance(20 * time.Millisecond)
	ln.release(p, nil) // the lane is idle from here...
	ln.mu.Lock()
	origin := ln.dims[dimRecords].ctl.origin
	ln.mu.Unlock()

	// ...until a request of another call reaches the head at once, waits
	// there seconds for its tokens, and is given up.
	stop, cancel := context.WithCancel(ctx)
	clk.giveUp = cancel
	start := clk.Now()
	_, err = ln.acquire(stop, req(5000))
	require.ErrorIs(t, err, context.Canceled)
	clk.giveUp = nil
	held := clk.Now().Sub(start)
	require.Greater(t, held, 4*time.Second, "the request waited at the head for its tokens")

	p, err = ln.acquire(ctx, req(10))
	require.NoError(t, err)
	ln.mu.Lock()
	c := ln.dims[dimRecords].ctl
	ln.mu.Unlock()
	clk.Advance(20 * time.Millisecond)
	ln.release(p, nil)
	assert.Less(t, c.climbed.paused, 100*time.Millisecond,
		"the %v a request waited at the head for tokens counted as a rest (paused)", held)
	assert.Less(t, c.origin.Sub(origin), 100*time.Millisecond,
		"the curve was held over the %v the rate held a request back at the head", held)
}

// hookClock is a fakeClock that runs the next of its hooks at each Sleep,
// before the sleep moves the clock: what happens meanwhile elsewhere.
type hookClock struct {
	*fakeClock
	mu    sync.Mutex
	hooks []func()
}

func (c *hookClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	var h func()
	if len(c.hooks) > 0 {
		h, c.hooks = c.hooks[0], c.hooks[1:]
	}
	c.mu.Unlock()
	if h != nil {
		h()
	}
	return c.fakeClock.Sleep(ctx, d)
}

// A request with its own slots that gave back its slot and its place at
// the head during a Retry-After (ownSlot.yieldThroughPause) and takes a
// place again after the pause ends the lane's rest there: once, a rest
// begun during the pause stayed open while it waited and was in flight,
// and the curve held still over time the lane was sending.
func TestARequestBackAtTheHeadAfterAPauseEndsTheRest(t *testing.T) {
	ctx := context.Background()
	clk := &hookClock{fakeClock: newFakeClock()}
	lim := &Limiter{clock: clk}
	ln := lim.holdLane(laneID{key: "ns"}, MaxBatchSize)
	measuredLane(ln, clk.fakeClock, 1000)

	own := make(chan struct{}, 2) // call A: WithConcurrency(2)
	p1, err := ln.acquire(ctx, request{n: 1, slots: own})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := ln.acquire(ctx, req(1)) // call B, adaptive
	if err != nil {
		t.Fatal(err)
	}
	clk.hooks = []func(){
		// While A's next request waits at the head for its tokens, the
		// index answers p1 with a 503 and a Retry-After of 30 s: the lane
		// pauses, and the request yields its slot and place at the head.
		func() { ln.release(p1, &Error{Class: ClassServer, RetryAfter: 30 * time.Second}) },
		// During the pause, p2 is answered: nothing in flight or at a
		// head, the lane rests.
		func() { ln.release(p2, nil) },
	}
	r, err := ln.acquire(ctx, request{n: 5000, slots: own})
	if err != nil {
		t.Fatal(err)
	}
	if len(clk.hooks) != 0 {
		t.Fatalf("the scenario did not run: %d hooks left", len(clk.hooks))
	}
	ln.mu.Lock()
	idle := ln.slots.idleSince
	origin := ln.dims[dimRecords].ctl.origin
	ln.mu.Unlock()
	sentAt := clk.Now()

	// r is in flight for 5 s; then another request reaches a head.
	clk.Advance(5 * time.Second)
	q, err := ln.acquire(ctx, request{n: 1, slots: own})
	if err != nil {
		t.Fatal(err)
	}
	ln.mu.Lock()
	shift := ln.dims[dimRecords].ctl.origin.Sub(origin)
	ln.mu.Unlock()
	ln.release(r, nil)
	ln.release(q, nil)

	if !idle.IsZero() {
		t.Errorf("a request admitted after waiting at the head again left the lane resting since %v (admitted at %v)", idle.Sub(newFakeClock().Now()), sentAt.Sub(newFakeClock().Now()))
	}
	if shift > 0 {
		t.Errorf("the %v a request was in flight counted as a rest: the curve's origin moved %v after it was sent", 5*time.Second, shift)
	}
}
