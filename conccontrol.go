package upsert

import (
	"math"
	"time"
)

// concControl is the policy of how many requests a lane keeps in flight.
// It judges a level by the throughput it brings, as Vespa's feed client
// does, never by how a latency compares with the best one seen: by
// Little's law the throughput at c requests in flight is c over their mean
// latency, so a higher level is kept only when latency grew less than the
// level did (the index is not yet saturated: more in flight would only
// queue), and a lower one when latency fell nearly as much as the level.
// Latencies are compared by the mean of their logarithms over an epoch as
// long as their spread needs to tell a gain from noise, so a heavy tail or
// the client's own load shifts both levels alike.
//
// It starts with slow start: levels double while every slot is taken and
// each doubling pays (one that falls short by less than the noise of its
// few answers is measured on, and the first that falls short by a little
// more is tried again after an epoch at the level kept), but a doubling
// that would queue past the request timeout if the index were saturated
// waits for a lower level's test: kept, the index is saturated and slow
// start ends; rejected, it is not, and slow start doubles on. Then it
// tries a level half again as high now and then, and after one that did
// not pay, one a third lower (over fewer answers), waiting longer after
// each trial that changed nothing. A timeout takes a quarter off, once
// per round trip, when it says the index is loaded: not when other
// requests sent after it were answered in good time, which says the size
// or the tail was to blame, and not when it is the batch size's trial,
// which says the size tried is too large. No level goes under the floor
// the lane raises (raiseFloor). It is a pure controller: no lock, no
// clock.
type concControl struct {
	limit     int
	slowStart bool
	down      bool       // the next trial is of a lower level
	seq       uint64     // the last change applies to requests admitted after this one
	from      uint64     // answers of requests admitted after this one measure the level
	base      levelStats // answers at the level kept
	trial     levelStats // answers at a level being tried; level 0 when none
	hold      int        // epochs to wait before the next trial
	holdFor   int        // the hold after the next trial that changes nothing
	// unsaturated: slow start's test found that a lower level loses
	// throughput, so latency is the index's, not a queue's (queuesPast)
	unsaturated bool
	wave        uint64  // the last request follow's raise let out at once; 0 when measured
	waveLog     float64 // the log latency of the larger size's answer that raised the level
	floor       int     // the lowest level raiseFloor set; 0: none (one)
	retried     bool    // slow start's last rejected doubling is tried once more
}

// levelStats summarises the latencies of full batches answered at one
// concurrency level.
type levelStats struct {
	level      int
	n          int
	sum, sumSq float64 // of log latency
	bound      bool    // a request waited for a slot at this level
	rated      bool    // a rate held requests back: the slots did not limit
}

func (s *levelStats) add(latency time.Duration) {
	x := math.Log(max(latency.Seconds(), 1e-6))
	s.n++
	s.sum += x
	s.sumSq += x * x
}

func (s *levelStats) mean() float64 { return s.sum / float64(s.n) }

// perRecord is the mean log latency per record of batches of records
// records: the cost a batch size is judged by.
func (s *levelStats) perRecord(records float64) float64 { return s.mean() - math.Log(records) }

// spread is the standard deviation of log latency.
func (s *levelStats) spread() float64 {
	if s.n < 2 {
		return 0
	}
	m := s.mean()
	return math.Sqrt(max(0, s.sumSq/float64(s.n)-m*m))
}

// deviation is how far latency is from the mean of the answers so far, in
// log, and how many there were.
func (s *levelStats) deviation(latency time.Duration) (float64, int) {
	if s.n == 0 {
		return 0, 0
	}
	return math.Log(max(latency.Seconds(), 1e-6)) - s.mean(), s.n
}

// concSample is what the lane saw of one answered request.
type concSample struct {
	seq, issued uint64
	latency     time.Duration
	class       Class         // 0 for a success
	full        bool          // a batch of the size handed out
	sizeShed    bool          // for a timeout: the batch size's alone to shed (a trial's, or one counted against a size no answer measured)
	loaded      bool          // for a timeout: no request sent after it was answered in good time
	slotBound   bool          // a request waited for a slot since the last sample
	rateBound   bool          // a rate held a request back within tuning.boundFor
	mayTry      bool          // a trial may start: the lane runs one experiment at a time
	spread      float64       // of the index's log latency, pooled
	timeout     time.Duration // the run's request timeout; 0: none
}

// concReason says what the concurrency controller did with a sample.
type concReason int

const (
	concHeld     concReason = iota // nothing to learn from the sample, or the epoch goes on
	concTry                        // an epoch ended: another level is tried
	concKept                       // the level tried paid and is kept
	concRejected                   // the level tried did not pay: back to the one before
	concTimedOut                   // a timeout of a loaded index took a quarter off
)

func newConcControl(t *tuning) concControl {
	return concControl{
		limit: t.startConcurrency, slowStart: true, base: levelStats{level: t.startConcurrency},
		holdFor: t.holdEpochs,
	}
}

// answer takes one answered request and returns what it did.
func (c *concControl) answer(s concSample, t *tuning) concReason {
	switch {
	case s.class == ClassTimeout && s.loaded && s.seq > c.seq && !s.sizeShed:
		if c.trial.level > c.base.level {
			// The level tried only queued (its slowest answers time out,
			// so its latency reads low): rejected, as judge would.
			c.down = c.base.level > c.lowest()
			c.hold, c.holdFor = c.holdFor, min(2*c.holdFor, t.maxHold)
		} else {
			c.down = false
		}
		c.trial = levelStats{}
		c.set(max(c.lowest(), c.limit*3/4), s.issued)
		c.base = levelStats{level: c.limit}
		c.slowStart = false
		return concTimedOut
	case s.class != 0 || !s.full || s.seq <= c.seq || s.seq <= c.from:
		return concHeld
	}
	st := c.current()
	st.add(s.latency)
	st.bound = st.bound || s.slotBound
	st.rated = st.rated || s.rateBound
	if st.n < c.epoch(s.spread, t) {
		return concHeld
	}
	if c.remeasure(s.spread, t) {
		return concHeld
	}
	if c.trial.level > 0 {
		if c.unclear(s.spread, t) {
			return concHeld
		}
		return c.judge(s.issued, s.mayTry, s.spread, t)
	}
	return c.next(s.issued, s.mayTry, s.timeout, t)
}

// current returns the stats that the next full answer adds to.
func (c *concControl) current() *levelStats {
	if c.trial.level > 0 {
		return &c.trial
	}
	return &c.base
}

// epoch is how many answers a level is measured over. In slow start, half
// the level (at least tuning.epochAnswers, or the level when lower): the
// answers after those a doubling lets out at once (see try), which come
// back within a round trip of them, so that a doubling that pays shows in
// two round trips; one stopped by noise is made up by the trials after.
// Then enough for the mean of log latency to tell the gain of a step from
// noise at the spread seen; a lower level tried, tuning.downShare of that.
func (c *concControl) epoch(spread float64, t *tuning) int {
	if c.slowStart && !c.triesLower() {
		return max(min(t.epochAnswers, c.limit), c.limit/2)
	}
	n := c.enough(spread, float64(c.step(t))/float64(c.base.level), t)
	if c.triesLower() {
		return max(1, int(t.downShare*float64(n)))
	}
	return n
}

// enough is how many answers tell the gain of a step by ratio from noise
// at the spread of log latency: two standard errors of the difference
// within half the step's gain, at least tuning.epochAnswers and the level,
// at most eight times tuning.epochAnswers.
func (c *concControl) enough(spread, ratio float64, t *tuning) int {
	r := math.Abs(math.Log(ratio))
	if r == 0 {
		r = math.Log(1.5)
	}
	x := spread / r
	need := 32 * x * x
	return min(max(t.epochAnswers, c.limit, int(need)), 8*t.epochAnswers)
}

// unclear reports whether slow start's trial, at the end of its epoch,
// falls short of paying by less than tuning.judgeNoise standard errors
// of the difference of the two levels' mean log latency (at the pooled
// spread), with fewer answers than enough: it is measured on. Its
// rejection would end slow start.
func (c *concControl) unclear(spread float64, t *tuning) bool {
	tr, b := c.trial, c.base
	if !c.slowStart || tr.n == 0 || b.n == 0 {
		return false
	}
	ratio := float64(tr.level) / float64(b.level)
	short := shortfall(tr, b, t)
	return short > 0 && short < t.judgeNoise*diffError(tr, b, spread) && tr.n < c.enough(spread, ratio, t)
}

// diffError is the standard error of the difference of two levels' mean
// log latency, at the spread of log latency.
func diffError(a, b levelStats, spread float64) float64 {
	return spread * math.Sqrt(1/float64(a.n)+1/float64(b.n))
}

// shortfall is how much longer, in mean log latency, the level tried took
// than paying allows: a higher level pays when its throughput (level over
// geometric mean latency, Little's law) grew by at least tuning.minGain of
// the proportional gain; a lower one when it lost less than that share.
// Positive: it does not pay.
func shortfall(tr, b levelStats, t *tuning) float64 {
	ratio := float64(tr.level) / float64(b.level)
	return tr.mean() - b.mean() - math.Log(ratio/(1+t.minGain*(ratio-1)))
}

// step is the next level to try from the one kept.
func (c *concControl) step(t *tuning) int {
	l := c.base.level
	switch {
	case c.slowStart && !c.down:
		return min(t.maxConcurrency, 2*l)
	case c.down:
		return max(c.lowest(), min(l-1, l*2/3))
	default:
		return min(t.maxConcurrency, max(l+1, l*3/2))
	}
}

// eager reports whether the next epoch's end would start a trial, if it
// may, given whether the slots limit the lane now.
func (c *concControl) eager(slotBound bool, t *tuning) bool {
	return c.trial.level == 0 && slotBound && c.hold <= 1 && c.step(t) != c.base.level
}

// next ends an epoch at the level kept: another is tried when every slot
// was taken, no rate held requests back, no hold is left and it may. In
// slow start a doubling that would queue past the timeout waits for a
// lower level's test (queuesPast).
func (c *concControl) next(issued uint64, mayTry bool, timeout time.Duration, t *tuning) concReason {
	bound := c.base.bound && !c.base.rated
	if c.hold > 0 {
		c.hold--
	}
	if c.queuesPast(timeout, t) {
		c.down = true
	}
	if step := c.step(t); !bound || !mayTry || c.hold > 0 || step == c.base.level {
		c.base = levelStats{level: c.base.level}
		return concHeld
	}
	c.try(issued, t)
	return concTry
}

// try starts a trial of the next step. The requests a higher level lets
// out at once queue behind those already in flight, so their latency is
// the old level's: the level is measured from the ones after them.
func (c *concControl) try(issued uint64, t *tuning) {
	c.trial = levelStats{level: c.step(t)}
	c.set(c.trial.level, issued)
	c.from = issued + uint64(max(0, c.trial.level-c.base.level))
}

// judge ends an epoch at a level tried. A higher level is kept when it
// brought at least tuning.minGain of the throughput the extra requests
// would bring an index far from saturated; a lower one when it lost less
// than that share of what the requests taken away would. A level kept is
// followed by the next step the same way at once. spread is the index's,
// pooled.
func (c *concControl) judge(issued uint64, mayTry bool, spread float64, t *tuning) concReason {
	tr, b := c.trial, c.base
	if b.n == 0 {
		return c.abandon(issued)
	}
	c.trial = levelStats{}
	ratio := float64(tr.level) / float64(b.level)
	if shortfall(tr, b, t) <= 0 {
		c.base = levelStats{level: tr.level, n: tr.n, sum: tr.sum, sumSq: tr.sumSq, bound: tr.bound, rated: tr.rated}
		c.holdFor, c.retried = t.holdEpochs, false
		if ratio < 1 {
			c.slowStart = false // saturated: the lower level lost nothing
		}
		if tr.bound && !tr.rated && (mayTry || c.slowStart) && c.step(t) != c.base.level {
			c.try(issued, t)
		}
		return concKept
	}
	if c.slowStart && ratio < 1 {
		// Not saturated: the doubling it held back goes ahead.
		c.down, c.unsaturated = false, true
		c.base = b
		c.set(b.level, issued)
		return concRejected
	}
	c.base = levelStats{level: b.level}
	c.set(b.level, issued)
	if c.retries(tr, b, spread, t) {
		c.retried = true
		return concRejected
	}
	c.slowStart, c.down = false, ratio > 1 && b.level > c.lowest()
	c.hold, c.holdFor = c.holdFor, min(2*c.holdFor, t.maxHold)
	return concRejected
}

// retries reports whether slow start's doubling tr, rejected against b,
// is tried once more after an epoch at b rather than ending slow start:
// the first since a level was kept that falls short by less than
// tuning.retryNoise standard errors of the difference at the spread.
func (c *concControl) retries(tr, b levelStats, spread float64, t *tuning) bool {
	if !c.slowStart || c.retried || tr.level <= b.level {
		return false
	}
	return shortfall(tr, b, t) < t.retryNoise*diffError(tr, b, spread)
}

// queuesPast reports whether slow start's next doubling would take the
// mean latency past tuning.queueShare of the request timeout if the index
// were saturated (latency growing with the level, by Little's law), while
// no test has found that it is not: a lower level is tested first, since a
// saturated index would time out many of the doubled level's requests.
func (c *concControl) queuesPast(timeout time.Duration, t *tuning) bool {
	if !c.slowStart || c.down || c.unsaturated || c.base.level <= c.lowest() || c.base.n == 0 || timeout <= 0 {
		return false
	}
	ratio := float64(c.step(t)) / float64(c.base.level) // the doubling, capped at tuning.maxConcurrency
	return ratio > 1 && math.Exp(c.base.mean())*ratio > t.queueShare*timeout.Seconds()
}

// triesLower reports whether the level tried is lower than the level kept.
func (c *concControl) triesLower() bool {
	return c.trial.level > 0 && c.trial.level < c.base.level
}

// follow raises the limit, in slow start, by how much longer requests
// take after a larger batch size was adopted (ratio of their latencies):
// as many requests a second need that many more in flight (Little's law),
// and doubling there would take round trips of the longer latency.
// sizeLog is the log latency of the larger size's answer (see remeasure).
func (c *concControl) follow(ratio, sizeLog float64, issued uint64, t *tuning) {
	if !c.slowStart || ratio <= 1 || c.trial.level > 0 {
		return
	}
	before := c.limit
	c.set(min(t.maxConcurrency, int(math.Ceil(float64(c.limit)*ratio))), issued)
	c.base = levelStats{level: c.limit}
	c.wave, c.waveLog = issued+uint64(max(0, c.limit-before)), sizeLog
}

// remeasure ends the first epoch of a level follow raised to, and reports
// whether the level is measured again from after the requests the raise
// let out at once. It is when their answers took longer than the larger
// size's answer that raised the level, by more than the spread (that one
// answer's noise) and tuning.waveQueued: they queued behind each other in
// the index's slots, so they read a level filling, not the level. A wave
// that did not queue measures the level in one round trip, and stands.
func (c *concControl) remeasure(spread float64, t *tuning) bool {
	wave := c.wave
	c.wave = 0
	if wave == 0 || !c.slowStart || c.trial.level > 0 {
		return false
	}
	if c.base.mean() <= c.waveLog+max(spread, math.Log(t.waveQueued)) {
		return false
	}
	c.from = wave
	c.base = levelStats{level: c.base.level}
	return true
}

// raiseFloor makes floor the lowest level, for requests admitted after
// issued: the level is raised to it, and a trial of a level under it, or
// from one, is abandoned.
func (c *concControl) raiseFloor(floor int, issued uint64) {
	if floor <= c.lowest() {
		return
	}
	c.floor = floor
	if c.trial.level > 0 && min(c.trial.level, c.base.level) < floor {
		c.abandon(issued)
	}
	if c.limit < floor {
		c.set(floor, issued)
		c.base = levelStats{level: floor}
	}
}

// lowest is the lowest level: one, until raiseFloor.
func (c *concControl) lowest() int { return max(1, c.floor) }

// set changes the limit for requests admitted after issued.
func (c *concControl) set(limit int, issued uint64) {
	c.limit, c.seq = limit, issued
	if c.trial.level == 0 {
		c.base.level = limit
	}
}

// reset forgets the latencies measured, when the batch size changes: they
// are no measure of the new one. A trial is abandoned.
func (c *concControl) reset(issued uint64) {
	if c.trial.level > 0 {
		c.abandon(issued)
	}
	c.base = levelStats{level: c.base.level}
}

// abandon ends a trial that cannot be judged: in slow start a higher level
// is kept (nothing says it does not pay), otherwise the level before (a
// lower one tried said nothing of saturation yet).
func (c *concControl) abandon(issued uint64) concReason {
	level := c.base.level
	if c.slowStart && !c.triesLower() {
		level = c.trial.level
	}
	c.trial = levelStats{}
	c.base = levelStats{level: level}
	c.set(level, issued)
	return concHeld
}
