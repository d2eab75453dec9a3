package upsert

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// routeVec is a small dense record.
func routeVec(id string) *pinecone.Vector {
	return &pinecone.Vector{Id: id, Values: &[]float32{1, 2}}
}

// waitFor waits, a millisecond at a time, until cond holds or limit
// passes, and reports whether it held: it bounds a wait for the run's
// goroutines, and never decides an outcome by timing alone.
func waitFor(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// Each namespace has its own lane (Pinecone's limits are per namespace),
// so a call over ten namespaces, each lane letting 4 requests in flight,
// sends more than one lane's worth at once: each route counts its own
// batches against its own lane's concurrency, and the worker pool bounds
// them all.
func TestAStreamOverManyNamespacesSendsMoreThanOneLanesConcurrency(t *testing.T) {
	var mu sync.Mutex
	inFlight, most := 0, 0
	release := make(chan struct{})
	send := func(ctx context.Context, ns string, batch []*pinecone.Vector) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		<-release // a slow index: every request stays in flight until released
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	}
	const namespaces, records = 10, 200
	done := make(chan Result, 1)
	go func() {
		res, _ := Stream(context.Background(), func(yield func(*pinecone.Vector) bool) {
			for i := range records {
				if !yield(routeVec(fmt.Sprint(i))) {
					return
				}
			}
		}, WithUpsertFunc(send), WithBatchSize(1),
			WithNamespaceOf(func(v *pinecone.Vector) string { return "tenant-" + v.Id[len(v.Id)-1:] }))
		done <- res
	}()
	// Two lanes' worth (8); one lane's concurrency plus two would be 6.
	reached := waitFor(time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return most >= 8
	})
	close(release)
	if res := <-done; res.Upserted != records {
		t.Fatalf("upserted %d of %d", res.Upserted, records)
	}
	mu.Lock()
	defer mu.Unlock()
	if !reached {
		t.Errorf("a stream into %d namespaces, each with its own lane of 4 slots, had at most %d requests in flight; want at least 8", namespaces, most)
	}
}

// retryAfterIndex answers the first request of namespace "a" with a
// minute's Retry-After and takes every other; it records when each of
// "a"'s requests went out, on clk.
type retryAfterIndex struct {
	clk         *gateClock
	mu          sync.Mutex
	sentA       []time.Time
	pausedUntil time.Time
}

func (x *retryAfterIndex) send(ctx context.Context, ns string, batch []*pinecone.Vector) error {
	if ns != "a" {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.clk.Now()
	x.sentA = append(x.sentA, now)
	if len(x.sentA) == 1 {
		x.pausedUntil = now.Add(time.Minute)
		return &Error{Class: ClassRateLimited, RetryAfter: time.Minute, Err: errors.New("429: retry after 60 s")}
	}
	return nil
}

// sentAgain reports whether "a" sent a second request.
func (x *retryAfterIndex) sentAgain() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.sentA) >= 2
}

// manyTenantsAfterA yields a/0, and once its retry waits, 1100 records of
// other namespaces a millisecond apart (routes past minRoutes, so the
// stream drops idle ones) and then a/1; state gets "a"'s lane state
// before a/1. pulled is closed when it returns.
func manyTenantsAfterA(t *testing.T, clk *gateClock, lim *Limiter, state *LimiterState, pulled chan struct{}) func(func(*pinecone.Vector) bool) {
	return func(yield func(*pinecone.Vector) bool) {
		defer close(pulled)
		if !yield(routeVec("a/0")) {
			return
		}
		if !waitFor(10*time.Second, func() bool { return clk.Sleepers() > 0 }) {
			t.Error("the refused batch never waited")
			return
		}
		for i := range 1100 {
			clk.Advance(time.Millisecond)
			if !yield(routeVec(fmt.Sprintf("b%d/0", i))) {
				return
			}
		}
		*state = lim.State("a")
		yield(routeVec("a/1"))
	}
}

// A stream over more than minRoutes namespaces drops idle routes, but not
// one whose batch waits out the index's Retry-After: its hold keeps the
// lane in the Limiter, so the namespace stays paused and its next records
// wait out the same Retry-After instead of going out through a new lane.
func TestARetryAfterHoldsItsNamespaceWhileAStreamDropsIdleRoutes(t *testing.T) {
	clk := newGateClock()
	lim := &Limiter{clock: clk}
	index := &retryAfterIndex{clk: clk}
	var state LimiterState
	pulled := make(chan struct{})
	done := make(chan Result, 1)
	go func() {
		res, _ := Stream(context.Background(), manyTenantsAfterA(t, clk, lim, &state, pulled),
			WithUpsertFunc(index.send), WithLimiter(lim), withClock(clk), withRand(maxRand), WithBatchSize(1),
			WithNamespaceOf(func(v *pinecone.Vector) string { return v.Id[:len(v.Id)-2] }))
		done <- res
	}()
	<-pulled
	// a/1 either went out, or sleeps until the pause ends (the retry of
	// a/0 is the other sleeper).
	waitFor(10*time.Second, func() bool { return index.sentAgain() || clk.Sleepers() >= 2 })
	sentEarly := index.sentAgain()
	var res Result
	for finished := false; !finished; { // let the minute pass
		select {
		case res = <-done:
			finished = true
		default:
			clk.Advance(time.Second)
			time.Sleep(100 * time.Microsecond)
		}
	}
	if res.Upserted != 1102 {
		t.Errorf("upserted %d of 1102", res.Upserted)
	}
	if !state.Paused {
		t.Errorf("Limiter.State(\"a\") during the index's Retry-After for \"a\": %+v, want Paused", state)
	}
	index.mu.Lock()
	defer index.mu.Unlock()
	if len(index.sentA) < 2 {
		t.Fatalf("namespace \"a\" sent %d requests; want 2", len(index.sentA))
	}
	if sentEarly || index.sentA[1].Before(index.pausedUntil) {
		t.Errorf("namespace \"a\" was asked to wait until %v; its next request went out at %v",
			index.pausedUntil.Format(time.TimeOnly), index.sentA[1].Format("15:04:05.000"))
	}
}
