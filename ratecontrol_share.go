package upsert

import (
	"math"
	"time"

	"github.com/upsertlib/upsert/internal/share"
)

// A lane shared across processes keeps its controllers in local terms:
// every rate is this writer's fraction of the lane's (records, requests
// and bytes alike, so that Pinecone's per-namespace caps are split as the
// record rate is). The curve is linear in its level, so fraction × the
// lane's curve is the curve of fraction × its anchors: a writer evaluates
// the lane's curve by following its own.

// scale multiplies every rate c holds by k (a change of the writer's
// fraction of the lane); what it measured stays as measured.
func (c *rateControl) scale(k float64) {
	if !(k > 0) || math.IsInf(k, 0) || k == 1 {
		return
	}
	c.limit *= k // +Inf stays +Inf
	c.level *= k
	c.capacity *= k
	c.prior *= k
}

// anchors returns c's curve in the lane's terms (c's rates over frac),
// as a proposal for the episode that c just cut; a search (nothing
// measured to climb back to) is a Recovery of 0.
func (c *rateControl) anchors(frac float64) (rate, level float64, recovery time.Duration) {
	if c.search.on() {
		return c.limit / frac, c.level / frac, 0
	}
	return c.limit / frac, c.level / frac, max(0, c.origin.Sub(c.cutAt))
}

// adopt makes the lane's last cut (v, in the lane's terms) c's own, as if
// c had cut at v.CutAt, with frac of it: requests admitted up to issued
// belong to that episode; a Recovery of 0 is a search (see anchors). A
// writer that joins late starts on the curve
// where it is now, but not above the level: the probe above is for the
// writers whose answers measure it.
func (c *rateControl) adopt(now time.Time, v share.View, frac float64, issued uint64, t *tuning) {
	rate, level := v.Rate*frac, max(v.Level, v.Rate)*frac
	c.search = rateSearch{}
	if v.Recovery <= 0 {
		c.search.pace = t.minWindow
		if c.episodes == 0 {
			c.search.pace = t.firstSearchFor // the pace of a floor, unknown to the view: a guess's
		}
	}
	c.level, c.depth = level, 0
	if level > 0 {
		c.depth = 1 - rate/level
	}
	// The climb back is this writer's tuning's for the cut's depth (the
	// proposer's too, when they run one version), so that the curve
	// starts at the cut's rate whatever Recovery says.
	c.origin = v.CutAt.Add(c.climb(t))
	c.limit = rate
	if !c.search.on() {
		c.limit = max(rate, min(level, c.curve(now, t)))
	}
	c.capacity = level
	c.cutAt, c.followed, c.cutSeq = v.CutAt, now, issued
	c.accepted, c.climbed = 0, climbed{}
	c.recent = answers{}
	c.ceiling, c.gain = false, 0
	c.episodes++
}

// viewCurve is the lane's rate at now by the anchors of v (+Inf before the
// first cut), in the lane's terms.
func viewCurve(v share.View, now time.Time, t *tuning) float64 {
	if v.Epoch == 0 || math.IsInf(v.Rate, 1) {
		return math.Inf(1)
	}
	var c rateControl
	c.adopt(now, v, 1, 0, t)
	return c.limit
}

// episodeCount is how many refusals, among how many of the lane's last
// answers, c's own rules call an episode: the fewest (leastRefusals, and
// at least two; two for a lane's first episode, whose writers' refusals
// come in no one row) that the index's usual share explains less than
// tuning.significance of the time among some answerSpan/2 to answerSpan
// answers, and the most answers that holds for. Two refusals close
// together say as much as three spread wider, and each one the lane waits
// for is a request refused; no fewer than answerSpan/2, as the lane
// counts them over a time this writer estimates from its own request
// rate, too rough over a few answers.
func (c *rateControl) episodeCount(t *tuning) (refusals, answers int) {
	least := 2
	if c.episodes > 0 {
		r, _ := c.leastRefusals(t) // the lane counts over its own span
		least = max(2, r)
	}
	noise := c.noise(t)
	for r := least; r < answerSpan; r++ {
		if poissonTail(noise*answerSpan/2, r) >= t.significance {
			continue // too common by chance among the fewest answers, so among any
		}
		n := answerSpan
		for poissonTail(noise*float64(n), r) >= t.significance {
			n-- // the tail falls with the answers: it holds at answerSpan/2
		}
		return r, n
	}
	return answerSpan, answerSpan
}

// hold lowers c's search to most (its limit, and the level that follows
// it), and reports whether it did.
func (c *rateControl) hold(most float64) bool {
	if !c.search.on() || !(most > 0) || c.limit <= most {
		return false
	}
	c.limit, c.level = most, min(c.level, most)
	return true
}

// alone keeps c's curve at its part of the lane's when the writer no
// longer hears the others, and probes above it fast enough to reach the
// lane's level two recoveries past it (gain × 2³ = 1/frac − 1): the
// writers it shared with most likely still run (Redis failed, not they),
// so their parts stay right, but once they finish it must not stay at its
// part. A probe under way goes on from the limit it reached.
func (c *rateControl) alone(now time.Time, frac float64, t *tuning) {
	if !(frac > 0) || frac >= 1 {
		return
	}
	c.prior /= frac
	if !c.capped() || c.level <= 0 || c.search.on() {
		return // a search doubles from its limit, whatever the level
	}
	c.gain = max(t.probeGain, (1/frac-1)/8)
	if c.limit > c.level {
		x := math.Cbrt((c.limit/c.level - 1) / c.gain)
		c.origin = now.Add(-time.Duration(x * float64(t.recovery)))
	}
}

// rejoin undoes alone (given the same frac) when the writer shares again:
// its known limit of the namespace is its part again (alone made it
// whole; left so, every fallback would multiply it), and a fast
// probe under way goes on from the limit it reached at the usual gain,
// whether or not the lane has a cut to adopt.
func (c *rateControl) rejoin(now time.Time, frac float64, t *tuning) {
	if !(frac > 0) || frac >= 1 {
		return
	}
	c.prior *= frac
	if c.gain == 0 {
		return
	}
	c.gain = 0
	if c.limit > c.level && c.level > 0 {
		x := math.Cbrt((c.limit/c.level - 1) / t.probeGain)
		c.origin = now.Add(-time.Duration(x * float64(t.recovery)))
	}
}
