package upserttest

import (
	"math"
	"slices"
)

// This file holds the fluid model of Index.IdealTime: the records a client
// that knows the index admits over time, through every limit of the index
// seen as a token bucket of records.

// flowBucket is one limit of the fluid model, in its own units (records,
// bytes or requests). Its tokens may be negative: a debt, which its refill
// repays before it lets anything through (see widen and keepBusyTime).
type flowBucket struct {
	tokens, burst float64
	base          float64 // the index's burst; burst is wider for larger requests (widen)
	rate          float64 // tokens per second in the current phase
	cost          float64 // tokens per record in the current phase
}

// empty reports whether b holds no tokens worth counting, or owes some.
func (b *flowBucket) empty() bool { return b.tokens <= 1e-9*max(b.burst, 1) }

// inDebt reports whether b owes tokens worth counting: it lets nothing
// through until its refill has repaid them.
func (b *flowBucket) inDebt() bool { return b.tokens < -1e-9*max(b.burst, 1) }

// flowModel is the state of the fluid model: the buckets that the index
// has (vectors, bytes, requests, requests in flight), nil when absent, and
// the requests in flight of the batches that the client has left.
type flowModel struct {
	vectors, bytes, requests, inFlight *flowBucket

	places  float64    // of the in-flight bucket, without a queue: idealModel.inFlight
	batch   int        // the current batch, 0 before the first phase
	earlier []slotWork // of the batches left, oldest first (see work)
}

// slotWork is the requests in flight of one batch, written one after the
// other as places free.
type slotWork struct {
	until float64 // when the last of them is written, in seconds after NewServer
	// hold is how long each holds its place: the places over the batch's
	// in-flight rate (where the index's slots bind, its write latency).
	hold      float64
	perSecond float64 // records landed a second of their writing
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
		fm.places = n
	}
	return fm
}

// setPhase sets the rates and costs of the buckets for batches of p at
// capacity factor f, from t on.
func (m *idealModel) setPhase(fm *flowModel, p batchPlan, f, t float64) {
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
		if p.batch != fm.batch {
			fm.leave(t)
			fm.batch = p.batch
		}
		b.keepBusyTime(rate)
		b.base = m.inFlight() + m.queued(p)
		set(b, rate, 1/n)
	}
}

// widen gives b the room that a request of amount tokens has in the
// index's bucket, which admits a request larger than its burst once full,
// into debt (internal/tokenbucket): for requests of that size, it is a
// bucket of that burst, and its tokens count the debt it may take. What b
// owes stays owed when its burst changes: a bucket narrowed below the
// debt it took for larger requests holds the rest as a debt of its own,
// as the index's does; an in-flight bucket given fewer places than it has
// requests outstanding owes the difference.
func (b *flowBucket) widen(amount float64) {
	burst := max(b.base, amount)
	b.tokens += burst - b.burst
	b.burst = burst
}

// keepBusyTime rescales the slots in use of an in-flight bucket whose
// refill rate changes to rate (a batch of another latency): the requests
// in flight were sent at the old batch and free their slots in the old
// one's time, not the new one's. Where the new batch is quicker, they
// may count for more requests of it than the bucket holds: the bucket
// then owes the rest, and admits nothing until the slots have written
// them (whatever the burst, or its change in setPhase).
func (b *flowBucket) keepBusyTime(rate float64) {
	if b.rate <= 0 || math.IsInf(b.rate, 1) || math.IsInf(rate, 1) || rate == b.rate {
		return
	}
	b.tokens = b.burst - (b.burst-b.tokens)*rate/b.rate
}

// admitAll runs the fluid model until records are admitted and written,
// and returns when the last one is written, in seconds after NewServer:
// when the last one is admitted plus the mean write latency of its batch,
// or later while the requests in flight (queued ones too) drain. Records
// still queued when an outage starts are admitted again.
func (m *idealModel) admitAll(records float64) float64 {
	fm := m.newFlow()
	bs := fm.all()
	t, done := 0.0, 0.0
	last, latency := 0.0, 0.0 // the last admission, and its batch's latency
	drained := 0.0            // when what is in flight after it is written, as last measured
	for step := 0; step < 1e6; step++ {
		end := done >= records-1e-9
		if end {
			if d := drainTime(fm.inFlight); d > 0 {
				drained = t + d // from t, however long after last
			}
			if math.IsInf(m.outageFrom(t, t+fm.queueWait(t)), 1) {
				break // and the queue, if any, drains before an outage starts
			}
		}
		f, out, next := m.phase(t)
		p := m.plan(f)
		m.setPhase(fm, p, f, t)
		if out {
			done -= fm.dropQueued(t)
		}
		// In an outage, or done with requests queued into one, nothing is
		// admitted until the next phase; while a bucket owes tokens,
		// nothing until it has repaid them.
		wait := untilRepaid(bs)
		if out || end {
			wait = next - t
		}
		if wait > 0 {
			wait = min(wait, next-t)
			flow(bs, 0, wait)
			t += wait
			continue
		}
		if amount := impulse(bs, records-done); amount > 0 {
			done += amount
			last, latency, drained = t, p.latency, 0
			continue
		}
		rate := bindingRate(bs)
		dt := min(next-t, (records-done)/rate, untilEmpty(bs, rate))
		flow(bs, rate, dt)
		done += rate * dt
		t += dt
		last, latency, drained = t, p.latency, 0
	}
	return max(last+latency, drained)
}

// drainTime is how long the requests in flight of the in-flight bucket b,
// queued ones too, take to be written: 0 if there are none, or b is nil
// or takes no time.
func drainTime(b *flowBucket) float64 {
	if b == nil || b.rate <= 0 || math.IsInf(b.rate, 1) {
		return 0
	}
	return max(0, b.burst-b.tokens) / b.rate
}

// untilRepaid is how long the refill takes to repay every bucket's debt:
// 0 if none owes tokens worth counting.
func untilRepaid(bs []*flowBucket) float64 {
	d := 0.0
	for _, b := range bs {
		if b.inDebt() {
			d = max(d, -b.tokens/b.rate)
		}
	}
	return d
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

// work returns the requests in flight at t, by batch, oldest first: those
// of the batches left that are not all written by t (the others are
// forgotten), then those of the current one, written after them (none if
// its until is not past theirs). What the in-flight bucket holds at t is
// written by t + drainTime, whatever the batches: keepBusyTime keeps the
// time its requests in flight take when the batch changes, and they take
// a second of it a second.
func (fm *flowModel) work(t float64) []slotWork {
	b := fm.inFlight
	if b == nil || b.rate <= 0 || math.IsInf(b.rate, 1) {
		return nil
	}
	fm.earlier = slices.DeleteFunc(fm.earlier, func(w slotWork) bool { return w.until <= t })
	cur := slotWork{until: t + drainTime(b), hold: fm.places / b.rate, perSecond: b.rate / b.cost}
	return append(fm.earlier[:len(fm.earlier):len(fm.earlier)], cur)
}

// leave keeps, as the client leaves its batch at t, the requests in flight
// of that batch (see work), so that they hold their places and are
// dropped at an outage as requests of their batch.
func (fm *flowModel) leave(t float64) {
	ws := fm.work(t)
	if len(ws) == 0 {
		return
	}
	cur, from := ws[len(ws)-1], t
	if len(ws) > 1 {
		from = ws[len(ws)-2].until
	}
	if cur.until > from {
		fm.earlier = ws
	}
}

// queueWait is how long from t the last request in flight waits for its
// place: 0 if each holds one. A request written by u that holds its
// place hold seconds gets it at u − hold.
func (fm *flowModel) queueWait(t float64) float64 {
	wait, from := 0.0, t
	for _, w := range fm.work(t) {
		if w.until > from {
			wait = max(wait, w.until-w.hold-t)
			from = w.until
		}
	}
	return wait
}

// dropQueued fails the requests in flight that wait for a place as an
// outage starts at t: a request that gets its slot during an outage fails
// (withStall), and its records are sent again; those in their places are
// written. It returns how many records were queued.
func (fm *flowModel) dropQueued(t float64) float64 {
	records, kept, from := 0.0, 0.0, t
	for _, w := range fm.work(t) {
		end := max(from, w.until)
		placed := min(end, max(from, t+w.hold)) // written by then: in their places at t
		kept += placed - from
		records += (end - placed) * w.perSecond
		from = end
	}
	if records <= 0 {
		return 0
	}
	b := fm.inFlight
	b.tokens = b.burst - kept*b.rate
	fm.earlier = []slotWork{{until: t + kept, hold: kept}} // in their places
	return records
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

// flow advances every bucket by dt seconds at the admission rate. A
// bucket's tokens stay within its burst, and at or above 0 unless it owes
// some (a debt only shrinks).
func flow(bs []*flowBucket, rate, dt float64) {
	for _, b := range bs {
		b.tokens = min(b.burst, max(min(0, b.tokens), b.tokens+(b.rate-rate*b.cost)*dt))
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
