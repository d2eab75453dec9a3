package upsert

import (
	"context"
	"errors"
	"math"
	"time"

	"sync"
	"sync/atomic"

	"golang.org/x/time/rate"
)

// lane is the mechanism that enforces the controllers' decisions for one
// namespace: FIFO admission, token buckets for the rates, slots for the
// concurrency, the breaker's and the retry budget's waits. It is the only
// code of the limiter that holds a lock; the policies are the pure
// controllers it feeds with each request's outcome (rateControl,
// concControl, batchControl, breaker, retryBudget).
type lane struct {
	clock  clock
	tuning *tuning
	head   line // its first place is the request being admitted
	// ownHead is head for requests that bring their own slot
	// (WithConcurrency): they wait for no slot of the lane, so never
	// behind a request that does.
	ownHead line
	// host is what the Limiter's lanes of the lane's index host know
	// together; nil for a lane no Limiter holds.
	host *hostSeen

	mu        sync.Mutex
	dims      [dimCount]dimension
	conc      concControl
	batch     batchControl
	breaker   breaker
	budget    retryBudget
	slots     laneSlots
	use       laneUse
	pushback  lanePushback
	seen      laneSeen
	limitsSet bool
	sizeTurn  bool // the batch size's turn to be tried; else the concurrency's
	signals   laneSignals
	// share is the lane's membership of the lane shared across
	// processes, if a run shares it (guarded by mu); shareSync is what
	// works outside mu.
	share     laneShare
	shareSync laneShareSync
}

// laneShareSync is the part of a lane's sharing that is not guarded by the
// lane's mutex: joining and leaving make a round trip to the store, which
// the mutex must not wait for.
type laneShareSync struct {
	joinMu  sync.Mutex  // serialises joining and leaving
	pending atomic.Bool // share.pending is not empty
}

// laneUse is how the lane is used: what the controllers number their
// samples by, and what a sweep of idle lanes reads.
type laneUse struct {
	issued uint64    // requests admitted so far
	last   time.Time // when the latest was admitted, or the lane made
	routes int       // routes of calls going on that send through the lane: a sweep keeps it
}

// lanePushback is what the index pushed back with: either makes the tokens
// a request reserved before it stale.
type lanePushback struct {
	cuts  uint64    // rate cuts so far
	until time.Time // the index's Retry-After
}

// laneSlots are the lane's own concurrency slots.
type laneSlots struct {
	used     int       // of the lane's own slots
	inFlight int       // requests in flight, on any slots
	waited   bool      // a request waited for a slot since the last answer
	fullAt   time.Time // when a request last took the last slot or waited for one
	// idleSince is when the lane began to rest, nothing in flight or at a
	// head (restIfIdle), or was made; zero once a request reaches a head
	// (endRest).
	idleSince time.Time
}

// laneSeen is what the lane measured of the index, for the controllers.
type laneSeen struct {
	roundTrip   float64   // smoothed latency of successes, ns
	recordBytes float64   // smoothed bytes per record sent
	fastSent    time.Time // send time of the latest request answered with success in a quarter of its timeout
	jitter      spreadMeter
	size        int    // the size of the batches handed out last
	epochSize   int    // the size the concurrency's epoch is measured at
	successes   uint64 // requests answered with success so far
}

// The dimensions of a lane's rate.
const (
	dimRecords = iota
	dimRequests
	dimBytes
	dimCount
)

// dimension is one rate a lane enforces: its controller and its bucket.
type dimension struct {
	ctl    rateControl
	bucket *rate.Limiter
	waited time.Time // when a request last waited for its tokens
	floor  float64   // the least limit a cut sets (see lane.floorOf)
	least  int       // the least burst: a shared lane's batch (lane_share.go); 0 otherwise
}

// laneSignals wake the requests waiting in a lane.
type laneSignals struct {
	rates   signal // a cut: the head reserves again
	slots   signal // a slot was freed, or concurrency grew
	breaker signal // the breaker closed, or a probe may go
	budget  signal // the retry budget has a retry
}

// signal is a broadcast: wait returns a channel that the next fire closes.
// It is guarded by the lane's mutex.
type signal struct{ ch chan struct{} }

func (s *signal) wait() <-chan struct{} {
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) fire() {
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

func newLane(c clock, maxBatch int, t *tuning) *lane {
	now := c.Now()
	ln := &lane{
		clock:  c,
		tuning: t,
		conc:   newConcControl(t),
		batch:  newBatchControl(maxBatch, t),
		budget: newRetryBudget(now),
		use:    laneUse{last: now},
		slots:  laneSlots{idleSince: now},
	}
	floors := [dimCount]float64{t.minRecords, t.minRequests, t.minBytes}
	for i := range ln.dims {
		d := &ln.dims[i]
		d.floor = floors[i]
		d.ctl.withPrior(now, 0, t)
		d.bucket = rate.NewLimiter(rate.Inf, 1)
	}
	ln.seen.size = ln.batch.size
	ln.seen.epochSize = ln.batch.size
	return ln
}

// setLimits starts the lane's request and byte rates at the index's known
// limits, once: a lane shared by later calls keeps what it learned.
func (ln *lane) setLimits(l IndexLimits) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.limitsSet {
		return
	}
	ln.limitsSet = true
	now := ln.clock.Now()
	for i, prior := range map[int]float64{dimRequests: l.RequestsPerSecond, dimBytes: l.BytesPerSecond} {
		if d := &ln.dims[i]; prior > 0 && !d.ctl.capped() {
			d.ctl.withPrior(now, max(prior, d.floor), ln.tuning) // no cut goes under the floor either
			// Full, as the index's own buckets are at the start.
			d.bucket = rate.NewLimiter(rate.Limit(d.ctl.limit), max(1, int(d.ctl.limit*ln.tuning.burstFor.Seconds())))
		}
	}
}

// floorOf is the least limit a cut sets in dimension dim: its floor, and
// for bytes no more than the bytes of tuning.minRecords records, so that
// an index that takes fewer small records a second than the byte floor
// carries is not sent more than it takes for good (a refusal storm).
func (ln *lane) floorOf(dim int) float64 {
	d := &ln.dims[dim]
	if dim == dimBytes && ln.seen.recordBytes > 0 {
		return min(d.floor, ln.tuning.minRecords*ln.seen.recordBytes)
	}
	return d.floor
}

// apply sets the bucket's rate to the controller's limit, and its burst
// to tuning.burstFor of it. A bucket that had no limit starts with at most
// one token: a first cut follows an overshoot that emptied the index's
// bucket (drain empties one that had a known limit). A limit
// of zero or less (or NaN) is applied as the dimension's floor: for those
// rate.Limit makes every request wait for ever (rate.InfDuration),
// whatever the controller got wrong.
func (d *dimension) apply(now time.Time, t *tuning) {
	if !d.ctl.capped() {
		d.bucket.SetLimitAt(now, rate.Inf)
		return
	}
	limit := d.ctl.limit
	if !(limit > 0) {
		limit = d.floor
	}
	d.bucket.SetLimitAt(now, rate.Limit(limit))
	d.bucket.SetBurstAt(now, max(1, int(limit*t.burstFor.Seconds()), d.least))
}

// drain spends the tokens the bucket saved, at the first cut, as apply's
// start from no limit does: what the lane saved under a known limit
// (withPrior) would go out at once into the index's empty bucket and be
// refused, a second episode a round trip after the first.
func (d *dimension) drain(now time.Time) {
	if saved := d.bucket.TokensAt(now); saved >= 1 {
		d.bucket.ReserveN(now, int(saved))
	}
}

// request is what a batch asks of the lane to be sent.
type request struct {
	n, bytes  int
	slots     chan struct{} // the caller's fixed slots, or nil for the lane's
	sizeProbe bool          // a trial batch of batchControl
	// afterTimeout: a piece of a batch whose request timed out
	// (part.afterTimeout).
	afterTimeout bool
	timeout      time.Duration // the run's request timeout
	turn         *place        // the caller's place in its route's line, left once it queues here
	// overLimit reports whether its records are over the per-minute
	// limits learned now (they may have fallen while it waited); nil:
	// never.
	overLimit func() bool
}

// overLimitNow reports whether q's records are over the per-minute limits
// learned now.
func (q request) overLimitNow() bool { return q.overLimit != nil && q.overLimit() }

// permit is one request's passage through the lane.
type permit struct {
	request
	seq        uint64
	start      time.Time
	probe      uint64 // the breaker's probe number, 0 for a request that is not one
	waitedSlot bool
	epoch      uint64 // the shared lane's episode when it was admitted
}

// concurrency returns how many requests may be in flight.
func (ln *lane) concurrency() int {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.conc.limit
}

// nextBatch returns the size of the next batch, and the number of the
// trial of a size it is a batch of (0: none; see trialUnsent).
func (ln *lane) nextBatch() (size int, trial uint64) {
	now := ln.clock.Now()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	caps := ln.sizeCaps()
	may := ln.mayTrySize(now)
	size, isTrial := ln.batch.next(now, caps, may, ln.spread(), ln.tuning)
	if isTrial {
		trial = ln.batch.trials
	}
	if !isTrial && size != ln.seen.size {
		ln.seen.size = size
		if r := float64(size) / float64(ln.seen.epochSize); r > ln.tuning.sizeBand || r < 1/ln.tuning.sizeBand {
			ln.seen.epochSize = size
			ln.resetConc() // latencies of another size measure nothing here
		}
	}
	return size, trial
}

// resetConc forgets the concurrency's latencies (concControl.reset). The
// trial it abandons may leave the limit higher, which wakes the requests
// waiting for a slot: no answer may come to wake them for a round trip.
// ln.mu is held.
func (ln *lane) resetConc() {
	before := ln.conc.limit
	ln.conc.reset(ln.use.issued)
	if ln.conc.limit > before {
		ln.signals.slots.fire()
	}
}

// sendLimit returns the most records a request may carry now. A batch
// formed before a cut or a ceiling and larger than that goes back to be
// cut, so that one stale large batch does not hold the queue while it
// saves up its tokens.
func (ln *lane) sendLimit() int {
	now := ln.clock.Now()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.batch.sendLimit(now, ln.sizeCaps(), ln.tuning)
}

// endTrialOver ends the batch size's trial if it is of more than n
// records, which a request may not carry now (the per-minute gate's cap
// cut a batch to n): it cannot go out at its size, as a trial batch that
// goes out smaller says nothing of it (batchControl.answer), and the
// concurrency takes its turn.
func (ln *lane) endTrialOver(n int) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.batch.trial.size > n {
		ln.batch.capTrial()
		ln.sizeTurn = false
	}
}

// trialUnsent gives back a batch handed out for trial number trial of the
// batch size (nextBatch) and dropped unsent (its call stopped, or its
// admission failed): the trial sends another, where it waited for ever
// for an answer and the lane, running one experiment at a time, tried
// nothing more. A later trial does not take it.
func (ln *lane) trialUnsent(trial uint64) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.batch.unsent(trial)
}

// The lane runs one experiment at a time: the batch size's first trial
// (ten times the size, one round trip), then the concurrency's slow
// start, then each in turn, a controller taking the other's turn when that
// one has nothing to try.

// mayTrySize reports whether the batch size may start a trial.
func (ln *lane) mayTrySize(now time.Time) bool {
	switch {
	case ln.conc.trial.level > 0:
		return false
	case ln.batch.slowStart:
		return true
	case ln.conc.slowStart:
		return !ln.conc.eager(ln.slotBound(now), ln.tuning)
	}
	return ln.sizeTurn || !ln.conc.eager(ln.slotBound(now), ln.tuning)
}

// mayTryConc reports whether the concurrency may start a trial.
func (ln *lane) mayTryConc() bool {
	switch {
	case ln.batch.trial.size > 0:
		return false
	case ln.batch.slowStart:
		return !ln.batch.eager(ln.sizeCaps(), ln.tuning)
	case ln.conc.slowStart:
		return true
	}
	return !ln.sizeTurn || !ln.batch.eager(ln.sizeCaps(), ln.tuning)
}

// slotBound reports whether the lane's slots held requests back within
// tuning.boundFor.
func (ln *lane) slotBound(now time.Time) bool { return now.Sub(ln.slots.fullAt) < ln.tuning.boundFor }

// spread is the index's latency spread (of log latency), pooled over
// sizes and levels; 0.3 until measured.
func (ln *lane) spread() float64 { return ln.seen.jitter.spread(0.3) }

// sizeCaps are the rates that bound a batch: the record rate, or what the
// byte rate allows in records, whichever is lower, and the request rate.
//
// A rate shapes batches only while it holds requests back: a cap that
// binds nothing (a known limit of the index far above what the lane sends)
// must not make them smaller than the latency wants.
func (ln *lane) sizeCaps() sizeCaps {
	now := ln.clock.Now()
	caps := sizeCaps{records: math.Inf(1), requests: ln.dims[dimRequests].ctl.limit}
	if ln.seen.recordBytes > 0 {
		caps.perRequest = max(1, int(MaxRequestBytes/ln.seen.recordBytes))
	}
	if r := &ln.dims[dimRecords]; now.Sub(r.waited) < ln.tuning.boundFor {
		caps.records = r.ctl.limit
	}
	if b := &ln.dims[dimBytes]; now.Sub(b.waited) < ln.tuning.boundFor && ln.seen.recordBytes > 0 {
		caps.records = min(caps.records, b.ctl.limit/ln.seen.recordBytes)
	}
	if ln.seen.roundTrip > 0 {
		caps.carry = float64(ln.conc.limit) / time.Duration(ln.seen.roundTrip).Seconds()
	}
	if f := ln.share.frac; ln.share.m != nil && f > 0 && f < 1 {
		// Batches are sized for the index's buckets, which the lane's
		// writers share: by the lane's rates, as one writer of the whole
		// lane would size them, so that N writers do not send N times the
		// requests for the same records; and so that its own requests in
		// flight can send its part (carry as N such writers would).
		caps.records, caps.requests, caps.carry = caps.records/f, caps.requests/f, caps.carry/f
	}
	return caps
}

// recordRate is the record rate, or what the byte rate allows in records
// when lower; with measuredOnly, the byte rate counts only once a 429 has
// measured it.
func (ln *lane) recordRate(measuredOnly bool) float64 {
	records := ln.dims[dimRecords].ctl.limit
	b := &ln.dims[dimBytes].ctl
	if b.capped() && ln.seen.recordBytes > 0 && (b.measured() || !measuredOnly) {
		records = min(records, b.limit/ln.seen.recordBytes)
	}
	return records
}

// stateRate is the record rate the lane's caps allow with batches of size
// records (LimiterState.Rate): the record rate, and once a 429 has
// measured them, what the byte rate allows in records and the request
// rate times size. ln.mu is held.
func (ln *lane) stateRate(size int) float64 {
	records := ln.recordRate(true)
	if r := &ln.dims[dimRequests].ctl; r.capped() && r.measured() {
		records = min(records, r.limit*float64(size))
	}
	return records
}

func (ln *lane) state() LimiterState {
	now := ln.clock.Now()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	size := min(ln.batch.size, ln.batch.maxSize(ln.sizeCaps(), ln.tuning))
	return LimiterState{
		Rate:        ln.stateRate(size),
		Concurrency: ln.conc.limit,
		BatchSize:   size,
		InFlight:    ln.slots.inFlight,
		Paused:      ln.breaker.open || now.Before(ln.pushback.until),
	}
}

// acquire admits a request, waiting as long as it takes: for the circuit
// breaker, for the caller's own slot if it brings slots, for the
// Retry-After of the index, for rate tokens, then for a slot of the lane.
//
// Requests are admitted one at a time per line, in FIFO order: only the
// head of a line holds a rate reservation, and it holds its tokens while
// it waits for a slot, so that at most one request's worth of tokens per
// line is ever stale. A cut wakes the heads, which reserve again at the
// new rate, since rate.Limiter does not move reservations already
// waiting. A request leaves its place in its route's line (q.turn) once it
// holds one in the lane's, so that a call's requests queue here in the
// order it dispatched them. A request of a call with its own slots
// (WithConcurrency) takes one before it queues, once the lane's
// Retry-After pause is over, and gives it back during a pause that begins
// while it queues (ownSlot): waiting for it at the head would hold back
// the requests of the lane's other calls, whose slots may be free, and a
// paused lane would hold the call's slots from its other namespaces. It
// queues in a line of its own (headOf), not behind a request waiting for
// a slot of the lane.
func (ln *lane) acquire(ctx context.Context, q request) (permit, error) {
	return ln.admit(ctx, q, false)
}

// acquireOrRecut is acquire for a batch sized by the lane: when the batch
// has become larger than a request may carry (sendLimit) by the time it is
// at the head of the queue, it returns errStaleBatch instead of waiting
// for its whole size in tokens at the new rate.
func (ln *lane) acquireOrRecut(ctx context.Context, q request) (permit, error) {
	return ln.admit(ctx, q, true)
}

func (ln *lane) admit(ctx context.Context, q request, recut bool) (permit, error) {
	probe, err := ln.waitBreaker(ctx)
	if err != nil {
		return permit{}, err
	}
	if probe != 0 && q.n > 1 && ln.probesAlone() { // a pinned size too: the breaker gives up only on a one-record timeout
		ln.abandonProbe(probe)
		return permit{}, errProbeAlone
	}
	own := ownSlot{slots: q.slots}
	if err = own.take(ctx, ln); err == nil {
		var p permit
		if p, err = ln.admitHead(ctx, q, recut, probe, &own); err == nil {
			return p, nil
		}
		own.give()
		ln.mu.Lock()
		ln.restIfIdle(ln.clock.Now())
		ln.mu.Unlock()
	}
	ln.abandonProbe(probe)
	return permit{}, err
}

// admitHead queues q for the head, waits there for the rates and a slot
// of the lane (unless q has its own, own), and issues its permit.
func (ln *lane) admitHead(ctx context.Context, q request, recut bool, probe uint64, own *ownSlot) (permit, error) {
	head := ln.headOf(q).take()
	q.turn.leave() // q holds its place: the caller's next request may queue behind it
	defer func() { head.leave() }()
	if err := head.wait(ctx); err != nil {
		return permit{}, err
	}
	ln.reachedHead()
	for {
		if err := own.yieldThroughPause(ctx, ln, &head); err != nil {
			return permit{}, err
		}
		cuts, err := ln.waitRate(ctx, q, recut)
		waited := own.waited
		if err == nil && q.slots == nil {
			waited, err = ln.takeSlot(ctx)
		}
		if err != nil {
			return permit{}, err
		}
		if recut && q.overLimitNow() { // the per-minute limits fell while it waited for the slot
			if q.slots == nil {
				ln.giveSlot()
			}
			return permit{}, errStaleBatch
		}
		ln.mu.Lock()
		if ln.pushback.cuts != cuts || ln.paused(ln.clock.Now()) {
			// Tokens granted at a rate since cut, or a Retry-After
			// answered while it waited for the slot.
			ln.mu.Unlock()
			if q.slots == nil {
				ln.giveSlot()
			}
			continue
		}
		p := ln.issue(q, probe, waited)
		ln.mu.Unlock()
		return p, nil
	}
}

// headOf is the line q queues in for the rates: requests that wait for a
// slot of the lane, and those that bring their own, each in their own
// line, so that neither waits behind the other's wait for a slot. Both
// heads reserve tokens: at most two requests' worth is stale at a cut.
func (ln *lane) headOf(q request) *line {
	if q.slots != nil {
		return &ln.ownHead
	}
	return &ln.head
}

// holdRoute counts a route of a call that holds the lane (delta 1) or
// lets go of it (-1).
func (ln *lane) holdRoute(delta int) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.use.routes += delta
}

// issue counts an admitted request; ln.mu is held.
func (ln *lane) issue(q request, probe uint64, waitedSlot bool) permit {
	now := ln.clock.Now()
	ln.slots.inFlight++
	ln.use.issued++
	ln.use.last = now
	amounts := q.amounts()
	for i := range ln.dims {
		ln.dims[i].ctl.send(now, amounts[i])
	}
	if q.sizeProbe {
		ln.batch.sent(now, q.n)
	}
	if q.n > 0 {
		x := float64(q.bytes) / float64(q.n)
		if ln.seen.recordBytes == 0 {
			ln.seen.recordBytes = x
		}
		ln.seen.recordBytes += (x - ln.seen.recordBytes) / 16
	}
	return permit{request: q, seq: ln.use.issued, start: now, probe: probe, waitedSlot: waitedSlot, epoch: ln.share.epoch}
}

// reachedHead ends the lane's rest, if it rests, when a request reaches
// the head of a line: from then on a wait is the lane's limits holding it
// back.
func (ln *lane) reachedHead() {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.endRest(ln.clock.Now())
}

// endRest tells the rates that the lane rested, nothing in flight and no
// request at a head, from the last answer to now. Time the breaker was
// open is the breaker's to count (closeBreaker). ln.mu is held.
func (ln *lane) endRest(now time.Time) {
	from := ln.slots.idleSince
	ln.slots.idleSince = time.Time{}
	if from.IsZero() || !now.After(from) || ln.breaker.open || ln.breaker.openedAt.After(from) {
		return
	}
	for i := range ln.dims {
		ln.dims[i].ctl.rest(from, now)
	}
}

// restIfIdle starts the lane's rest when nothing is in flight or at a
// head: after the last answer, and after a request that left the head
// unissued; ln.mu is held.
func (ln *lane) restIfIdle(now time.Time) {
	if ln.slots.inFlight == 0 && ln.head.empty() && ln.ownHead.empty() {
		ln.slots.idleSince = now
	}
}

// amounts is the request's amount in each dimension.
func (q request) amounts() [dimCount]float64 {
	return [dimCount]float64{float64(q.n), 1, float64(q.bytes)}
}

// waitBreaker waits while the breaker is open, and returns this request's
// probe number when it is the breaker's probe, 0 otherwise. Once the
// breaker has given up on the index, a request that is not the probe
// fails at once with its error.
func (ln *lane) waitBreaker(ctx context.Context) (probe uint64, err error) {
	for {
		ln.mu.Lock()
		now := ln.clock.Now()
		ln.heardHost()
		var back <-chan struct{} // another namespace of the host got an answer
		if ln.breaker.open {
			back = ln.hearBack(now)
		}
		ok, isProbe, wait := ln.breaker.admit(now)
		if isProbe {
			probe = ln.breaker.probes
		}
		var down *Error
		if !ok {
			down = ln.breaker.gaveUp(now)
		}
		wake := ln.signals.breaker.wait()
		ln.mu.Unlock()
		if ok {
			return probe, nil
		}
		if down != nil {
			return 0, down
		}
		if err := sleepOrWakeEither(ctx, ln.clock, wait, wake, back); err != nil && !errors.Is(err, errWoken) {
			return 0, err
		}
	}
}

// errProbeAlone is what admit returns for a batch of several records that
// was to be the breaker's probe after a timeout: the probe goes as one
// record (probesAlone), and the batch goes back to be cut.
var errProbeAlone = errors.New("the breaker's probe after a timeout goes as one record")

// probesAlone reports whether the breaker's probe goes as one record: its
// patience is spent and its last failure was a timeout, which a batch too
// large for the index gets as well as an index that is down. One record
// tells them apart (an index that answers it in time is up, and the
// breaker closes) where a batch's halves, each a whole timeout, outlast
// the patience; before it, the probe carries a batch, and its answer
// records (breaker.gaveUp).
func (ln *lane) probesAlone() bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.breaker.probesAlone(ln.clock.Now())
}

// gaveUp reports whether the breaker fails requests without sending them
// now (breaker.gaveUp).
func (ln *lane) gaveUp() bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.heardHost()
	ln.hearHostBack()
	return ln.breaker.gaveUp(ln.clock.Now()) != nil
}

// openedAt is when the breaker last opened: one outage's mark.
func (ln *lane) openedAt() time.Time {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.breaker.openedAt
}

// isProbe reports whether probe is the breaker's probe in flight: a probe
// of an outage the breaker has closed since, answered late, is not, and
// must not free the slot of the next outage's probe; ln.mu is held.
func (ln *lane) isProbe(probe uint64) bool {
	return probe != 0 && probe == ln.breaker.probes
}

func (ln *lane) abandonProbe(probe uint64) {
	if probe != 0 {
		ln.mu.Lock()
		if ln.breaker.abandon(ln.isProbe(probe)) {
			ln.signals.breaker.fire()
		}
		ln.mu.Unlock()
	}
}

// waitRate blocks until the request may be sent and returns the number of
// cuts at that time. Only the head of the queue calls it. With recut, it
// returns errStaleBatch when the request is larger than one may carry now.
func (ln *lane) waitRate(ctx context.Context, q request, recut bool) (cuts uint64, err error) {
	for {
		if recut && (q.n > ln.sendLimit() || q.overLimitNow()) {
			return 0, errStaleBatch
		}
		now := ln.clock.Now()
		ln.mu.Lock()
		res, d := ln.reserve(now, q)
		if recut && d > 0 && q.n > ln.batch.sendLimit(now, ln.sizeCaps(), ln.tuning) {
			// Its wait marked the rate binding, which shapes batches:
			// a batch formed before the cut does not hold the queue
			// while it saves up its whole size in tokens.
			for _, r := range res {
				r.CancelAt(now)
			}
			ln.mu.Unlock()
			return 0, errStaleBatch
		}
		d = max(d, ln.pushback.until.Sub(now))
		cuts = ln.pushback.cuts
		wake := ln.signals.rates.wait()
		ln.mu.Unlock()
		if d <= 0 {
			return cuts, nil
		}
		err := sleepOrWake(ctx, ln.clock, d, wake)
		if err == nil {
			return cuts, nil
		}
		now = ln.clock.Now()
		for _, r := range res {
			r.CancelAt(now)
		}
		if !errors.Is(err, errWoken) {
			return 0, err
		}
		// A cut woke the head: reserve again at the new rate.
	}
}

// reserve takes q's tokens from every rate's bucket and returns the
// reservations and how long until all of them are due; a rate that makes
// q wait is marked as binding. ln.mu is held.
func (ln *lane) reserve(now time.Time, q request) (res [dimCount]*rate.Reservation, wait time.Duration) {
	amounts := q.amounts()
	for i := range ln.dims {
		dim := &ln.dims[i]
		if n := int(amounts[i]); dim.bucket.Burst() < n {
			dim.bucket.SetBurstAt(now, n) // a request larger than the burst waits, it is never refused
		}
		res[i] = dim.bucket.ReserveN(now, int(amounts[i]))
		if w := res[i].DelayFrom(now); w > 0 {
			dim.waited = now
			wait = max(wait, w)
		}
	}
	if wait > 0 {
		ln.reportHeldBack()
	}
	return res, wait
}

// paused reports whether the lane waits out a Retry-After at now; ln.mu
// is held.
func (ln *lane) paused(now time.Time) bool { return now.Before(ln.pushback.until) }

// waitPause waits until the lane's pause for a Retry-After is over, or
// ctx ends.
func (ln *lane) waitPause(ctx context.Context) error {
	for {
		ln.mu.Lock()
		d := ln.pushback.until.Sub(ln.clock.Now())
		ln.mu.Unlock()
		if d <= 0 {
			return nil
		}
		if err := ln.clock.Sleep(ctx, d); err != nil {
			return err
		}
	}
}

// ownSlot is a request's hold on one of its call's own slots
// (WithConcurrency). A request waiting out its lane's Retry-After holds
// none: the call's other namespaces use the slots meanwhile.
type ownSlot struct {
	slots  chan struct{} // the call's; nil when it has none
	held   bool
	waited bool // taking the one held took a wait
}

// take waits out the lane's pause, then for a slot, unless one is held or
// the call has none.
func (o *ownSlot) take(ctx context.Context, ln *lane) error {
	if o.slots == nil || o.held {
		return nil
	}
	if err := ln.waitPause(ctx); err != nil {
		return err
	}
	waited, err := takeOwnSlot(ctx, o.slots)
	o.held, o.waited = err == nil, waited
	return err
}

// yieldThroughPause gives back the slot held and the lane's head, *head,
// while the lane is paused (a Retry-After answered after they were
// taken), then takes a slot and a place at the head again, in the order
// every request takes them: holding the head while waiting for a slot, it
// would wait for ever on a request that took the slot and waits for the
// head.
func (o *ownSlot) yieldThroughPause(ctx context.Context, ln *lane, head **place) error {
	if !o.held {
		return nil
	}
	ln.mu.Lock()
	paused := ln.paused(ln.clock.Now())
	ln.mu.Unlock()
	if !paused {
		return nil
	}
	(*head).leave()
	o.give()
	if err := o.take(ctx, ln); err != nil {
		return err
	}
	*head = ln.ownHead.take()
	if err := (*head).wait(ctx); err != nil {
		return err
	}
	ln.reachedHead()
	return nil
}

// give gives back the slot held, if any.
func (o *ownSlot) give() {
	if o.held {
		giveOwnSlot(o.slots)
		o.held = false
	}
}

// takeOwnSlot waits for one of slots, the caller's own, and reports
// whether it had to wait; with no slots it has nothing to take.
func takeOwnSlot(ctx context.Context, slots chan struct{}) (waited bool, err error) {
	if slots == nil {
		return false, nil
	}
	select {
	case slots <- struct{}{}:
		return false, nil
	default:
	}
	select {
	case slots <- struct{}{}:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

// giveOwnSlot gives back a slot takeOwnSlot took.
func giveOwnSlot(slots chan struct{}) {
	if slots != nil {
		<-slots
	}
}

// takeSlot waits for one of the lane's slots. It reports whether it had
// to wait, or took the last one.
func (ln *lane) takeSlot(ctx context.Context) (waited bool, err error) {
	for {
		ln.mu.Lock()
		if ln.slots.used < ln.conc.limit {
			ln.slots.used++
			if ln.slots.used == ln.conc.limit {
				waited = true // the last free slot: concurrency is what limits
			}
			ln.slots.waited = ln.slots.waited || waited
			if waited {
				ln.slots.fullAt = ln.clock.Now()
			}
			ln.mu.Unlock()
			return waited, nil
		}
		waited = true
		ch := ln.signals.slots.wait()
		ln.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return true, ctx.Err()
		}
	}
}

// giveSlot gives back a slot of the lane that takeSlot took.
func (ln *lane) giveSlot() {
	ln.mu.Lock()
	ln.slots.used--
	ln.signals.slots.fire()
	ln.mu.Unlock()
}

// awaitRetry waits until the retry budget allows one more retry.
func (ln *lane) awaitRetry(ctx context.Context) error {
	for {
		ln.mu.Lock()
		ok, wait := ln.budget.take(ln.clock.Now())
		wake := ln.signals.budget.wait()
		ln.mu.Unlock()
		if ok {
			return nil
		}
		if err := sleepOrWake(ctx, ln.clock, wait, wake); err != nil && !errors.Is(err, errWoken) {
			return err
		}
	}
}
