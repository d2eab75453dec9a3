package upsert

import (
	"math"
	"time"

	"github.com/upsertlib/upsert/internal/share"
)

// failureNote is what the lane tells a batch of its request's failure, so
// that the batch spends its retries on failures of its own, not on an
// outage's or on the lane's own overshoot.
type failureNote struct {
	// young: the breaker has been open for less than outagePatience
	// after the index had answered; the error spends no retry.
	young bool
	// cutFor: a 429 of a request sent before the cut the lane's rate
	// made for the episode, or while the index still refused what came
	// before it (rateSameEpisode, rateDraining): the lane's overshoot,
	// which the cut answers, not the batch's.
	cutFor bool
	// followsFailure: a server error or timeout that follows another
	// failure (the batch's own or another request's) in a run with no
	// success between, within the run's patience (breaker.followsFailure):
	// the index failing requests in turn, as in an outage too short to
	// open the breaker, not this batch failing. The run's first failure
	// spends; a timeout may still be the batch's own (batchFailures.outages).
	followsFailure bool
	// refused: a 429; successes is then how many requests of the lane had
	// succeeded when it came.
	refused   bool
	successes uint64
	// timeout: what tells a batch whether its timeout is its own; nil for
	// other failures.
	timeout *timeoutNote
}

// timeoutNote is what the lane tells of a request that timed out: when its
// timeout came, when the latest request the index answered was sent
// (breaker.lastAnswered), and when the one was sent whose answer last
// ended an outage (breaker.closedAt).
type timeoutNote struct {
	at, answered, closed time.Time
}

// batchFailures is what a batch remembers of its failures, to tell
// whether the next one spends a retry.
type batchFailures struct {
	spared    int    // 429s that spent no retry as the lane's overshoot
	refusals  int    // 429s that answered it, spent or not
	refusedAt uint64 // the lane's successes at the last of them
	woke      bool   // its last retry went out before its backoff ended (run.wakeResting)
	early     int    // 429s that answered such retries
	// timedOutSince is when the first of its requests' timeouts came, its
	// halves' included; zero before one did.
	timedOutSince time.Time
}

// free takes what the lane said of a failure and reports whether it
// spends no retry of the batch. The lane's overshoot spares at most
// maxSpared, so that a batch still fails on an index that refuses it for
// ever; a 429 after others landed since the batch's last one is spared
// (the index takes writes: it asks for a slower pace, which the lane's
// rate answers), so that a batch fails on 429s only when nothing lands
// between them.
func (b *batchFailures) free(f failureNote, maxSpared int) bool {
	free := b.outages(f)
	if f.cutFor && b.spared < maxSpared {
		free = true
		b.spared++
	}
	if f.refused {
		free = free || b.refusals > 0 && f.successes > b.refusedAt
		b.refusals, b.refusedAt = b.refusals+1, f.successes
		if b.woke {
			b.early++
		}
	}
	b.woke = false
	return free
}

// outages reports whether the breaker takes the failure f for an
// outage's (young, or following another failure). A timeout is the
// batch's own once the index answered a request sent after the batch's
// first timeout came: it takes others' records, not these (a record whose
// requests alone keep timing out); one sent before may have been answered
// before the outage began.
func (b *batchFailures) outages(f failureNote) bool {
	waited := f.young || f.followsFailure
	if f.timeout == nil {
		return waited
	}
	if b.timedOutSince.IsZero() || b.timedOutSince.Before(f.timeout.closed) {
		b.timedOutSince = f.timeout.at // its first, or its first since an outage ended: the answers that ended it say nothing of this batch
	}
	return waited && !f.timeout.answered.After(b.timedOutSince)
}

// backoffStep is the step of the backoff after a failure of class c
// (taken by free), given the retries of c spent before it. For a 429 every
// earlier refusal of the batch counts, spent or not: each asked for a
// slower pace; but not those of retries a wake sent early, which asked
// before the backoff ended. Which failures spend a retry decides when a
// batch fails, not how long it waits.
func (b *batchFailures) backoffStep(c Class, spent int) int {
	if c == ClassRateLimited {
		return max(spent, b.refusals-1-b.early)
	}
	return spent
}

// release returns p's slot and feeds its outcome to the controllers; e is
// nil for a success. It reports what the failure says of the index.
func (ln *lane) release(p permit, e *Error) failureNote {
	now := ln.clock.Now()
	latency := now.Sub(p.start)
	defer ln.flushShare() // after the unlock: a shared lane's round trips
	if p.slots != nil {
		// After the answer is counted: a request sent in the freed slot
		// must not be answered first (its failure would follow no
		// success, and spend a retry, in an outage the index had
		// answered before).
		defer func() { <-p.slots }()
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if p.slots == nil {
		ln.slots.used--
		ln.signals.slots.fire()
	}
	ln.slots.inFlight--
	ln.restIfIdle(now)
	class := Class(0)
	if e != nil {
		class = e.Class
	}
	if class == 0 {
		ln.seen.successes++
	}
	if class == 0 && p.n > 0 {
		ln.seen.roundTrip += (float64(latency) - ln.seen.roundTrip) / 8
		if (p.timeout <= 0 || latency < p.timeout/4) && p.start.After(ln.seen.fastSent) {
			ln.seen.fastSent = p.start
		}
	}
	// The breaker first: the answer that closes it marks the outage down
	// before the rates measure over their windows.
	f := ln.answerBreaker(p, now, class)
	ln.answerPause(now, e)
	window := ln.measureWindow(now)
	cutFor := ln.answerRates(p, now, window, e)
	ln.reportShare(p, now, window, class)
	sizeShed := ln.answerBatch(p, now, latency, class)
	ln.answerConc(p, now, window, latency, class, sizeShed)
	f.cutFor = cutFor
	f.refused, f.successes = class == ClassRateLimited, ln.seen.successes
	return f
}

// answerPause pauses the lane for the Retry-After of any answer (a 429's,
// a 503's, gRPC pushback on UNAVAILABLE): an index asks it of every
// request of the namespace, not only of the batch that got it.
func (ln *lane) answerPause(now time.Time, e *Error) {
	if e == nil || e.RetryAfter <= 0 {
		return
	}
	if until := now.Add(e.RetryAfter); until.After(ln.pushback.until) {
		ln.pushback.until = until
	}
}

// answerRates feeds the outcome to the rate controllers and applies their
// limits; a cut wakes the head of the queue.
func (ln *lane) answerRates(p permit, now time.Time, window time.Duration, e *Error) (cutFor bool) {
	refused := -1
	switch {
	case e == nil:
	case e.Class == ClassRateLimited:
		refused = refusedDim(e.Limit)
		if refused < 0 {
			return false // a per-minute limit: the minute gate paces it
		}
	default:
		return false // neither accepted nor refused for the rate
	}
	amounts := p.amounts()
	for i := range ln.dims {
		d := &ln.dims[i]
		if refused >= 0 && i != refused {
			continue
		}
		s := rateSample{
			now: now, amount: amounts[i], seq: p.seq, issued: ln.use.issued, refused: i == refused,
			bound: now.Sub(d.waited) < ln.tuning.boundFor, window: window,
			doubling: 4 * time.Duration(ln.seen.roundTrip), least: ln.leastAmount(i),
		}
		searched := d.ctl.search.on()
		switch reason := d.ctl.answer(s, ln.tuning, ln.floorOf(i)); reason {
		case rateFirstCut, rateCut, rateHalved, rateAtPrior:
			ln.pushback.cuts++
			ln.signals.rates.fire()
			d.apply(now, ln.tuning)
			if reason == rateFirstCut {
				d.drain(now)
			}
			ln.shareCut(p, e, i, searched && reason != rateAtPrior)
		case rateNoise:
			ln.shareRefusal(p, e, i, s)
		case rateGrew:
			d.apply(now, ln.tuning)
		case rateSameEpisode, rateDraining:
			cutFor = true
		}
	}
	return cutFor
}

// measureWindow is the least span over which a rate is measured: four
// round trips, and the time the lane takes to send tuning.windowRequests
// requests, within [tuning.minWindow, tuning.maxWindow].
func (ln *lane) measureWindow(now time.Time) time.Duration {
	w := max(ln.tuning.minWindow, 4*time.Duration(ln.seen.roundTrip))
	if r := ln.dims[dimRequests].ctl.sent.rateOver(now, meterSpan); r > 0 {
		w = max(w, time.Duration(ln.tuning.windowRequests/r*float64(time.Second)))
	}
	return min(w, ln.tuning.maxWindow)
}

// leastAmount is the amount in dimension dim of the smallest batch the
// lane forms under a capped rate (tuning.leastBatch), in records,
// requests or bytes.
func (ln *lane) leastAmount(dim int) float64 {
	n := ln.tuning.leastBatch()
	switch dim {
	case dimRequests:
		return 1
	case dimBytes:
		return n * ln.seen.recordBytes
	}
	return n
}

// refusedDim is the dimension of the lane's rate that a 429 naming limit
// refused, or -1 for the embedding tokens per minute, which only the
// minute gate paces (inference requests are limited a second too).
func refusedDim(limit Limit) int {
	switch limit {
	case LimitRequests, LimitInferenceRequests:
		return dimRequests
	case LimitBytes:
		return dimBytes
	case LimitEmbedTokens:
		return -1
	default:
		return dimRecords
	}
}

// answerBatch feeds the outcome to the batch size's controller, and
// reports whether it is a timeout the size sheds alone: a trial's, or one
// counted against a size no answer measured (batchControl.guess).
func (ln *lane) answerBatch(p permit, now time.Time, latency time.Duration, class Class) (sizeShed bool) {
	before, trying := ln.batch.size, ln.batch.trial.size > 0
	baseMean := ln.batch.base.mean()
	guess := ln.batch.guess()
	verdict := ln.batch.answer(batchSample{
		now: now, records: p.n, latency: latency, timeout: p.timeout, class: class, trial: p.sizeProbe,
		afterTimeout: p.afterTimeout && p.probe == 0 && !ln.breaker.open, // in an outage every size times out
		spread:       ln.spread(), queued: p.slots == nil && !ln.seen.fastSent.After(p.start),
		conc: ln.conc.limit,
	}, ln.tuning)
	if verdict == batchAdopted && ln.batch.size > before && p.slots == nil {
		sizeLog := ln.batch.base.mean()
		ln.conc.follow(math.Exp(sizeLog-baseMean), sizeLog, ln.use.issued, ln.tuning)
		ln.signals.slots.fire()
	}
	if ln.batch.size != before {
		ln.resetConc()
	}
	if trying && ln.batch.trial.size == 0 {
		ln.sizeTurn = false // the concurrency's turn
	}
	ln.raiseConcFloor(p)
	return class == ClassTimeout && (p.sizeProbe || guess && (verdict == batchTimedOut || verdict == batchTooLarge))
}

// raiseConcFloor keeps tuning.minConcurrency requests in flight from now
// on, once the lane, with fewer in flight, has measured the size adopted
// (the batch size's first search over) and that many times its latency
// keeps the tail within the timeout's share: one request alone leaves the
// index idle while the next travels to it, but requests waiting in one
// slot must not push the tail into timeouts. The floor is for good and
// rests on a few answers, so their mean is taken a standard error higher
// and the spread is the larger of the index's and theirs: a lucky few of a
// heavy tail must not queue every later request behind another.
func (ln *lane) raiseConcFloor(p permit) {
	t, b := ln.tuning, &ln.batch
	if p.slots != nil || ln.conc.limit >= t.minConcurrency || !b.searched(t) || b.base.n < t.batchSamples {
		return
	}
	spread := max(ln.spread(), b.base.spread())
	queued := b.base.mean() + spread/math.Sqrt(float64(b.base.n)) + math.Log(float64(t.minConcurrency))
	if b.tooSlow(queued, b.base.n, batchSample{timeout: p.timeout, spread: spread}, t) {
		return
	}
	ln.conc.raiseFloor(t.minConcurrency, ln.use.issued)
	ln.batch.forget()
	ln.signals.slots.fire()
}

// answerConc feeds the outcome to the concurrency's controller; more room
// wakes the requests waiting for a slot. window is measureWindow(now),
// which release computes once for every controller; sizeShed, from
// answerBatch, says a timeout is the batch size's to shed: taking a
// quarter off the concurrency too would shed the same queue twice.
func (ln *lane) answerConc(p permit, now time.Time, window, latency time.Duration, class Class, sizeShed bool) {
	if p.slots != nil {
		return // the caller's fixed concurrency
	}
	rateBound := ln.rateBinds(now, window)
	full := !p.sizeProbe && 10*p.n >= 9*ln.seen.size
	if class == 0 && full && p.seq > ln.conc.seq {
		ln.seen.jitter.add(ln.conc.current().deviation(latency))
	}
	before, trying := ln.conc.limit, ln.conc.trial.level > 0
	may := ln.mayTryConc()
	ln.conc.answer(concSample{
		seq: p.seq, issued: ln.use.issued, latency: latency, class: class, full: full, sizeShed: sizeShed, loaded: !ln.seen.fastSent.After(p.start),
		slotBound: p.waitedSlot || ln.slots.waited, rateBound: rateBound,
		mayTry: may, spread: ln.spread(), timeout: p.timeout,
	}, ln.tuning)
	if trying && ln.conc.trial.level == 0 && !ln.conc.slowStart {
		ln.sizeTurn = true // the batch size's turn
	}
	ln.slots.waited = false
	if ln.conc.limit != before {
		ln.batch.forget() // latencies at another level measure nothing here
	}
	if ln.conc.limit > before {
		ln.signals.slots.fire()
	}
}

// rateBinds reports whether a rate, rather than the slots, limits what the
// lane sends: one held a request back within tuning.boundFor while the
// lane sent at least tuning.bindingShare of it. Requests sent in waves (a
// round trip's answers come together) wait for tokens under a rate they
// do not reach on average; that rate limits nothing.
func (ln *lane) rateBinds(now time.Time, window time.Duration) bool {
	for i := range ln.dims {
		d := &ln.dims[i]
		if now.Sub(d.waited) < ln.tuning.boundFor && d.ctl.sent.rateOver(now, window) >= ln.tuning.bindingShare*d.ctl.limit {
			return true
		}
	}
	return false
}

// answerBreaker feeds the outcome to the breaker and the retry budget.
func (ln *lane) answerBreaker(p permit, now time.Time, class Class) failureNote {
	switch class {
	case 0:
		if ln.budget.success(now) {
			ln.signals.budget.fire()
		}
		ln.closeBreaker(now, p.start)
	case ClassTimeout, ClassServer:
		wasOpen := ln.breaker.open
		ln.heardOpen()
		timedOut := 0
		if class == ClassTimeout {
			timedOut = p.n
		}
		if ln.breaker.failure(now, p.start, ln.isProbe(p.probe), timedOut) {
			ln.signals.breaker.fire()
		}
		if !wasOpen && ln.breaker.open {
			ln.queueBreaker(true)
		} else if ln.joinsSharedOutage(now) {
			ln.queueInOutage()
		}
		ln.tellHost()
		if class == ClassServer {
			ln.heardHost()
			return failureNote{young: ln.breaker.young(now), followsFailure: ln.breaker.followsFailure(now)}
		}
		// A timeout in an outage spends no retry either: a record alone
		// (the probe, or a batch's last half) ran out of them within the
		// minute, failing for good what the outage failed. The batch tells
		// its own (batchFailures.outages).
		return failureNote{young: ln.breaker.young(now), followsFailure: ln.breaker.followsFailure(now),
			timeout: &timeoutNote{at: now, answered: ln.breaker.lastAnswered, closed: ln.breaker.closedAt}}
	case ClassRateLimited, ClassTooLarge, ClassInvalid, ClassDenied, ClassQuotaExceeded:
		ln.closeBreaker(now, p.start) // the index answers
	default:
		if ln.breaker.abandon(ln.isProbe(p.probe)) {
			ln.signals.breaker.fire()
		}
	}
	return failureNote{}
}

// closeBreaker closes the breaker on an answer of the index to a request
// sent at sent, and tells the rates how long it was open.
func (ln *lane) closeBreaker(now, sent time.Time) {
	if h := ln.host; h != nil && !h.answered.Load() {
		h.answered.Store(true) // the index answers: every lane of its host hears it
	}
	openedAt := ln.breaker.openedAt
	if !ln.breaker.success(sent) {
		return
	}
	for i := range ln.dims {
		ln.dims[i].ctl.pause(openedAt, now)
	}
	ln.signals.breaker.fire()
	ln.queueBreaker(false)
	if ln.host != nil {
		ln.host.closed(ln, sent) // the host's other namespaces probe at once
	}
}

// joinsSharedOutage reports whether the failure just counted, its
// breaker open, reports this writer in the lane's outage: its first
// failure in the outage as it last heard of it (another writer's breaker
// opened it, and opened this one; or it replaced, between two views, the
// outage this writer was in), or one once its last report is due for
// renewal (outageRenewalDue) in the outage it marked itself in. The store
// keeps the outage while a writer that reported itself in it within
// share.OutageLapse is live, so that it outlives the writer that opened
// it only while a writer still fails in it (one that none still sees may
// have ended unseen: a writer that joins later must not count its own
// from that one's start). ln.mu is held.
func (ln *lane) joinsSharedOutage(now time.Time) bool {
	heard := ln.breaker.shared.openSince
	if !ln.breaker.open || heard.IsZero() {
		return false
	}
	return !heard.Equal(ln.share.markedIn) || outageRenewalDue(ln.share.reportedAt, now)
}

// outageRenewalDue reports whether a writer whose breaker is open and
// that fails at now reports itself again, its last report made at last:
// once that is share.OutageRenewal old, so that the store, which drops a
// writer's mark share.OutageLapse after it, keeps the outage while the
// writer fails in it, at one round trip per renewal rather than one per
// failure. It renews only the outage the lane holds (joinsSharedOutage):
// one that ended under this writer (its mark lapsed while it sat idle, or
// another writer's answer closed it) is not opened again by its word.
func outageRenewalDue(last, now time.Time) bool {
	return last.IsZero() || now.Sub(last) >= share.OutageRenewal
}

// indexAnswered tells the lane that its index answered the run's
// DescribeIndexStats: the host is right. Its breaker holds it (the host's
// hostSeen may be forgotten with the host's idle lanes), and every lane of
// the host hears it.
func (ln *lane) indexAnswered() {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.breaker.hostAnswered = true
	if ln.host != nil {
		ln.host.answered.Store(true)
	}
}

// heardHost tells the breaker whether the index answered another lane of
// its host (hostSeen.answered), before the breaker judges whether the
// index ever answered: the breaker stays a function of what it is told.
// ln.mu is held.
func (ln *lane) heardHost() {
	if ln.host != nil && ln.host.answered.Load() {
		ln.breaker.hostAnswered = true
	}
}

// heardOpen tells the breaker how many breakers of its host are open,
// its own counted, before it may schedule a probe (breaker.schedule);
// ln.mu is held.
func (ln *lane) heardOpen() {
	if h := ln.host; h != nil {
		h.mu.Lock()
		ln.breaker.hostOpen = h.openBesides(ln, ln.clock.Now()) + 1
		h.mu.Unlock()
	}
}

// tellHost tells the lane's host whether its breaker is open, at a
// failure or when another writer opened it (closeBreaker tells it
// closed); ln.mu is held.
func (ln *lane) tellHost() {
	if h := ln.host; h != nil {
		h.mu.Lock()
		h.setOpen(ln, ln.breaker.open, ln.clock.Now())
		h.mu.Unlock()
	}
}

// hearHostBack tells the breaker when the index last answered another
// namespace of its host, for its verdict alone (breaker.hearHostBack);
// ln.mu is held.
func (ln *lane) hearHostBack() {
	if h := ln.host; h != nil {
		h.mu.Lock()
		ln.breaker.hearHostBack(h.backAt)
		h.mu.Unlock()
	}
}

// hearBack tells the open breaker when the index last answered another
// namespace of its host (breaker.hostBack), and returns the channel that
// the next such answer closes, nil for a lane without a host; ln.mu is
// held.
func (ln *lane) hearBack(now time.Time) <-chan struct{} {
	h := ln.host
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ln.breaker.hostBack(h.backAt, now)
	return h.back()
}
