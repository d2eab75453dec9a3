package upsert

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Limiter paces the requests sent to an index so that an ingestion runs
// close to what the index accepts, without a storm of 429s and without
// tuning. It learns per index and namespace, since Pinecone's limits are
// per namespace, with a small controller per decision (each a pure
// function of what the index answered; docs/limiter.md has the rules and
// the evidence):
//
//   - the send rate, in records, requests and bytes per second: no cap on
//     records until the index's 429s start an episode (more of them than
//     its usual share of refusals explains: a lone 429 does not), requests and bytes
//     starting a tenth above the index's known limits ([WithIndexLimits];
//     [ServerlessLimits] by default with [WithIndex]). A 429 cuts the rate
//     its message names (Pinecone names requests or upsert size) once per
//     episode, to a little under what the index accepted over the last
//     round trips; a rate the index still accepts as well as before is
//     only dipped, so that 429s that come whatever the rate do not grind
//     it down. The rate then climbs back along a cubic curve and probes
//     above, also above a known limit, which is a starting point and not
//     a ceiling. The index's Retry-After, on any failed answer (a 429, a
//     503, gRPC pushback), pauses every request of the namespace.
//   - how many requests may be in flight: 4 at first, doubling while
//     every slot is taken and each doubling raises the throughput, then
//     half again as many now and then, kept only when the throughput
//     (requests in flight over their mean latency, by Little's law) grows
//     with it: an index that only queues more requests does not get them.
//     A timeout takes a quarter off. At most 64.
//   - how many records go in one request: 100 at first; a larger size is
//     tried on a few batches now and then (the largest at once in slow
//     start) and adopted when it costs no more per record; a size that
//     costs more, times out or is too large is avoided for a while, and
//     so is one whose latency tail takes more than three quarters of
//     the request timeout.
//     Under a capped rate, batches carry a twentieth of a second's worth,
//     but enough that the record rate needs at most four fifths of the
//     request rate. At most [MaxBatchSize], and never more than
//     [MaxRequestBytes].
//
// It also holds a circuit breaker (after 5 server failures in a row, every
// request waits while single probes test the index, every 100 ms at first,
// a pace the namespaces of an index share: with N of them down, each
// probes every N×100 ms, and all of them at once when one is answered;
// for the first minute, failures while it is open spend no retries, nor
// does a failure that follows another in a run of failures; after
// it, or at once if the index never answered, requests other than the
// probes fail without being sent) and a retry budget (retries stay around
// a fifth of the requests; a retry that finds the budget empty waits, it
// is never dropped).
//
// A Limiter is safe for concurrent use. Calls that write into one index at
// the same time share one by default; pass one with [WithLimiter] so that a
// long-running service keeps what it learned between calls. One Limiter
// may serve several indexes: what it learns of a namespace of one index
// does not apply to another's, as long as the call knows its index
// ([WithIndex]; calls through [WithUpsertFunc] or [WithRecordsFunc] are
// told apart by namespace alone). A lane (an index's namespace) that has
// sent nothing for ten minutes is forgotten once the Limiter holds many,
// and beyond about a thousand lanes the least recently used ones with
// nothing in flight and no route of a run going on are (a Stream or Writer
// keeps about a thousand routes), so that a run or a service writing to
// ever new namespaces holds about two thousand lanes at most, some MB.
// The zero value is ready to use.
type Limiter struct {
	mu      sync.Mutex
	lanes   map[laneID]*lane
	sweepAt int   // the number of lanes at which idle ones are looked for
	clock   clock // nil means the real clock; tests inject a fake
	// hosts is what the lanes of each index host know together (by
	// laneID.host), kept while the Limiter holds a lane of the host.
	hosts map[string]*hostSeen
	// shareStats count its lanes' fallbacks and rejoins, when shared
	// across processes (sharing.go).
	shareStats shareCounters
	// minutes paces the integrated records of each index host under its
	// per-minute limits (minutegate.go); a host's gate is kept.
	minutes map[string]*minuteGate
}

// laneID names a lane of a Limiter: the index host it writes to
// (canonicalHost's spelling; "" when the call does not know it) and the
// kind's key of the namespace (kind.laneKey), which is the lane's key in a
// Store too.
type laneID struct {
	host string
	key  string
}

// minuteGateOf returns the per-minute gate of the integrated records
// written to host, made with clock c the first time: Pinecone's per-minute
// limits are the project's, so every call and namespace writing through l
// into one index meets them together.
func (l *Limiter) minuteGateOf(host string, c clock) *minuteGate {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.minutes == nil {
		l.minutes = make(map[string]*minuteGate)
	}
	g := l.minutes[host]
	if g == nil {
		g = newMinuteGate(c)
		l.minutes[host] = g
	}
	return g
}

// hostSeen is what a Limiter's lanes of one index host know together:
// one namespace's answers tell about the index that all of them write to.
type hostSeen struct {
	// answered: the index answered a request of some lane of the host, so
	// it is neither a wrong host nor a dead index (lane.heardHost).
	answered atomic.Bool
	lanes    int // lanes of the host the Limiter holds; guarded by Limiter.mu

	// mu guards what the host's breakers tell each other. It is taken
	// with a lane's mutex held, or the Limiter's, never the other way
	// round.
	mu sync.Mutex
	// open holds the lanes of the host whose breaker is open, with the
	// time of their last failure (set by lane.tellHost at each failure,
	// cleared by closed, Limiter.forget and a shared lane's view of the
	// outage's end): their probes share one breaker's pace
	// (breaker.hostOpen). A lane that has not failed since the index last
	// answered (backAt), or for longer than its probes are apart
	// (openBesides), is no longer counted: nothing may probe it again,
	// and its outage may be over.
	open map[*lane]time.Time
	// backAt is when the latest request was sent that the index answered
	// with a breaker of the host open, closing it; backCh is closed and
	// replaced when it moves, to wake the requests waiting on the other
	// lanes' breakers (breaker.hostBack).
	backAt time.Time
	backCh chan struct{}
}

// openBesides returns how many lanes of the host other than ln have
// their breaker open and failed within a probe's widest spread of now (an
// open breaker that probes fails that often; one whose lane is no longer
// written may be open for good), forgetting the others; h.mu is held.
func (h *hostSeen) openBesides(ln *lane, now time.Time) int {
	for other, failed := range h.open {
		if now.Sub(failed) > probeSpreadMax+probeMax {
			delete(h.open, other)
		}
	}
	n := len(h.open)
	if _, ok := h.open[ln]; ok {
		n--
	}
	return n
}

// setOpen records whether ln's breaker is open, and when it last failed;
// h.mu is held.
func (h *hostSeen) setOpen(ln *lane, open bool, failed time.Time) {
	switch {
	case !open:
		delete(h.open, ln)
	case h.open == nil:
		h.open = map[*lane]time.Time{ln: failed}
	default:
		h.open[ln] = failed
	}
}

// back returns the channel that the next answer closing a breaker of the
// host closes; h.mu is held.
func (h *hostSeen) back() <-chan struct{} {
	if h.backCh == nil {
		h.backCh = make(chan struct{})
	}
	return h.backCh
}

// closed takes ln's breaker closed by an answer to a request sent at
// sent, and wakes the requests waiting on the host's other breakers, which
// probe at once (breaker.hostBack).
func (h *hostSeen) closed(ln *lane, sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.setOpen(ln, false, time.Time{})
	if sent.After(h.backAt) {
		h.backAt = sent
	}
	for other, failed := range h.open {
		if failed.Before(h.backAt) {
			delete(h.open, other) // its next request probes at once (breaker.hostBack)
		}
	}
	if h.backCh != nil {
		close(h.backCh)
		h.backCh = nil
	}
}

// NewLimiter returns a Limiter with nothing learned yet. It is the same as
// new(Limiter).
func NewLimiter() *Limiter { return new(Limiter) }

// LimiterState is what a Limiter has learned about one namespace.
type LimiterState struct {
	// Rate is the send rate cap in records per second: the lowest of
	// the record rate, what the byte rate allows in records (bytes over
	// the mean record size sent), and the request rate times BatchSize,
	// the last two counting once a 429 has cut them (a known limit
	// alone, [WithIndexLimits], does not); +Inf until the index's 429s
	// start an episode (see [Limiter]: a lone 429 does not).
	Rate float64
	// Concurrency is how many requests may be in flight.
	Concurrency int
	// BatchSize is how many records the batches carry that the Limiter
	// hands out now.
	BatchSize int
	// InFlight is how many requests are in flight now.
	InFlight int
	// Paused is true while the circuit breaker holds requests back or the
	// index's Retry-After is being waited out.
	Paused bool
}

// State returns what l has learned about namespace, for vectors; for a
// namespace it has not seen, the state it would start from. Of a namespace
// written in several indexes through l, it is the state of the index that
// sent last.
func (l *Limiter) State(namespace string) LimiterState {
	return l.stateOf(func() *lane { return l.latest(vectorKind.laneKey(namespaceKey(namespace))) }, MaxBatchSize)
}

// stateOf returns the state of the lane find returns (called with l.mu
// held), or of a new one (whose batches hold at most maxBatch records)
// without keeping it: a lane is made by the route that sends through it,
// with its kind's batch cap.
func (l *Limiter) stateOf(find func() *lane, maxBatch int) LimiterState {
	l.mu.Lock()
	ln := find()
	c := l.clock
	l.mu.Unlock()
	if ln == nil {
		if c == nil {
			c = realClock{}
		}
		ln = newLane(c, maxBatch, &defaultTuning)
	}
	return ln.state()
}

// Lanes idle for laneIdle are forgotten once a Limiter holds minLanes;
// beyond maxLanes, the least recently used with nothing in flight or
// being admitted are too, whatever their age, so that a run over ever new
// namespaces holds about maxLanes (a lane is a few KB).
const (
	laneIdle = 10 * time.Minute
	minLanes = 64
	maxLanes = 1024
)

// latest returns the lane of key on any host that sent last, or nil;
// l.mu is held.
func (l *Limiter) latest(key string) *lane {
	var found *lane
	var last time.Time
	for id, ln := range l.lanes {
		if id.key != key {
			continue
		}
		ln.mu.Lock()
		used := ln.use.last
		ln.mu.Unlock()
		if found == nil || used.After(last) {
			found, last = ln, used
		}
	}
	return found
}

// holdLane returns the lane of id, whose batches hold at most maxBatch
// records, with a route's hold on it (lane.holdRoute). The hold is taken
// under l.mu, with the lane's making: a sweep in between would forget a
// lane that a route is about to send through.
func (l *Limiter) holdLane(id laneID, maxBatch int) *lane {
	l.mu.Lock()
	defer l.mu.Unlock()
	ln := l.laneLocked(id, maxBatch)
	ln.holdRoute(1)
	return ln
}

// laneLocked returns the lane of id, made on first use with batches of at
// most maxBatch records; l.mu is held.
func (l *Limiter) laneLocked(id laneID, maxBatch int) *lane {
	c := l.clock
	if c == nil {
		c = realClock{}
	}
	if l.lanes == nil {
		l.lanes = make(map[laneID]*lane)
	}
	ln, ok := l.lanes[id]
	if !ok {
		if len(l.lanes) >= max(minLanes, l.sweepAt) {
			l.sweep(c.Now())
		}
		ln = newLane(c, maxBatch, &defaultTuning)
		ln.host = l.hostLocked(id.host)
		ln.host.lanes++
		l.lanes[id] = ln
	}
	return ln
}

// hostLocked returns what the lanes of host know together, made on first
// use; l.mu is held.
func (l *Limiter) hostLocked(host string) *hostSeen {
	if l.hosts == nil {
		l.hosts = make(map[string]*hostSeen)
	}
	h, ok := l.hosts[host]
	if !ok {
		h = new(hostSeen)
		l.hosts[host] = h
	}
	return h
}

// forget drops the lane of id, and what its host's lanes know together
// with the last of them, as a lane forgets what it learned with itself;
// l.mu is held.
func (l *Limiter) forget(id laneID) {
	if ln := l.lanes[id]; ln != nil && ln.host != nil {
		ln.host.mu.Lock()
		ln.host.setOpen(ln, false, time.Time{}) // its breaker no longer slows the host's others
		ln.host.mu.Unlock()
	}
	if h := l.hosts[id.host]; h != nil {
		if h.lanes--; h.lanes <= 0 {
			delete(l.hosts, id.host)
		}
	}
	delete(l.lanes, id)
}

// sweep forgets the lanes with nothing in flight or being admitted that
// sent nothing for laneIdle, and beyond maxLanes the least recently used
// of such lanes down to half of it; it sets the size at which to look
// again (nextSweep).
func (l *Limiter) sweep(now time.Time) {
	type use struct {
		id   laneID
		last time.Time
	}
	var free []use
	for id, ln := range l.lanes {
		ln.mu.Lock()
		// A lane a run still shares across processes is kept: dropping
		// it would join the lane a second time from this process.
		// So is one a call's route holds: the call would go on with a
		// lane that another call no longer shares.
		quiet := ln.slots.inFlight == 0 && ln.head.empty() && ln.ownHead.empty() && ln.share.users == 0 && ln.use.routes == 0
		last := ln.use.last
		ln.mu.Unlock()
		switch {
		case quiet && now.Sub(last) >= laneIdle:
			l.forget(id)
		case quiet:
			free = append(free, use{id, last})
		}
	}
	if excess := len(l.lanes) - maxLanes/2; len(l.lanes) >= maxLanes {
		slices.SortFunc(free, func(a, b use) int { return a.last.Compare(b.last) })
		for _, u := range free[:min(excess, len(free))] {
			l.forget(u.id)
		}
	}
	l.sweepAt = nextSweep(len(l.lanes))
}

// sweepSoon makes the next lane made look for lanes to forget once the
// Limiter holds maxLanes: lanes that a run shared were just left, and a
// sweep that had to keep them meanwhile may have set the next one at
// twice the lanes it kept.
func (l *Limiter) sweepSoon() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepAt = min(l.sweepAt, maxLanes)
}

// nextSweep is the number of lanes at which to sweep again when a sweep
// left n: twice n, so that sweeps cost little per lane made, but no more
// than maxLanes while under it, where the next sweep forgets the least
// recently used (twice would let idle lanes grow to nearly 2*maxLanes). At
// maxLanes or more, the lanes left are all in use (the sweep forgot every
// other), and a sweep at each new lane would find nothing: twice again.
func nextSweep(n int) int {
	if n < maxLanes {
		return min(max(minLanes, 2*n), maxLanes)
	}
	return 2 * n
}

// clock is the time source of the limiter and the retry loop, injected in
// tests so that nothing really sleeps.
type clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx ends, whichever is first, and returns
	// ctx's error in the second case.
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errWoken reports a sleep cut short by its wake channel.
var errWoken = errors.New("woken")

// errStaleBatch reports a batch larger than a request may carry now, which
// acquireOrRecut did not admit: it is to be cut to sendLimit and tried
// again.
var errStaleBatch = errors.New("batch larger than the lane now allows")

// sleepOrWake sleeps d on c, returning early with errWoken when wake is
// closed, or with ctx's error when ctx ends.
func sleepOrWake(ctx context.Context, c clock, d time.Duration, wake <-chan struct{}) error {
	return sleepOrWakeEither(ctx, c, d, wake, nil)
}

// sleepOrWakeEither is sleepOrWake woken by either channel (a nil one
// never wakes it).
func sleepOrWakeEither(ctx context.Context, c clock, d time.Duration, wake, also <-chan struct{}) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-wake:
			cancel()
		case <-also:
			cancel()
		case <-stop:
		}
	}()
	err := c.Sleep(wctx, d)
	if err != nil && ctx.Err() == nil {
		return errWoken
	}
	return err
}
