package upsert

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/upsertlib/upsert/internal/share"
)

// laneShare is a lane's membership of the lane of the same index host and
// namespace that writers in other processes share (docs/redis-sharing.md,
// "How the limiter plugs in"). The hot path stays local: a request makes
// no round trip, it only counts what the index accepted and what this
// writer could send (an atomic add and store in the member). The lane adopts the
// shared view when it changes (watchShare), proposes its 429 episodes'
// cuts and its breaker's changes outside its mutex (flushShare), and goes
// on alone, exactly as without sharing, while the view is not Shared.
// Fields are guarded by the lane's mutex.
type laneShare struct {
	m      share.Member // nil while no run shares the lane
	users  int          // runs sharing it
	stats  *shareCounters
	frac   float64 // this writer's fraction of the lane's rates that the controllers hold; 0 means 1
	epoch  uint64  // the lane's episode whose cut the lane's curves come from
	shared bool    // the last view was Shared
	// cutAlone is set when the lane cut a rate (cutDim) while the shared
	// state did not answer: at the rejoin it proposes that cut if it is
	// below its part of the lane's rate, so that the others learn it.
	cutAlone bool
	cutDim   int
	// markedIn is the lane's outage (its OpenSince, as the views show it)
	// this writer reported itself in (queueBreaker(true)); zero once a
	// view showed the lane without one, or none was known when it
	// reported (its own breaker opened it: the next view dates it). The
	// store keeps the lane's outage while a writer that reported itself
	// in it within share.OutageLapse is live (share.Member.Breaker). A
	// writer whose breaker is open reports itself at its first failure in
	// an outage of the lane's other than markedIn (lane.joinsSharedOutage):
	// one it heard, or one that replaced the outage it was in between two
	// views (closed by an answer to another writer, opened by a third's
	// breaker); and, in the outage it marked itself in, at a failure once
	// reportedAt is share.OutageRenewal old (outageRenewalDue), so that
	// the outage lasts as long as a writer still fails in it, and no
	// longer.
	markedIn time.Time
	// reportedAt is when this writer last reported its breaker open
	// (queueBreaker(true)), on the lane's clock.
	reportedAt time.Time
	// aloneFrac is the fraction goAlone made the controllers' known
	// limits whole by (rateControl.alone), until the lane shares again;
	// 0 while they hold this writer's part.
	aloneFrac  float64
	pending    []func() // round trips to the store, made outside the mutex
	flushing   bool     // a goroutine is making them (flushShare)
	stop, done chan struct{}
}

// joinShare makes ln a member of lane through s, once however many runs
// share ln, and returns the function that ends this run's use of it (the
// last one out leaves the lane). Join makes one round trip, bounded by the
// store's timeout; it never fails (a store that does not answer leaves the
// lane alone until it does).
func (ln *lane) joinShare(ctx context.Context, s share.Store, lane share.Lane, stats *shareCounters) (leave func()) {
	ln.shareSync.joinMu.Lock()
	defer ln.shareSync.joinMu.Unlock()
	ln.mu.Lock()
	sh := &ln.share
	if sh.m == nil {
		ln.mu.Unlock()
		m := s.Join(ctx, lane) // not under mu: requests of other runs go on
		ln.mu.Lock()
		sh.m, sh.stats, sh.shared = m, stats, true
		// A new membership counts the lane's episodes afresh: the lane's
		// keys may have been dropped since an earlier one (a Limiter kept
		// between calls), and its epochs started over.
		sh.epoch, sh.cutAlone, sh.markedIn, sh.reportedAt = 0, false, time.Time{}, time.Time{}
		// Nor did it hear any outage yet: an earlier membership's, whose
		// keys were dropped since, has not ended (applyView's sharedBack).
		ln.breaker.shared.openSince, ln.breaker.shared.answered = time.Time{}, false
		sh.stop, sh.done = make(chan struct{}), make(chan struct{})
		v := m.View()
		ln.applyView(v)
		ln.proposeHeld(v)
		go ln.watchShare(m, sh.stop, sh.done)
	}
	sh.users++
	ln.mu.Unlock()
	ln.flushShare()
	return sync.OnceFunc(ln.leaveShare)
}

// proposeHeld proposes, to a lane whose shared state holds no cut and no
// other writer (its keys were dropped when its last writer left: a route
// of this process that stepped out, a Limiter kept between calls), the cut
// and the Retry-After this lane still enforces, and its breaker's outage
// if failures still bear it out, so that the writers that join share them
// rather than start at the full rate; ln.mu is held, v being the new
// membership's first view. A lane that other writers send through without
// a cut is no lane that forgot: their answers are newer than this lane's.
func (ln *lane) proposeHeld(v share.View) {
	if !v.Shared || v.Writers > 1 {
		return
	}
	now := ln.clock.Now()
	if dim := ln.heldCut(); v.Epoch == 0 && dim >= 0 {
		rate, level, recovery := ln.dims[dim].ctl.anchors(ln.share.frac)
		c := share.Cut{Sent: now, Unit: share.Unit(dim), Rate: rate, Level: level, Recovery: recovery}
		if pause := ln.pushback.until.Sub(now); pause > 0 && !v.PausedUntil.After(now) {
			c.RetryAfter = pause
		}
		ln.queueCut(c)
	}
	ln.hearHostBack()
	ln.proposeOutage(v, now)
}

// proposeOutage proposes the outage that failures still bear out to a
// lane state that holds none: the store never heard of it (its keys were
// dropped, or it was out of reach when the breaker opened); ln.mu is held.
func (ln *lane) proposeOutage(v share.View, now time.Time) {
	if v.OpenSince.IsZero() && ln.breaker.current(now) {
		ln.queueBreaker(true)
	}
}

// heldCut is the rate the lane cut last, of those a 429 capped, or -1;
// ln.mu is held.
func (ln *lane) heldCut() int {
	dim := -1
	for i := range ln.dims {
		c := &ln.dims[i].ctl
		if c.capped() && c.measured() && (dim < 0 || c.cutAt.After(ln.dims[dim].ctl.cutAt)) {
			dim = i
		}
	}
	return dim
}

// leaveShare ends one run's use of the membership; the last one leaves.
func (ln *lane) leaveShare() {
	ln.shareSync.joinMu.Lock()
	defer ln.shareSync.joinMu.Unlock()
	ln.mu.Lock()
	sh := &ln.share
	if sh.users--; sh.users > 0 {
		ln.mu.Unlock()
		return
	}
	m, stop, done := sh.m, sh.stop, sh.done
	sh.m, sh.pending = nil, nil
	ln.shareSync.pending.Store(false)
	ln.mu.Unlock()
	close(stop)
	<-done
	_ = m.Leave(context.Background()) // bounded by the store's timeout; else the heartbeat expires
}

// watchShare applies the member's view each time it changes, and reports
// the writer's demand every shareDemandEvery, until stop.
func (ln *lane) watchShare(m share.Member, stop, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(ln.tuning.shareDemandEvery)
	defer tick.Stop()
	for {
		changed := m.Changed() // before View: a change in between is not missed
		ln.mu.Lock()
		if ln.share.m == m {
			ln.applyView(m.View())
		}
		ln.mu.Unlock()
		ln.flushShare()
		for waiting := true; waiting; {
			select {
			case <-changed:
				waiting = false
			case <-tick.C:
				ln.reportDemand(m)
			case <-stop:
				return
			}
		}
	}
}

// applyView takes the lane's view; ln.mu is held. A view that is not
// Shared changes nothing: the controllers go on alone from their part of
// the last one.
func (ln *lane) applyView(v share.View) {
	sh := &ln.share
	now := ln.clock.Now()
	if !v.Shared {
		if sh.shared {
			sh.shared = false
			sh.stats.fallbacks.Add(1)
			ln.goAlone(now)
			sh.markedIn = time.Time{} // the store may drop it meanwhile (its heartbeat expires)
		}
		return
	}
	rejoined := !sh.shared
	if rejoined {
		sh.shared = true
		sh.stats.rejoins.Add(1)
	}
	ln.shareAgain(now) // before setFraction: alone's rates are in terms of the fraction it left with
	ln.setFraction(ln.shareFraction(v), now)
	own := ln.dims[sh.cutDim].ctl.limit
	switch {
	case rejoined && sh.cutAlone && (share.Unit(sh.cutDim) != v.Unit || own < sh.frac*viewCurve(v, now, ln.tuning)):
		rate, level, recovery := ln.dims[sh.cutDim].ctl.anchors(sh.frac)
		ln.queueCut(share.Cut{Seen: v.Epoch, Sent: now, Unit: share.Unit(sh.cutDim), Rate: rate, Level: level, Recovery: recovery})
	case v.Epoch > sh.epoch || (rejoined && v.Epoch > 0):
		ln.adoptCut(v, now)
	}
	if rejoined {
		sh.cutAlone = false
	}
	if v.PausedUntil.After(ln.pushback.until) {
		ln.pushback.until = v.PausedUntil
		ln.signals.rates.fire()
	}
	ln.applyOutage(v, now, rejoined)
}

// applyOutage applies what a view says of an outage of the index: the
// breaker shared by the lane's writers (docs/redis-sharing.md).
func (ln *lane) applyOutage(v share.View, now time.Time, rejoined bool) {
	openSince, heardOpen := v.OpenSince, ln.breaker.shared.openSince
	if openSince.IsZero() {
		ln.share.markedIn = time.Time{} // the store counts no writer in an outage it does not hold
	}
	if !openSince.IsZero() && ln.breaker.answeredSince(openSince) {
		// This writer's own answers show the outage over (it saw it end
		// while the store was out of reach, or the writer that opened it
		// cannot reach the index): it says so rather than reopen, and an
		// open breaker is a later outage's, which it proposes.
		openSince = time.Time{}
		ln.queueBreaker(false)
		if ln.breaker.open {
			ln.queueBreaker(true)
		}
	} else if openSince.IsZero() && !heardOpen.IsZero() && v.Answered && ln.breaker.open {
		ln.sharedBack(now) // a close says answered; keys dropped and made again do not
	}
	if openSince.IsZero() && ln.breaker.unheard() {
		// The lane's outage, which alone opened this breaker, is over
		// for the lane's writers: this writer goes on as one that joins
		// now (breaker.unheard), its host told as by an answer above.
		ln.signals.breaker.fire()
		ln.tellHost()
	}
	if rejoined {
		ln.proposeOutage(v, now) // one that opened while the store was out of reach
	}
	if !openSince.IsZero() && !ln.breaker.open {
		ln.heardOpen() // it may open: its first probe takes its share of the host's pace
	}
	if ln.breaker.heard(now, openSince, v.Answered) {
		ln.signals.breaker.fire()
		ln.tellHost()
	}
	if v.OpenSince.IsZero() && ln.breaker.open && ln.host != nil {
		// The lane's writers saw the outage end: its breaker no longer
		// slows the host's others, unless it fails again (tellHost).
		ln.host.mu.Lock()
		ln.host.setOpen(ln, false, time.Time{})
		ln.host.mu.Unlock()
	}
}

// sharedBack takes the end of the lane's outage that another writer saw
// (the index answered it), as an answer to another namespace of the host
// is taken: the verdict is stale, and the host's open breakers, this one
// too, probe at once; ln.mu is held.
func (ln *lane) sharedBack(now time.Time) {
	if ln.host != nil {
		ln.host.closed(ln, now)
	}
	if ln.breaker.hostBack(now, now) {
		ln.signals.breaker.fire()
	}
}

// goAlone makes the lane a writer without sharing, climbing from its part
// of the lane's rates to the whole (rateControl.alone); ln.mu is held. At
// the rejoin it adopts its part of the lane's curve again.
func (ln *lane) goAlone(now time.Time) {
	sh := &ln.share
	if sh.frac == 0 || sh.frac >= 1 || sh.aloneFrac > 0 {
		return // nothing shared, or alone already (a new membership that found no store)
	}
	sh.aloneFrac = sh.frac
	for i := range ln.dims {
		ln.dims[i].ctl.alone(now, sh.frac, ln.tuning)
		ln.dims[i].apply(now, ln.tuning)
	}
	ln.signals.rates.fire()
}

// shareAgain undoes goAlone when the lane shares again, whatever the
// lane's epoch (adoptCut resets only the rate a cut names), or at a new
// membership that found the store after one that left alone; ln.mu is
// held.
func (ln *lane) shareAgain(now time.Time) {
	sh := &ln.share
	if sh.aloneFrac == 0 {
		return
	}
	for i := range ln.dims {
		ln.dims[i].ctl.rejoin(now, sh.aloneFrac, ln.tuning)
		ln.dims[i].apply(now, ln.tuning)
	}
	sh.aloneFrac = 0
	ln.signals.rates.fire()
}

// adoptCut makes the lane's last cut that of the rate it names; ln.mu is
// held. Permits issued so far belong to that episode, as after a cut of
// its own.
func (ln *lane) adoptCut(v share.View, now time.Time) {
	if v.Unit < 0 || int(v.Unit) >= dimCount {
		return // a unit of a later version: nothing to adopt it into
	}
	d := &ln.dims[v.Unit]
	d.ctl.adopt(now, v, ln.share.frac, ln.use.issued, ln.tuning)
	d.apply(now, ln.tuning)
	ln.share.epoch = v.Epoch
	ln.pushback.cuts++
	ln.signals.rates.fire()
}

// setFraction scales every rate of the lane to frac of the lane's (the
// record rate, and Pinecone's per-namespace request and byte caps alike);
// ln.mu is held.
func (ln *lane) setFraction(frac float64, now time.Time) {
	sh := &ln.share
	if sh.frac == 0 {
		sh.frac = 1
	}
	k := frac / sh.frac
	if math.Abs(k-1) < 1e-3 {
		return
	}
	for i := range ln.dims {
		ln.dims[i].ctl.scale(k)
		ln.dims[i].apply(now, ln.tuning)
	}
	sh.frac = frac
	ln.signals.rates.fire() // the head reserves again at its new part
}

// shareFraction is this writer's part of the lane's rate in v, as a
// fraction: by demand (records per second) once the lane has a level (in
// records, as this lane's records measure its unit; see View.Allocation);
// before, an equal split among the writers that send at all (a total of 1
// record a second, below every sending writer's demand: nothing is capped
// yet), within [leastShare, 1]. ln.mu is held.
func (ln *lane) shareFraction(v share.View) float64 {
	total := v.Level
	switch v.Unit {
	case share.UnitRequests:
		total *= float64(ln.seen.size)
	case share.UnitBytes:
		if ln.seen.recordBytes > 0 {
			total /= ln.seen.recordBytes
		} else {
			total = 0 // nothing sent yet to measure by
		}
	}
	if v.Epoch == 0 || !(total > 0) || math.IsInf(total, 1) {
		total = 1
	}
	return min(1, max(ln.leastShare(v), v.Allocation(total)/total))
}

// leastShare is the least part a writer of the lane holds: tuning.minShare,
// so that a writer is not starved while its demand catches up, but no more
// than an even split, or more writers than 1/minShare would together hold
// more than the lane.
func (ln *lane) leastShare(v share.View) float64 {
	return min(ln.tuning.minShare, 1/float64(max(1, v.Writers)))
}

// reportShare tells the member what a request's answer says, without I/O:
// the records the index accepted, and the writer's demand (+Inf while a
// rate holds requests back, else tuning.shareHeadroom times what it
// sends). ln.mu is held.
func (ln *lane) reportShare(p permit, now time.Time, window time.Duration, class Class) {
	m := ln.share.m
	if m == nil {
		return
	}
	if class == 0 {
		m.Accepted(p.n)
	}
	if f := ln.share.frac; f > 0 && f < 1 {
		// Batches are sized by the lane's rates (sizeCaps): a burst
		// below one makes every request wait, and the rate look binding.
		size := ln.seen.size
		ln.dims[dimRecords].least, ln.dims[dimRequests].least = size, 1
		ln.dims[dimBytes].least = int(float64(size) * ln.seen.recordBytes)
		ln.holdSearches(now, window)
	}
	m.Demand(ln.demand(now))
}

// demand is the writer's demand of the lane, records a second: +Inf while
// a rate held requests back within boundFor, else shareHeadroom times what
// it sent over the meter's span, which falls to 0 within the span once it
// sends nothing. ln.mu is held.
func (ln *lane) demand(now time.Time) float64 {
	for i := range ln.dims {
		if now.Sub(ln.dims[i].waited) < ln.tuning.boundFor {
			return math.Inf(1)
		}
	}
	return ln.tuning.shareHeadroom * ln.dims[dimRecords].ctl.sent.rateOver(now, meterSpan)
}

// reportHeldBack tells the lane's member, if shared, that a rate holds a
// request back (the demand is +Inf) now rather than at the next answer: a
// writer back from quiet has the least part, and its first request may
// wait long for it. ln.mu is held.
func (ln *lane) reportHeldBack() {
	if m := ln.share.m; m != nil {
		m.Demand(math.Inf(1))
	}
}

// reportDemand reports the writer's demand to m, the lane's member, between
// answers: without answers a writer that went quiet would hold the part it
// last asked for, and the lane's other writers would be held to the rest.
func (ln *lane) reportDemand(m share.Member) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.share.m == m {
		m.Demand(ln.demand(ln.clock.Now()))
	}
}

// holdSearches keeps each searching rate of a shared lane within twice
// what the writer sends, or its part of what the lane got accepted over
// the last second if more: its tokens bind for a second after its bucket
// starts empty however little it sends, and a search doubles while they
// do, far past what the lane sent; but a writer that ramped up slower
// than the others is held by the lane's pace, not its own. A writer that
// sends more than its part of what the lane sends is held within twice
// its part (searchPace): the lane's search doubles the lane's rate, not
// each writer's lead. ln.mu is held.
func (ln *lane) holdSearches(now time.Time, w time.Duration) {
	var v *share.View // loaded for the first search: reportShare runs per answer
	var k float64
	for i := range ln.dims {
		d := &ln.dims[i]
		if !d.ctl.search.on() {
			continue // hold lowers only a search
		}
		if v == nil {
			view := ln.share.m.View()
			v, k = &view, ln.laneMultiple(now, view)
		}
		if d.ctl.hold(max(ln.floorOf(i), 2*ln.searchPace(now, w, *v, i, k))) {
			d.apply(now, ln.tuning)
		}
	}
}

// searchPace is what a search of rate dim, shared by the lane, may
// double: what the writer sends over w, or its part of what the lane got
// accepted lately when more; but at most its part of what the lane sends
// now (what it sends, times k, laneMultiple), when k is known (above 0)
// and that is less. ln.mu is held.
func (ln *lane) searchPace(now time.Time, w time.Duration, v share.View, dim int, k float64) float64 {
	frac := ln.share.frac
	own := ln.dims[dim].ctl.sent.rateOver(now, w)
	lane := ln.laneRecent(v, dim)
	pace := max(own, frac*lane)
	if k > 0 {
		pace = min(pace, frac*max(lane, k*own))
	}
	return pace
}

// laneMultiple is how many times the records this writer got accepted
// over v.RecentSpan the lane's writers got accepted (at least 1), or 0
// while either is unmeasured. ln.mu is held.
func (ln *lane) laneMultiple(now time.Time, v share.View) float64 {
	lane := ln.laneRecent(v, dimRecords)
	own := ln.dims[dimRecords].ctl.taken.rateOver(now, v.RecentSpan)
	if !(lane > 0) || !(own > 0) {
		return 0
	}
	return max(1, lane/own)
}

// shareCut proposes the cut of rate dim that the lane just made for p's
// 429 (e; searched: the rate was searching up before it) to the lane's
// other writers, or notes that it was made alone; ln.mu is held.
func (ln *lane) shareCut(p permit, e *Error, dim int, searched bool) {
	sh := &ln.share
	if sh.m == nil {
		return
	}
	if !sh.shared {
		sh.cutAlone, sh.cutDim = true, dim
		return
	}
	ln.queueCut(ln.proposal(p, e, dim, &ln.dims[dim].ctl, searched))
}

// shareRefusal counts p's 429 (e, refusing rate dim; s its sample), which
// this writer's own answers do not call an episode, towards the lane's:
// a writer sees its part of the lane's answers, so its own count of
// refusals reaches the episode's only after up to that many times more
// of the lane's. The proposal is the cut the writer would make now, made
// when the refusal completes the lane's count. ln.mu is held.
func (ln *lane) shareRefusal(p permit, e *Error, dim int, s rateSample) {
	sh := &ln.share
	if sh.m == nil || !sh.shared || p.epoch != sh.epoch || sh.frac >= 1 {
		return // alone, or a request sent before the lane's last cut
	}
	d := &ln.dims[dim]
	trial := d.ctl // a copy: the cut is made only if the lane's count is complete
	reason := trial.cut(s, ln.tuning, ln.floorOf(dim))
	c := ln.proposal(p, e, dim, &trial, d.ctl.search.on() && reason != rateAtPrior)
	refusals, answers := d.ctl.episodeCount(ln.tuning)
	c.Refusals, c.Window = refusals, ln.laneAnswersSpan(s.now, answers)
	ln.queueCut(c)
}

// proposal is the cut c (rate dim's controller, just cut for p's 429 e;
// searched: it was searching up before) in the lane's terms; ln.mu is
// held.
func (ln *lane) proposal(p permit, e *Error, dim int, c *rateControl, searched bool) share.Cut {
	sh := &ln.share
	v := sh.m.View()
	rate, level, recovery := c.anchors(ln.measuredShare(v))
	if first := ln.laneFirst(v, dim); first > level {
		// The lane's first episode: this writer may have started last,
		// and sent little of what the lane sent.
		rate, level = first, first
	}
	lane := ln.laneAccepted(v, dim)
	if measured := max(lane, ln.laneRecent(v, dim)); measured > 0 && (searched || recovery == 0 && c.episodes > 1) {
		// A cut after a search, or a halving (too few of its own
		// answers since the cut to measure by): the lane's answers
		// measure the index, and a search's limit does not (the
		// writers' parts of it bind nothing). Since the cut they count
		// the search's climb too (and measure nothing the first
		// moments after it); lately, the index refusing, its rate and
		// what its bucket had left.
		lane = measured
		t := ln.tuning
		climb := rateControl{depth: t.cutDepth}
		return ln.cutOf(p, e, dim, lane*(1-t.cutDepth), lane, climb.climb(t))
	}
	if lane > level && recovery > 0 {
		// The writer sent less than its part (another rate, or its
		// backoffs, held it back): what every writer got accepted is
		// the better measure of the index, and its own would ratchet
		// the lane down.
		rate, level = rate*lane/level, lane
	}
	return ln.cutOf(p, e, dim, rate, level, recovery)
}

// cutOf is the proposal of these anchors for p's 429 e; ln.mu is held.
func (ln *lane) cutOf(p permit, e *Error, dim int, rate, level float64, recovery time.Duration) share.Cut {
	return share.Cut{
		Seen: p.epoch, Sent: p.start, MinGap: time.Duration(ln.seen.roundTrip),
		Unit: share.Unit(dim), Rate: rate, Level: level, Recovery: recovery, RetryAfter: e.RetryAfter,
	}
}

// measuredShare is this writer's part of what the index accepted from
// the lane since the last cut (when its meter spans that time), else its
// fraction: its own measures are that part of the lane's, and writers
// ramping up at different paces send far from their fractions. ln.mu is
// held.
func (ln *lane) measuredShare(v share.View) float64 {
	frac := ln.share.frac
	lane := ln.laneAccepted(v, dimRecords)
	now := ln.clock.Now()
	span := now.Sub(v.AcceptedSince)
	if !(lane > 0) || span > meterSpan {
		return frac
	}
	own := ln.dims[dimRecords].ctl.taken.rateOver(now, span)
	if !(own > 0) {
		return frac
	}
	return min(1, max(ln.leastShare(v), own/lane))
}

// laneAnswersSpan is how long the lane's writers take to give n answers,
// by this writer's request rate over its fraction; ln.mu is held.
func (ln *lane) laneAnswersSpan(now time.Time, n int) time.Duration {
	r := ln.dims[dimRequests].ctl.sent.rateOver(now, meterSpan) / ln.share.frac
	if !(r > 0) {
		return meterSpan
	}
	return time.Duration(float64(n) / r * float64(time.Second))
}

// laneAccepted is what the index accepted from all the lane's writers per
// second since the last cut (v.Accepted, reported at each writer's
// exchanges), in the unit of rate dim, or 0 over less than
// tuning.shareMeasureFor: over a shorter span the exchanges' lag counts
// for too much. ln.mu is held.
func (ln *lane) laneAccepted(v share.View, dim int) float64 {
	span := ln.clock.Now().Sub(v.AcceptedSince)
	if !v.Shared || v.Epoch == 0 || v.AcceptedSince.IsZero() || span < ln.tuning.shareMeasureFor {
		return 0
	}
	return ln.inUnit(float64(v.Accepted)/span.Seconds(), dim)
}

// laneRecent is what the index accepted from all the lane's writers per
// second over the last second or so (v.Recent), in the unit of rate dim,
// or 0 over less than tuning.shareMeasureFor. ln.mu is held.
func (ln *lane) laneRecent(v share.View, dim int) float64 {
	if !v.Shared || v.RecentSpan < ln.tuning.shareMeasureFor {
		return 0
	}
	return ln.inUnit(float64(v.Recent)/v.RecentSpan.Seconds(), dim)
}

// laneFirst is, before the lane's first cut, rateFirstCut's floor for the
// lane: what the index accepted from all its writers since the lane
// started, spread over at least a second (a bucket holds up to a second's
// worth), or half of it over that span (until the first refusals the
// index accepted what was sent, and slow start doubled it within the last
// round trip), in the unit of rate dim; 0 after the first cut. ln.mu is
// held.
func (ln *lane) laneFirst(v share.View, dim int) float64 {
	if !v.Shared || v.Epoch > 0 || v.AcceptedSince.IsZero() {
		return 0
	}
	span := ln.clock.Now().Sub(v.AcceptedSince)
	n := float64(v.Accepted)
	spread := n / max(time.Second, span).Seconds()
	sent := n / max(ln.tuning.minWindow, span).Seconds() / 2
	return ln.inUnit(max(spread, sent), dim)
}

// inUnit converts records per second to the unit of rate dim, by the
// sizes this lane's requests had; ln.mu is held.
func (ln *lane) inUnit(records float64, dim int) float64 {
	switch dim {
	case dimRequests:
		return records / float64(max(1, ln.seen.size))
	case dimBytes:
		return records * ln.seen.recordBytes
	}
	return records
}

// queueCut queues the proposal c, to be sent outside the mutex; ln.mu is
// held. The lane's cut then replaces this writer's, whether it is c or
// the cut of the episode c belonged to; if the store does not answer,
// the writer's own cut stands.
func (ln *lane) queueCut(c share.Cut) {
	m := ln.share.m
	ln.queueShare(func() {
		v, _, err := m.Cut(context.Background(), c)
		ln.mu.Lock()
		defer ln.mu.Unlock()
		sh := &ln.share
		switch {
		case sh.m != m:
		case err != nil && c.Refusals > 1:
			// Not cut by this writer: nothing to propose at the rejoin.
		case err != nil:
			sh.cutAlone, sh.cutDim = true, int(c.Unit)
		case c.Refusals > 1 && v.Epoch <= sh.epoch:
			// Counted, no episode yet: the writer's curve goes on.
		case v.Epoch < sh.epoch:
			// The watcher applied a later episode's cut while the
			// proposal was out: this answer is older.
		case v.Epoch > 0:
			// Applied (this writer's proposal, which the lane's
			// measure may have raised) or not (the episode's cut
			// by another): the lane's cut becomes this lane's.
			ln.adoptCut(v, ln.clock.Now())
		}
	})
}

// queueBreaker tells the lane's other writers that this writer's breaker
// opened or closed; ln.mu is held. The view it brings back is applied by
// watchShare, as any change.
func (ln *lane) queueBreaker(open bool) {
	sh := &ln.share
	if sh.m == nil || !sh.shared {
		return
	}
	m := sh.m
	if open {
		sh.markedIn, sh.reportedAt = ln.breaker.shared.openSince, ln.clock.Now()
	} else {
		sh.markedIn = time.Time{}
	}
	ln.queueShare(func() { _, _ = m.Breaker(context.Background(), open) })
}

// queueInOutage tells the lane's other writers that this writer, its
// breaker open, failed in the lane's outage it last heard of
// (lane.joinsSharedOutage); ln.mu is held. The store marks it in that
// outage only: one that ended meanwhile is not opened again on this
// writer's word (share.Member.InOutage).
func (ln *lane) queueInOutage() {
	sh := &ln.share
	if sh.m == nil || !sh.shared {
		return
	}
	m, since := sh.m, ln.breaker.shared.openSince
	sh.markedIn, sh.reportedAt = since, ln.clock.Now()
	ln.queueShare(func() { _, _ = m.InOutage(context.Background(), since) })
}

func (ln *lane) queueShare(f func()) {
	ln.share.pending = append(ln.share.pending, f)
	ln.shareSync.pending.Store(true)
}

// flushShare makes the round trips queued under the mutex, without it, in
// the order queued: one goroutine at a time makes them, and one that finds
// another at it leaves its calls to that one (a breaker's "closed" sent
// before its "opened" would keep the outage open for every writer).
// Without pending calls it costs an atomic load.
func (ln *lane) flushShare() {
	if !ln.shareSync.pending.Load() {
		return
	}
	for {
		ln.mu.Lock()
		sh := &ln.share
		if sh.flushing || len(sh.pending) == 0 {
			ln.mu.Unlock()
			return
		}
		calls := sh.pending
		sh.pending, sh.flushing = nil, true
		ln.shareSync.pending.Store(false)
		ln.mu.Unlock()
		for _, f := range calls {
			f()
		}
		ln.mu.Lock()
		sh.flushing = false
		ln.mu.Unlock()
	}
}
