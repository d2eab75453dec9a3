package upsert

import (
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter paces the requests sent to an index so that ingestion runs close
// to what the index accepts without a storm of 429s. It learns three
// things per namespace, since Pinecone's limits are per namespace: the send
// rate in records per second (a token bucket that every attempt passes,
// retries included), how many requests may be in flight, and how many
// records go in one request.
//
// It starts safely (4 requests in flight, 100 records per request, no rate
// cap) and probes upward while requests succeed. On a 429 it cuts the rate
// multiplicatively and drops concurrency by one, at most once per round
// trip: the 429s of requests that were already in flight when it cut are
// the same episode. Timeouts shrink the batch size and the size that timed
// out is remembered.
//
// A Limiter is safe for concurrent use. Share one between [All] calls and
// goroutines with [WithLimiter] so that a long-running service keeps what it
// learned. The zero value is ready to use.
type Limiter struct {
	mu    sync.Mutex
	lanes map[string]*lane
	clock clock // nil means the real clock; tests inject a fake
}

// NewLimiter returns a Limiter with nothing learned yet. It is the same as
// new(Limiter).
func NewLimiter() *Limiter { return new(Limiter) }

// LimiterState is what a Limiter has learned about one namespace.
type LimiterState struct {
	// Rate is the current send rate cap in records per second; +Inf until
	// the index first answers 429.
	Rate float64
	// Concurrency is how many requests may be in flight.
	Concurrency int
	// BatchSize is how many records the next request carries at most.
	BatchSize int
	// InFlight is how many requests are in flight now.
	InFlight int
}

// State returns what l has learned about namespace.
func (l *Limiter) State(namespace string) LimiterState {
	return l.lane(namespace).state()
}

func (l *Limiter) lane(namespace string) *lane {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lanes == nil {
		l.lanes = make(map[string]*lane)
	}
	ln, ok := l.lanes[namespace]
	if !ok {
		ln = newLane(l.clockOrReal())
		l.lanes[namespace] = ln
	}
	return ln
}

func (l *Limiter) clockOrReal() clock {
	if l.clock == nil {
		return realClock{}
	}
	return l.clock
}

// Starting points and bounds of the adaptive controls.
const (
	startConcurrency = 4
	maxConcurrency   = 64
	startBatchSize   = 100
	// minRate keeps a cut rate from reaching zero: ten records per second
	// still probe the index.
	minRate = 10.0
	// rateCut is the multiplicative decrease on a 429 episode.
	rateCut = 0.7
	// rateGrowth is the multiplicative increase per clean round trip.
	rateGrowth = 1.05
)

// lane is the control state of one namespace.
type lane struct {
	clock clock

	mu        sync.Mutex
	bucket    *rate.Limiter
	cutGen    uint64 // permits issued up to this number belong to the last cut's episode
	issued    uint64 // permits issued so far
	conc      int
	slotsUsed int // of the lane's own slots
	inFlight  int // requests in flight, on any slots
	cuts      int // rate cuts so far
	slotFreed chan struct{} // closed and replaced when a slot frees or the limit rises
	batch     int
	batchCeil int // smallest batch size that timed out; batches stay below it
	clean     int // successes since the last increase
	head      chan struct{}      // held by the one waiter that holds a rate reservation
	wakeHead  context.CancelFunc // wakes that waiter when the rate is cut
	meter     rateMeter
}

func newLane(c clock) *lane {
	return &lane{
		clock:     c,
		bucket:    rate.NewLimiter(rate.Inf, startBatchSize),
		head:      make(chan struct{}, 1),
		conc:      startConcurrency,
		batch:     startBatchSize,
		batchCeil: MaxBatchSize + 1,
	}
}

// permit is one request's passage through the lane.
type permit struct {
	gen   uint64
	n     int
	start time.Time
	slots chan struct{} // the caller's fixed slots, or nil for the lane's
}

func (ln *lane) state() LimiterState {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	r := float64(ln.bucket.Limit())
	if ln.bucket.Limit() == rate.Inf {
		r = math.Inf(1)
	}
	return LimiterState{
		Rate:        r,
		Concurrency: ln.conc,
		BatchSize:   ln.batch,
		InFlight:    ln.inFlight,
	}
}

// batchSize returns how many records the next batch should carry.
func (ln *lane) batchSize() int {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.batch
}

// acquire admits a request of n records: it waits for rate tokens, then
// for a concurrency slot, and returns a permit to give back with release.
// slots, when not nil, are the caller's own fixed concurrency slots, used
// instead of the lane's adaptive ones.
//
// Requests are admitted one at a time, in FIFO order: only the head of the
// queue holds a rate reservation, and it holds its tokens while it waits
// for a slot, so that at most one request's worth of tokens is ever stale.
// The head waits for tokens before it takes a slot, so no slot is held
// while waiting for the rate. A rate cut wakes the head, which reserves
// again at the new rate: rate.Limiter does not move reservations that are
// already waiting.
func (ln *lane) acquire(ctx context.Context, n int, slots chan struct{}) (permit, error) {
	select {
	case ln.head <- struct{}{}:
	case <-ctx.Done():
		return permit{}, ctx.Err()
	}
	defer func() { <-ln.head }()
	for {
		cuts, err := ln.waitRate(ctx, n)
		if err != nil {
			return permit{}, err
		}
		if err := ln.takeSlot(ctx, slots); err != nil {
			return permit{}, err
		}
		ln.mu.Lock()
		if ln.cuts != cuts {
			// The tokens were granted at a rate that has since been cut.
			ln.mu.Unlock()
			ln.giveSlot(slots)
			continue
		}
		ln.inFlight++
		ln.issued++
		p := permit{gen: ln.issued, n: n, start: ln.clock.Now(), slots: slots}
		ln.mu.Unlock()
		return p, nil
	}
}

// waitRate blocks until n records may be sent and returns the number of
// cuts at that time. Only the head of the queue calls it.
func (ln *lane) waitRate(ctx context.Context, n int) (cuts int, err error) {
	for {
		now := ln.clock.Now()
		ln.mu.Lock()
		if ln.bucket.Burst() < n {
			ln.bucket.SetBurstAt(now, n)
		}
		r := ln.bucket.ReserveN(now, n)
		d := r.DelayFrom(now)
		cuts = ln.cuts
		if d == 0 {
			ln.mu.Unlock()
			return cuts, nil
		}
		wctx, wake := context.WithCancel(ctx)
		ln.wakeHead = wake
		ln.mu.Unlock()
		err := ln.clock.Sleep(wctx, d)
		ln.mu.Lock()
		ln.wakeHead = nil
		ln.mu.Unlock()
		wake()
		if err == nil {
			return cuts, nil
		}
		r.CancelAt(ln.clock.Now())
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		// A cut woke the head: reserve again at the new rate.
	}
}

// takeSlot waits for a slot: one of slots when given, else one of the
// lane's.
func (ln *lane) takeSlot(ctx context.Context, slots chan struct{}) error {
	if slots != nil {
		select {
		case slots <- struct{}{}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		ln.mu.Lock()
		if ln.slotsUsed < ln.conc {
			ln.slotsUsed++
			ln.mu.Unlock()
			return nil
		}
		if ln.slotFreed == nil {
			ln.slotFreed = make(chan struct{})
		}
		ch := ln.slotFreed
		ln.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (ln *lane) giveSlot(slots chan struct{}) {
	if slots != nil {
		<-slots
		return
	}
	ln.mu.Lock()
	ln.slotsUsed--
	ln.wake()
	ln.mu.Unlock()
}

// release returns p's slot and feeds its outcome to the controls. class is
// 0 for a success.
func (ln *lane) release(p permit, class Class) {
	ln.giveSlot(p.slots)
	now := ln.clock.Now()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.inFlight--
	switch class {
	case 0:
		ln.meter.add(now, p.n)
		ln.clean++
		if ln.clean >= ln.conc {
			ln.clean = 0
			ln.grow(now)
		}
	case ClassRateLimited:
		ln.clean = 0
		if p.gen > ln.cutGen {
			ln.cut(now)
		}
	case ClassTimeout:
		ln.clean = 0
		if p.n > 1 && p.n < ln.batchCeil {
			ln.batchCeil = p.n
		}
		ln.batch = max(1, min(ln.batch, ln.batchCeil/2))
	}
}

// cut lowers the rate and the concurrency once for a 429 episode.
func (ln *lane) cut(now time.Time) {
	ln.cutGen = ln.issued
	ln.cuts++
	if ln.wakeHead != nil {
		ln.wakeHead()
	}
	cur := float64(ln.bucket.Limit())
	if ln.bucket.Limit() == rate.Inf {
		cur = ln.meter.rate(now)
		if cur <= 0 {
			cur = float64(ln.batch * ln.conc)
		}
	}
	ln.bucket.SetLimitAt(now, rate.Limit(max(minRate, cur*rateCut)))
	ln.conc = max(1, ln.conc-1)
}

// grow raises the controls after a round trip of clean successes.
func (ln *lane) grow(now time.Time) {
	if cur := ln.bucket.Limit(); cur != rate.Inf {
		ln.bucket.SetLimitAt(now, cur*rateGrowth)
	}
	if ln.conc < maxConcurrency {
		ln.conc++
		ln.wake()
	}
}

func (ln *lane) wake() {
	if ln.slotFreed != nil {
		close(ln.slotFreed)
		ln.slotFreed = nil
	}
}

// rateMeter measures the rate of successful records over the last second,
// in ten buckets of 100 ms.
type rateMeter struct {
	buckets [10]int
	epoch   int64     // index of the newest bucket, in 100 ms units since the zero time
	first   time.Time // first record, so that a young meter is not diluted
}

const meterBucket = 100 * time.Millisecond

func (m *rateMeter) add(now time.Time, n int) {
	if m.first.IsZero() {
		m.first = now
	}
	m.advance(now)
	m.buckets[m.epoch%int64(len(m.buckets))] += n
}

func (m *rateMeter) rate(now time.Time) float64 {
	m.advance(now)
	sum := 0
	for _, n := range m.buckets {
		sum += n
	}
	window := float64(len(m.buckets)) * meterBucket.Seconds()
	if age := now.Sub(m.first).Seconds(); age < window {
		window = max(age, meterBucket.Seconds())
	}
	return float64(sum) / window
}

func (m *rateMeter) advance(now time.Time) {
	e := now.UnixNano() / int64(meterBucket)
	if e <= m.epoch {
		return
	}
	steps := min(e-m.epoch, int64(len(m.buckets)))
	for i := int64(1); i <= steps; i++ {
		m.buckets[(m.epoch+i)%int64(len(m.buckets))] = 0
	}
	m.epoch = e
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
