package upsert

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/upsertlib/upsert/internal/tokenbucket"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
)

var errRateLimited = &Error{Class: ClassRateLimited, GRPCCode: codes.ResourceExhausted}

// capLane returns a lane on a fake clock whose rate is already capped at r,
// as after a 429 episode that measured the index's rate.
func capLane(r float64) (*lane, *fakeClock) {
	clk := newFakeClock()
	ln := newLane(clk)
	capAt(ln, clk, r)
	return ln, clk
}

// capAt puts ln in the state of a lane that measured the index at r
// records/s and was just cut there.
func capAt(ln *lane, clk *fakeClock, r float64) {
	ln.records.SetLimitAt(clk.Now(), rate.Limit(r))
	ln.wmax, ln.cutBeta, ln.recovery, ln.measured = r, rateCut, rateRecovery, true
	ln.cutAt, ln.grownAt, ln.lastCut = clk.Now(), clk.Now(), clk.Now()
	ln.slowStart = false
}

func TestLimiterCutsOncePerRoundTrip(t *testing.T) {
	ctx := context.Background()
	ln, clk := capLane(1000)
	ln.conc = 10
	clk.Advance(time.Second)

	var inFlight []permit
	for range 10 {
		p, err := ln.acquire(ctx, 10, 0, nil, false)
		require.NoError(t, err)
		inFlight = append(inFlight, p)
	}
	for _, p := range inFlight {
		ln.release(p, errRateLimited)
	}
	st := ln.state()
	assert.Equal(t, 1, ln.cuts, "ten 429s of one round trip are one episode")
	assert.Less(t, st.Rate, 1000.0)
	assert.Equal(t, 9, st.Concurrency, "concurrency drops one step")

	rateAfterFirst := st.Rate
	clk.Advance(time.Second)
	p, err := ln.acquire(ctx, 10, 0, nil, false)
	require.NoError(t, err)
	ln.release(p, errRateLimited)
	assert.Equal(t, 2, ln.cuts, "a 429 of a request sent after the cut is a new episode")
	assert.Less(t, ln.state().Rate, rateAfterFirst)
	assert.Equal(t, 8, ln.state().Concurrency)
}

func TestLimiterLetsAnOverdrawnIndexRefillBeforeCuttingAgain(t *testing.T) {
	ctx := context.Background()
	ln, clk := capLane(1000)
	ln.fullMean = float64(2 * time.Millisecond) // a fast index
	clk.Advance(time.Second)
	refuse := func() {
		p, err := ln.acquire(ctx, 1, 0, nil, false)
		require.NoError(t, err)
		clk.Advance(2 * time.Millisecond)
		ln.release(p, errRateLimited)
	}
	refuse()
	require.Equal(t, 1, ln.cuts)
	for range 5 {
		clk.Advance(5 * time.Millisecond) // each one sent after a round trip
		refuse()
	}
	assert.Equal(t, 1, ln.cuts, "429s of requests sent within 100 ms of the cut are still its episode")
	clk.Advance(100 * time.Millisecond)
	refuse()
	assert.Equal(t, 1, ln.cuts, "while the index accepts nothing, one sent later is the same episode")
	p, err := ln.acquire(ctx, 1, 0, nil, false)
	require.NoError(t, err)
	ln.release(p, nil)
	refuse()
	assert.Equal(t, 2, ln.cuts, "once it accepts, one sent later starts a new episode")

	clk.Advance(drainFor)
	refuse()
	assert.Equal(t, 3, ln.cuts, "and so does one after drainFor, accepted or not")
}

func TestLimiterFirstCutHalvesTheSendingRate(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	ln := newLane(clk)
	own := make(chan struct{}, 1) // the caller's own slot: concurrency plays no part
	// 50 requests of 100 records over a second: 5000 records/s, uncapped.
	for range 50 {
		p, err := ln.acquire(ctx, 100, 0, own, false)
		require.NoError(t, err)
		clk.Advance(20 * time.Millisecond)
		ln.release(p, nil)
	}
	assert.True(t, math.IsInf(ln.state().Rate, 1), "no cap before the index pushes back")
	p, err := ln.acquire(ctx, 100, 0, own, false)
	require.NoError(t, err)
	ln.release(p, errRateLimited)
	assert.InDelta(t, 5000*slowStartCut, ln.state().Rate, 5000*slowStartCut*0.15)
}

func TestLimiterClimbsFromTheCutWhenTheIndexAcceptedNothingYet(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	ln := newLane(clk)
	var first []permit
	for range startConcurrency { // slow start's first requests
		p, err := ln.acquire(ctx, startBatchSize, 0, nil, false)
		require.NoError(t, err)
		first = append(first, p)
	}
	clk.Advance(5 * time.Millisecond)
	for _, p := range first { // refused before any was accepted
		ln.release(p, errRateLimited)
	}
	require.Equal(t, 1, ln.cuts)
	cutRate := ln.state().Rate
	assert.Equal(t, cutRate, ln.wmax, "what the lane sent is no level: it climbs from the cut")
	rateAt := func(after time.Duration) float64 {
		clk.Advance(after)
		ln.rateWaited = clk.Now() // requests wait for the rate
		ln.growRate(clk.Now())
		return ln.state().Rate
	}
	assert.Less(t, rateAt(guessRecovery/4), 1.1*cutRate, "slowly at first, while the index's bucket is empty")
	assert.Greater(t, rateAt(guessRecovery), 2*cutRate, "then ever faster")
}

// sendEvery sends n requests of size records through ln one at a time,
// every apart, each answered with e. Each is taken to have waited for the
// rate, so that a capped rate grows.
func sendEvery(t *testing.T, ln *lane, clk *fakeClock, n, size int, every time.Duration, e *Error) {
	t.Helper()
	own := make(chan struct{}, 1) // the caller's own slot: concurrency plays no part
	for range n {
		p, err := ln.acquire(context.Background(), size, 0, own, false)
		require.NoError(t, err)
		clk.Advance(every)
		ln.rateWaited = clk.Now()
		ln.release(p, e)
	}
}

func TestLimiterLeavesAGuessedLevelSooner(t *testing.T) {
	clk := newFakeClock()
	ln := newLane(clk)
	send := func(n int, every time.Duration, e *Error) { sendEvery(t, ln, clk, n, 10, every, e) }
	send(50, 10*time.Millisecond, nil)
	send(1, 0, errRateLimited)
	require.False(t, ln.measured)
	assert.Equal(t, guessRecovery, ln.recovery, "the level of slow start's overshoot is a guess")
	level := ln.wmax
	clk.Advance(guessRecovery)
	ln.growRate(clk.Now())
	assert.InDelta(t, level, ln.state().Rate, 1, "the rate is back at the guessed level after guessRecovery")

	// A second episode long enough after the first measures the level,
	// but slow start's cut was deep: the index's bucket overflowed while
	// the rate climbed back, and the level is a floor.
	send(100, 10*time.Millisecond, nil)
	send(1, 0, errRateLimited)
	assert.True(t, ln.measured)
	assert.Equal(t, guessRecovery, ln.recovery, "a level measured after a deep cut is left sooner")
	// The next one, after a regular cut, is a measure.
	send(100, 10*time.Millisecond, nil)
	send(1, 0, errRateLimited)
	assert.Equal(t, rateRecovery, ln.recovery, "a measured level is approached slowly")
}

func TestLimiterFloorsTheLevelAtHalfTheBestSecondUnderACap(t *testing.T) {
	t.Run("429s that come whatever the rate do not grind it down", func(t *testing.T) {
		ln, clk := capLane(10_000)
		sendEvery(t, ln, clk, 300, 100, 10*time.Millisecond, nil) // 10k records/s for 3 s
		for range 10 {                                            // an episode every 200 ms
			sendEvery(t, ln, clk, 20, 10, 10*time.Millisecond, nil)
			sendEvery(t, ln, clk, 1, 10, 0, errRateLimited)
		}
		assert.Greater(t, ln.state().Rate, 0.4*10_000, "half the best second, cut once")
	})
	t.Run("a burst taken in slow start is no best second", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		// An index of 2000 records/s with a 15-second burst: slow start
		// gets 30k records through in a second, then the burst is spent.
		sendEvery(t, ln, clk, 30, 1000, 33*time.Millisecond, nil)
		clk.Advance(10 * time.Millisecond)
		sendEvery(t, ln, clk, 1, 100, 0, errRateLimited)
		require.Equal(t, 1, ln.cuts)
		// Twelve seconds at the index's rate, no 429 among them, then one.
		sendEvery(t, ln, clk, 120, 200, 100*time.Millisecond, nil)
		sendEvery(t, ln, clk, 1, 200, 0, errRateLimited)
		assert.Less(t, ln.state().Rate, 2000.0, "cut below the index's rate, not to half the burst's")
	})
}

func TestLimiterComesDownToWhatTheIndexAcceptsAfterABigBurst(t *testing.T) {
	clk := newFakeClock()
	ln := newLane(clk)
	start := clk.Now()
	// An index of 2000 records/s with a 15-second burst: slow start gets
	// 30k records through in a second, then the burst is spent.
	sendEvery(t, ln, clk, 30, 1000, 33*time.Millisecond, nil)
	clk.Advance(10 * time.Millisecond)
	sendEvery(t, ln, clk, 1, 100, 0, errRateLimited)
	require.Equal(t, 1, ln.cuts)
	// From now on the index takes a request of 1000 records every 500 ms
	// and refuses the rest, as a bucket refilling at 2000 records/s does.
	own := make(chan struct{}, 1)
	var next time.Time
	refusedLate := 0 // after the third second
	for clk.Now().Before(start.Add(6 * time.Second)) {
		p, err := ln.acquire(context.Background(), 1000, 0, own, false)
		require.NoError(t, err)
		clk.Advance(10 * time.Millisecond)
		ln.rateWaited = clk.Now()
		var e *Error
		if clk.Now().Before(next) {
			e = errRateLimited
			if clk.Now().Sub(start) > 3*time.Second {
				refusedLate++
			}
		} else {
			next = clk.Now().Add(500 * time.Millisecond)
		}
		ln.release(p, e)
	}
	// Cut by 15% an episode from 9k records/s, the storm went on past
	// the sixth second.
	assert.Less(t, ln.state().Rate, 2500.0, "at the index's rate")
	assert.LessOrEqual(t, refusedLate, 1, "the storm ended within three seconds")
}

func TestLimiterMeasuresNothingWhileClimbingBackToSlowStartsGuess(t *testing.T) {
	clk := newFakeClock()
	ln := newLane(clk)
	send := func(n, size int, every time.Duration, e *Error) { sendEvery(t, ln, clk, n, size, every, e) }
	send(50, 10, 10*time.Millisecond, nil) // slow start at 1000 records/s
	send(1, 10, 0, errRateLimited)
	require.Equal(t, 1, ln.cuts)
	// 700 ms later, past minEpisodeGap but not yet back at the guess
	// (guessRecovery): a random 429 (a flaky index) or the bucket slow
	// start emptied, not a measure of the index's rate.
	send(70, 1, 10*time.Millisecond, nil)
	send(1, 1, 0, errRateLimited)
	require.Equal(t, 2, ln.cuts)
	assert.False(t, ln.measured, "the second episode measures nothing")
	assert.Equal(t, guessRecovery, ln.recovery)
	// A guess far above the index's rate is never reached: the next
	// episode is a measure all the same.
	send(70, 1, 10*time.Millisecond, nil)
	send(1, 1, 0, errRateLimited)
	require.Equal(t, 3, ln.cuts)
	assert.True(t, ln.measured, "the third episode is a measure")
}

func TestLimiterSendLimitCutsStaleBatches(t *testing.T) {
	ln, _ := capLane(2000)
	assert.Equal(t, 2000/sizedRequestsPerSecond, ln.sendLimit(100, false), "a capped rate sends a twentieth of a second's worth at most")
	ln.ceilSize = 60
	assert.Equal(t, 59, ln.sendLimit(100, false), "a size known to be too large is not sent")
	ln.probeSize = 100
	ln.sendLimit(100, true)
	assert.Zero(t, ln.probeSize, "a probe batch that is cut is no longer out")
	uncapped := newLane(newFakeClock())
	assert.Equal(t, MaxBatchSize, uncapped.sendLimit(1000, false))
}

func TestLimiterLevelIsWhatTheIndexAcceptedBetweenEpisodes(t *testing.T) {
	ctx := context.Background()
	ln, clk := capLane(10_000)
	own := make(chan struct{}, 1)
	// Two seconds of 3000 records/s accepted since the last episode.
	for range 60 {
		p, err := ln.acquire(ctx, 100, 0, own, false)
		require.NoError(t, err)
		clk.Advance(time.Second / 30)
		ln.release(p, nil)
	}
	p, err := ln.acquire(ctx, 100, 0, own, false)
	require.NoError(t, err)
	ln.release(p, errRateLimited)
	assert.InDelta(t, 3000, ln.wmax, 150, "the level is the accepted rate")
	assert.InDelta(t, 3000*rateCut, ln.state().Rate, 150)
}

func TestLimiterClimbsBackAlongACubic(t *testing.T) {
	ln, clk := capLane(8500)
	ln.wmax = 10_000
	rateAt := func(after time.Duration) float64 {
		clk.Advance(after)
		ln.rateWaited = clk.Now() // requests are waiting for the rate
		ln.growRate(clk.Now())
		return ln.state().Rate
	}
	r1 := rateAt(rateRecovery / 4)
	r2 := rateAt(rateRecovery / 4)
	r3 := rateAt(rateRecovery / 2)
	assert.Greater(t, r1-8500, r2-r1, "the climb is fast at first and slows down")
	assert.InDelta(t, 10_000, r3, 1, "the level is reached after rateRecovery")
	r4 := rateAt(rateRecovery / 2)
	r5 := rateAt(rateRecovery / 2)
	assert.Greater(t, r4, 10_000.0, "then the rate probes above the level")
	assert.Greater(t, r5-r4, r4-r3, "ever faster")

	t.Run("a rate that holds nothing back does not grow", func(t *testing.T) {
		before := ln.state().Rate
		clk.Advance(10 * time.Second) // no request waited for tokens
		ln.growRate(clk.Now())
		assert.Equal(t, before, ln.state().Rate)
	})
}

func TestLimiterConvergesToTheIndexCapacity(t *testing.T) {
	tests := []struct {
		name     string
		capacity float64
		burst    int
		latency  time.Duration
	}{
		{"a fast index of 20k records/s", 20_000, 5_000, 5 * time.Millisecond},
		{"a tight index of 3k records/s", 3_000, 750, 5 * time.Millisecond},
		{"a large index of 100k records/s", 100_000, 20_000, 2 * time.Millisecond},
	}
	for _, tt := range tests {
		for _, pinned := range []int{0, 1} {
			name := tt.name + " is used at 95% or more with 2% or fewer 429s"
			if pinned > 0 {
				name += fmt.Sprintf(" by a writer pinned to %d request in flight", pinned)
			}
			t.Run(name, func(t *testing.T) {
				rates, rejected := simulateSharedIndex(t, 1, tt.capacity, tt.burst, tt.latency, 2*time.Minute, time.Minute, pinned, 0)
				eff := rates[0] / tt.capacity
				t.Logf("efficiency %.1f%%, refused %.2f%%", 100*eff, 100*rejected)
				assert.GreaterOrEqual(t, eff, 0.95, "efficiency")
				assert.LessOrEqual(t, eff, 1.02, "no more than the index accepts")
				assert.LessOrEqual(t, rejected, 0.02, "share of requests answered 429")
			})
		}
	}
}

// simulateSharedIndex runs writers lanes, each on its own virtual clock,
// against one index that admits records and requests (100/s, as
// Pinecone's namespaces) with upserttest's token buckets and answers in
// latency give or take a half (from a seeded source, so that writers do
// not fall into lockstep and the run is the same every time). A writer keeps as many
// requests in flight as its lane's concurrency allows, as All does by
// default, or as pinned allows when it is not 0 (WithConcurrency(pinned)).
// Events are taken in time order, so that the buckets see time move
// forward. It returns what each lane got accepted per second from
// measureFrom to d, and the share of requests refused then.
func simulateSharedIndex(t *testing.T, writers int, capacity float64, burst int, latency, d, measureFrom time.Duration, pinned int, seed uint64) (rates []float64, refusedShare float64) {
	t.Helper()
	records := tokenbucket.New(capacity, burst)
	requests := tokenbucket.New(maxRequestRate, maxRequestRate)
	jitter := rand.New(rand.NewPCG(uint64(writers), uint64(capacity)+seed))
	type writer struct {
		clk   *simClock
		ln    *lane
		slots chan struct{} // the pinned slots, or nil for the lane's
		n     int           // the batch formed and not yet sent, if any
		probe bool
		try   time.Time // when it next tries to send it; zero: when a request returns
	}
	type request struct {
		w      int
		p      permit
		ok     bool
		answer time.Time
	}
	ws := make([]*writer, writers)
	for i := range ws {
		clk := &simClock{fakeClock: newFakeClock()}
		ws[i] = &writer{clk: clk, ln: newLane(clk), try: clk.Now()}
		ws[i].ln.capRequests()
		if pinned > 0 {
			ws[i].slots = make(chan struct{}, pinned)
		}
	}
	start := ws[0].clk.Now()
	from, end := start.Add(measureFrom), start.Add(d)
	var inFlight []request
	accepted := make([]int, writers)
	sent, refused := 0, 0
	for {
		// The next event: an answer, or a writer trying to send.
		now, wi, ri := end, -1, -1
		for i, r := range inFlight {
			if r.answer.Before(now) {
				now, ri = r.answer, i
			}
		}
		for i, w := range ws {
			if !w.try.IsZero() && w.try.Before(now) {
				now, wi, ri = w.try, i, -1
			}
		}
		if wi < 0 && ri < 0 {
			break
		}
		if ri >= 0 {
			r := inFlight[ri]
			inFlight = slices.Delete(inFlight, ri, ri+1)
			w := ws[r.w]
			w.clk.advanceTo(now)
			counted := now.After(from)
			if counted {
				sent++
			}
			if r.ok {
				w.ln.release(r.p, nil)
				if counted {
					accepted[r.w] += r.p.n
				}
			} else {
				w.ln.release(r.p, errRateLimited)
				if counted {
					refused++
				}
			}
			if w.try.IsZero() {
				w.try = now // it waited for a slot
			}
			continue
		}
		w := ws[wi]
		w.clk.advanceTo(now)
		if w.n == 0 {
			w.n, w.probe = w.ln.nextBatch()
		}
		if st := w.ln.state(); w.slots != nil && len(w.slots) == cap(w.slots) || w.slots == nil && st.InFlight >= st.Concurrency {
			w.try = time.Time{}
			continue
		}
		n := min(w.n, w.ln.sendLimit(w.n, w.probe))
		p, wait := w.clk.acquire(t, w.ln, n, w.slots, w.probe)
		if wait > 0 {
			w.try = now.Add(wait)
			continue
		}
		ok := requests.Has(now, 1) && records.Has(now, n)
		if ok {
			requests.Take(now, 1)
			records.Take(now, n)
		}
		inFlight = append(inFlight, request{w: wi, p: p, ok: ok, answer: now.Add(latency/2 + time.Duration(jitter.Int64N(int64(latency))))})
		w.n, w.probe, w.try = w.n-n, false, now
	}
	rates = make([]float64, writers)
	for i, a := range accepted {
		rates[i] = float64(a) / (d - measureFrom).Seconds()
	}
	return rates, float64(refused) / float64(sent)
}

// simClock is a writer's time in simulateSharedIndex. A Sleep does not
// pass: it notes how long the lane would wait and ends the acquire it is
// in, which the simulation calls again when that time has come, so that
// the writer's clock never passes the answers of its requests in flight.
type simClock struct {
	*fakeClock
	cancel context.CancelFunc
	wait   time.Duration
}

func (c *simClock) Sleep(ctx context.Context, d time.Duration) error {
	c.wait = d
	c.cancel()
	return ctx.Err()
}

func (c *simClock) advanceTo(t time.Time) {
	if gap := t.Sub(c.Now()); gap > 0 {
		c.Advance(gap)
	}
}

// acquire asks ln for a permit now; when the lane would wait for it, it
// returns how long instead.
func (c *simClock) acquire(t *testing.T, ln *lane, n int, slots chan struct{}, probe bool) (permit, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.cancel, c.wait = cancel, 0
	p, err := ln.acquire(ctx, n, 0, slots, probe)
	if err != nil {
		require.Positive(t, c.wait, "acquire failed without waiting: %v", err)
		return permit{}, c.wait
	}
	return p, 0
}

func TestLimiterSharesAnIndexWithoutStarvingAWriter(t *testing.T) {
	tests := []struct {
		name     string
		writers  int
		capacity float64
		burst    int
		pinned   int     // WithConcurrency, or 0 for the lane's own
		total    float64 // the least share of the capacity used in total, in the median run
		refused  float64 // the most requests answered 429, in the median run
	}{
		// Each writer finds the capacity on its own, so together they
		// overshoot more often than one writer does, and the more of
		// them, the more often.
		{"two writers on an index of 20k records/s", 2, 20_000, 5_000, 0, 0.95, 0.06},
		{"four writers on an index of 20k records/s", 4, 20_000, 5_000, 0, 0.95, 0.06},
		{"four writers on an index of 3k records/s", 4, 3_000, 750, 0, 0.95, 0.06},
		// More than four writers send more than the namespace's 100
		// requests a second at 20 apiece: they must learn to send fewer.
		{"eight writers on an index of 20k records/s", 8, 20_000, 5_000, 0, 0.95, 0.06},
		// Sixteen need batches of 200 records on average to take 20k
		// records/s in 100 requests, and get there by trial and error;
		// most of them climb from their first cut, as nothing of theirs
		// was accepted before it (70-100% over 40 runs).
		{"sixteen writers on an index of 20k records/s", 16, 20_000, 5_000, 0, 0.90, 0.10},
		// With one request in flight, a writer's first level is what its
		// slow start happened to get through before the index's bucket
		// ran dry, and the climb, in proportion to each writer's level,
		// keeps the shares the start dealt. Two and four writers start
		// close enough; eight and more pinned to one request each can
		// start ten times apart, and stay so (see BENCHMARKS.md).
		{"two writers pinned to one request in flight on an index of 20k records/s", 2, 20_000, 5_000, 1, 0.95, 0.06},
		{"four writers pinned to one request in flight on an index of 20k records/s", 4, 20_000, 5_000, 1, 0.95, 0.06},
		{"four writers pinned to one request in flight on an index of 3k records/s", 4, 3_000, 750, 1, 0.95, 0.06},
	}
	// Writers that each find the capacity on their own are a chaotic
	// system: the jitter of one answer changes who is cut when, and the
	// shares 30 s later. A case run once passes or fails by luck (with
	// rateCut at 0.849 instead of 0.85, sixteen writers used 81.5% of the
	// index in one run; 70-100% over 40), so each case runs three seeds at
	// four latencies and the medians carry the claims. Starvation, a
	// writer held under a tenth of its share, is checked in every run.
	for _, tt := range tests {
		name := fmt.Sprintf("%s use %.0f%% of it or more, the smallest share is 40%% of a fair one or more, and no writer starves", tt.name, 100*tt.total)
		t.Run(name, func(t *testing.T) {
			fair := tt.capacity / float64(tt.writers)
			var totals, refusals, smallest []float64
			for _, latency := range []time.Duration{3 * time.Millisecond, 5 * time.Millisecond, 8 * time.Millisecond, 13 * time.Millisecond} {
				for seed := range uint64(3) {
					rates, refused := simulateSharedIndex(t, tt.writers, tt.capacity, tt.burst, latency, 30*time.Second, 2*time.Second, tt.pinned, seed)
					total := 0.0
					for _, r := range rates {
						total += r
					}
					least := slices.Min(rates)
					assert.GreaterOrEqual(t, least, fair/10, "answering in %v, seed %d: %.0f", latency, seed, rates)
					totals = append(totals, total/tt.capacity)
					refusals = append(refusals, refused)
					smallest = append(smallest, least/fair)
				}
			}
			t.Logf("in total %.2f, refused %.3f, the smallest writer's share %.2f", totals, refusals, smallest)
			assert.GreaterOrEqual(t, median(totals), tt.total, "share of the capacity used in total")
			assert.LessOrEqual(t, median(refusals), tt.refused, "share of requests answered 429")
			assert.GreaterOrEqual(t, median(smallest), 0.4, "the smallest writer's rate over its share")
		})
	}
}

// median returns the median of xs, which must not be empty.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func TestLimiterRechecksAReservationAfterACut(t *testing.T) {
	ctx := context.Background()
	clk := &cuttingClock{fakeClock: newFakeClock()}
	ln := newLane(clk)
	clk.ln = ln
	ln.records = rate.NewLimiter(100, 100)
	ln.slowStart = false
	start := clk.Now()
	_, err := ln.waitRate(ctx, 100, 0, false, false) // empties the bucket
	require.NoError(t, err)
	_, err = ln.waitRate(ctx, 100, 0, false, false) // waits 1 s at 100/s, but the rate is cut meanwhile
	require.NoError(t, err)
	require.Len(t, clk.Sleeps(), 2, "the cut woke the waiter, which slept again")
	want := 100 / float64(ln.records.Limit())
	assert.InDelta(t, want, clk.Now().Sub(start).Seconds(), 0.01, "the wait is the one of the new rate")
}

func TestLimiterSendsBackABatchThatACutMadeTooLarge(t *testing.T) {
	ctx := context.Background()
	ln, _ := capLane(2000) // batches of up to 100 records
	p, err := ln.acquireOrRecut(ctx, 100, 0, nil, false)
	require.NoError(t, err, "a batch within the limit is admitted")
	ln.release(p, nil)
	ln.mu.Lock()
	ln.cut(ln.clock.Now(), 0) // while a batch of 100 waits its turn
	ln.mu.Unlock()
	require.Less(t, ln.sendLimit(100, false), 100)
	_, err = ln.acquireOrRecut(ctx, 100, 0, nil, false)
	assert.ErrorIs(t, err, errStaleBatch, "not admitted: it would wait for 100 tokens at the new rate with the queue behind it")
	_, err = ln.acquire(ctx, 100, 0, nil, false)
	assert.NoError(t, err, "a pinned size is admitted whatever the limit")
}

// cuttingClock cuts the lane's rate during the first sleep, as a 429
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
		c.ln.cut(c.fakeClock.Now(), 0)
		c.ln.mu.Unlock()
		// The cut closed the head's wake channel; let its watcher cancel
		// the sleep's context before sleeping.
		<-ctx.Done()
	}
	return c.fakeClock.Sleep(ctx, d)
}

func TestLimiterNeverSpendsTokensFromBeforeACut(t *testing.T) {
	ctx := context.Background()
	ln, clk := capLane(1000)
	ln.conc = 1
	clk.Advance(time.Second) // a new episode, long after capLane's cut
	held, err := ln.acquire(ctx, 1, 0, nil, false)
	require.NoError(t, err)

	got := make(chan permit)
	go func() {
		p, err := ln.acquire(ctx, 100, 0, nil, false) // gets tokens, then waits for the slot
		if err == nil {
			got <- p
		}
	}()
	// Let the waiter reserve its tokens and block on the slot.
	require.Eventually(t, func() bool {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return ln.slotFreed != nil
	}, time.Second, time.Millisecond)
	clk.Advance(time.Second)
	ln.release(held, errRateLimited) // cuts the rate and frees the slot
	p := <-got
	assert.Equal(t, 1, ln.cuts)
	assert.NotEmpty(t, clk.Sleeps(), "the waiter waited again for tokens at the new rate")
	ln.release(p, nil)
}

func TestLimiterSpendsNoSavedTokensAfterSlowStart(t *testing.T) {
	ctx := context.Background()
	own := make(chan struct{}, 1) // the caller's own slot: concurrency plays no part
	send := func(t *testing.T, ln *lane, n int, e *Error) {
		t.Helper()
		p, err := ln.acquire(ctx, n, 0, own, false)
		require.NoError(t, err)
		ln.release(p, e)
	}
	// waitAfter is how long the next request of n records waits for rate
	// tokens.
	waitAfter := func(t *testing.T, ln *lane, clk *fakeClock, n int) time.Duration {
		t.Helper()
		before := clk.Now()
		p, err := ln.acquire(ctx, n, 0, own, false)
		require.NoError(t, err)
		ln.release(p, nil)
		return clk.Now().Sub(before)
	}

	t.Run("the burst slow start's large batches needed is not spent after the first cut", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		for range 5 {
			send(t, ln, 1000, nil) // the rate has no cap: its bucket grows to 1000
			clk.Advance(20 * time.Millisecond)
		}
		send(t, ln, 100, errRateLimited)
		require.Equal(t, 1, ln.cuts)
		r := ln.state().Rate
		// The bucket of the index is empty: what the lane saved up while
		// it had no cap would all be refused.
		assert.InDelta(t, (100 / r), waitAfter(t, ln, clk, 100).Seconds(), 0.001)
	})
	t.Run("a later cut keeps the tokens, since a 429 need not mean an empty bucket", func(t *testing.T) {
		ln, clk := capLane(1000)
		ln.records.SetBurstAt(clk.Now(), 500)
		clk.Advance(2 * time.Second) // idle: the lane's bucket fills
		send(t, ln, 50, errRateLimited)
		require.Equal(t, 1, ln.cuts)
		assert.Zero(t, waitAfter(t, ln, clk, 50), "a flaky index's 429 does not idle the lane")
	})
}

func TestLimiterConcurrency(t *testing.T) {
	ctx := context.Background()
	t.Run("slow start doubles concurrency each round trip while every slot is busy", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		// A producer with plenty of records: every completion is
		// followed by a new request, and new slots are filled at once.
		var inFlight []permit
		fill := func() {
			for ln.state().InFlight < ln.state().Concurrency {
				p, err := ln.acquire(ctx, 100, 0, nil, false)
				require.NoError(t, err)
				inFlight = append(inFlight, p)
			}
		}
		fill()
		for range 3 {
			c := ln.state().Concurrency
			round := inFlight
			inFlight = nil
			clk.Advance(time.Second) // slow enough that Pinecone's 100 requests/s do not bind
			for _, p := range round {
				ln.release(p, nil)
				fill()
			}
			assert.Equal(t, 2*c, ln.state().Concurrency)
		}
		for _, p := range inFlight {
			ln.release(p, nil)
		}
	})
	t.Run("concurrency does not grow while slots are idle", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		for range 20 {
			p, err := ln.acquire(ctx, 100, 0, nil, false) // one at a time: never all slots
			require.NoError(t, err)
			clk.Advance(10 * time.Millisecond)
			ln.release(p, nil)
		}
		assert.Equal(t, startConcurrency, ln.state().Concurrency)
	})
	t.Run("latency that doubles shows queueing and cuts concurrency by a quarter", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		ln.conc, ln.slowStart = 16, false
		lat := 10 * time.Millisecond
		for i := range 40 {
			if i == 20 {
				lat = 40 * time.Millisecond
			}
			p, err := ln.acquire(ctx, 100, 0, nil, false)
			require.NoError(t, err)
			clk.Advance(lat)
			ln.release(p, nil)
		}
		assert.Less(t, ln.state().Concurrency, 16)
	})
	t.Run("latency alone never takes concurrency below two", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		ln.conc, ln.slowStart = 8, false
		for i := range 200 {
			// A busy client: the best latency stays 10 ms, the average
			// is four times that.
			lat := 10 * time.Millisecond
			if i%2 == 1 {
				lat = 70 * time.Millisecond
			}
			p, err := ln.acquire(ctx, 100, 0, nil, false)
			require.NoError(t, err)
			clk.Advance(lat)
			ln.release(p, nil)
		}
		assert.Equal(t, pipelined, ln.state().Concurrency)
	})
	t.Run("a request beyond the limit waits for a slot", func(t *testing.T) {
		ln := newLane(newFakeClock())
		ln.conc = 1
		first, err := ln.acquire(ctx, 1, 0, nil, false)
		require.NoError(t, err)
		got := make(chan permit)
		go func() {
			if p, err := ln.acquire(ctx, 1, 0, nil, false); err == nil {
				got <- p
			}
		}()
		select {
		case <-got:
			t.Fatal("a second request got a slot while the only one was taken")
		case <-time.After(5 * time.Millisecond):
		}
		ln.release(first, nil)
		ln.release(<-got, nil)
	})
	t.Run("a canceled wait returns the context's error", func(t *testing.T) {
		ln := newLane(newFakeClock())
		ln.conc = 1
		p, err := ln.acquire(ctx, 1, 0, nil, false)
		require.NoError(t, err)
		defer ln.release(p, nil)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err = ln.acquire(cctx, 1, 0, nil, false)
		assert.ErrorIs(t, err, context.Canceled)
	})
}

func TestLimiterBatchSize(t *testing.T) {
	ctx := context.Background()
	// send runs one request of the size nextBatch asks for, taking
	// latency(n).
	send := func(ln *lane, clk *fakeClock, latency func(n int) time.Duration, e *Error) int {
		n, probe := ln.nextBatch()
		p, err := ln.acquire(ctx, n, 0, nil, probe)
		require.NoError(t, err)
		clk.Advance(latency(n))
		ln.release(p, e)
		return n
	}
	affine := func(n int) time.Duration { return 5*time.Millisecond + time.Duration(n)*20*time.Microsecond }
	t.Run("batches grow to Pinecone's limit while larger ones cost no more per record", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		for range 50 {
			send(ln, clk, affine, nil)
		}
		assert.Equal(t, MaxBatchSize, ln.state().BatchSize)
	})
	t.Run("batches stop below a size that is much slower per record", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		cliff := func(n int) time.Duration {
			if n > 300 {
				return 20 * affine(n)
			}
			return affine(n)
		}
		for range 100 {
			send(ln, clk, cliff, nil)
		}
		b := ln.state().BatchSize
		assert.LessOrEqual(t, b, 300)
		assert.GreaterOrEqual(t, b, 250, "and close to it")
	})
	timeout := &Error{Class: ClassTimeout}
	t.Run("one timeout of a usual batch leaves the batch size alone", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		ln.batch, ln.sized = 800, 800
		p, err := ln.acquire(ctx, 800, 0, nil, false)
		require.NoError(t, err)
		ln.release(p, timeout)
		assert.Equal(t, 800, ln.state().BatchSize)
	})
	t.Run("timeouts that keep hitting the usual size halve it and keep it below", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		ln.batch, ln.sized = 800, 800
		for range 2 {
			p, err := ln.acquire(ctx, 800, 0, nil, false)
			require.NoError(t, err)
			ln.release(p, timeout)
		}
		assert.Equal(t, 400, ln.state().BatchSize)
		for range 50 {
			n := send(ln, clk, affine, nil)
			assert.Less(t, n, 800)
		}
	})
	t.Run("a probe of a larger size that times out is remembered as too large", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		ln.batch, ln.sized, ln.fullCount = 400, 400, 2
		n, probe := ln.nextBatch()
		require.True(t, probe)
		p, err := ln.acquire(ctx, n, 0, nil, probe)
		require.NoError(t, err)
		ln.release(p, timeout)
		assert.Equal(t, 400, ln.state().BatchSize)
		for range 50 {
			assert.Less(t, send(ln, clk, affine, nil), n)
		}
	})
	t.Run("a probe out longer than a no-worse size would take is too large before it returns", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		ln.slowStart = false
		for range 2 {
			send(ln, clk, affine, nil) // 100 records in 7 ms: the baseline
		}
		n, probe := ln.nextBatch()
		require.True(t, probe)
		p, err := ln.acquire(ctx, n, 0, nil, probe)
		require.NoError(t, err)
		// The probe is 2× the size; no worse per record means ≤ 1.25 ×
		// 14 ms + 5 ms. At 30 ms it is still out.
		clk.Advance(30 * time.Millisecond)
		next, again := ln.nextBatch()
		assert.True(t, again, "the probe slot is free at once")
		assert.Equal(t, 150, next, "for a size between the current one and the one judged too large")
		q, err := ln.acquire(ctx, next, 0, nil, again)
		require.NoError(t, err)
		clk.Advance(affine(next))
		ln.release(q, nil)
		clk.Advance(2 * time.Second)
		ln.release(p, &Error{Class: ClassTimeout})
		for range 50 {
			assert.Less(t, send(ln, clk, affine, nil), n, "the size stays off limits")
		}
	})
	t.Run("time a probe batch waits to be sent does not count against it", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		ln.slowStart = false
		for range 2 {
			send(ln, clk, affine, nil)
		}
		n, probe := ln.nextBatch()
		require.True(t, probe)
		clk.Advance(time.Second) // formed, but queued behind others
		next, _ := ln.nextBatch()
		assert.Equal(t, 100, next)
		assert.Equal(t, n, ln.probeSize, "the probe is still pending")
	})
	t.Run("in slow start the first probe goes right behind the first request", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		n, probe := ln.nextBatch()
		require.False(t, probe, "the first request is of the starting size")
		first, err := ln.acquire(ctx, n, 0, nil, false)
		require.NoError(t, err)
		n, probe = ln.nextBatch()
		require.True(t, probe)
		assert.Equal(t, MaxBatchSize, n, "slow start probes ten times the size")
		p, err := ln.acquire(ctx, n, 0, nil, probe)
		require.NoError(t, err)
		clk.Advance(affine(startBatchSize))
		ln.release(first, nil)
		clk.Advance(affine(n) - affine(startBatchSize))
		ln.release(p, nil)
		assert.Equal(t, MaxBatchSize, ln.state().BatchSize)
	})
	t.Run("in slow start a larger batch size brings the concurrency to keep the request rate", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		slow := func(n int) time.Duration { return 50*time.Millisecond + time.Duration(n)*500*time.Microsecond }
		var out []permit
		for range 3 {
			p, err := ln.acquire(ctx, startBatchSize, 0, nil, false)
			require.NoError(t, err)
			out = append(out, p)
		}
		n, probe := ln.nextBatch()
		require.True(t, probe)
		p, err := ln.acquire(ctx, n, 0, nil, probe)
		require.NoError(t, err)
		clk.Advance(slow(startBatchSize))
		for _, q := range out[:2] {
			ln.release(q, nil) // the baseline: 100 ms
		}
		clk.Advance(slow(n) - slow(startBatchSize))
		ln.release(p, nil) // 550 ms: 5.5× as long, with 2 in flight
		assert.Equal(t, MaxBatchSize, ln.state().BatchSize)
		assert.GreaterOrEqual(t, ln.state().Concurrency, 11, "2 in flight × 5.5")
		assert.LessOrEqual(t, ln.state().Concurrency, maxConcurrency)
		ln.release(out[2], nil)
	})
	t.Run("a capped rate keeps batches to a twentieth of a second's worth", func(t *testing.T) {
		ln, _ := capLane(3000)
		ln.batch, ln.sized = MaxBatchSize, MaxBatchSize
		n, _ := ln.nextBatch()
		assert.Equal(t, 150, n)
	})
	t.Run("batches follow a rate that grows back up to the size adopted, without probing", func(t *testing.T) {
		ln, clk := capLane(2000)
		ln.batch, ln.sized = 100, 800
		n, probe := ln.nextBatch()
		assert.Equal(t, 100, n)
		assert.False(t, probe)
		ln.records.SetLimitAt(clk.Now(), 10_000)
		n, probe = ln.nextBatch()
		assert.Equal(t, 500, n)
		assert.False(t, probe)
		ln.records.SetLimitAt(clk.Now(), 40_000)
		n, _ = ln.nextBatch()
		assert.Equal(t, 800, n, "not past the size adopted on its latency")
	})
	t.Run("a probe toward a known limit stays within what the rate allows", func(t *testing.T) {
		ln, clk := capLane(3000)
		ln.batch, ln.sized, ln.fullCount = 100, 100, 2
		ln.ceilSize, ln.ceilUntil = 1000, clk.Now().Add(time.Minute)
		n, probe := ln.nextBatch()
		assert.True(t, probe)
		assert.Equal(t, 150, n, "not (100+1000)/2, which would be cut to 150 and forgotten")
	})
	t.Run("429s right after a cut make requests fewer and larger, then they creep back", func(t *testing.T) {
		ln, clk := capLane(4000)
		ln.sized = MaxBatchSize
		for range 40 {
			send(ln, clk, affine, nil) // a second at 4000 records/s
		}
		refuse := func() {
			p, err := ln.acquire(ctx, 100, 0, nil, false)
			require.NoError(t, err)
			ln.release(p, errRateLimited)
		}
		refuse() // an episode long after the last: the rate is cut, the request size kept
		require.Equal(t, 1, ln.cuts)
		assert.Equal(t, float64(sizedRequestsPerSecond), ln.perSecond)
		clk.Advance(2 * minCutGap)
		send(ln, clk, affine, nil) // the index accepts some,
		refuse()                   // but the 429s go on although the rate was cut
		require.Equal(t, 2, ln.cuts)
		assert.Equal(t, requestsCut*sizedRequestsPerSecond, ln.perSecond)
		r := float64(ln.records.Limit())
		n, _ := ln.nextBatch()
		assert.Equal(t, int(r/(requestsCut*sizedRequestsPerSecond)), n)

		clk.Advance(10 * time.Second)
		ln.growPerSecond(clk.Now())
		assert.InDelta(t, requestsCut*sizedRequestsPerSecond+10*requestsGrowth, ln.perSecond, 1e-9)
		clk.Advance(time.Minute)
		ln.growPerSecond(clk.Now())
		assert.Equal(t, float64(sizedRequestsPerSecond), ln.perSecond)
	})
	t.Run("fewer requests never take batches past the size adopted on its latency", func(t *testing.T) {
		// Past it the index may be twenty times slower per record: a
		// version that let batches grow to the rate's limit when
		// requests were short sent batches into the timeouts profile's
		// cliff at 300 (p50 latency 1.02 s, about 500 records) and got a
		// third of its throughput.
		ln, clk := capLane(20_000)
		ln.batch, ln.sized, ln.perSecond = 250, 250, 5
		ln.ceilSize, ln.ceilUntil = 1000, clk.Now().Add(time.Minute)
		n, probe := ln.nextBatch()
		assert.False(t, probe)
		assert.Equal(t, 250, n)
	})
	t.Run("slow start's probe answered 429 is a size too large, not a rate", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		first, _ := ln.nextBatch()
		p, err := ln.acquire(ctx, first, 0, nil, false)
		require.NoError(t, err)
		n, probe := ln.nextBatch()
		require.True(t, probe)
		require.Equal(t, 10*startBatchSize, n)
		q, err := ln.acquire(ctx, n, 0, nil, probe)
		require.NoError(t, err)
		clk.Advance(5 * time.Millisecond)
		ln.release(p, nil)
		ln.release(q, errRateLimited)
		assert.Equal(t, 0, ln.cuts)
		assert.Equal(t, math.Inf(1), ln.state().Rate)
		assert.False(t, ln.slowStart)
		for range 20 {
			assert.Less(t, send(ln, clk, affine, nil), n)
		}
	})
}

func TestLimiterBreaker(t *testing.T) {
	ctx := context.Background()
	serverErr := &Error{Class: ClassServer, GRPCCode: codes.Unavailable}
	clk := newFakeClock()
	ln := newLane(clk)
	ln.conc = 10
	first, err := ln.acquire(ctx, 10, 0, nil, false)
	require.NoError(t, err)
	ln.release(first, nil) // the index answers, then fails
	var ps []permit
	for range breakerThreshold {
		p, err := ln.acquire(ctx, 10, 0, nil, false)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	for _, p := range ps {
		ln.release(p, serverErr)
	}
	require.True(t, ln.state().Paused, "five server errors in a row open the breaker")

	// The next request waits for the probe time and goes as the probe.
	before := clk.Now()
	p, err := ln.acquire(ctx, 10, 0, nil, false)
	require.NoError(t, err)
	assert.True(t, p.probe)
	assert.GreaterOrEqual(t, clk.Now().Sub(before), probeEvery)

	t.Run("a failed probe keeps it open, a successful one closes it", func(t *testing.T) {
		ln.release(p, serverErr)
		assert.True(t, ln.state().Paused)
		p2, err := ln.acquire(ctx, 10, 0, nil, false)
		require.NoError(t, err)
		assert.True(t, p2.probe)
		ln.release(p2, nil)
		assert.False(t, ln.state().Paused)
		p3, err := ln.acquire(ctx, 10, 0, nil, false)
		require.NoError(t, err)
		assert.False(t, p3.probe)
		ln.release(p3, nil)
	})
	t.Run("while the probe is out, others wait until the outage is a minute old, then fail unsent", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		first, err := ln.acquire(ctx, 10, 0, nil, false)
		require.NoError(t, err)
		ln.release(first, nil)
		for range breakerThreshold {
			p, err := ln.acquire(ctx, 10, 0, nil, false)
			require.NoError(t, err)
			ln.release(p, serverErr)
		}
		opened := clk.Now()
		probe, err := ln.acquire(ctx, 10, 0, nil, false)
		require.NoError(t, err)
		require.True(t, probe.probe)
		_, err = ln.acquire(ctx, 10, 0, nil, false)
		assert.ErrorIs(t, err, errOutageTooLong)
		assert.GreaterOrEqual(t, clk.Now().Sub(opened), outagePatience)
	})
	t.Run("a long outage is probed less and less often, up to a cap", func(t *testing.T) {
		var b breaker
		now := clk.Now()
		b.open, b.openedAt = true, now
		assert.Equal(t, probeEvery, b.probeWait(now.Add(time.Second)))
		assert.Greater(t, b.probeWait(now.Add(probeFastFor+time.Second)), probeEvery)
		assert.Equal(t, probeMax, b.probeWait(now.Add(time.Hour)))
	})
	t.Run("an outage is young for a minute, once the index had answered", func(t *testing.T) {
		var b breaker
		now := clk.Now()
		for range breakerThreshold {
			b.failure(now, false, false)
		}
		require.True(t, b.open)
		assert.False(t, b.young(now), "an index that never answered is dead or misconfigured")
		b.success(now)
		for range breakerThreshold {
			b.failure(now, false, false)
		}
		assert.True(t, b.young(now.Add(outagePatience-time.Second)))
		assert.False(t, b.young(now.Add(outagePatience)))
		b.success(now.Add(outagePatience))
		assert.False(t, b.young(now.Add(outagePatience)), "a closed breaker is no outage")
	})
	t.Run("it gives up on an index at once if it never answered, after a minute if it did", func(t *testing.T) {
		var b breaker
		now := clk.Now()
		assert.Nil(t, b.gaveUp(now), "closed")
		for range breakerThreshold {
			b.failure(now, false, false)
		}
		assert.Equal(t, errNeverAnswered, b.gaveUp(now))
		b.success(now)
		for range breakerThreshold {
			b.failure(now, false, false)
		}
		assert.Nil(t, b.gaveUp(now.Add(outagePatience-time.Second)))
		assert.Equal(t, errOutageTooLong, b.gaveUp(now.Add(outagePatience)))

		var slow breaker
		for range breakerThreshold {
			slow.failure(now, false, true)
		}
		assert.Nil(t, slow.gaveUp(now), "not at once after timeouts: the index may answer smaller requests")
		assert.Equal(t, errOutageTooLong, slow.gaveUp(now.Add(outagePatience)), "but after a minute of them")
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

func TestLimiterLearnsPerNamespace(t *testing.T) {
	lim := &Limiter{clock: newFakeClock()}
	a := lim.lane("a", MaxBatchSize)
	p, err := a.acquire(context.Background(), 1, 0, nil, false)
	require.NoError(t, err)
	a.release(p, errRateLimited)
	assert.Less(t, lim.State("a").Concurrency, startConcurrency)
	assert.Equal(t, startConcurrency, lim.State("b").Concurrency, "another namespace is untouched")
	assert.Same(t, a, lim.lane("a", MaxBatchSize), "a namespace keeps its state")
}

func TestZeroLimiterIsReady(t *testing.T) {
	var lim Limiter
	st := lim.State("")
	assert.Equal(t, startConcurrency, st.Concurrency)
	assert.Equal(t, startBatchSize, st.BatchSize)
	assert.True(t, math.IsInf(st.Rate, 1), "no rate cap until the index pushes back")
}

func TestLimiterKeepsPineconesRequestLimit(t *testing.T) {
	// requestsOf counts the permits of one-record requests of bytes bytes
	// that the lane grants over d of fake time, each returned at once.
	requestsOf := func(bytes int, ln *lane, clk *fakeClock, d time.Duration) int {
		end, n := clk.Now().Add(d), 0
		for {
			p, err := ln.acquire(context.Background(), 1, bytes, nil, false)
			require.NoError(t, err)
			if clk.Now().After(end) {
				ln.release(p, nil)
				return n
			}
			ln.release(p, nil)
			n++
		}
	}
	requestsIn := func(ln *lane, clk *fakeClock, d time.Duration) int { return requestsOf(0, ln, clk, d) }
	t.Run("a lane sends a tenth above 100 requests a second until the first 429, then 100", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		ln.capRequests()
		assert.InDelta(t, 10*firstRequestRate+requestBurst, requestsIn(ln, clk, 10*time.Second), 1)

		p, err := ln.acquire(context.Background(), 1, 0, nil, false)
		require.NoError(t, err)
		ln.release(p, errRateLimited)
		clk.Advance(time.Second) // past the rate's own cut: only the request limit binds
		ln.records.SetLimitAt(clk.Now(), rate.Inf)
		assert.InDelta(t, 10*maxRequestRate+requestBurst, requestsIn(ln, clk, 10*time.Second), 1)

		ln.capRequests() // a later All call on the same Limiter
		assert.InDelta(t, 10*maxRequestRate, requestsIn(ln, clk, 10*time.Second), 1, "it stays at 100")
	})
	t.Run("a lane sends a tenth above 50 MiB a second until the first 429, then 50 MiB", func(t *testing.T) {
		const mib = 1 << 20 // 55 requests a second at most: the byte limit binds
		clk := newFakeClock()
		ln := newLane(clk)
		ln.capRequests()
		assert.InDelta(t, 10*firstByteRate/mib+MaxRequestBytes/mib, requestsOf(mib, ln, clk, 10*time.Second), 1)

		p, err := ln.acquire(context.Background(), 1, mib, nil, false)
		require.NoError(t, err)
		ln.release(p, errRateLimited)
		clk.Advance(time.Second)
		ln.records.SetLimitAt(clk.Now(), rate.Inf)
		assert.InDelta(t, 10*maxByteRate/mib+MaxRequestBytes/mib, requestsOf(mib, ln, clk, 10*time.Second), 1)
	})
	t.Run("a lane of another transport has no request limit, before or after a 429", func(t *testing.T) {
		clk := newFakeClock()
		ln := newLane(clk)
		p, err := ln.acquire(context.Background(), 1, 0, nil, false)
		require.NoError(t, err)
		ln.release(p, errRateLimited)
		assert.Equal(t, rate.Inf, ln.requests.Limit())
		assert.Equal(t, rate.Inf, ln.bytes.Limit())
	})
	t.Run("slow start held at the byte limit for seconds ends with a regular cut", func(t *testing.T) {
		// It sent a tenth above the limit, not a round trip's doubling:
		// cutting it to 30% would idle most of the index for a second.
		// Unless the index's bucket ran dry soon: then others share
		// the namespace, and together they sent several times its rate.
		for _, tt := range []struct {
			name     string
			capped   bool
			requests int // of 1 MiB, each answered in 5 ms: 55 a second at the cap
			pauseAt  int // the producer pauses for two seconds after this many, if not 0
			inFlight int // requests of 1 MiB still out when the 429 comes
			beta     float64
		}{
			{"held at the cap for four seconds", true, 220, 0, 0, rateCut},
			{"held at the cap for less than a second", true, 40, 0, 0, slowStartCut},
			{"held for three seconds, then again for one after a pause", true, 220, 165, 0, slowStartCut},
			{"held for four seconds, with most of what went out in the last 300 ms still out", true, 220, 0, 8, slowStartCut},
			{"a lane without caps", false, 100, 0, 0, slowStartCut},
		} {
			t.Run(tt.name, func(t *testing.T) {
				clk := newFakeClock()
				ln := newLane(clk)
				if tt.capped {
					ln.capRequests()
				}
				for i := range tt.requests {
					if i > 0 && i == tt.pauseAt {
						clk.Advance(2 * time.Second)
					}
					p, err := ln.acquire(context.Background(), 100, 1<<20, nil, false)
					require.NoError(t, err)
					clk.Advance(5 * time.Millisecond)
					ln.release(p, nil)
				}
				for range tt.inFlight {
					_, err := ln.acquire(context.Background(), 100, 1<<20, make(chan struct{}, 1), false)
					require.NoError(t, err)
				}
				p, err := ln.acquire(context.Background(), 100, 1<<20, nil, false)
				require.NoError(t, err)
				ln.release(p, errRateLimited)
				require.Equal(t, 1, ln.cuts)
				assert.Equal(t, tt.beta, ln.cutBeta)
			})
		}
	})
}
