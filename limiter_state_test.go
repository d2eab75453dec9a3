package upsert

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

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
