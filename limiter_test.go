package upsert

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

func TestLimiterCutsOncePerRoundTrip(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	ln := newLane(clk)
	ln.conc = 10
	ln.bucket.SetLimitAt(clk.Now(), 1000)

	var inFlight []permit
	for range 10 {
		p, err := ln.acquire(ctx, 10, nil)
		require.NoError(t, err)
		inFlight = append(inFlight, p)
	}
	for _, p := range inFlight {
		ln.release(p, ClassRateLimited)
	}
	st := ln.state()
	assert.InDelta(t, 1000*rateCut, st.Rate, 1e-9, "ten 429s of one round trip cut the rate once")
	assert.Equal(t, 9, st.Concurrency, "and concurrency one step")

	p, err := ln.acquire(ctx, 10, nil)
	require.NoError(t, err)
	ln.release(p, ClassRateLimited)
	st = ln.state()
	assert.InDelta(t, 1000*rateCut*rateCut, st.Rate, 1e-9, "a 429 of a request sent after the cut cuts again")
	assert.Equal(t, 8, st.Concurrency)
}

func TestLimiterFirstCutStartsFromTheMeasuredRate(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	ln := newLane(clk)
	own := make(chan struct{}, 1) // the caller's own slot, so that concurrency does not matter
	// 50 requests of 100 records over one second: 5000 records/s.
	for range 50 {
		p, err := ln.acquire(ctx, 100, own)
		require.NoError(t, err)
		clk.Advance(20 * time.Millisecond)
		ln.release(p, 0)
	}
	p, err := ln.acquire(ctx, 100, own)
	require.NoError(t, err)
	ln.release(p, ClassRateLimited)
	assert.InDelta(t, 5000*rateCut, ln.state().Rate, 5000*rateCut*0.15)
}

func TestLimiterClimbsBackAfterCleanRoundTrips(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	ln := newLane(clk)
	ln.conc = 2
	ln.bucket.SetLimitAt(clk.Now(), 100)
	for round := range 3 {
		for range ln.state().Concurrency {
			p, err := ln.acquire(ctx, 1, nil)
			require.NoError(t, err)
			ln.release(p, 0)
		}
		st := ln.state()
		assert.Equal(t, 3+round, st.Concurrency, "concurrency grows by one per clean round trip")
		assert.InDelta(t, 100*math.Pow(rateGrowth, float64(round+1)), st.Rate, 1e-6, "and the rate grows")
	}
}

func TestLimiterNeverStopsSending(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	ln := newLane(clk)
	ln.bucket.SetLimitAt(clk.Now(), 2)
	for range 100 {
		p, err := ln.acquire(ctx, 1, nil)
		require.NoError(t, err)
		clk.Advance(time.Second)
		ln.release(p, ClassRateLimited)
	}
	st := ln.state()
	assert.Equal(t, 1, st.Concurrency)
	assert.Equal(t, minRate, st.Rate)
}

func TestLimiterWaitsOutTheRate(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	ln := newLane(clk)
	ln.bucket = rate.NewLimiter(100, 100) // 100 records/s, full bucket
	for _, n := range []int{100, 50} {
		_, err := ln.waitRate(ctx, n)
		require.NoError(t, err)
	}
	assert.Equal(t, []time.Duration{500 * time.Millisecond}, clk.Sleeps(), "50 records at 100/s wait half a second")
}

// cuttingClock cuts the lane's rate during the first sleep, as a 429 would
// while a goroutine waits on its reservation.
type cuttingClock struct {
	*fakeClock
	ln  *lane
	cut bool
}

func (c *cuttingClock) Sleep(ctx context.Context, d time.Duration) error {
	if !c.cut {
		c.cut = true
		c.ln.mu.Lock()
		c.ln.cut(c.fakeClock.Now())
		c.ln.mu.Unlock()
	}
	return c.fakeClock.Sleep(ctx, d)
}

func TestLimiterRechecksAReservationAfterACut(t *testing.T) {
	ctx := context.Background()
	clk := &cuttingClock{fakeClock: newFakeClock()}
	ln := newLane(clk)
	clk.ln = ln
	ln.bucket = rate.NewLimiter(100, 100)
	start := clk.Now()
	_, err := ln.waitRate(ctx, 100) // empties the bucket
	require.NoError(t, err)
	_, err = ln.waitRate(ctx, 100) // waits 1 s at 100/s, but the rate is cut to 70/s meanwhile
	require.NoError(t, err)
	require.Len(t, clk.Sleeps(), 2, "the cut woke the waiter, which slept again")
	waited := clk.Now().Sub(start)
	assert.InDelta(t, 100.0/(100*rateCut)*float64(time.Second), float64(waited), float64(10*time.Millisecond),
		"the wait is the one of the new rate")
}

func TestLimiterBlocksBeyondItsConcurrency(t *testing.T) {
	ctx := context.Background()
	ln := newLane(newFakeClock())
	ln.conc = 1
	first, err := ln.acquire(ctx, 1, nil)
	require.NoError(t, err)

	got := make(chan permit)
	go func() {
		p, err := ln.acquire(ctx, 1, nil)
		if err == nil {
			got <- p
		}
	}()
	select {
	case <-got:
		t.Fatal("a second request got a slot while the only one was taken")
	case <-time.After(5 * time.Millisecond):
	}
	ln.release(first, 0)
	p := <-got
	ln.release(p, 0)

	t.Run("a canceled wait returns the context's error", func(t *testing.T) {
		ln.conc = 1
		p, err := ln.acquire(ctx, 1, nil)
		require.NoError(t, err)
		defer ln.release(p, 0)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err = ln.acquire(cctx, 1, nil)
		assert.ErrorIs(t, err, context.Canceled)
	})
}

func TestLimiterLearnsPerNamespace(t *testing.T) {
	lim := &Limiter{clock: newFakeClock()}
	a := lim.lane("a")
	p, err := a.acquire(context.Background(), 1, nil)
	require.NoError(t, err)
	a.release(p, ClassRateLimited)
	assert.Less(t, lim.State("a").Concurrency, startConcurrency)
	assert.Equal(t, startConcurrency, lim.State("b").Concurrency, "another namespace is untouched")
	assert.Same(t, a, lim.lane("a"), "a namespace keeps its state")
}

func TestZeroLimiterIsReady(t *testing.T) {
	var lim Limiter
	st := lim.State("")
	assert.Equal(t, startConcurrency, st.Concurrency)
	assert.Equal(t, startBatchSize, st.BatchSize)
	assert.True(t, math.IsInf(st.Rate, 1), "no rate cap until the index pushes back")
}
