package upsert

import (
	"math"
	"time"
)

// batchControl is the policy of how many records a lane's requests carry.
// Larger requests cost less per record until the index slows down above
// some size (or times out): a larger size is tried on a few batches now and
// then, twice the size (ten times in slow start, so that the largest is
// tried at once, and then half way by ratio to it when it cost more per
// record) or halfway to a size known to be too large, and adopted
// when its cost per record, compared by the mean of log latency, is no
// worse; a size that costs more, times out or is refused as too large is
// remembered as too large for a while. A trial batch out longer than a
// no-worse size would take, with the tail of the latency seen, is judged
// too large at once.
//
// Under a capped record rate, batches carry a fraction of a second's worth
// (tuning.requestsPerSecond requests a second), up to the size adopted,
// but never so little that the record rate needs more than a share of the
// request rate's cap, nor so little that the lane's requests in flight
// cannot carry more than the rate. It is a pure
// controller: no lock, no clock.
type batchControl struct {
	limit      int       // the most records a request may carry, for the lane's kind
	size       int       // the size adopted
	base       sizeStats // answers of full batches of the size adopted
	trial      sizeStats // a larger size being tried; size 0 when none
	ceil       int       // a size known to be too large; 0 when none
	ceilUntil  time.Time // when ceil is forgotten
	slowStart  bool      // until the first trial is judged
	timeouts   int       // timeouts of full batches of the size adopted since one succeeded
	sizedAt    int       // the concurrency when the size was adopted; 0 for the first size
	lookedDown bool      // the size below the start was tried
	halved     bool      // the size adopted is a halving no full batch of it has answered since
	halves     halfStats // answers of batches of about half the size adopted
	trials     uint64    // trials started: the one running is number trials
}

// halfStats summarises the answers of batches of about half a size.
type halfStats struct {
	levelStats     // level unused
	of         int // the size adopted they are half of
	records    int // in all of them
}

// sizeStats summarises the latencies of batches of one size.
type sizeStats struct {
	levelStats           // level unused
	size       int       // records per batch
	sent       int       // trial batches handed out
	out        int       // trial batches sent and not answered
	oldest     time.Time // when the oldest of those was sent
	held       bool      // slow start's trial, held under its size by a rate
}

// sizeCaps are the lane's rate limits that bound a batch, +Inf for none.
type sizeCaps struct {
	records, requests float64
	perRequest        int     // the most records a request's bytes allow; 0: no bound
	carry             float64 // requests a second the lane's requests in flight make (concurrency over round trip); 0: unknown
}

// batchSample is what the lane saw of one answered request.
type batchSample struct {
	now     time.Time
	records int
	latency time.Duration
	timeout time.Duration // the run's request timeout
	class   Class         // 0 for a success
	trial   bool          // a batch handed out as a trial
	// afterTimeout: a piece of a batch that timed out (part.afterTimeout)
	afterTimeout bool
	spread       float64 // of the index's log latency, pooled
	queued       bool    // for a timeout: the index queues, and concurrency can still shed
	conc         int     // the lane's concurrency limit
}

// batchReason says what the batch controller did.
type batchReason int

const (
	batchHeld     batchReason = iota
	batchTrying               // a larger size is being tried
	batchAdopted              // the size tried costs no more per record
	batchTooLarge             // the size tried, or the size adopted, is too large
	batchTimedOut             // a timeout counted against the size adopted; the second in a row makes it too large
)

func newBatchControl(limit int, t *tuning) batchControl {
	size := min(t.startBatch, limit)
	return batchControl{limit: limit, size: size, base: sizeStats{size: size}, slowStart: true}
}

// next returns the size of the next batch to form and whether it is a
// trial batch. A trial starts only when mayTry (the lane runs one
// experiment at a time); spread is the index's, pooled.
func (c *batchControl) next(now time.Time, caps sizeCaps, mayTry bool, spread float64, t *tuning) (int, bool) {
	c.expire(now)
	cap := c.maxSize(caps, t)
	if c.trial.size > 0 {
		switch {
		case c.trial.size > cap:
			c.capTrial()
			return min(c.size, cap), false
		case c.overdue(now, spread, t):
			c.endTrial(now, t)
			return min(c.size, cap), false
		}
		if c.trial.sent < c.trialSamples(t) {
			c.trial.sent++
			return c.trial.size, true
		}
		return min(c.size, cap), false
	}
	if n := c.nextTrial(cap, t); n > 0 && mayTry {
		c.lookedDown = c.lookedDown || n < c.size
		c.trial = sizeStats{size: n, sent: 1, held: c.heldByRate(n, caps, t)}
		c.trials++
		return n, true
	}
	return min(c.size, cap), false
}

// heldByRate reports whether slow start's trial of n records is smaller
// than it would be but for the rate caps: a size the rate allows says
// nothing of a larger one's cost, so slow start goes on as the rate rises.
func (c *batchControl) heldByRate(n int, caps sizeCaps, t *tuning) bool {
	if !c.slowStart {
		return false
	}
	unrated := sizeCaps{records: math.Inf(1), requests: math.Inf(1), perRequest: caps.perRequest}
	return n < c.nextTrial(c.maxSize(unrated, t), t)
}

// sent counts a trial batch sent at now.
func (c *batchControl) sent(now time.Time, n int) {
	if c.trial.size == 0 || n != c.trial.size {
		return
	}
	if c.trial.out == 0 {
		c.trial.oldest = now
	}
	c.trial.out++
}

// unsent gives back a batch handed out by next as a trial and never sent:
// trial is the number of the trial it was handed out for (c.trials then),
// and only that trial takes it back.
func (c *batchControl) unsent(trial uint64) {
	if c.trial.size > 0 && trial == c.trials && c.trial.sent > 0 {
		c.trial.sent--
	}
}

// sendLimit returns the most records a batch formed earlier may carry now:
// the size adopted, or the size tried, under maxSize. A batch formed at a
// size since found too large is cut to the size adopted, not to just under
// the ceiling: the sizes between are as unknown as the one that failed.
func (c *batchControl) sendLimit(now time.Time, caps sizeCaps, t *tuning) int {
	c.expire(now)
	n := c.maxSize(caps, t)
	if c.trial.size > n {
		c.capTrial()
	}
	return min(n, max(c.size, c.trial.size))
}

// maxSize is the largest batch worth forming: the kind's limit and what a
// request's bytes allow, under a size known to be too large, and under a
// capped rate what the caps ask (at least what the requests in flight need
// to carry tuning.carryShare times it).
func (c *batchControl) maxSize(caps sizeCaps, t *tuning) int {
	n := c.limit
	if caps.perRequest > 0 {
		n = min(n, caps.perRequest)
	}
	if c.ceil > 0 {
		n = min(n, max(1, c.ceil-1))
	}
	if !math.IsInf(caps.records, 1) {
		per := max(t.leastBatch(), caps.records/t.requestsPerSecond)
		if !math.IsInf(caps.requests, 1) {
			per = max(per, caps.records/(t.requestShare*caps.requests))
		}
		if caps.carry > 0 {
			// Enough for the requests in flight to carry more than the
			// rate: smaller batches hold the lane under its own limit,
			// which then never binds, so its search never grows and the
			// next cut measures what the batches allowed.
			per = max(per, t.carryShare*caps.records/caps.carry)
		}
		n = min(n, max(1, int(per)))
	}
	return n
}

func (c *batchControl) expire(now time.Time) {
	if c.ceil > 0 && !now.Before(c.ceilUntil) {
		c.ceil = 0
	}
}

// trialSamples is how many batches a trial size is judged on.
func (c *batchControl) trialSamples(t *tuning) int {
	if c.slowStart {
		return 1
	}
	return t.batchSamples
}

// eager reports whether a trial would start if it may.
func (c *batchControl) eager(caps sizeCaps, t *tuning) bool {
	return c.trial.size == 0 && c.nextTrial(c.maxSize(caps, t), t) > 0
}

// nextTrial returns a size to try, or 0. In slow start the trial goes out
// once the first batch is answered (an index that refuses it would refuse
// the larger one too, and leave its bucket in debt for it), and is judged
// on one sample against it.
func (c *batchControl) nextTrial(cap int, t *tuning) int {
	if c.base.n < c.trialSamples(t) {
		return 0
	}
	if below := c.below(t); !c.slowStart && !c.lookedDown && below > 0 {
		// An index can slow down above a size below the start (cost per
		// record jumps there); only a smaller size shows it, once.
		return below
	}
	if c.size >= cap {
		return 0
	}
	growth := 2
	if c.slowStart {
		growth = 10
	}
	n := min(growth*c.size, cap)
	if c.ceil > 0 {
		if c.ceil-c.size <= max(1, c.size/8) {
			return 0 // close enough to the size known too large
		}
		n = min(n, c.between())
	}
	if n <= c.size {
		return 0
	}
	return n
}

// overdue reports whether the oldest unanswered trial batch has been out
// longer than a size no worse per record than the adopted one would take
// in the tail of its latency.
func (c *batchControl) overdue(now time.Time, spread float64, t *tuning) bool {
	if c.trial.out == 0 || c.base.n < 2 {
		return false
	}
	tail := math.Exp(c.base.mean() + 2.5*spread)
	budget := tail * t.probeWorse * float64(c.trial.size) / float64(c.size)
	return now.Sub(c.trial.oldest).Seconds() > budget
}

// endTrial forgets the trial, remembers its size as too large and ends
// slow start. A trial that says nothing of its size is forgotten by
// capTrial instead.
func (c *batchControl) endTrial(now time.Time, t *tuning) {
	if c.trial.size > c.size {
		c.setCeiling(c.trial.size, now.Add(t.ceilingFor))
	}
	c.trial = sizeStats{}
	c.slowStart = false
}

// tooCostly ends a trial of a size that costs more per record than the
// size adopted. In slow start the search goes on between the two while
// they are far apart (brackets): the index slows down above a size
// between them, and the largest size under that carries the most. A size
// that timed out or whose tail is too long ends slow start instead: on
// few slots, the sizes between queue into timeouts as well.
func (c *batchControl) tooCostly(now time.Time, t *tuning) batchReason {
	bracket := c.slowStart
	c.endTrial(now, t)
	c.slowStart = bracket && c.brackets(t)
	return batchTooLarge
}

// between is the next size to try under the ceiling: half way in slow
// start's bracket by ratio (one sample a step, so few steps), half way by
// records after it.
func (c *batchControl) between() int {
	if c.slowStart {
		return int(math.Sqrt(float64(c.size) * float64(c.ceil)))
	}
	return (c.size + c.ceil) / 2
}

// brackets reports whether slow start goes on searching between the size
// adopted and a size found too costly: one sample a step finds the
// largest size worth it in a few round trips, where out of slow start
// each step waits its turn and a few answers.
func (c *batchControl) brackets(t *tuning) bool {
	return c.ceil > 0 && float64(c.ceil) > t.startBracket*float64(c.size)
}

// capTrial forgets a trial that the rate caps now bound below its size,
// unjudged: in slow start the next trial is at the caps, which say nothing
// of a size's cost (a lane's first cut often comes before its trial is
// answered).
func (c *batchControl) capTrial() { c.trial = sizeStats{} }

// answer takes one answered request and returns what it did.
func (c *batchControl) answer(s batchSample, t *tuning) batchReason {
	if s.trial && c.trial.size > 0 {
		if s.records != c.trial.size {
			// The batch went out smaller (cut to a rate or the request's
			// bytes, or a stream's partial batch): it says nothing of the
			// size tried, so it ends the trial, not slow start.
			c.capTrial()
			return batchHeld
		}
		return c.answerTrial(s, t)
	}
	full := s.records == c.size || 10*s.records >= 9*c.size && s.records <= c.size
	switch {
	case s.class == ClassTooLarge && s.records > 1:
		c.setCeiling(s.records, s.now.Add(t.timeoutCeilingFor))
		return batchTooLarge
	case s.class == ClassTimeout && (full || s.afterTimeout && s.records <= c.size) && s.records > 1 && c.blames(s):
		// A piece of a batch that timed out, timing out in turn, is as
		// much the size's: the size holds it.
		if c.timeouts++; c.timeouts >= 2 {
			c.timeouts = 0
			c.setCeiling(c.size, s.now.Add(t.timeoutCeilingFor))
			c.sizedAt = s.conc
			return batchTooLarge
		}
		return batchTimedOut
	case s.class == 0 && c.trial.size == 0 && c.isHalf(s.records):
		return c.answerHalf(s, t)
	case s.class == 0 && full:
		c.timeouts, c.halved = 0, false
		c.base.add(s.latency)
		if c.trial.size > 0 && c.trial.n >= c.trialSamples(t) {
			return c.judgeTrial(s, t) // its answers came before this one
		}
		return batchHeld
	}
	return batchHeld
}

// isHalf reports whether a batch of n records is about half the size
// adopted: a piece of a batch split after a timeout, or a partial batch.
func (c *batchControl) isHalf(n int) bool {
	return c.size > 1 && 20*n >= 9*c.size && 20*n <= 11*c.size
}

// answerHalf takes the answer of a batch of about half the size adopted,
// a measure of that size that costs no trial: once tuning.halfAnswers
// such answers cost clearly less per record than the size adopted (by
// tuning.halfCheaper beyond probeWorse and the noise), the index slows
// down above a size between the two, and the half is adopted.
func (c *batchControl) answerHalf(s batchSample, t *tuning) batchReason {
	h := &c.halves
	if h.of != c.size {
		*h = halfStats{of: c.size}
	}
	h.add(s.latency)
	h.records += s.records
	if h.n < t.halfAnswers || c.base.n < 2 {
		return batchHeld
	}
	costHalf := h.perRecord(float64(h.records) / float64(h.n))
	if costHalf >= c.base.perRecord(float64(c.size))-math.Log(t.halfCheaper)-c.costSlack(s.spread, h.n, t) {
		return batchHeld
	}
	c.trial, c.halves = sizeStats{levelStats: h.levelStats, size: c.size / 2}, halfStats{}
	c.trials++
	return c.judgeSmaller(s, true, t)
}

// answerTrial takes the answer of a trial batch.
func (c *batchControl) answerTrial(s batchSample, t *tuning) batchReason {
	c.trial.out = max(0, c.trial.out-1)
	c.trial.oldest = s.now
	switch s.class {
	case ClassTimeout, ClassTooLarge:
		c.endTrial(s.now, t)
		c.ceilUntil = s.now.Add(t.timeoutCeilingFor)
		return batchTooLarge
	case 0:
	default:
		c.trial.sent-- // a refusal tells nothing of the size: send another
		return batchHeld
	}
	c.trial.add(s.latency)
	if c.trial.n < c.trialSamples(t) || c.base.n == 0 {
		return batchTrying
	}
	return c.judgeTrial(s, t)
}

// judgeTrial adopts the size tried when it costs no more per record than
// the size adopted, by the mean of log latency, and its tail stays within
// tuning.latencyShare of the request timeout; it remembers it as too large
// otherwise. A larger size is too costly only when it costs more than the
// noise of its few answers explains (costSlack); a smaller one must cost
// clearly less.
func (c *batchControl) judgeTrial(s batchSample, t *tuning) batchReason {
	costTrial := c.trial.perRecord(float64(c.trial.size))
	costBase := c.base.perRecord(float64(c.size))
	if c.trial.size < c.size {
		return c.judgeSmaller(s, costTrial < costBase-math.Log(t.probeWorse), t)
	}
	if costTrial > costBase+c.costSlack(s.spread, c.trial.n, t) {
		return c.tooCostly(s.now, t)
	}
	if c.tooSlow(c.trial.mean(), c.trial.n, s, t) {
		c.endTrial(s.now, t)
		return batchTooLarge
	}
	c.adopt(s.conc, t)
	return batchAdopted
}

// costSlack is how much more, in log, a size measured on n answers may
// cost per record than the size adopted and still be no worse:
// tuning.probeWorse, and tuning.costNoise standard errors of the
// difference of their mean log latencies at the pooled spread.
func (c *batchControl) costSlack(spread float64, n int, t *tuning) float64 {
	se := spread * math.Sqrt(1/float64(max(1, n))+1/float64(max(1, c.base.n)))
	return math.Log(t.probeWorse) + t.costNoise*se
}

// adopt makes the size tried the size adopted, with its latencies, at the
// lane's concurrency conc. Slow start goes on after a trial a rate held
// (heldByRate) or while it brackets a size too costly.
func (c *batchControl) adopt(conc int, t *tuning) {
	held := c.trial.held
	c.size, c.base = c.trial.size, sizeStats{levelStats: c.trial.levelStats, size: c.trial.size}
	c.sizedAt, c.halved = conc, false
	c.trial = sizeStats{}
	c.slowStart = c.slowStart && (held || c.brackets(t))
}

// searched reports whether the size's first search is over: slow start
// has ended, no trial is out, and the size below the start was looked at
// (or the size is too small to look below).
func (c *batchControl) searched(t *tuning) bool {
	return !c.slowStart && c.trial.size == 0 && (c.lookedDown || c.below(t) == 0)
}

// below is the size tried once below the start: a tenth of it, or of the
// size adopted when smaller; 0 when that is under one record.
func (c *batchControl) below(t *tuning) int { return min(c.size, t.startBatch) / 10 }

// guess reports whether the size adopted is a guess no answer measured:
// the start's, or a halving no full batch of it has answered yet. The
// timeouts counted against it are the size's alone to shed
// (lane.answerBatch). Once a size is measured, a queue's timeouts are the
// concurrency's to shed as well: one slot's queue waits as long at half
// the size when a request's latency is mostly its own.
func (c *batchControl) guess() bool { return c.sizedAt == 0 || c.halved }

// blames reports whether a timeout counts against the size adopted. A
// queue's timeout, with more requests in flight than when the size was
// adopted, is concurrency's to shed (concTimedOut): halving the size too
// would ratchet it down to one record while the queue stays long.
func (c *batchControl) blames(s batchSample) bool {
	return !s.queued || c.sizedAt == 0 || s.conc <= c.sizedAt
}

// judgeSmaller adopts a smaller size tried when it costs clearly less per
// record, and keeps the size it replaced as too large; it drops the trial
// otherwise.
func (c *batchControl) judgeSmaller(s batchSample, cheaper bool, t *tuning) batchReason {
	if !cheaper {
		c.trial = sizeStats{}
		return batchHeld
	}
	c.ceil, c.ceilUntil = c.size, s.now.Add(t.ceilingFor)
	c.adopt(s.conc, t)
	return batchAdopted
}

// forget drops the latencies of the size adopted, when the concurrency
// changes: they are no measure of the new level.
func (c *batchControl) forget() {
	c.base, c.halves = sizeStats{size: c.size}, halfStats{}
}

// tooSlow reports whether the 99th percentile of a lognormal latency of
// the mean log given (of n samples), at the spread seen, takes more than
// tuning.latencyShare of the request timeout. A mean of one sample (slow
// start's trial) is taken a spread lower: a size wrongly rejected is not
// tried again for ceilingFor, one wrongly adopted is halved at its second
// timeout.
func (c *batchControl) tooSlow(meanLog float64, n int, s batchSample, t *tuning) bool {
	if n == 1 {
		meanLog -= s.spread
	}
	return s.timeout > 0 && math.Exp(meanLog+2.33*s.spread) > t.latencyShare*s.timeout.Seconds()
}

// setCeiling remembers size as too large until until, and brings the
// size adopted under it.
func (c *batchControl) setCeiling(size int, until time.Time) {
	if c.ceil == 0 || size <= c.ceil {
		c.ceil, c.ceilUntil = size, until
	}
	if c.size >= size {
		c.size, c.halved = max(1, size/2), true
		c.base = sizeStats{size: c.size}
	}
}
