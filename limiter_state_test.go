package upsert

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// LimiterState.Rate reports a cap after the index's 429s on its request
// rate (Pinecone's requests-per-second limit) started an episode and the
// Limiter cut that rate: the record rate the caps allow is the request
// rate times the batch size handed out, not +Inf. The OpenTelemetry gauge
// upsert.limiter.rate reads this field.
func TestLimiterStateRateCountsACutOfTheRequestRate(t *testing.T) {
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	var mu sync.Mutex
	refused := 0
	send := func(ctx context.Context, ns string, batch []*pinecone.Vector) error {
		mu.Lock()
		defer mu.Unlock()
		if refused < 3 { // three 429s among the first answers start an episode
			refused++
			return &Error{Class: ClassRateLimited, Limit: LimitRequests,
				Err: errors.New("Request failed. You've reached the max upsert requests per second for index x.")}
		}
		return nil
	}
	res, err := All(context.Background(), vectors(2000, 2), WithUpsertFunc(send), WithLimiter(lim), withClock(clk), withRand(maxRand),
		WithNamespaceOf(func(*pinecone.Vector) string { return "tenant" }))
	require.NoError(t, err)
	require.Equal(t, 2000, res.Upserted)
	lim.mu.Lock()
	ln := lim.lanes[laneID{key: "tenant"}]
	lim.mu.Unlock()
	ln.mu.Lock()
	req := ln.dims[dimRequests].ctl
	ln.mu.Unlock()
	require.True(t, req.capped() && req.measured(), "the 429s started an episode on the request rate")

	st := lim.State("tenant")
	assert.False(t, math.IsInf(st.Rate, 1), "a lane cut to %.3g requests a second reports no cap: %+v", req.limit, st)
	assert.InDelta(t, req.limit*float64(st.BatchSize), st.Rate, 1e-9*st.Rate, "the request rate times the batch size")
}

// A known limit of the index alone (WithIndexLimits, ServerlessLimits)
// caps nothing that LimiterState.Rate reports: it is +Inf until the
// index's 429s start an episode.
func TestLimiterStateRateIsInfiniteUnderAKnownLimitAlone(t *testing.T) {
	ln := newLane(newFakeClock(), MaxBatchSize, &defaultTuning)
	ln.setLimits(IndexLimits{RequestsPerSecond: 100, BytesPerSecond: 50e6})
	assert.True(t, math.IsInf(ln.state().Rate, 1), "State: %+v", ln.state())
}

// A Writer stopped (its context canceled) while the batch carrying its
// lane's size trial waits unsent gives the trial back: it waited for ever
// for an answer in the Limiter, and the calls sharing the lane (at once,
// or later through WithLimiter) never tried a larger batch size again, nor
// a higher concurrency (the lane runs one experiment at a time). Here the
// next call's batches stayed at 100 records for its whole run.
func TestACallStoppedWithItsSizeTrialUnsentLeavesTheLaneFreeToTryAgain(t *testing.T) {
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	fi := newFakeIndex(nil)
	opts := func(more ...Option) []Option {
		return append([]Option{WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand), WithLimiter(lim)}, more...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := NewWriter(ctx, opts(WithMaxDelay(time.Hour))...)
	if err != nil {
		t.Fatal(err)
	}
	vs := vectors(101, 4)
	for _, v := range vs[:100] { // one full batch of the start size, answered
		if err := w.Add(context.Background(), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The next batch starts: it is handed the lane's size trial (ten times
	// the size, slow start), and waits for more records.
	if err := w.Add(context.Background(), vs[100]); err != nil {
		t.Fatal(err)
	}
	if w.in.r.routes.byKey[""].batcher.cur.trial == 0 {
		t.Fatal("setup: the second batch is not the lane's size trial")
	}
	cancel() // the Writer stops: its trial batch fails unsent
	_, _ = w.Close(context.Background())

	// Another call on the Limiter: a backfill of 20 000 records on an
	// index that answers at once.
	res, err := All(context.Background(), vectors(20000, 4), opts()...)
	if err != nil || res.Upserted != 20000 {
		t.Fatalf("All: %d upserted, %v", res.Upserted, err)
	}
	if res.Stats.BatchSizes.Max <= 100 {
		lim.mu.Lock()
		ln := lim.lanes[laneID{key: vectorKind.laneKey("")}]
		lim.mu.Unlock()
		ln.mu.Lock()
		trial := ln.batch.trial
		ln.mu.Unlock()
		t.Errorf("after a canceled call left its size trial unsent, the next call's batches never grew: largest %d records in %d requests (the lane's trial: size %d, handed out %d, out %d)",
			res.Stats.BatchSizes.Max, res.Stats.Requests, trial.size, trial.sent, trial.out)
	}
}
