package upsert

import (
	"math"
	"math/bits"
	"time"
)

// rateControl is the policy of one dimension of a lane's send rate:
// records, requests or bytes per second. It is a pure controller: it sees
// what was sent and how each request was answered, with the time, and
// keeps the limit the lane enforces; it holds no lock and reads no clock.
//
// There is no limit until the index refuses requests for this dimension
// (or the limit starts at a known limit of the index, see withPrior).
// Refusals start an episode only when they are more than the index's
// usual share of refusals explains: some indexes refuse a few requests
// whatever the rate, and those must not grind the rate down. An episode
// cuts the limit once, to a little under the level: what the index
// accepted since the last cut, which is its capacity when it limits with a
// token bucket (it accepts exactly its rate once its bucket is empty).
// After the cut the limit climbs back to the level along a cubic curve
// (CUBIC congestion control, in rate: the deeper the cut, the longer the
// climb) and probes ever faster above it, while the limit holds requests
// back, searching up once it doubled the level unrefused (outgrown);
// unless the index refuses at random (refusesAtRandom), a refusal of the
// probe restarts it. The usual share of refusals is learnt while
// the limit climbs back, or the lane sends well under it, when a token
// bucket refuses nothing.
type rateControl struct {
	limit    float64       // per second; +Inf: no cap
	level    float64       // what the index accepted at the last episode, or the prior; 0: none
	depth    float64       // how far below the level the curve starts, as a share of it
	origin   time.Time     // when the curve is back at the level, shifted by the time the limit bound nothing
	followed time.Time     // when the curve was last followed
	cutAt    time.Time     // when the last episode began, or the controller started
	cutSeq   uint64        // requests admitted up to this one were sent before the last cut
	episodes int           // 429 episodes so far
	capacity float64       // what the index accepted at the last cut: below it refusals are noise
	search   rateSearch    // the limit searching up from a floor; its zero value: none
	start    runStart      // what the controller saw of the run's start
	prior    float64       // the index's known limit; 0: none
	ceiling  bool          // a cut found the index at its known limit: it is the limit
	accepted int           // answers accepted since the last cut, of requests sent after it
	climbed  climbed       // since the limit climbed back to the capacity after the last cut
	recent   answers       // the last answers, refused or not
	quiet    usualRefusals // answers while calm, when a token bucket refuses nothing
	sent     meter         // amount sent
	taken    meter         // amount the index accepted
	gain     float64       // the probe's gain until the next cut, set by alone; 0: tuning.probeGain
}

// rateSearch is a limit searching up, doubling, from a floor: after the
// first cut, after one with too few answers to measure by, or once the
// probe outgrew the level.
type rateSearch struct {
	pace    time.Duration // while > 0, it searches, doubling no sooner than this
	refused float64       // the limit at its first refusal that started no episode; 0: none
}

// on reports whether the limit searches up.
func (s rateSearch) on() bool { return s.pace > 0 }

// refusedAt notes a refusal that started no episode at limit, the first
// of the search if it searches.
func (s *rateSearch) refusedAt(limit float64) {
	if s.on() && s.refused == 0 {
		s.refused = limit
	}
}

// reached is the limit the search had reached at its first refusal, or
// limit, the one it reached since, when none came.
func (s rateSearch) reached(limit float64) float64 {
	if s.refused > 0 {
		return min(limit, s.refused)
	}
	return limit
}

// climbed is what a rate controller saw since its limit climbed back to
// the capacity measured at the last cut: from then on the index's bucket
// no longer overflows while the limit climbs.
type climbed struct {
	at     time.Time     // when; zero before
	taken  float64       // amount accepted since, of any request
	paused time.Duration // time the index was down (breaker open) since the last cut
}

// runStart is what a rate controller keeps of its run's start, for its
// first episodes: a window then reaches back to when the lane ramped up
// and the index's bucket still held its burst.
type runStart struct {
	taken    float64   // amount accepted since the controller started
	firstCut time.Time // when the first episode began; zero before it
}

// answerSpan is how many answers the test of refusals counts: the width
// of the answers register.
const answerSpan = 64

// answers is a shift register of the last answerSpan answers: a bit set
// for each refusal.
type answers struct {
	refused uint64
	n       int
}

func (a *answers) add(refused bool) {
	a.refused <<= 1
	if refused {
		a.refused |= 1
	}
	a.n = min(a.n+1, answerSpan)
}

func (a *answers) count() (refused, n int) { return bits.OnesCount64(a.refused), a.n }

// within is how many of the last n answers were refusals.
func (a *answers) within(n int) int {
	mask := ^uint64(0)
	if n < answerSpan {
		mask = 1<<n - 1
	}
	return bits.OnesCount64(a.refused & mask)
}

// inRow reports whether the last two answers were both refusals: a bucket
// that overflows refuses several in a row.
func (a *answers) inRow() bool { return a.refused&3 == 3 }

// rateSample is what the lane saw of one answered request, for one
// dimension.
type rateSample struct {
	now      time.Time
	amount   float64       // the request's amount in this dimension
	seq      uint64        // the request's admission number
	issued   uint64        // admissions so far
	refused  bool          // answered 429 for this dimension
	bound    bool          // the limit held a request back within tuning.boundFor
	window   time.Duration // the least span that measures a rate: a few round trips and answers
	doubling time.Duration // four round trips: a search doubles no sooner, nor sooner than the search's pace
	least    float64       // the amount of the smallest batch the lane forms (see leastTime)
}

// leastTime is how long two of the lane's smallest requests take at
// limit: a search doubles no sooner, since one request says nothing of a
// rate. On an index that takes fewer records a second than the smallest
// batch carries in four round trips, a search doubled at each answer and
// overshot at every other one. 0 for no limit.
func (s rateSample) leastTime(limit float64) time.Duration {
	if !(limit > 0) || math.IsInf(limit, 1) {
		return 0
	}
	return time.Duration(2 * s.least / limit * float64(time.Second))
}

// rateReason says what a rate controller did with a sample.
type rateReason int

const (
	rateHeld        rateReason = iota // unchanged: no cap, or the cap bound nothing
	rateGrew                          // followed the curve
	rateFirstCut                      // the first episode: a floor to search up from
	rateCut                           // an episode: the level is what the index accepted
	rateHalved                        // an episode with too few answers accepted to measure by: half of what was sent
	rateAtPrior                       // an episode that found the index at its known limit
	rateSameEpisode                   // a refusal of a request sent before the last cut
	rateDraining                      // a refusal while the index still refuses what came before the cut
	rateNoise                         // a refusal within the share the index refuses anyway
)

// withPrior starts c at a known limit of the index (0: none), a little
// above it so that the index's burst is taken in, and on the curve's
// plateau, so that it probes above when the limit is higher than known.
func (c *rateControl) withPrior(now time.Time, prior float64, t *tuning) {
	c.limit, c.cutAt = math.Inf(1), now
	if prior <= 0 {
		return
	}
	c.prior = prior
	c.level = prior * (1 + t.priorHeadroom)
	c.atPlateau(now)
}

// atPlateau puts the limit at the level, on the curve's plateau from now:
// it probes above from there.
func (c *rateControl) atPlateau(now time.Time) {
	c.limit, c.depth = c.level, 0
	c.origin, c.followed = now, now
}

// pause counts an outage from from to to, during which the index accepted
// nothing through no fault of the rate: it is no part of what the index
// accepted since the last cut, nor of any window a rate is measured over
// (what was sent or accepted then is the rate while the index was up).
func (c *rateControl) pause(from, to time.Time) {
	c.climbed.paused += to.Sub(from)
	c.sent.markDown(from, to)
	c.taken.markDown(from, to)
}

// rest counts from to to as time the lane rested, nothing in flight and
// no request held back: the limit held nothing back, so the curve does
// not climb over it, as follow holds it for an answer that bound nothing.
// What the index accepted is still measured over the rest: a token bucket
// refills meanwhile, and takes the burst it saved when the lane sends.
func (c *rateControl) rest(from, to time.Time) {
	// The time before followed is judged already.
	if d := to.Sub(later(from, c.followed)); d > 0 {
		c.origin, c.followed = c.origin.Add(d), c.followed.Add(d)
	}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// measured reports whether a 429 has set the limit.
func (c *rateControl) measured() bool { return c.episodes > 0 }

// capped reports whether c has a finite limit.
func (c *rateControl) capped() bool { return !math.IsInf(c.limit, 1) }

// send counts an amount sent at now.
func (c *rateControl) send(now time.Time, amount float64) { c.sent.add(now, amount) }

// answer takes one answered request and returns what it did.
func (c *rateControl) answer(s rateSample, t *tuning, floor float64) rateReason {
	c.recent.add(s.refused)
	after := s.seq > c.cutSeq
	// While the limit climbs back to what the index accepted at the last
	// cut, or the lane sends well under it, once it accepts again, a
	// token-bucket index refuses nothing: what it refuses then, it
	// refuses whatever the rate.
	if after && c.accepted > 0 && s.now.Sub(c.cutAt) >= t.drainFor && c.calm(s, t) {
		c.quiet.add(s.refused, c.episodes, t)
	}
	if !s.refused {
		c.taken.add(s.now, s.amount)
		if c.climbed.at.IsZero() && c.limit >= c.capacity {
			// Back at what the index accepted: from here to the next
			// refusal the lane sends at least that, and the index's
			// bucket overflows no more.
			c.climbed = climbed{at: s.now}
		}
		c.climbed.taken += s.amount
		c.start.taken += s.amount
		if after {
			c.accepted++
		}
		return c.follow(s, t)
	}
	if !after {
		return rateSameEpisode
	}
	since := s.now.Sub(c.cutAt)
	if c.episodes > 0 && c.accepted == 0 && since < t.drainFor {
		return rateDraining
	}
	if least, among := c.leastRefusals(t); !c.excess(t) || c.recent.within(among) < least {
		c.search.refusedAt(c.limit)
		c.endProbe(s, t)
		return rateNoise
	}
	return c.cut(s, t, floor)
}

// endProbe restarts the probe above the level at a refusal that starts no
// episode, unless the index refuses at random: then the refusal is the
// index's bucket, not its usual share, and a probe that climbed on would
// only be refused more. The level becomes what the index accepted since
// the climb, when more (a capacity that rose). A lane shared with other
// writers restarts only its own curve: the lane's is changed by cuts.
func (c *rateControl) endProbe(s rateSample, t *tuning) {
	if c.refusesAtRandom() || !c.probing() {
		return
	}
	if r, ok := c.sinceClimb(s, t); ok {
		c.level = max(c.level, r)
	}
	c.atPlateau(s.now)
}

// probing reports whether the limit probes above the level of the last
// cut.
func (c *rateControl) probing() bool {
	return c.episodes > 0 && c.capped() && !c.search.on() && c.level > 0 && c.limit > c.level
}

// climbing reports whether the limit climbs back to what the index
// accepted at the last cut.
func (c *rateControl) climbing() bool { return c.episodes > 0 && c.limit < c.capacity }

// calm reports whether an answer tells the index's usual share of
// refusals: while the limit climbs back to what the index accepted at the
// last cut, or while the lane sends less than the limit a cut sets
// (tuning.cutDepth under it) over the last window, held there by its
// concurrency or its callers, but for a refusal that follows another
// (a bucket that overflows refuses several in a row: a capacity that
// fell under what the lane sends).
func (c *rateControl) calm(s rateSample, t *tuning) bool {
	if c.climbing() {
		return true
	}
	inRow := s.refused && c.recent.inRow() // the register holds this answer
	return c.episodes > 0 && !inRow && c.sent.rateOver(s.now, s.window) < (1-t.cutDepth)*c.capacity
}

// leastRefusals is the fewest refusals, among how many of the last
// answers, that start an episode whatever the usual share: for the first,
// two in a row (a bucket that overflows refuses several in a row; refusals
// at random seldom come so); for the first, while the limit climbs back
// and while it searches up, three among the last tuning.closeAnswers (one
// among the first answers may be the index's usual share, refusals while
// climbing teach it, and a bucket that slow start, a search or a fallen
// capacity overflowed refuses some of every round trip, where refusals at
// random spread over the run; a search has learnt no share yet, and two
// such refusals in it would cut it far under the capacity); none
// otherwise.
func (c *rateControl) leastRefusals(t *tuning) (refusals, among int) {
	switch {
	case c.episodes == 0 && c.recent.inRow():
		return 2, answerSpan
	case c.episodes == 0, c.climbing(), c.search.on():
		return 3, t.closeAnswers
	}
	return 0, answerSpan
}

// excess reports whether the last answers hold more refusals than the
// index's usual share explains: so many that they would come by chance
// less than tuning.significance of the time (three among the last 64
// answers of an index that has refused nothing yet).
func (c *rateControl) excess(t *tuning) bool {
	r, n := c.recent.count()
	return poissonTail(c.noise(t)*float64(n), r) < t.significance
}

// noise is the share of answers the index refuses whatever the rate
// (see usualRefusals.share).
func (c *rateControl) noise(t *tuning) float64 { return c.quiet.share(t) }

// refusesAtRandom reports whether the index refuses at random (see
// usualRefusals.random).
func (c *rateControl) refusesAtRandom() bool { return c.quiet.random() }

// poissonTail is the chance of k or more events when lambda are expected.
func poissonTail(lambda float64, k int) float64 {
	if k <= 0 {
		return 1
	}
	term, below := math.Exp(-lambda), 0.0
	for i := 0; i < k; i++ {
		below += term
		term *= lambda / float64(i+1)
	}
	return max(0, 1-below)
}

// cut begins an episode. The level becomes what the index accepted since
// the limit climbed back to the capacity after the last cut (else over the
// last window, the least span that measures a rate, or since the first cut
// when that is shorter: afterFirstCut), which is its capacity
// when it limits with a token bucket and refuses: it accepts exactly its
// rate once its bucket is empty. The limit goes tuning.cutDepth under it,
// so that the index's bucket refills in a fraction of a second, and climbs
// back to it. Refusals that come whatever the rate do not get here
// (answer's test of their excess): they must not grind the rate down; nor
// do those that got here while the limit climbed back lower the level
// (keepsCapacity). A cut after a search takes at least √2/2 of the limit
// it doubled to, or had reached at its first refusal. The first cut goes
// to a floor (firstFloor) and searches up from there (while the lane ramps
// up, a window measures less than the index took at the end of it). With
// fewer than three answers accepted since the last cut there is nothing to
// measure by: the limit is half of what was sent, and searches up. A cut
// that does not find the index at its known limit lifts the ceiling an
// earlier one set: the index's limits changed.
func (c *rateControl) cut(s rateSample, t *tuning, floor float64) rateReason {
	accepted := c.taken.rateOver(s.now, c.afterFirstCut(s.now, s.window))
	if r, ok := c.sinceClimb(s, t); ok {
		accepted = r
	}
	sent := c.sent.rateOver(s.now, s.window)
	if c.episodes == 0 {
		c.start.firstCut = s.now
	}
	reason := rateCut
	searched := c.search
	c.search, c.ceiling = rateSearch{}, false
	switch {
	case c.accepted >= 3 && c.prior > 0 && c.atPrior(s, accepted, t):
		// The index accepted its known limit: that is its limit, a
		// token bucket of that rate; probing above it would only be
		// refused.
		reason = rateAtPrior
		c.level, c.limit, c.ceiling = c.prior, c.prior, true
	case c.episodes == 0:
		reason = rateFirstCut
		c.level, c.search.pace = c.firstFloor(s, sent, t)
		c.limit = c.level
	case c.accepted < 3:
		reason = rateHalved
		c.level, c.limit, c.search.pace = sent/2, sent/2, t.minWindow
	case searched.on():
		// A search doubled its way past the capacity within the last
		// few round trips, too fast for a window to measure: the
		// capacity is between half the limit and the limit, the limit
		// at its first refusal (rule 11c: the doublings after it, while
		// too few refusals came to cut, were past the capacity).
		c.level = max(accepted, searched.reached(c.limit)*math.Sqrt2/2)
		c.limit = c.level * (1 - t.cutDepth)
	default:
		c.level = accepted
		if c.keepsCapacity() { // the limit and capacity are still the last cut's
			c.level = max(accepted, c.capacity)
		}
		c.limit = c.level * (1 - t.cutDepth)
	}
	c.capacity = accepted
	c.limit = max(floor, c.limit)
	c.level = max(c.level, c.limit)
	c.depth = 1 - c.limit/c.level
	c.origin = s.now.Add(c.climb(t))
	c.cutAt, c.followed, c.cutSeq = s.now, s.now, s.issued
	c.accepted, c.climbed = 0, climbed{}
	c.recent = answers{}
	c.gain = 0
	c.episodes++
	return reason
}

// keepsCapacity reports whether a cut keeps the capacity measured at the
// last one as its level: its refusals came while the limit climbed back to
// that capacity, none two in a row. The lane then sent less than the
// index took before, so what the index accepted is the lane's own rate,
// and the refusals its usual share or a bucket refilling late: cut to
// them, an index that refuses at random would have its rate ratcheted
// down. A capacity that fell under what the lane sends overflows the
// bucket, which refuses several in a row, and lowers the level as before.
func (c *rateControl) keepsCapacity() bool {
	return c.climbing() && !c.recent.inRow()
}

// firstFloor is the level of the first cut, a floor to search up from,
// and the least time that search takes to double: the first refusals say
// little of the rate, the index's bucket took in the start. The floor is
// the most of half of what was sent (slow start doubled it within the
// last round trip), what the index accepted spread over at least a second
// (a bucket holds up to a second's worth), and tuning.cutDepth under what
// it accepted per second since c started, over a window at most: as close
// under a measured rate as any cut goes (over a whole window, a run
// younger than it reads diluted). A floor that is that measure is as near
// the capacity as a later cut's, and searches at its pace; the others are
// guesses, often several doublings under it (tuning.firstSearchFor).
func (c *rateControl) firstFloor(s rateSample, sent float64, t *tuning) (float64, time.Duration) {
	since := s.now.Sub(c.cutAt)
	accepted := c.taken.rateOver(s.now, min(s.window, since+meterBucket)) // the bucket c started in counts whole
	guess := max(c.start.taken/max(since, time.Second).Seconds(), sent/2)
	if measured := (1 - t.cutDepth) * accepted; measured > guess {
		return measured, t.minWindow
	}
	return guess, t.firstSearchFor
}

// afterFirstCut is window, or the time since the first cut when that is
// shorter (and a meter bucket at least): a young run's window reaches
// back to the lane's ramp and the burst the index's bucket held; by the
// first cut the bucket was empty, and what it accepted since is its rate.
func (c *rateControl) afterFirstCut(now time.Time, window time.Duration) time.Duration {
	if since := now.Sub(c.start.firstCut); since >= meterBucket && since < window { // before it, since saturates at ~292 years
		return since
	}
	return window
}

// sinceClimb is what the index accepted per second from the time the
// limit was back at the capacity of the last cut to now, and whether that
// measures it (a window or more, not after a search, which spent most of
// the time far below it). From then to a refusal the lane sent at least
// the index's rate: a token bucket accepted its rate and what it had
// saved during the climb. An average more than a cut's depth above that
// capacity says the capacity rose during the climb, and averages the
// ramp to it: the rate over the span's second half is the index's then,
// when higher.
func (c *rateControl) sinceClimb(s rateSample, t *tuning) (float64, bool) {
	since := s.now.Sub(c.climbed.at) - c.climbed.paused
	if c.climbed.at.IsZero() || since < s.window || c.episodes == 0 || c.search.on() {
		return 0, false
	}
	accepted := c.climbed.taken / since.Seconds()
	if accepted > (1+t.cutDepth)*c.capacity {
		accepted = max(accepted, c.taken.rateOver(s.now, max(s.window, since/2)))
	}
	return accepted, true
}

// atPrior reports whether what the index accepted, since the last climb
// or over the last window, is its known limit.
func (c *rateControl) atPrior(s rateSample, accepted float64, t *tuning) bool {
	for _, r := range []float64{accepted, c.taken.rateOver(s.now, s.window)} {
		if math.Abs(r-c.prior) <= t.priorMatch*c.prior {
			return true
		}
	}
	return false
}

// climb is how long the curve takes from the cut back to the level: a
// recovery for a cut of tuning.recoveryDepth, more for a deeper one, as
// the cube root of the depth (CUBIC's K).
func (c *rateControl) climb(t *tuning) time.Duration {
	return time.Duration(float64(t.recovery) * math.Cbrt(max(c.depth, 1e-3)/t.recoveryDepth))
}

// follow moves the limit along the curve while it holds requests back;
// otherwise it holds the curve where it is, by shifting its origin.
func (c *rateControl) follow(s rateSample, t *tuning) rateReason {
	now := s.now
	if !c.capped() || c.level <= 0 {
		return rateHeld
	}
	if !s.bound {
		c.origin = c.origin.Add(now.Sub(c.followed))
		c.followed = now
		return rateHeld
	}
	if c.search.on() {
		// Nothing measured: double every few round trips (and two of
		// the smallest requests) while bound, as slow start does every
		// round trip, until the next episode; at most once between two
		// answers, since a gap without answers (a request waiting for
		// its tokens) measures nothing.
		period := max(s.doubling, c.search.pace, s.leastTime(c.limit))
		c.limit *= math.Exp2(min(1, now.Sub(c.followed).Seconds()/period.Seconds()))
		c.level = max(c.level, c.limit)
		c.followed = now
		return rateGrew
	}
	c.followed = now
	c.limit = c.curve(now, t)
	if c.ceiling {
		c.limit = min(c.limit, c.prior)
	}
	if c.outgrown(t) {
		c.level, c.search = c.limit, rateSearch{pace: t.recovery}
	}
	return rateGrew
}

// outgrown reports whether the probe has reached tuning.probeSearch times
// the level of the last cut, no refusal restarting it: the capacity rose.
// The level becomes the limit, which searches up (doubling no sooner than
// once a recovery) as after the first cut, and a refusal then cuts from
// what the search reached (rule 10 of docs/limiter.md) instead of
// restarting the probe from the old level. A known limit the index was
// found at caps the probe instead.
func (c *rateControl) outgrown(t *tuning) bool {
	return !c.ceiling && c.episodes > 0 && c.level > 0 && c.limit >= t.probeSearch*c.level
}

// curve is the limit at now: from the cut (at the origin plus the climb
// before it) it climbs fast, flattens as it nears the level, then rises
// ever faster above it, by tuning.probeGain of the level one recovery
// past it. A time before the cut (a caller's clock read before another's
// cut took the lock) is at the cut's limit: below it, the curve would reach
// zero and under, and a limit of zero waits for ever.
func (c *rateControl) curve(now time.Time, t *tuning) float64 {
	x := now.Sub(c.origin).Seconds() / t.recovery.Seconds()
	if x < 0 {
		k := c.climb(t).Seconds() / t.recovery.Seconds()
		y := min(-x/k, 1)
		return c.level * (1 - c.depth*y*y*y)
	}
	gain := t.probeGain
	if c.gain > 0 {
		gain = c.gain
	}
	return c.level * (1 + gain*x*x*x)
}
