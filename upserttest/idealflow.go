package upserttest

import "math"

// This file holds the fluid model of Index.IdealTime: the records a client
// that knows the index admits over time, through every limit of the index
// seen as a token bucket of records.

// flowBucket is one limit of the fluid model, in its own units (records,
// bytes or requests).
type flowBucket struct {
	tokens, burst float64
	base          float64 // the index's burst; burst is wider for larger requests (widen)
	rate          float64 // tokens per second in the current phase
	cost          float64 // tokens per record in the current phase
}

// empty reports whether b holds no tokens worth counting.
func (b *flowBucket) empty() bool { return b.tokens <= 1e-9*max(b.burst, 1) }

// flowModel is the state of the fluid model: the buckets that the index
// has (vectors, bytes, requests, requests in flight), nil when absent.
type flowModel struct {
	vectors, bytes, requests, inFlight *flowBucket
}

// all returns the buckets the index has.
func (fm *flowModel) all() []*flowBucket {
	out := make([]*flowBucket, 0, 4)
	for _, b := range []*flowBucket{fm.vectors, fm.bytes, fm.requests, fm.inFlight} {
		if b != nil {
			out = append(out, b)
		}
	}
	return out
}

// newFlow returns full buckets for the limits of m's index.
func (m *idealModel) newFlow() *flowModel {
	full := func(c bucketConfig) *flowBucket {
		if !c.enabled() {
			return nil
		}
		return &flowBucket{tokens: float64(c.burst), burst: float64(c.burst), base: float64(c.burst)}
	}
	fm := &flowModel{vectors: full(m.cfg.vectorRate), bytes: full(m.cfg.byteRate), requests: full(m.cfg.requestRate)}
	if m.latency(1) > 0 || m.latency(m.maxBatch) > 0 {
		n := m.inFlight()
		fm.inFlight = &flowBucket{tokens: n, burst: n, base: n}
	}
	return fm
}

// setPhase sets the rates and costs of the buckets for batches of p at
// capacity factor f.
func (m *idealModel) setPhase(fm *flowModel, p batchPlan, f float64) {
	n := float64(p.batch)
	// A request that times out was admitted and written, and is sent
	// again: every record landed costs 1/(1 − lost) of its tokens.
	waste := 1 / (1 - p.lost)
	set := func(b *flowBucket, rate, cost float64) {
		if b != nil {
			b.widen(cost * n)
			b.rate, b.cost = rate, cost*waste
		}
	}
	set(fm.vectors, f*m.cfg.vectorRate.rate, 1)
	set(fm.bytes, f*m.cfg.byteRate.rate, float64(m.empty+p.batch*m.perBytes)/n)
	set(fm.requests, f*m.cfg.requestRate.rate, 1/n)
	if b := fm.inFlight; b != nil {
		rate := m.flightRate(p.batch)
		b.keepBusyTime(rate)
		b.base = m.inFlight() + m.queued(p)
		set(b, rate, 1/n)
	}
}

// widen gives b the room that a request of amount tokens has in the
// index's bucket, which admits a request larger than its burst once full,
// into debt (internal/tokenbucket): for requests of that size, it is a
// bucket of that burst, and its tokens count the debt it may take.
func (b *flowBucket) widen(amount float64) {
	burst := max(b.base, amount)
	b.tokens = max(0, b.tokens+burst-b.burst)
	b.burst = burst
}

// keepBusyTime rescales the slots in use of an in-flight bucket whose
// refill rate changes to rate (a batch of another latency): the requests
// in flight were sent at the old batch and free their slots in the old
// one's time, not the new one's.
func (b *flowBucket) keepBusyTime(rate float64) {
	if b.rate <= 0 || math.IsInf(b.rate, 1) || math.IsInf(rate, 1) || rate == b.rate {
		return
	}
	b.tokens = max(0, b.burst-(b.burst-b.tokens)*rate/b.rate)
}

// admitAll runs the fluid model until records are admitted and returns
// when the last one was, in seconds after NewServer, and how long after
// that the last one is written: the mean write latency of its batch, or
// more while the slot queue drains. Records still queued when an outage
// starts are admitted again.
func (m *idealModel) admitAll(records float64) (last, latency float64) {
	fm := m.newFlow()
	bs := fm.all()
	t, done := 0.0, 0.0
	for step := 0; step < 1e6; step++ {
		end := done >= records-1e-9
		if end && math.IsInf(m.outageFrom(t, t+queueWait(fm.inFlight, m.inFlight())), 1) {
			break // and the queue, if any, drains before an outage starts
		}
		f, out, next := m.phase(t)
		p := m.plan(f)
		m.setPhase(fm, p, f)
		if out {
			done -= dropQueued(fm.inFlight, m.inFlight())
		}
		if out || end { // in an outage, or done with requests queued into one
			flow(bs, 0, next-t)
			t = next
			continue
		}
		latency = p.latency
		if amount := impulse(bs, records-done); amount > 0 {
			done += amount
			last = t
			continue
		}
		rate := bindingRate(bs)
		dt := min(next-t, (records-done)/rate, untilEmpty(bs, rate))
		flow(bs, rate, dt)
		done += rate * dt
		t += dt
		last = t
	}
	if b := fm.inFlight; b != nil && b.rate > 0 && !math.IsInf(b.rate, 1) {
		// The requests in flight, queued ones too, are written.
		latency = max(latency, (b.burst-b.tokens)/b.rate)
	}
	return last, latency
}

// queueWait is how long the last request queued for the slots of the
// in-flight bucket b, of an index that writes slots requests at once,
// waits for its slot: 0 if none is queued.
func queueWait(b *flowBucket, slots float64) float64 {
	if b == nil || b.rate <= 0 || math.IsInf(b.rate, 1) {
		return 0
	}
	return max(0, b.burst-b.tokens-slots) / b.rate
}

// outageFrom returns the start of the first outage from t to until
// (until excluded), or +Inf if none starts in that time.
func (m *idealModel) outageFrom(t, until float64) float64 {
	for t < until {
		_, out, next := m.phase(t)
		if out {
			return t
		}
		t = next
	}
	return math.Inf(1)
}

// dropQueued empties the slot queue of the in-flight bucket b, of an index
// that writes slots requests at once, as an outage starts: a request that
// gets its slot during an outage fails (withStall), and its records are
// sent again. It returns how many records were queued.
func dropQueued(b *flowBucket, slots float64) float64 {
	if b == nil {
		return 0
	}
	over := b.burst - b.tokens - slots
	if over <= 0 {
		return 0
	}
	b.tokens += over
	return over / b.cost
}

// impulse admits at once as many of the remaining records as every bucket
// has tokens for, if none is empty, and returns how many.
func impulse(bs []*flowBucket, remaining float64) float64 {
	amount, first := remaining, (*flowBucket)(nil)
	for _, b := range bs {
		if b.empty() {
			return 0
		}
		if a := b.tokens / b.cost; a < amount {
			amount, first = a, b
		}
	}
	for _, b := range bs {
		b.tokens -= amount * b.cost
	}
	if first != nil {
		first.tokens = 0 // exactly, whatever the rounding
	}
	return amount
}

// bindingRate is the rate, in records per second, that the empty buckets
// allow: the least of theirs.
func bindingRate(bs []*flowBucket) float64 {
	rate := math.Inf(1)
	for _, b := range bs {
		if b.empty() {
			rate = min(rate, b.rate/b.cost)
		}
	}
	return rate
}

// untilEmpty is the time until the first bucket that holds tokens runs
// out at the given admission rate, or +Inf.
func untilEmpty(bs []*flowBucket, rate float64) float64 {
	d := math.Inf(1)
	for _, b := range bs {
		if net := rate*b.cost - b.rate; !b.empty() && net > 0 {
			d = min(d, b.tokens/net)
		}
	}
	return d
}

// flow advances every bucket by dt seconds at the admission rate.
func flow(bs []*flowBucket, rate, dt float64) {
	for _, b := range bs {
		b.tokens = min(b.burst, max(0, b.tokens+(b.rate-rate*b.cost)*dt))
	}
}

// phase returns the capacity factor in force t seconds after NewServer,
// whether t falls in an outage, and the next time at which either changes
// (+Inf if never). A nanosecond of slack keeps float rounding from
// returning t itself as the next time.
func (m *idealModel) phase(t float64) (factor float64, out bool, next float64) {
	const slack = 1e-9
	factor, next = 1, math.Inf(1)
	for _, ch := range m.cfg.changes {
		if at := ch.At.Seconds(); at <= t+slack {
			factor = ch.Factor
		} else {
			next = at
			break
		}
	}
	every, length := m.ix.OutageEvery.Seconds(), m.ix.OutageLength.Seconds()
	if every <= 0 || length <= 0 {
		return factor, false, next
	}
	k := math.Floor((t + slack) / every)
	start, end := k*every+every-length, (k+1)*every
	if t+slack >= start {
		return factor, true, min(next, end)
	}
	return factor, false, min(next, start)
}
