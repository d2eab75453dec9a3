package upsert

import (
	"context"
	"errors"
	"fmt"
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

// idVec is a small dense record with the given id.
func idVec(id string) *pinecone.Vector {
	return &pinecone.Vector{Id: id, Values: &[]float32{1, 2}}
}

// A short outage fails nothing, also in a namespace that a Writer starts
// writing during it. The breaker gives up at once only on an index that
// never answered (a wrong host, a dead index), and "the index answered" is
// known per index host, not per namespace: a Writer that landed records in
// namespace "old" and then meets a 20-second outage while writing "new"
// as well waits the outage out in both, as the README promises ("short
// outages fail nothing"). The lane of "new" never got an answer itself.
func TestAShortOutageFailsNothingInANamespaceAWriterStartsDuringIt(t *testing.T) {
	clk := newEventClock()
	send, outage := outageIndex(clk)
	ctx := context.Background()
	w, err := NewWriter(ctx, WithUpsertFunc(send), withClock(clk), withRand(maxRand),
		WithNamespaceOf(func(v *pinecone.Vector) string { return v.Id[:3] }))
	require.NoError(t, err)
	for i := range 10 {
		require.NoError(t, w.Add(ctx, idVec(fmt.Sprint("old", i))))
	}
	require.NoError(t, w.Flush(ctx), "the index answers: it is up, and the host right")
	outage(20 * time.Second)
	for i := range 10 {
		require.NoError(t, w.Add(ctx, idVec(fmt.Sprint("new", i))))
		require.NoError(t, w.Add(ctx, idVec(fmt.Sprint("old", 100+i))))
	}
	res, err := w.Close(ctx)
	byNS := map[string]int{}
	for _, f := range res.Failed {
		byNS[f.Namespace]++
	}
	assert.NoError(t, err)
	assert.Equal(t, 30, res.Upserted, "a 20-second outage failed records, by namespace: %v", byNS)
}

// A Limiter knows per index host whether the index answered: a lane of a
// namespace whose requests have met only server errors waits an outage
// out (the breaker open, nothing failed unsent) when another lane of the
// same host got an answer, and gives up at once when none did (here
// another host's lane). What a host's lanes know together is forgotten
// with the last of them, as a lane forgets its own.
func TestLimiterKnowsPerHostThatTheIndexAnswered(t *testing.T) {
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	send := func(id laneID, e *Error) *lane {
		ln := lim.holdLane(id, MaxBatchSize)
		defer ln.holdRoute(-1)
		p, err := ln.acquire(context.Background(), req(1))
		require.NoError(t, err)
		ln.release(p, e)
		return ln
	}
	down := &Error{Class: ClassServer, StatusCode: 503}
	outage := func(id laneID) *lane {
		var ln *lane
		for range breakerThreshold {
			ln = send(id, down)
		}
		require.True(t, ln.state().Paused, "five server errors open the breaker of %v", id)
		return ln
	}
	const host, other = "a.svc.pinecone.io", "b.svc.pinecone.io"
	send(laneID{host: host, key: "old"}, nil)
	assert.False(t, outage(laneID{host: host, key: "new"}).gaveUp(), "the index answered namespace old: new waits the outage out")
	assert.True(t, outage(laneID{host: other, key: "new"}).gaveUp(), "another host that never answered is given up on")

	clk.Advance(laneIdle)
	lim.mu.Lock()
	lim.sweep(clk.Now())
	lim.mu.Unlock()
	require.Empty(t, lim.lanes, "every lane idle for laneIdle is forgotten")
	assert.Empty(t, lim.hosts, "what the hosts' lanes knew is forgotten with them")
	assert.True(t, outage(laneID{host: host, key: "later"}).gaveUp(), "a host whose lanes were all forgotten starts over")
}

// The breaker counts an answer that the lane tells it another lane of its
// host got (hostAnswered) as the index's answer: failures while it is
// open spend no retries for outagePatience, a failure that follows
// another spends none, and it does not give up at once as on a host that
// never answered.
func TestBreakerCountsAnAnswerToAnotherLaneOfItsHost(t *testing.T) {
	start := time.Unix(1000, 0)
	for _, host := range []bool{false, true} {
		b := breaker{hostAnswered: host}
		now := start
		for range breakerThreshold {
			now = now.Add(time.Millisecond)
			b.failure(now, now, false, false)
		}
		require.True(t, b.open)
		assert.Equal(t, host, b.young(now), "young, with hostAnswered %v", host)
		assert.Equal(t, host, b.followsFailure(now), "followsFailure, with hostAnswered %v", host)
		assert.Equal(t, !host, b.gaveUp(now) == errNeverAnswered, "never answered, with hostAnswered %v", host)
	}
}

// A run whose DescribeIndexStats answered waits out a blip of errors at
// its start, also when the Limiter forgets, as it makes the run's first
// lane, the idle lanes of the index from an earlier call, and with them
// what the host's lanes knew together: the run's lanes hear the answer
// themselves.
func TestADescribedIndexIsWaitedOutAfterTheLimiterForgotItsIdleLanes(t *testing.T) {
	// Virtual time that moves only when nothing else happens: a fakeClock
	// adds up the backoffs of concurrent requests, and once that passed
	// outagePatience the blip was given up on, now and then.
	clk := newEventClock()
	l := &Limiter{clock: clk}
	old := l.holdLane(laneID{key: "old"}, MaxBatchSize) // an earlier call's namespace, let go
	old.holdRoute(-1)
	for i := 0; len(l.lanes) < max(minLanes, l.sweepAt); i++ { // enough lanes that the next sweeps
		l.holdLane(laneID{host: "other", key: fmt.Sprint(i)}, MaxBatchSize).holdRoute(-1)
	}
	advanceEventClock(clk, laneIdle+time.Minute) // every lane idle

	var requests atomic.Int64
	send := func(context.Context, string, []*pinecone.Vector) error {
		if requests.Add(1) <= 8 { // a blip at the start
			return status.Error(codes.Unavailable, "upstream connect error")
		}
		return nil
	}
	res, err := Stream(context.Background(), slices.Values(vectors(2000, 2)), WithUpsertFunc(send), WithLimiter(l),
		withIndexInfo(indexInfo{dimension: 2}, nil), withClock(clk), withRand(maxRand))
	require.NoError(t, err, "the index answered describe: the blip is an outage to wait out")
	assert.Equal(t, 2000, res.Upserted)
}

// outageIndex is a send function answering 503 while an outage lasts, and
// the function that starts one of d on clk's time.
func outageIndex(clk *eventClock) (send func(context.Context, string, []*pinecone.Vector) error, outage func(d time.Duration)) {
	var mu sync.Mutex
	var downUntil time.Time
	send = func(context.Context, string, []*pinecone.Vector) error {
		mu.Lock()
		defer mu.Unlock()
		if clk.Now().Before(downUntil) {
			return &Error{Class: ClassServer, StatusCode: 503, Err: errors.New("503 service unavailable")}
		}
		return nil
	}
	outage = func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		downUntil = clk.Now().Add(d)
	}
	return send, outage
}
