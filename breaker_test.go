package upsert

import (
	"context"
	"errors"
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
	"github.com/upsertlib/upsert/internal/share"
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
			b.failure(now, now, false, 0)
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

// probeHost is the index host of the lanes of the probe-pace tests.
const probeHost = "idx.svc.pinecone.io"

// downLanes returns n lanes of one index host of a Limiter on a fake
// clock, each answered once and then failed until its breaker opened.
func downLanes(t *testing.T, n int) (*Limiter, *fakeClock, []*lane) {
	t.Helper()
	ctx := context.Background()
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	lanes := make([]*lane, n)
	for i := range lanes {
		ln := lim.holdLane(laneID{host: probeHost, key: fmt.Sprint("ns", i)}, MaxBatchSize)
		t.Cleanup(func() { ln.holdRoute(-1) })
		p, err := ln.acquire(ctx, req(1))
		require.NoError(t, err)
		ln.release(p, nil)
		lanes[i] = ln
	}
	for _, ln := range lanes {
		for !ln.state().Paused {
			p, err := ln.acquire(ctx, req(1))
			require.NoError(t, err)
			ln.release(p, errServer)
		}
	}
	return lim, clk, lanes
}

// An index that is down, written through 16 namespaces, gets about one
// breaker's probes, not 16 times as many: the namespaces of an index host
// share one breaker's pace (here at most twice one breaker's rate over
// the first second of the outage).
func TestProbesOfAnIndexDownInManyNamespacesShareOneBreakersPace(t *testing.T) {
	ctx := context.Background()
	_, clk, lanes := downLanes(t, 16)
	start := clk.Now()
	probes := 0
	for clk.Now().Sub(start) < time.Second {
		for _, ln := range lanes {
			p, err := ln.acquire(ctx, req(1))
			require.NoError(t, err)
			if p.probe != 0 && p.start.Sub(start) <= time.Second {
				probes++
			}
			ln.release(p, errServer)
		}
	}
	t.Logf("%d probes", probes)
	assert.LessOrEqual(t, probes, 2*int(time.Second/probeEvery), "probes in a second of 16 namespaces down")
}

// When the index answers one namespace's probe after an outage, every
// namespace of the index probes at once: all of them notice the end of
// the outage within a round trip, not after their share of the host's
// pace (up to probeSpreadMax).
func TestEveryNamespaceProbesAtOnceWhenTheIndexAnswersOne(t *testing.T) {
	ctx := context.Background()
	_, clk, lanes := downLanes(t, 16)
	clk.Advance(2 * probeFastFor) // past the fast probes, which would line the namespaces' probes up
	for i, ln := range lanes {    // each probing at its own times, as breakers opened at different times do
		ln.mu.Lock()
		ln.breaker.nextProbe = clk.Now().Add(time.Duration(i) * 2 * time.Second)
		ln.mu.Unlock()
	}
	upAt := clk.Now().Add(20 * time.Second)
	closedAt := make([]time.Time, len(lanes))
	var first time.Time
	next := func(ln *lane) time.Time {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return ln.breaker.nextProbe
	}
	for step := 0; slices.ContainsFunc(closedAt, time.Time.IsZero); step++ {
		require.Less(t, step, 10000)
		// The namespace whose probe is due first sends it, as the
		// requests waiting in every namespace at once would.
		i := -1
		for j, ln := range lanes {
			if closedAt[j].IsZero() && (i < 0 || next(ln).Before(next(lanes[i]))) {
				i = j
			}
		}
		p, err := lanes[i].acquire(ctx, req(1))
		require.NoError(t, err)
		var e *Error
		if p.start.Before(upAt) {
			e = errServer
		}
		lanes[i].release(p, e)
		if !lanes[i].state().Paused {
			closedAt[i] = clk.Now()
			if first.IsZero() {
				first = closedAt[i]
			}
		}
	}
	t.Logf("first closed %v after the index answered again", first.Sub(upAt))
	for i, at := range closedAt {
		assert.LessOrEqual(t, at.Sub(first), 2*probeEvery, "namespace %d closed its breaker %v after the first", i, at.Sub(first))
	}
}

// A waiting request of a namespace of the host wakes when another
// namespace's breaker closes, and goes as the probe at once.
func TestAWaitingNamespaceWakesWhenTheIndexAnswersAnother(t *testing.T) {
	ctx := context.Background()
	clk := newGateClock()
	lim := &Limiter{clock: clk}
	var lanes [2]*lane
	for i := range lanes {
		lanes[i] = lim.holdLane(laneID{host: probeHost, key: fmt.Sprint("ns", i)}, MaxBatchSize)
		defer lanes[i].holdRoute(-1)
		lanes[i].mu.Lock()
		lanes[i].breaker.answered = true
		lanes[i].mu.Unlock()
		for range breakerThreshold {
			p, err := lanes[i].acquire(ctx, req(1))
			require.NoError(t, err)
			lanes[i].release(p, errServer)
		}
		require.True(t, lanes[i].state().Paused)
	}
	got := make(chan permit, 1)
	go func() {
		p, err := lanes[1].acquire(ctx, req(1)) // sleeps until woken: the clock stands still
		assert.NoError(t, err)
		got <- p
	}()
	for clk.Sleepers() == 0 {
		time.Sleep(time.Millisecond)
	}
	clk.Advance(time.Millisecond) // the probe goes after the breakers opened
	lanes[0].mu.Lock()
	lanes[0].breaker.nextProbe = clk.Now()
	lanes[0].mu.Unlock()
	p, err := lanes[0].acquire(ctx, req(1))
	require.NoError(t, err)
	require.NotZero(t, p.probe)
	lanes[0].release(p, nil)
	select {
	case p := <-got:
		assert.NotZero(t, p.probe, "it goes as the probe")
	case <-time.After(2 * time.Second):
		t.Fatal("the waiting namespace was not woken")
	}
}

// The host counts its open breakers without leaking one: a breaker that
// closes, and a lane forgotten with its breaker open, no longer slow the
// others' probes.
func TestTheHostsCountOfOpenBreakersDoesNotLeak(t *testing.T) {
	ctx := context.Background()
	lim, clk, lanes := downLanes(t, 3)
	h := lim.hosts[probeHost]
	open := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.open)
	}
	require.Equal(t, 3, open())

	ln := lanes[0]
	ln.mu.Lock()
	ln.breaker.nextProbe = clk.Now()
	ln.mu.Unlock()
	p, err := ln.acquire(ctx, req(1))
	require.NoError(t, err)
	ln.release(p, nil)
	require.False(t, ln.state().Paused)
	assert.Equal(t, 2, open(), "a breaker that closed")

	lanes[2].holdRoute(-1) // its run ended with the breaker open (and downLanes' Cleanup lets go of a lane forgotten)
	clk.Advance(laneIdle)  // the others are held
	lim.mu.Lock()
	lim.sweep(clk.Now())
	lim.mu.Unlock()
	lim.mu.Lock()
	_, kept := lim.lanes[laneID{host: probeHost, key: "ns2"}]
	lim.mu.Unlock()
	require.False(t, kept, "the idle lane is forgotten")
	assert.Equal(t, 1, open(), "a lane forgotten with its breaker open")

	lanes[1].mu.Lock()
	lanes[1].heardOpen()
	assert.Equal(t, 1, lanes[1].breaker.hostOpen, "the one open breaker left probes at its own pace")
	lanes[1].mu.Unlock()
}

// A breaker probes as many times less often as its host has breakers
// open, up to probeSpreadMax; its verdict lasts until its next probe is
// overdue by probeMax, or the index answers another namespace.
func TestBreakerSpreadsItsProbesByTheHostsOpenBreakers(t *testing.T) {
	start := time.Unix(1000, 0)
	for _, c := range []struct {
		hostOpen int
		after    time.Duration // since the breaker opened, when the probe fails
		want     time.Duration
	}{
		{0, 0, probeEvery}, // no host
		{1, 0, probeEvery},
		{16, 0, 16 * probeEvery},
		{16, time.Second, 16 * probeEvery},
		{1, time.Hour, probeMax},
		{4, time.Hour, 4 * probeMax},
		{16, time.Hour, probeSpreadMax},
		{1000, time.Second, probeSpreadMax},
	} {
		b := breaker{answered: true, hostOpen: c.hostOpen}
		now := start
		for range breakerThreshold {
			b.failure(now, now, false, 0)
		}
		require.True(t, b.open)
		if c.after == 0 {
			assert.Equal(t, c.want, b.nextProbe.Sub(now), "opening, %d open", c.hostOpen)
			continue
		}
		now = start.Add(c.after)
		b.nextProbe = now // the probe goes
		ok, probe, _ := b.admit(now)
		require.True(t, ok && probe)
		b.failure(now, now, true, 0)
		assert.Equal(t, c.want, b.nextProbe.Sub(now), "%v into the outage, %d open", c.after, c.hostOpen)
		// The verdict lasts until the next probe and probeMax more (two
		// probe periods at least), then is stale: the lane sat idle.
		lasts := now.Add(max(2*probeMax, c.want+probeMax))
		assert.True(t, b.current(lasts))
		assert.False(t, b.current(lasts.Add(time.Millisecond)))
		if c.after >= outagePatience {
			assert.Equal(t, errOutageTooLong, b.gaveUp(lasts))
			assert.Nil(t, b.gaveUp(lasts.Add(time.Millisecond)))
		}
		// It is stale at once when the index answered another namespace
		// of its host after the failure: requests wait for the probe.
		b.hostBack(now.Add(time.Millisecond), now.Add(time.Second))
		assert.False(t, b.current(now.Add(time.Second)))
	}
}

// A breaker hears of the index's answer to another namespace once: it
// probes at once when it opened before that request was sent and has no
// probe out, and not again for the same answer.
func TestBreakerProbesAtOnceWhenTheHostIsBack(t *testing.T) {
	start := time.Unix(1000, 0)
	open := func() breaker {
		b := breaker{answered: true, hostOpen: 16}
		for range breakerThreshold {
			b.failure(start, start, false, 0)
		}
		return b
	}
	now := start.Add(time.Second / 2)
	b := open()
	assert.False(t, b.hostBack(start.Add(-time.Second), now), "an answer to a request sent before it opened")
	assert.True(t, b.hostBack(start.Add(time.Second/4), now))
	ok, probe, _ := b.admit(now)
	assert.True(t, ok && probe)
	b.failure(now, now, true, 0)
	assert.False(t, b.hostBack(start.Add(time.Second/4), now), "the same answer again")
	b = open()
	b.admit(b.nextProbe)
	assert.False(t, b.hostBack(start.Add(time.Second/4), now), "a probe is out already")
}

// nextProbeOf returns when ln's breaker probes next.
func nextProbeOf(ln *lane) time.Time {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.breaker.nextProbe
}

// breakerOpen reports whether ln's breaker is open.
func breakerOpen(ln *lane) bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.breaker.open
}

// failProbesUntil fails the probes of lanes, the one due first each time,
// at their times, until the clock reaches until: an outage every
// namespace is written through.
func failProbesUntil(t *testing.T, clk *fakeClock, lanes []*lane, until time.Time) {
	t.Helper()
	for clk.Now().Before(until) {
		first := lanes[0]
		for _, ln := range lanes {
			if nextProbeOf(ln).Before(nextProbeOf(first)) {
				first = ln
			}
		}
		probeWith(t, clk, first, errServer)
	}
}

// probeWith sends the probe of ln, due first among lanes, at its time, and
// answers it with e; it returns the probe's permit.
func probeWith(t *testing.T, clk *fakeClock, ln *lane, e *Error) permit {
	t.Helper()
	if d := nextProbeOf(ln).Sub(clk.Now()); d > 0 {
		clk.Advance(d)
	}
	p, err := ln.acquire(context.Background(), req(1))
	require.NoError(t, err)
	require.NotZero(t, p.probe)
	ln.release(p, e)
	return p
}

// firstProbeWait sends the open breaker's first probe through ln, answered,
// and returns how long it waited: the fake clock sleeps until it may go.
func firstProbeWait(t *testing.T, clk *fakeClock, ln *lane) time.Duration {
	t.Helper()
	openedAt := clk.Now()
	p, err := ln.acquire(context.Background(), req(1))
	require.NoError(t, err)
	require.NotZero(t, p.probe)
	ln.release(p, nil)
	return p.start.Sub(openedAt)
}

// The breakers of namespaces not written since an outage ended stay open
// (nothing probes them), but they no longer count toward their host's
// pace once the index answered after their last failure: a later outage
// of the one namespace still written is probed at one breaker's pace.
// They slowed its first probe to 1.6 s, and later ones up to 30 s.
func TestBreakersOfAnOutageThatEndedDoNotSlowALaterOne(t *testing.T) {
	_, clk, lanes := downLanes(t, 16)
	// The index is back: ns0's probe is answered; ns1..ns15 got no more
	// records (their part of the run was over, or failed), so nothing
	// probes them.
	probeWith(t, clk, lanes[0], nil)
	require.False(t, breakerOpen(lanes[0]))

	clk.Advance(time.Hour) // an hour later, a short outage; only ns0 is written
	openBreaker(t, lanes[0])
	assert.LessOrEqual(t, firstProbeWait(t, clk, lanes[0]), probeEvery,
		"the only namespace written during the outage probes at one breaker's pace, not slowed by breakers of an outage that ended an hour ago")
}

// A namespace idle 30 s after a long outage, which the index has since
// ended for another namespace, waits for the probe that rechecks the
// index: the host's stretched pace does not stretch a verdict's life
// (two probe periods), which failed its requests unsent.
func TestAnIdleNamespaceWaitsForItsRecheckAfterTheIndexAnsweredAnother(t *testing.T) {
	_, clk, lanes := downLanes(t, 16)
	start := clk.Now()
	// The outage lasts over a minute: each namespace's probes fail in turn.
	failProbesUntil(t, clk, lanes, start.Add(outagePatience+10*time.Second))
	idle := lanes[5]
	idle.mu.Lock()
	lastFailure := idle.breaker.lastFailure
	idle.mu.Unlock()

	// The index is back: ns0's probe is answered.
	clk.Advance(time.Second)
	back := probeWith(t, clk, lanes[0], nil)
	require.False(t, breakerOpen(lanes[0]))

	// ns5 sat idle; 30 s after its last failure, two batches come.
	if d := lastFailure.Add(30 * time.Second).Sub(clk.Now()); d > 0 {
		clk.Advance(d)
	}
	require.Greater(t, clk.Now().Sub(lastFailure), 2*probeMax, "idle for longer than the verdict lasted before 05b4bc0")
	require.Less(t, clk.Now().Sub(lastFailure), outagePatience)
	t.Logf("ns5 idle %v since its last failure, ns0 answered %v ago", clk.Now().Sub(lastFailure), clk.Now().Sub(back.start))
	p, err := idle.acquire(context.Background(), req(1))
	require.NoError(t, err)
	require.NotZero(t, p.probe, "the first batch probes at once (hostBack)")
	assert.False(t, idle.gaveUp(), "the second batch waits for the recheck, not fail unsent with errOutageTooLong")
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = idle.acquire(cctx, req(1))
	assert.NotErrorIs(t, err, errOutageTooLong, "a batch arriving while the recheck is out")
	idle.release(p, nil)
}

// Breakers that other processes' writers opened (applyView), on lanes
// this process shares but does not write, leave their host's count when
// those writers see the outage end: this process's one namespace written
// then probes a later outage at one breaker's pace.
func TestBreakersOtherWritersSawCloseDoNotSlowALaterOutage(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	written := lim.holdLane(laneID{host: probeHost, key: "ns0"}, MaxBatchSize)
	defer written.holdRoute(-1)
	p, err := written.acquire(ctx, req(1))
	require.NoError(t, err)
	written.release(p, nil)
	for i := 1; i < 16; i++ {
		ln := lim.holdLane(laneID{host: probeHost, key: "ns" + string(rune('a'+i))}, MaxBatchSize)
		defer ln.holdRoute(-1)
		m := newFakeMember(liveLaneNoCut(clk.Now()))
		shareDownLane(ln, m)
		v := m.View()
		v.OpenSince = clk.Now() // another process's writer met an outage
		apply(ln, m, v)
		require.True(t, breakerOpen(ln))
		v.OpenSince = time.Time{} // and saw it end
		apply(ln, m, v)
	}
	clk.Advance(time.Hour)
	openBreaker(t, written)
	assert.LessOrEqual(t, firstProbeWait(t, clk, written), probeEvery,
		"the only namespace down probes at one breaker's pace")
}

// The breakers an earlier run left open count toward the host's pace only
// while they keep failing: when the index comes back through a namespace
// whose breaker never opened (nothing closes), a later short outage of
// another namespace is still probed at one breaker's pace (it waited 1.7
// s for its first probe, later ones up to 30 s).
func TestBreakersOfAnOutageThatEndedUnseenDoNotSlowALaterOne(t *testing.T) {
	ctx := context.Background()
	lim, clk, _ := downLanes(t, 16) // ns0..ns15 down; their run gives up and ends
	// The index is back; a later run writes a new namespace only.
	fresh := lim.holdLane(laneID{host: probeHost, key: "ns-new"}, MaxBatchSize)
	t.Cleanup(func() { fresh.holdRoute(-1) })
	clk.Advance(time.Minute)
	for i := 0; i < 10; i++ {
		p, err := fresh.acquire(ctx, req(1))
		require.NoError(t, err)
		fresh.release(p, nil) // the index answers
	}
	clk.Advance(time.Hour) // an hour later, a short outage of the one namespace written
	openBreaker(t, fresh)
	assert.LessOrEqual(t, firstProbeWait(t, clk, fresh), probeEvery,
		"the only namespace down probes at one breaker's pace, not slowed by breakers of an outage that ended an hour ago")
}

// After the first minute of an outage, a namespace written all along whose
// probes come 30 s apart (the host's pace shared by 16) keeps its verdict
// between them, and its batches fail unsent: the verdict went stale 10 s
// after each failure, and they waited for the next probe.
func TestANamespaceWrittenThroughALongOutageFailsUnsentBetweenItsSharedProbes(t *testing.T) {
	_, clk, lanes := downLanes(t, 16)
	start := clk.Now()
	// The outage lasts; every namespace is written: each probe fails on
	// time, the earliest due first.
	failProbesUntil(t, clk, lanes, start.Add(outagePatience+30*time.Second))
	// The namespace whose probe just failed: its next is 30 s away.
	ln := lanes[0]
	for _, l := range lanes {
		l.mu.Lock()
		lf := l.breaker.lastFailure
		l.mu.Unlock()
		if lf.Equal(clk.Now()) {
			ln = l
		}
	}
	gap := nextProbeOf(ln).Sub(clk.Now())
	t.Logf("next probe of the namespace in %v", gap)
	require.Greater(t, gap, 2*probeMax+time.Second)
	require.True(t, ln.gaveUp(), "just after its probe failed, the verdict holds")
	clk.Advance(2*probeMax + time.Second) // a batch of the same namespace, still before its next probe
	assert.True(t, ln.gaveUp(),
		"over a minute into the outage, a namespace whose probes keep failing at the host's shared pace fails its batches unsent; they wait for the next probe instead")
}

// Lanes of one host failing, probing, closing and being forgotten
// concurrently: no race, no deadlock (lock order Limiter.mu → lane.mu →
// hostSeen.mu), and the host's set holds only open lanes at the end.
func TestTheHostsOpenSetUnderConcurrency(t *testing.T) {
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	done := make(chan struct{})
	for g := 0; g < 8; g++ {
		go func(g int) {
			defer func() { done <- struct{}{} }()
			ln := lim.holdLane(laneID{host: probeHost, key: string(rune('a' + g%4))}, MaxBatchSize)
			defer ln.holdRoute(-1)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			for i := 0; i < 300; i++ {
				p, err := ln.acquire(ctx, req(1))
				if err != nil {
					continue
				}
				var e *Error
				if (i/20+g)%3 != 0 {
					e = errServer
				}
				ln.release(p, e)
				if i%50 == 0 {
					lim.State("a")
				}
			}
		}(g)
	}
	for g := 0; g < 8; g++ {
		<-done
	}
	lim.mu.Lock()
	h := lim.hosts[probeHost]
	lim.mu.Unlock()
	h.mu.Lock()
	var counted []*lane
	for ln := range h.open {
		counted = append(counted, ln)
	}
	h.mu.Unlock()
	for _, ln := range counted { // lane.mu before hostSeen.mu: never both here
		ln.mu.Lock()
		open := ln.breaker.open
		ln.mu.Unlock()
		assert.True(t, open, "only open breakers are counted")
	}
}

// A writer whose breaker another writer's outage opened (heard), its own
// last failure minutes old, has no failure that bears the verdict out:
// its requests wait for its own probe, a recheck, as before the host's
// pace; the probe heard scheduled stretched an old failure's life, and
// they failed unsent at once.
func TestAnOutageHeardFromOtherWritersIsNotBorneOutByAnOldFailure(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 2))
	ln, clk, _ := sharedLane(t, m)
	// One server error, then answers: an old blip, the breaker never opened.
	p, err := ln.acquire(context.Background(), req(1))
	require.NoError(t, err)
	ln.release(p, &Error{Class: ClassServer})
	clk.Advance(time.Millisecond)
	p, err = ln.acquire(context.Background(), req(1))
	require.NoError(t, err)
	ln.release(p, nil)

	clk.Advance(5 * time.Minute)
	// Another writer's breaker opened a minute ago; this writer hears it.
	v := m.View()
	v.OpenSince, v.Answered = clk.Now().Add(-outagePatience), true
	apply(ln, m, v)

	ln.mu.Lock()
	defer ln.mu.Unlock()
	require.True(t, ln.breaker.open)
	assert.False(t, ln.breaker.current(clk.Now()), "a failure five minutes old bears out no verdict (old rule: stale after 2×probeMax)")
	assert.Nil(t, ln.breaker.gaveUp(clk.Now()), "requests wait for this writer's probe, which decides")
	_, _, _ = ln.breaker.admit(clk.Now().Add(probeEvery))
	assert.True(t, ln.breaker.rechecking, "the probe rechecks: nothing of this writer bore the verdict out")
}

// A lane whose index answered another namespace of its host after the
// lane's last failure does not propose its outage to a new membership:
// the verdict is no longer borne out, though the lane had not waited
// since to hear of the answer.
func TestANewMembershipDoesNotProposeAnOutageTheHostSawEnd(t *testing.T) {
	_, clk, lanes := downLanes(t, 2)
	a, b := lanes[0], lanes[1]
	a.mu.Lock()
	lastFailure := a.breaker.lastFailure
	a.mu.Unlock()
	p := probeWith(t, clk, b, nil) // the index answers the other namespace
	require.True(t, p.start.After(lastFailure))
	require.True(t, breakerOpen(a), "nothing probed a: its breaker is still open")

	v := capped(clk.Now(), 0, math.Inf(1), 0, 1)
	v.Answered = true
	m := newFakeMember(v)
	leave := a.joinShare(context.Background(), fakeStore{m}, share.Lane{Host: probeHost}, new(shareCounters))
	m.mu.Lock()
	opened := slices.Contains(m.breakers, true)
	m.mu.Unlock()
	leave()
	assert.False(t, opened, "the index answered another namespace after the lane's last failure: no outage to propose")
}

// A failure that comes after the probe failed (a request admitted before
// the breaker opened, timing out late) does not shorten the verdict: it
// lasts until the next probe, 30 s away when 16 namespaces share the
// host's pace, and batches keep failing unsent meanwhile; it went stale
// 10 s after the late failure.
func TestALateFailureDoesNotShortenAVerdictBetweenSharedProbes(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	lanes := make([]*lane, 16)
	late := make([]permit, len(lanes)) // admitted before the outage, answered late
	for i := range lanes {
		ln := lim.holdLane(laneID{host: probeHost, key: fmt.Sprint("ns", i)}, MaxBatchSize)
		t.Cleanup(func() { ln.holdRoute(-1) })
		p, err := ln.acquire(ctx, req(1))
		require.NoError(t, err)
		ln.release(p, nil)
		late[i], err = ln.acquire(ctx, req(1))
		require.NoError(t, err)
		lanes[i] = ln
	}
	for _, ln := range lanes {
		for !ln.state().Paused {
			p, err := ln.acquire(ctx, req(1))
			require.NoError(t, err)
			ln.release(p, errServer)
		}
	}
	start := clk.Now()
	failProbesUntil(t, clk, lanes, start.Add(outagePatience+30*time.Second))
	k := 0
	for i, l := range lanes {
		l.mu.Lock()
		lf := l.breaker.lastFailure
		l.mu.Unlock()
		if lf.Equal(clk.Now()) {
			k = i
		}
	}
	ln := lanes[k]
	next := nextProbeOf(ln)
	require.Greater(t, next.Sub(clk.Now()), 2*probeMax+5*time.Second)
	require.True(t, ln.gaveUp(), "just after its probe failed, the verdict holds")

	clk.Advance(time.Second)
	ln.release(late[k], &Error{Class: ClassTimeout}) // the index is still down
	require.True(t, ln.gaveUp())

	clk.Advance(2*probeMax + time.Second) // still well before the next probe
	require.True(t, clk.Now().Before(next))
	assert.True(t, ln.gaveUp(),
		"a failure after the probe bears the outage out more, not less: batches fail unsent until the next probe is overdue")
}

// lane.gaveUp (hearHostBack: lane.mu → hostSeen.mu) racing answers that
// close other lanes' breakers (hostSeen.closed) and failures: no race, no
// deadlock.
func TestGaveUpRacesTheHostsAnswers(t *testing.T) {
	_, _, lanes := downLanes(t, 4)
	done := make(chan struct{})
	for g, ln := range lanes {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 200; i++ {
				if g%2 == 0 {
					_ = ln.gaveUp()
					continue
				}
				p, err := ln.acquire(context.Background(), req(1))
				if err != nil {
					continue
				}
				if i%3 == 0 {
					ln.release(p, nil)
				} else {
					ln.release(p, errServer)
				}
			}
		}()
	}
	for range lanes {
		<-done
	}
}

// A namespace whose probe is out when the index answers another namespace
// of its host fails no request unsent meanwhile: the host's answer ends
// its verdict, probe or not (gaveUp), where its batches failed with
// errOutageTooLong until the probe came back.
func TestAnOutageTheHostSawEndIsNotBorneOutWhileAProbeIsOut(t *testing.T) {
	_, clk, lanes := downLanes(t, 16)
	start := clk.Now()
	failProbesUntil(t, clk, lanes, start.Add(outagePatience+10*time.Second))
	ns5 := lanes[5]
	// ns5's probe goes out, still during the outage, and hangs.
	if d := nextProbeOf(ns5).Sub(clk.Now()); d > 0 {
		clk.Advance(d)
	}
	p5, err := ns5.acquire(context.Background(), req(1))
	require.NoError(t, err)
	require.NotZero(t, p5.probe)
	defer ns5.release(p5, nil)

	// The index is back: ns0's probe, sent after ns5's last failure, is answered.
	clk.Advance(time.Second)
	probeWith(t, clk, lanes[0], nil)
	require.False(t, breakerOpen(lanes[0]))

	assert.False(t, ns5.gaveUp(), "the index answered another namespace since ns5's last failure: its verdict is not borne out")
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = ns5.acquire(cctx, req(1))
	assert.NotErrorIs(t, err, errOutageTooLong, "a batch of ns5 while its probe is out fails unsent although the index answers")
}

// shareDownLane makes ln (a lane a Limiter holds) a member through m, as
// joinShare does, without the watcher: the test applies views with apply.
func shareDownLane(ln *lane, m *fakeMember) {
	ln.mu.Lock()
	ln.share.m, ln.share.stats, ln.share.shared, ln.share.users = m, new(shareCounters), true, 1
	ln.applyView(m.View())
	ln.mu.Unlock()
	ln.flushShare()
}

// Once the lane's other writers (other processes, through the
// Store) saw the outage end, this writer's batches of that very namespace
// do not fail unsent with errOutageTooLong: they wait for the probe, which
// goes at once, as when the index answered another namespace of the host
// in this process (breaker.hostBack / borneOut: "A verdict that no failure
// bears out is stale (... or the index answered another namespace of its
// host since): requests wait for the next probe, which decides again").
// The Store's contract (scripts.go, breakerScript): "The outage starts
// with the first writer whose breaker opens, and ends for all with the
// first that closes (the index answered it)". applyView takes the shared
// close only off the host's pace count; the lane's verdict stayed current
// until its own next probe (30 s away with 16 namespaces of the host down,
// 5 s with one), and every batch meanwhile failed unsent although the index
// answered this namespace to another process.
func TestALaneWhoseOtherWritersSawTheOutageEndProbesAtOnceAndFailsNothingUnsent(t *testing.T) {
	_, clk, lanes := downLanes(t, 16)
	ln := lanes[3]
	m := newFakeMember(liveLaneNoCut(clk.Now()))
	// The store heard of this writer's outage (Breaker(true)).
	v := m.View()
	v.OpenSince, v.Answered = clk.Now(), true
	m.set(v)
	shareDownLane(ln, m)
	start := clk.Now()
	// Over a minute of outage, every namespace's probes failing.
	failProbesUntil(t, clk, lanes, start.Add(outagePatience+20*time.Second))
	// The probe of ln just failed, or did a moment ago.
	probeWith(t, clk, ln, errServer)
	require.True(t, ln.gaveUp(), "during the outage, after its minute, batches fail unsent")
	nextProbe := nextProbeOf(ln)
	t.Logf("ln's next probe in %v", nextProbe.Sub(clk.Now()))

	// The index is back: another process's writer of this namespace got
	// an answer, and the store cleared the outage (open_since 0).
	clk.Advance(time.Second)
	v = m.View()
	v.OpenSince = time.Time{}
	apply(ln, m, v)

	assert.False(t, ln.gaveUp(),
		"the lane's writers saw the outage end: its batches must not fail unsent with errOutageTooLong")
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := ln.acquire(cctx, req(1))
	assert.NotErrorIs(t, err, errOutageTooLong, "a batch after the shared outage ended failed unsent")
	assert.LessOrEqual(t, nextProbeOf(ln).Sub(clk.Now()), probeEvery,
		"the lane probes at once once its other writers heard the index back (it waited %v)", nextProbe.Sub(clk.Now()))
}

// A new membership whose first view holds an outage that began
// before this writer's latest answer (another process's writer opened its
// breaker minutes ago and none closed it since: that writer is cut off
// from the index, or the lane's other writers all left) does not fail this
// writer's batches unsent. applyView says so for a rejoin ("This writer
// saw the outage end while the store was out of reach ...: it says so now
// rather than reopen for an outage that its own answers show is over"),
// and the core's rule is that a writer "that never got an answer itself
// must not call a live index dead" / "must not fail records it never sent
// on another's word" (docs/redis-sharing.md, departure 6). But joinShare
// sets shared before applyView, so a new membership is never "rejoined":
// the breaker opened on the old outage (openedAt = OpenSince, two minutes
// ago), and a server error of this writer a few seconds old, followed by
// answers, "bore it out" (borneOut: within 2×probeMax): every batch but
// the probe failed with errOutageTooLong although the index answered this
// writer after the outage began, and after that failure. The writer now
// tells the store the outage is over.
func TestANewMembershipDoesNotReopenAnOutageItsOwnAnswersShowIsOver(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	ln := lim.holdLane(laneID{host: probeHost, key: "ns"}, MaxBatchSize)
	defer ln.holdRoute(-1)
	send := func(e *Error) {
		t.Helper()
		clk.Advance(time.Millisecond)
		p, err := ln.acquire(ctx, req(1))
		require.NoError(t, err)
		ln.release(p, e)
	}
	send(nil)
	send(errServer) // a blip
	send(nil)       // the index answers this writer again
	send(nil)
	clk.Advance(3 * time.Second)

	// Another process's writer opened its breaker two minutes ago, and
	// none closed it since (that writer cannot reach the index).
	v := liveLaneNoCut(clk.Now())
	v.OpenSince, v.Answered = clk.Now().Add(-2*outagePatience), true
	m := newFakeMember(v)
	leave := ln.joinShare(ctx, fakeStore{m}, share.Lane{Host: probeHost, Namespace: "ns"}, new(shareCounters))
	defer leave()

	assert.False(t, ln.gaveUp(),
		"this writer's own answers came after the shared outage began: its batches must not fail unsent")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := ln.acquire(cctx, req(1))
	assert.NotErrorIs(t, err, errOutageTooLong, "a batch failed unsent on another writer's outage")
	assert.False(t, breakerOpen(ln), "the writer's own answers show the outage over: it does not reopen")
	m.mu.Lock()
	defer m.mu.Unlock()
	assert.Contains(t, m.breakers, false, "the writer tells the store the outage is over")
}

// A failure that the index answered a later request of the writer past
// bears out no verdict: a breaker opened by another writer's outage (heard)
// waits for its probe rather than fail requests unsent, however old the
// outage (openSince may come from another machine's clock, which the
// writer's own answers cannot be compared with).
func TestAFailureTheIndexAnsweredPastBearsOutNoVerdict(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var b breaker
	require.False(t, b.failure(t0, t0, false, 0))
	b.success(t0.Add(time.Second)) // a request sent after the failure, answered
	now := t0.Add(3 * time.Second)
	require.True(t, b.heard(now, now.Add(-2*outagePatience), true), "another writer's outage opens it")
	assert.False(t, b.borneOut(now))
	assert.False(t, b.current(now))
	assert.Nil(t, b.gaveUp(now), "requests wait for the probe")
}

// A Limiter kept between calls (WithLimiter) whose last call ended during
// an outage: the lane's last view held the outage (its own Breaker(true)
// landed, open_since set), and when its last writer left, the store dropped
// the lane's keys (leaveScript: "the lane's keys when no live writer is
// left"). The next call's new membership finds a fresh state: OpenSince
// zero. Nobody answered anything: that zero is "the keys are gone", not
// "another writer saw the outage end".
//
// proposeHeld's contract: a new membership of a lane whose state was
// dropped proposes "its breaker's outage if failures still bear it out, so
// that the writers that join share them". And hostSeen.closed is for "ln's
// breaker closed by an answer to a request sent at sent" (every other
// namespace of the host then probes at once and its verdict goes stale).
//
// applyView's sharedBack took the 0 of the fresh keys (the last view heard
// held an outage) as the index answering: the lane's own verdict went
// stale, so proposeHeld no longer proposed the outage, and every namespace
// of the host had its verdict made stale and probed at once.
func TestANewMembershipAfterTheKeysWereDroppedIsNoAnswerOfTheIndex(t *testing.T) {
	ctx := context.Background()
	_, clk, lanes := downLanes(t, 2)
	a, b := lanes[0], lanes[1]
	start := clk.Now()
	failProbesUntil(t, clk, lanes, start.Add(outagePatience+10*time.Second))
	require.True(t, a.gaveUp(), "a minute into the outage, a's verdict holds")
	require.True(t, b.gaveUp(), "a minute into the outage, b's verdict holds")

	// The call that ended: a was a member, and the store held its outage.
	v1 := capped(clk.Now(), 0, math.Inf(1), 0, 1)
	v1.OpenSince, v1.Answered = start, true
	m1 := newFakeMember(v1)
	leave := a.joinShare(ctx, fakeStore{m1}, share.Lane{Host: probeHost, Namespace: "ns0"}, new(shareCounters))
	leave() // the last writer: the store drops the lane's keys

	// The next call, a moment later: a fresh state, or one where another
	// writer once saw an outage end (when, the view does not say).
	clk.Advance(10 * time.Millisecond)
	for _, answered := range []bool{true, false} {
		fresh := capped(clk.Now(), 0, math.Inf(1), 0, 1)
		fresh.Answered = answered
		m2 := newFakeMember(fresh)
		leave = a.joinShare(ctx, fakeStore{m2}, share.Lane{Host: probeHost, Namespace: "ns0"}, new(shareCounters))

		m2.mu.Lock()
		proposed := slices.Contains(m2.breakers, true)
		m2.mu.Unlock()
		assert.True(t, proposed, "answered %v: the outage a's failures still bear out is proposed to the lane's state (proposeHeld)", answered)
		assert.True(t, a.gaveUp(), "answered %v: nothing answered: a's verdict, borne out moments ago, still holds", answered)
		assert.True(t, b.gaveUp(), "answered %v: another namespace's verdict is made stale by a new membership's view", answered)
		leave()
	}
}

// Keys the store dropped while this writer was a member (its heartbeat
// expired: the process stalled) and made again by its next exchange hold
// no outage and no answer: that is no other writer seeing the outage end,
// which a close always says (answered), and the verdict of this writer's
// own failures stands.
func TestAStateMadeAgainIsNoCloseOfTheOutage(t *testing.T) {
	m := newFakeMember(capped(newFakeClock().Now(), 0, math.Inf(1), 0, 2))
	ln, clk, _ := sharedLane(t, m)
	openBreaker(t, ln)
	v := m.View()
	v.OpenSince, v.Answered = clk.Now(), true
	apply(ln, m, v)
	clk.Advance(probeEvery / 2)
	v.OpenSince, v.Answered = time.Time{}, false
	apply(ln, m, v)
	ln.mu.Lock()
	defer ln.mu.Unlock()
	assert.True(t, ln.breaker.current(clk.Now()), "the writer's own failures still bear its verdict out")
}

// sizeCapIndex is an UpsertFunc, on an eventClock, for an index that takes
// a batch of at most limit records in 20 ms (virtual) and lets every larger
// one run until the request timeout (virtual) and time out, from its
// request number slowFrom on (before it, it takes every size in 20 ms): a
// batch too heavy for the index, while smaller ones are no trouble.
type sizeCapIndex struct {
	clk      *eventClock
	limit    int
	slowFrom int
	timeout  time.Duration

	mu       sync.Mutex
	stored   map[string]bool
	sizes    map[int]int // requests by records carried
	timeouts int
	calls    int
}

func (s *sizeCapIndex) upsert(ctx context.Context, _ string, batch []*pinecone.Vector) error {
	s.mu.Lock()
	call := s.calls
	s.calls++
	s.sizes[len(batch)]++
	s.mu.Unlock()
	// ctx's deadline runs in real time, not the clock's: wait on the clock
	// alone (All waits for its requests anyway).
	wait := context.WithoutCancel(ctx)
	if len(batch) > s.limit && call >= s.slowFrom {
		_ = s.clk.Sleep(wait, s.timeout)
		s.mu.Lock()
		s.timeouts++
		s.mu.Unlock()
		return context.DeadlineExceeded
	}
	_ = s.clk.Sleep(wait, 20*time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range batch {
		s.stored[v.Id] = true
	}
	return nil
}

// runSizeCap writes n records with All, default options but the clock,
// into a sizeCapIndex, and logs what happened.
func runSizeCap(t *testing.T, n, limit, slowFrom int, timeout time.Duration, opts ...Option) (Result, *sizeCapIndex, error) {
	t.Helper()
	clk := newEventClock()
	ix := &sizeCapIndex{clk: clk, limit: limit, slowFrom: slowFrom, timeout: timeout, stored: map[string]bool{}, sizes: map[int]int{}}
	all := append([]Option{WithUpsertFunc(ix.upsert), withClock(clk), withRand(maxRand)}, opts...)
	res, err := All(context.Background(), vectors(n, 8), all...)
	t.Logf("index takes <= %d records, request timeout %v: virtual %v, requests %d (timeouts %d), upserted %d, failed %d, splits %d, retries %d, errors %v, batch size at the end %d",
		limit, timeout, clk.Now().Sub(clk.start), res.Stats.Requests, ix.timeouts, res.Upserted, len(res.Failed),
		res.Stats.Splits, res.Stats.Retries, res.Stats.ErrorsByClass, res.Stats.Limiter.BatchSize)
	t.Logf("requests by records carried: %v", ix.sizes)
	if len(res.Failed) > 0 {
		t.Logf("first failure: %v", res.Failed[0].Err)
	}
	return res, ix, err
}

// An index that takes batches of up to 20 records in 20 ms but lets every
// larger batch run into the request timeout, written with All and the
// default options (request timeout 30 s): every record lands. The fifth
// timeout opens the breaker; its probes were whichever halves came first
// (50 records, 30 s each), and a minute after it opened all 3000 records
// failed "not sent: every request has failed ... for over a minute". After
// a timeout the probe goes as one record, which the index answers in time.
func TestBatchesTooLargeForTheIndexAreHalvedToWhatItTakesNotFailedByTheBreaker(t *testing.T) {
	const n = 3000
	res, ix, err := runSizeCap(t, n, 20, 0, DefaultRequestTimeout)
	assert.NoError(t, err)
	assert.Equal(t, n, res.Upserted, "the index takes every batch of up to 20 records; none need fail")
	assert.Len(t, ix.stored, n)
	assert.Empty(t, res.Failed)
}

// The same with WithRequestTimeout(2 * time.Second), on an index that
// slows down during the run: it takes every size for 20 requests (the
// batch size grows to 1000), then lets every batch of more than 20 records
// time out. The breaker's probes were split pieces (500, 250, 125, ...),
// and 9000 of the 20000 records failed unsent within its minute.
func TestAnIndexThatSlowsDownMidRunGetsEveryRecordThroughTheBreaker(t *testing.T) {
	const n = 20000
	res, ix, err := runSizeCap(t, n, 20, 20, 2*time.Second, WithRequestTimeout(2*time.Second))
	assert.NoError(t, err)
	assert.Equal(t, n, res.Upserted, "the index takes every batch of up to 20 records; none need fail")
	assert.Len(t, ix.stored, n)
	assert.Empty(t, res.Failed)
}

// gatewayOutageIndex is an UpsertFunc, on an eventClock, for an index that
// answers every request in 20 ms (virtual) and, from its request number
// from on, answers HTTP 504 (a gateway timeout: ClassTimeout) for d of
// virtual time: a short outage behind a load balancer, answered at once.
type gatewayOutageIndex struct {
	clk  *eventClock
	from int
	d    time.Duration

	mu        sync.Mutex
	calls     int
	downUntil time.Time
	stored    map[string]bool
}

func (g *gatewayOutageIndex) upsert(ctx context.Context, _ string, b []*pinecone.Vector) error {
	g.mu.Lock()
	g.calls++
	if g.calls == g.from {
		g.downUntil = g.clk.Now().Add(g.d)
	}
	down := g.clk.Now().Before(g.downUntil)
	g.mu.Unlock()
	_ = g.clk.Sleep(context.WithoutCancel(ctx), 20*time.Millisecond)
	if down {
		return &Error{Class: ClassTimeout, StatusCode: 504, Err: errors.New("504 gateway timeout")}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, v := range b {
		g.stored[v.Id] = true
	}
	return nil
}

// forGood returns the failures that are not Resend: dead letters.
func forGood(res Result) []Failure {
	var out []Failure
	for _, f := range res.Failed {
		if !f.Resend {
			out = append(out, f)
		}
	}
	return out
}

// A 5-second outage answered with HTTP 504 (ClassTimeout, which counts
// toward the circuit breaker) fails nothing: "failures while it is open
// spend no retries for the first minute ... so short outages fail
// nothing" (README). A probe of one record from the first timeout spent
// that record's timeout retries, one per probe, and failed 3 of 3,000 for
// good though the index was back a second later; the probe goes alone only
// once the minute has passed.
func TestAShortOutageOfGatewayTimeoutsFailsNoRecord(t *testing.T) {
	clk := newEventClock()
	ix := &gatewayOutageIndex{clk: clk, from: 10, d: 5 * time.Second, stored: map[string]bool{}}
	res, err := All(context.Background(), vectors(3000, 8), WithUpsertFunc(ix.upsert), withClock(clk), withRand(maxRand))
	for _, f := range res.Failed {
		t.Logf("failed %s after %d attempts (resend %v): %v", f.ID, f.Attempts, f.Resend, f.Err)
	}
	assert.NoError(t, err)
	assert.Equal(t, 3000, res.Upserted, "a 5-second outage fails nothing")
	assert.Empty(t, forGood(res), "no record of a short outage is a dead letter")
}

// An index host that black-holes every request (each runs into the
// request timeout) after answering the first few: the breaker
// gives up after its minute, and every record it fails is the index's
// failure, not its own: Failure.Resend "reports a failure that says
// nothing against the record: the run stopped, the index was down ..."
// and a Checkpoint stops before it, so a resumed run sends it. A probe of
// one record from the first timeout spent all its retries inside the
// breaker's minute and failed for good with a bare timeout; so did a
// record alone with a request timeout of a second or two, whose timeouts
// spent its retries while the breaker was young.
func TestABlackHoledHostFailsEveryRecordAsTheIndexsNotForGood(t *testing.T) {
	for _, timeout := range []time.Duration{DefaultRequestTimeout, 2 * time.Second, time.Second} {
		res, ix, _ := runSizeCap(t, 3000, 0, 10, timeout, WithRequestTimeout(timeout))
		require.NotEmpty(t, res.Failed, "the host is black-holed: the breaker gives up")
		assert.Equal(t, 3000, len(ix.stored)+len(res.Failed))
		for _, f := range forGood(res) {
			t.Errorf("request timeout %v: record %s failed for good after %d attempts while the index was down: %v", timeout, f.ID, f.Attempts, f.Err)
		}
	}
}

// A pinned WithBatchSize is cut for the breaker's probe too: the breaker
// gives up on timeouts only once a one-record request timed out, and a
// batch of the pinned size as the probe kept it waiting while its halves,
// each a probe of its own, came down to one record.
func TestABlackHoledHostIsGivenUpOnWithAPinnedBatchSizeToo(t *testing.T) {
	res, ix, _ := runSizeCap(t, 3000, 0, 10, 2*time.Second, WithRequestTimeout(2*time.Second), WithBatchSize(100))
	require.NotEmpty(t, res.Failed, "the host is black-holed: the breaker gives up")
	assert.Equal(t, 3000, len(ix.stored)+len(res.Failed))
	assert.Empty(t, forGood(res))
	assert.Less(t, ix.clk.Now().Sub(ix.clk.start), 3*time.Minute, "a minute's patience, then a probe of one record")
}

// afterOutageIndex wraps a gatewayOutageIndex and counts the records
// carried by the first `of` requests the index took after its outage,
// then cancels the run (what follows says no more).
type afterOutageIndex struct {
	g      *gatewayOutageIndex
	of     int
	cancel context.CancelFunc

	mu       sync.Mutex
	requests int
	records  int
}

func (r *afterOutageIndex) upsert(ctx context.Context, ns string, b []*pinecone.Vector) error {
	err := r.g.upsert(ctx, ns, b)
	r.g.mu.Lock()
	after := !r.g.downUntil.IsZero() && !r.g.clk.Now().Before(r.g.downUntil)
	r.g.mu.Unlock()
	if err != nil || !after {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.requests < r.of {
		r.requests++
		r.records += len(b)
		if r.requests == r.of {
			r.cancel()
		}
	}
	return nil
}

// An outage's timeouts say nothing of the size: every size times out.
// Rule 22c counted the breaker's probes, pieces of batches that timed out
// recut to the shrinking size, and a 3-second outage of HTTP 504s took the
// size from 1,000 to one record within 1.5 s, held there a minute by the
// ceiling (3,040 requests for 5,000 records). Once the index is back, its
// first 100 requests carry batches, and the size never falls to one.
func TestAShortOutageOfGatewayTimeoutsDoesNotRatchetTheBatchSizeToOne(t *testing.T) {
	clk := newEventClock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ix := &afterOutageIndex{g: &gatewayOutageIndex{clk: clk, from: 12, d: 3 * time.Second, stored: map[string]bool{}}, of: 100, cancel: cancel}
	var mu sync.Mutex
	var state func() LimiterState
	minSize := 1 << 30
	obs := Observer{
		StartRun: func(ctx context.Context, e RunEvent) context.Context {
			mu.Lock()
			state = e.LimiterState
			mu.Unlock()
			return ctx
		},
		RequestDone: func(RequestEvent) {
			mu.Lock()
			defer mu.Unlock()
			minSize = min(minSize, state().BatchSize)
		},
	}
	_, _ = All(ctx, vectors(5000, 4), WithUpsertFunc(ix.upsert), withClock(clk), withRand(maxRand), WithObserver(obs))
	ix.mu.Lock()
	defer ix.mu.Unlock()
	t.Logf("first %d requests after the outage carried %d records; smallest batch size the limiter reported: %d", ix.requests, ix.records, minSize)
	assert.NotZero(t, ix.requests)
	assert.GreaterOrEqual(t, ix.records, 10*ix.requests, "a 3-s outage of gateway timeouts must not leave the run sending single records")
	assert.Greater(t, minSize, 1, "the outage's probes halved the size down to one record")
}

// An outage of gateway timeouts shorter than the breaker's minute fails no
// record for good, as one of server errors does ("short outages fail
// nothing"): once a batch was halved to single records, each record's probe
// spent one of its timeout retries, and 2 to 4 of 3,000 records failed for
// good in a 50-s outage. A record whose requests alone keep timing out
// still spends them (TestAllSplitsTimedOutBatches).
func TestAnOutageOfGatewayTimeoutsUnderAMinuteFailsNoRecordForGood(t *testing.T) {
	for name, extra := range map[string][]Option{
		"adaptive":            nil,
		"pinned":              {WithBatchSize(100)},
		"one batch in flight": {WithConcurrency(1)}, // the batch comes down to its first record alone
	} {
		t.Run(name, func(t *testing.T) {
			clk := newEventClock()
			ix := &gatewayOutageIndex{clk: clk, from: 10, d: 50 * time.Second, stored: map[string]bool{}}
			opts := append([]Option{WithUpsertFunc(ix.upsert), withClock(clk), withRand(maxRand)}, extra...)
			res, err := All(context.Background(), vectors(3000, 8), opts...)
			assert.NoError(t, err)
			assert.Equal(t, 3000, res.Upserted)
			for _, f := range forGood(res) {
				t.Errorf("record %s failed for good after %d attempts: %v", f.ID, f.Attempts, f.Err)
			}
		})
	}
}

// An outage of gateway timeouts under a minute, met by a service that
// writes a few records a call from several goroutines sharing a Limiter,
// fails none of them for good: each call begins at its own record 0, and
// failures all starting at position 0 were taken for one record's own.
func TestCallsSharingALimiterThroughAShortOutageOfTimeoutsFailNoRecordForGood(t *testing.T) {
	clk := newEventClock()
	ix := &gatewayOutageIndex{clk: clk, from: 10, d: 50 * time.Second, stored: map[string]bool{}}
	lim := &Limiter{clock: clk}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var upserted int
	var failed []Failure
	for g := range 4 {
		wg.Go(func() {
			for c := range 6 {
				vs := vectors(5, 8)
				for i, v := range vs {
					v.Id = fmt.Sprintf("g%d-c%d-%d", g, c, i)
				}
				res, _ := All(context.Background(), vs, WithUpsertFunc(ix.upsert), WithLimiter(lim), withClock(clk), withRand(maxRand))
				mu.Lock()
				upserted += res.Upserted
				failed = append(failed, forGood(res)...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 4*6*5, upserted)
	for _, f := range failed {
		t.Errorf("record %s failed for good after %d attempts: %v", f.ID, f.Attempts, f.Err)
	}
}

// A writer joins a lane whose shared outage another writer's breaker
// opened a moment ago (View.OpenSince). Its breaker opens on it
// (breaker.heard), and its one record goes as each probe: every timeout
// it meets is that record's, but the outage is the other writers' too, so
// they spend no retry while the breaker is young. They spent them (taken
// for the record's own): the record failed for good as its own timeout within
// 4 s, in an outage of 504s that ended 20 s later, and on a black-holed
// host (where it fails, after the minute, as the index's).
func TestAWritersRecordAloneIsNotFailedForGoodInAnOutageItJoined(t *testing.T) {
	cases := []struct {
		name string
		run  func(clk *eventClock, opts ...Option) (Result, error)
	}{
		{"504s for 20 s", func(clk *eventClock, opts ...Option) (Result, error) {
			ix := &gatewayOutageIndex{clk: clk, from: 1, d: 20 * time.Second, stored: map[string]bool{}}
			return All(context.Background(), vectors(1, 8), append(opts, WithUpsertFunc(ix.upsert))...)
		}},
		{"black-holed host, 2-s timeout", func(clk *eventClock, opts ...Option) (Result, error) {
			ix := &sizeCapIndex{clk: clk, limit: 0, slowFrom: 0, timeout: 2 * time.Second, stored: map[string]bool{}, sizes: map[int]int{}}
			return All(context.Background(), vectors(1, 8), append(opts, WithUpsertFunc(ix.upsert), WithRequestTimeout(2*time.Second))...)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newEventClock()
			v := liveLaneNoCut(clk.Now())
			v.OpenSince = clk.Now() // another writer's breaker just opened: the lane's outage
			m := newFakeMember(v)
			res, _ := tc.run(clk, withClock(clk), withRand(maxRand),
				func(c *config) { c.store, c.shareHost = fakeStore{m}, "h" })
			for _, f := range forGood(res) {
				t.Errorf("record %s failed for good after %d attempts, %v into the lane's outage: %v",
					f.ID, f.Attempts, clk.Now().Sub(clk.start), f.Err)
			}
		})
	}
}

// A writer's view of the lane's outage goes stale while the store is out
// of reach: the outage it heard (open_since T0) ended for it while alone
// (its probe was answered; it could not report the close), and a new
// outage opened its own breaker 70 s later. The store comes back holding
// T0. The writer's answer since shows that outage over, open breaker or
// not (lane.applyOutage): its new outage is counted from its own opening,
// not T0, where every record failed unsent a second into it.
func TestAWritersNewOutageIsNotCountedFromAnEarlierSharedOneItSawEnd(t *testing.T) {
	m := newFakeMember(liveLaneNoCut(newFakeClock().Now()))
	ln, clk, _ := sharedLane(t, m)
	openBreaker(t, ln) // outage 1, reported
	outage := m.View()
	outage.OpenSince, outage.Answered = clk.Now(), true
	apply(ln, m, outage) // the store holds it; the lane heard it
	fallBack(ln, m)      // Redis out of reach

	clk.Advance(20 * time.Second)
	probeWith(t, clk, ln, nil) // the index is back: the close is not reported
	require.False(t, breakerOpen(ln))

	clk.Advance(70 * time.Second)
	openBreaker(t, ln) // outage 2, alone
	require.True(t, breakerOpen(ln))
	clk.Advance(time.Second)
	apply(ln, m, outage) // Redis answers again, with outage 1's open_since

	probeWith(t, clk, ln, errServer)
	ln.mu.Lock()
	start, gaveUp := ln.breaker.outageStart(), ln.breaker.gaveUp(clk.Now())
	ln.mu.Unlock()
	t.Logf("outage 2 counted from %v ago", clk.Now().Sub(start))
	if gaveUp != nil {
		t.Errorf("an outage %v old fails records unsent: %v", clk.Now().Sub(ln.openedAt()), gaveUp)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	assert.Equal(t, []bool{false, true}, m.breakers[len(m.breakers)-2:], "it ends the stale outage and proposes its own")
}

// A black-holed host written in ten namespaces, each with one batch in
// flight: every record it fails is the index's (Resend), none a dead
// letter. Each namespace's batch came down to its first record alone, or
// was one record, whose timeouts the breaker took for that record's own.
func TestABlackHoledHostFailsNoRecordForGoodInNamespacesWithOneBatchInFlight(t *testing.T) {
	for _, size := range []int{10, 1} {
		t.Run(fmt.Sprintf("batches of %d", size), func(t *testing.T) {
			byLastDigit := WithNamespaceOf(func(v *pinecone.Vector) string { return "ns" + v.Id[len(v.Id)-1:] })
			res, ix, _ := runSizeCap(t, 60, 0, 3, 2*time.Second, WithRequestTimeout(2*time.Second),
				WithBatchSize(size), WithConcurrency(3), byLastDigit)
			assert.Equal(t, 60, len(ix.stored)+len(res.Failed))
			for _, f := range forGood(res) {
				t.Errorf("record %s failed for good after %d attempts while the index was down: %v", f.ID, f.Attempts, f.Err)
			}
		})
	}
}

// poisonIndex is an UpsertFunc, on an eventClock, for an index that
// answers every request in 20 ms (virtual) but times out (HTTP 504, a
// gateway timeout, answered at once) every request carrying a poison id:
// a record the index cannot take, while it takes every other.
type poisonIndex struct {
	clk    *eventClock
	poison map[string]bool // by namespace+"/"+id

	mu     sync.Mutex
	stored map[string]bool
	calls  map[string]int // requests by namespace
}

func newPoisonIndex(clk *eventClock, poison ...string) *poisonIndex {
	ix := &poisonIndex{clk: clk, poison: map[string]bool{}, stored: map[string]bool{}, calls: map[string]int{}}
	for _, p := range poison {
		ix.poison[p] = true
	}
	return ix
}

func (ix *poisonIndex) upsert(ctx context.Context, ns string, b []*pinecone.Vector) error {
	ix.mu.Lock()
	ix.calls[ns]++
	ix.mu.Unlock()
	_ = ix.clk.Sleep(context.WithoutCancel(ctx), 20*time.Millisecond)
	for _, v := range b {
		if ix.poison[ns+"/"+v.Id] {
			return &Error{Class: ClassTimeout, StatusCode: 504, Err: errors.New("504 gateway timeout")}
		}
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, v := range b {
		ix.stored[ns+"/"+v.Id] = true
	}
	return nil
}

// byParity puts v0, v2, ... in namespace "a" and v1, v3, ... in "b".
var byParity = WithNamespaceOf(func(v *pinecone.Vector) string {
	if (v.Id[len(v.Id)-1]-'0')%2 == 0 {
		return "a"
	}
	return "b"
})

// Each of two namespaces of one index holds one record the index times out
// whatever request carries it (v18 in "a", v19 in "b"), last of its batch,
// written through a Writer; then ten more records of "a" are added. Each
// poison record fails as its own timeout, a dead letter, within seconds,
// and everything else lands: the index answered its siblings, sent after
// its first timeout (batchFailures.outages). Taking the other namespace's
// timeouts for a sign of an outage held each for the breaker's minute,
// failed it as the index's, and the ten healthy records after it unsent.
func TestPoisonRecordsInTwoNamespacesFailAsTheirOwnTimeouts(t *testing.T) {
	clk := newEventClock()
	ix := newPoisonIndex(clk, "a/v18", "b/v19")
	ctx := context.Background()
	w, err := NewWriter(ctx, WithUpsertFunc(ix.upsert), withClock(clk), withRand(maxRand), WithBatchSize(10), byParity)
	require.NoError(t, err)
	for _, v := range vectors(20, 8) {
		require.NoError(t, w.Add(ctx, v))
	}
	require.NoError(t, w.Flush(ctx))
	took := clk.Now().Sub(clk.start)
	for i, v := range vectors(10, 8) {
		v.Id = fmt.Sprintf("w%d", 2*i) // namespace "a"
		require.NoError(t, w.Add(ctx, v))
	}
	require.NoError(t, w.Flush(ctx))
	res, _ := w.Close(ctx)
	t.Logf("first flush after %v virtual, requests %v, upserted %d", took, ix.calls, res.Upserted)
	var poison []string
	for _, f := range res.Failed {
		t.Logf("%s/%s: attempts %d, resend %v: %v", f.Namespace, f.ID, f.Attempts, f.Resend, f.Err)
		if f.ID == "v18" || f.ID == "v19" {
			poison = append(poison, f.ID)
			assert.Equal(t, ClassTimeout, f.Class)
			assert.False(t, f.Resend, "%s: a record the index alone times out is a dead letter, not the index's", f.ID)
		}
	}
	assert.Len(t, poison, 2)
	assert.Equal(t, 28, res.Upserted, "every record but the two poison ones lands")
	assert.Less(t, took, outagePatience, "a poison record is not held for the breaker's minute")
}

// One batch of 16 records holds two records the index times out whatever
// request carries them (v2 and v5): they fail as their own timeouts, the
// other 14 land, in seconds. Once the two records' failures alternated
// (v2 resent behind the piece holding v5), the breaker took them for an
// outage's, v5 was its every probe for a minute while v8..v15 waited
// behind it, and those failed unsent: 6 of 16 landed in 69 s.
func TestTwoPoisonRecordsOfABatchFailAloneAndQuickly(t *testing.T) {
	for _, pinned := range []bool{false, true} {
		t.Run(fmt.Sprintf("pinned %v", pinned), func(t *testing.T) {
			clk := newEventClock()
			ix := newPoisonIndex(clk, "/v2", "/v5")
			opts := []Option{WithUpsertFunc(ix.upsert), withClock(clk), withRand(maxRand)}
			if pinned {
				opts = append(opts, WithBatchSize(16))
			}
			res, _ := All(context.Background(), vectors(16, 8), opts...)
			took := clk.Now().Sub(clk.start)
			t.Logf("virtual %v, requests %v, upserted %d, failed %d", took, ix.calls, res.Upserted, len(res.Failed))
			for _, f := range res.Failed {
				t.Logf("%s: attempts %d, resend %v: %v", f.ID, f.Attempts, f.Resend, f.Err)
			}
			assert.Equal(t, 14, res.Upserted, "only the two poison records fail")
			for _, f := range res.Failed {
				if f.ID == "v2" || f.ID == "v5" {
					assert.Equal(t, ClassTimeout, f.Class, f.ID)
					assert.False(t, f.Resend, "%s: a record the index alone times out is a dead letter", f.ID)
				}
			}
			assert.Less(t, took, outagePatience, "no record is held for the breaker's minute")
		})
	}
}

// A 20-second outage of gateway timeouts that begins while a slow batch is
// in flight (sent at 0, its 504 at 200 ms), after the index answered a
// request sent at 20 ms, before the outage: the batch's timeouts are the
// outage's. Counted from its first request's send, not its first timeout,
// that answer made them its own, and two records failed for good.
func TestAnOutageThatCatchesABatchInFlightFailsNoRecordForGood(t *testing.T) {
	clk := newEventClock()
	ix := &windowsIndex{clk: clk, slow: "v0", stored: map[string]bool{},
		down: [][2]time.Duration{{100 * time.Millisecond, 20*time.Second + 100*time.Millisecond}}}
	var mu sync.Mutex
	var lastFail time.Duration
	obs := Observer{RequestDone: func(e RequestEvent) {
		mu.Lock()
		defer mu.Unlock()
		if e.Err != nil {
			lastFail = clk.Now().Sub(clk.start)
		}
	}}
	res, err := All(context.Background(), vectors(12, 8), WithUpsertFunc(ix.upsert), withClock(clk), withRand(maxRand),
		WithBatchSize(4), WithConcurrency(2), WithObserver(obs))
	t.Logf("last failed request at %v", lastFail)
	t.Logf("virtual %v, upserted %d, failed %d, retries %v", clk.Now().Sub(clk.start), res.Upserted, len(res.Failed), res.Stats.RetriesByClass)
	for _, f := range res.Failed {
		t.Logf("%s: attempts %d, resend %v: %v", f.ID, f.Attempts, f.Resend, f.Err)
	}
	assert.NoError(t, err)
	assert.Equal(t, 12, res.Upserted, "a 20-second outage fails nothing")
	assert.Empty(t, forGood(res), "no record of a short outage is a dead letter")
}

// windowsIndex answers each request in 20 ms (virtual; 200 ms for one
// carrying the slow id) and fails it with a 504 when its answer falls in
// one of the outage windows: a gateway whose backend dies while requests
// are in flight.
type windowsIndex struct {
	clk  *eventClock
	slow string
	down [][2]time.Duration
	fail *Error // the answer in an outage window; nil: a 504 (ClassTimeout)

	mu     sync.Mutex
	stored map[string]bool
}

func (ix *windowsIndex) upsert(ctx context.Context, _ string, b []*pinecone.Vector) error {
	lat := 20 * time.Millisecond
	for _, v := range b {
		if v.Id == ix.slow {
			lat = 200 * time.Millisecond
		}
	}
	_ = ix.clk.Sleep(context.WithoutCancel(ctx), lat)
	at := ix.clk.Now().Sub(ix.clk.start)
	for _, w := range ix.down {
		if at >= w[0] && at < w[1] && ix.fail != nil {
			return ix.fail
		}
		if at >= w[0] && at < w[1] {
			return &Error{Class: ClassTimeout, StatusCode: 504, Err: errors.New("504 gateway timeout")}
		}
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, v := range b {
		ix.stored[v.Id] = true
	}
	return nil
}

// Two outages of gateway timeouts, each shorter than the breaker's minute
// (1.9 s, then 30 s after the index answered for 100 ms), written in
// batches of one record: no record fails for good. A record that timed
// out in the first took every timeout of the second for its own (the
// index answered others in the gap, after its first timeout); the answers
// that end an outage say nothing of the batches that met it.
func TestASecondShortOutageFailsNoRecordForGood(t *testing.T) {
	clk := newEventClock()
	ix := &windowsIndex{clk: clk, stored: map[string]bool{}, down: [][2]time.Duration{
		{100 * time.Millisecond, 2 * time.Second},
		{2100 * time.Millisecond, 32100 * time.Millisecond},
	}}
	res, err := All(context.Background(), vectors(20, 8), WithUpsertFunc(ix.upsert), withClock(clk), withRand(maxRand),
		WithBatchSize(1), WithConcurrency(1))
	t.Logf("virtual %v, upserted %d, failed %d", clk.Now().Sub(clk.start), res.Upserted, len(res.Failed))
	for _, f := range res.Failed {
		t.Logf("%s: attempts %d, resend %v: %v", f.ID, f.Attempts, f.Resend, f.Err)
	}
	assert.NoError(t, err)
	assert.Equal(t, 20, res.Upserted, "two outages under a minute fail nothing")
	assert.Empty(t, forGood(res), "no record of a short outage is a dead letter")
}

// A record alone in flight meets a 3-second outage under WithMaxRetries(c,
// 2): its failures after the first follow another with no answer between,
// so they spend nothing, whether the outage answers 503s or 504s. The
// timeouts spent a retry each until the breaker opened at the fifth, and
// the record failed for good at the third.
func TestAShortOutageSparesALoneBatchsRetriesForTimeoutsAsForServerErrors(t *testing.T) {
	for _, fail := range []*Error{
		{Class: ClassServer, StatusCode: 503, Err: errors.New("503 unavailable")},
		{Class: ClassTimeout, StatusCode: 504, Err: errors.New("504 gateway timeout")},
	} {
		t.Run(fail.Class.String(), func(t *testing.T) {
			clk := newEventClock()
			ix := &windowsIndex{clk: clk, stored: map[string]bool{}, fail: fail,
				down: [][2]time.Duration{{70 * time.Millisecond, 3070 * time.Millisecond}}}
			res, err := All(context.Background(), vectors(4, 8), WithUpsertFunc(ix.upsert), withClock(clk), withRand(maxRand),
				WithBatchSize(1), WithConcurrency(1), WithMaxRetries(fail.Class, 2))
			t.Logf("virtual %v, retries %v, requests %d", clk.Now().Sub(clk.start), res.Stats.RetriesByClass, res.Stats.Requests)
			assert.NoError(t, err)
			assert.Equal(t, 4, res.Upserted, "a 3-second outage fails nothing")
			assert.Empty(t, res.Failed)
		})
	}
}

// A poison record alone in its batch (WithBatchSize(1)) of a Writer, one or
// two batches in flight, fails as its own timeout within seconds and the
// other 11 land: no breaker's minute.
func TestAPoisonRecordAloneInAWriterFailsAsItsOwnTimeout(t *testing.T) {
	for _, conc := range []int{1, 2} {
		clk := newEventClock()
		ix := newPoisonIndex(clk, "/v1")
		ctx := context.Background()
		w, err := NewWriter(ctx, WithUpsertFunc(ix.upsert), withClock(clk), withRand(maxRand), WithBatchSize(1), WithConcurrency(conc))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vectors(12, 8) {
			_ = w.Add(ctx, v)
		}
		res, _ := w.Close(ctx)
		assert.Equal(t, 11, res.Upserted)
		if assert.Len(t, res.Failed, 1) {
			assert.False(t, res.Failed[0].Resend)
		}
		assert.Less(t, clk.Now().Sub(clk.start), outagePatience)
	}
}
