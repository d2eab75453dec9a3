package upsert

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/upsertlib/upsert/internal/minmax"
)

// Limiter paces the requests sent to an index so that an ingestion runs
// close to what the index accepts, without a storm of 429s and without
// tuning. It learns per namespace, since Pinecone's limits are per
// namespace:
//
//   - the send rate in records per second: a token bucket that every
//     attempt passes, retries included. There is no cap until the index
//     first answers 429; then the rate is cut to what the index actually
//     accepted, at most once per round trip and per 100 ms (the 429s of
//     requests already in flight belong to the same episode, and so do
//     those of the next second while the index accepts nothing), climbs
//     back quickly to that level and then probes above it, slowly first
//     and faster the longer no 429 comes. A Retry-After pauses every
//     request of the namespace.
//     Requests sent through an index connection are also kept under
//     Pinecone's limits per namespace, 100 upsert requests and 50 MB
//     (taken as MiB) of upsert data per second: a tenth above them until
//     the first 429 (to take in the burst the index's buckets allow),
//     at them after it. A first 429 after the byte limit held slow start
//     for seconds cuts the rate as a later one does, not as slow start's
//     overshoot.
//   - how many requests may be in flight: 4 at first, doubling each round
//     trip while requests wait for a slot and latency holds (and at once
//     as far as keeps the request rate when it adopts a larger batch),
//     then one more per round trip; one fewer on a 429 or a timeout, a
//     quarter fewer when latency shows the index queueing, but not below
//     two for latency (on a busy client it rises with the client's own
//     load). At most 64.
//   - how many records go in one request: 100 at first. A single larger
//     probe batch is tried now and then (ten times the size in slow start,
//     twice after); its size is adopted when its cost per record is no worse,
//     and remembered as too large when it is (for 30 s, judged as soon as
//     it has been out longer than a no-worse size would take), when it
//     times out (for a minute), or when slow start's probe is answered
//     429 (for 30 s: an index whose bucket holds fewer records refuses it
//     at any rate). Once the rate is capped, batches carry a twentieth of
//     a second's worth, up to the largest size adopted; fewer, larger
//     requests when 429s keep coming right after a cut, which is what
//     happens when writers together send more than the namespace's 100
//     requests a second. At most [MaxBatchSize], and never more than
//     [MaxRequestBytes].
//
// It also holds a circuit breaker (after 5 server failures in a row, every
// request waits while single probes test the index, every 100 ms at first;
// for the first minute, failures while it is open spend no retries; after
// it, or at once if the index never answered, requests other than the
// probes fail without being sent)
// and a retry budget (retries stay around a fifth of the requests; a retry
// that finds the budget empty waits, it is never dropped).
//
// A Limiter is safe for concurrent use. Calls that write into one index at
// the same time share one by default; pass one with [WithLimiter] so that a
// long-running service keeps what it learned between calls. The zero value
// is ready to use.
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
	// Rate is the send rate cap in records per second; +Inf until the
	// index first answers 429.
	Rate float64
	// Concurrency is how many requests may be in flight.
	Concurrency int
	// BatchSize is how many records a request carries at most.
	BatchSize int
	// InFlight is how many requests are in flight now.
	InFlight int
	// Paused is true while the circuit breaker holds requests back or the
	// index's Retry-After is being waited out.
	Paused bool
}

// State returns what l has learned about namespace, for vectors.
func (l *Limiter) State(namespace string) LimiterState {
	return l.lane(namespace, MaxBatchSize).state()
}

// lane returns the lane of key (a namespace, with a prefix per kind of
// record), whose batches hold at most maxBatch records.
func (l *Limiter) lane(key string, maxBatch int) *lane {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lanes == nil {
		l.lanes = make(map[string]*lane)
	}
	ln, ok := l.lanes[key]
	if !ok {
		c := l.clock
		if c == nil {
			c = realClock{}
		}
		ln = newLane(c)
		ln.limit = maxBatch
		ln.batch = min(ln.batch, maxBatch)
		ln.sized = ln.batch
		l.lanes[key] = ln
	}
	return ln
}

// The controls' starting points, bounds and gains.
const (
	startConcurrency = 4
	maxConcurrency   = 64
	startBatchSize   = 100

	// sizedRequestsPerSecond sizes batches at a capped rate (see
	// maxBatch): the requests per second they are sized for start there,
	// and never go above it; a 429 episode that comes right after a cut
	// multiplies them by requestsCut, and they grow back by
	// requestsGrowth per second.
	sizedRequestsPerSecond = 20
	requestsCut            = 0.75
	requestsGrowth         = 0.1

	// maxRequestRate is Pinecone serverless's limit of upsert requests per
	// second per namespace; requestBurst lets a few go back to back. Only
	// a few: writers that start together share the namespace's limit, and
	// each one's first burst lands in the same second.
	maxRequestRate = 100
	requestBurst   = 10
	// firstRequestRate is the request rate until the first 429 episode.
	// Pinecone's limit is a token bucket with a burst of its own; sending
	// a tenth above its rate takes that burst in over ten seconds (in
	// upserttest's serverless preset, 100 requests: a second's worth of
	// 1000-record batches) at the cost of the one episode that then
	// brings the lane down to maxRequestRate for good.
	firstRequestRate = 1.1 * maxRequestRate
	// maxByteRate is Pinecone serverless's limit of upsert data per second
	// per namespace: 50 MB, read as 50 MiB like the 2 MB request limit
	// (MaxRequestBytes), and as upserttest's Serverless preset does. Like
	// the request limit it is a token bucket with a burst, which slow
	// start takes in at firstByteRate, a tenth above. Without the cap,
	// 1536-dimension records (6 KB each, 8.5k records/s) reached 2.3
	// times the limit in slow start before its first 429 came back, with
	// twenty 2 MB requests in flight that the emptied bucket then refused:
	// 1.8-5.1% of a run's requests answered 429 (14 of one run's 16 in
	// its first two seconds); 0-0.2% with it.
	maxByteRate   = 50 << 20
	firstByteRate = 1.1 * maxByteRate
	// cappedAccepted is the share of what slow start sent over the meter
	// window that the index must have accepted (the rest is in flight),
	// and cappedFor how long the byte cap must have held it, for its
	// first 429 episode to be a regular cut (see cut).
	cappedAccepted = 0.8
	cappedFor      = 2 * time.Second

	// minRate keeps a cut rate from reaching zero: ten records per second
	// still probe the index.
	minRate = 10.0
	// rateCut is the multiplicative decrease of a 429 episode, applied to
	// the rate the lane was sending at; slowStartCut the one of the first
	// episode, when there was no cap yet.
	rateCut      = 0.85
	slowStartCut = 0.3
	// peakShare is the share of the best rate ever accepted in a second
	// below which no cut takes the level, while the index refuses less
	// than smallRefusedShare of the records sent over ten seconds.
	peakShare         = 0.5
	smallRefusedShare = 0.1
	// acceptedFloor is the share of the rate the index accepted over the
	// last second that repeated cuts do not go below.
	acceptedFloor = 0.9
	// farAboveBest is how many times the best second the index ever
	// accepted under a cap the lane must have sent over the last second
	// for what it sent to be no measure of the index (see cut).
	farAboveBest = 4
	// rateRecovery is how long the rate takes to climb back to the level
	// of the last 429 episode. Until the lane has once measured what the
	// index accepts between two episodes, the level is a rough guess
	// (taken while the lane ramped up and the index spent its burst), so
	// the rate moves past it sooner, after guessRecovery; so it does past
	// a level measured after a cut far below it (see trustedCutShare).
	rateRecovery  = 4 * time.Second
	guessRecovery = time.Second
	// trustedCutShare is how far below the level the last cut may have
	// gone for the rate accepted since to be a measure of capacity rather
	// than a floor: a regular cut is to rateCut of the level.
	trustedCutShare = 0.8
	// minEpisodeGap is the least time between two 429 episodes for the
	// rate accepted between them to be a measure of capacity.
	minEpisodeGap = 500 * time.Millisecond
	// minCutGap is the least time after a cut before a request sent may
	// start a new episode, however fast the index answers. A token-bucket
	// index that slow start or a convex climb overdrew refuses until its
	// bucket refills, which takes longer than a round trip of a few
	// milliseconds: counting those 429s as new episodes cut tight (3k
	// records/s, 2 ms round trips) three or four times within 50 ms at
	// its first episode, to a sixth of its capacity.
	minCutGap = 100 * time.Millisecond
	// drainFor is how long after a cut 429s still belong to its episode
	// while the index has accepted nothing since: it is still refusing
	// the overshoot. A request larger than a small index's bucket is
	// admitted into a full one and leaves it in debt (upserttest's model
	// does this); 1000 records into a bucket of 125 refilling at 500/s
	// is 1.75 s of 429s. Counted as episodes 100 ms apart, they cut the
	// rate and the requests per second batches are sized for ten times
	// over, and one run in five of such an index (upsertbench's tiny,
	// not a published profile) ended at 70% of its capacity with 27%
	// of its requests refused.
	drainFor = time.Second
	// rateBoundFor is how recently a request must have waited for rate
	// tokens for the rate to keep growing.
	rateBoundFor = time.Second

	// queueingRatio is the latency, relative to the best recent one, above
	// which the index is taken to be queueing: concurrency stops growing.
	// Above shrinkRatio it is cut by a quarter.
	queueingRatio = 1.3
	shrinkRatio   = 2.0
	// latencySlack is a rise in latency too small to mean anything
	// whatever the ratio: the jitter of a fast index answering in a
	// millisecond or two.
	latencySlack = 5 * time.Millisecond
	// pipelined is the concurrency below which latency does not take it
	// (429s and timeouts still do): with two requests in flight, one is
	// prepared and sent while the other is at the index. Latency measured
	// on the client rises with the client's own load as well as with the
	// index's queue: 1536-dimension records under Pinecone's 50 MB/s
	// (upsertbench's wide), whose 2 MB requests take 40 ms on a busy
	// 2-core client, were shrunk to one in flight, which cannot carry
	// 50 MB/s at that latency: 85.0-93.5% efficiency in four runs,
	// 99.0-99.6% in five with this.
	pipelined = 2

	// probeWorse is how much more a probe batch may cost per record than
	// the current size before the probe size is judged too large.
	probeWorse = 1.25
	// softCeilingFor and timeoutCeilingFor are how long a size judged too
	// large by its cost, or by a timeout, stays off limits.
	softCeilingFor    = 30 * time.Second
	timeoutCeilingFor = time.Minute
	// probeExpiry frees the probe slot of a probe batch that never came
	// back (its run ended first).
	probeExpiry = 10 * time.Second
)

// lane is the control state of one namespace.
type lane struct {
	clock clock
	head  chan struct{} // held by the request being admitted; FIFO

	mu sync.Mutex

	// rate
	records          *rate.Limiter // records per second; Inf until the first 429
	requests         *rate.Limiter // requests per second
	bytes            *rate.Limiter // request bytes per second
	bytesWaited      time.Time     // when a request last waited for the byte cap
	bytesHeld        time.Time     // since when the byte cap has held requests back, with gaps under rateBoundFor
	wmax             float64       // sending rate at the last 429 episode; 0 before
	cutAt            time.Time     // origin of the growth curve: the last cut, shifted by idle time
	cutBeta          float64       // the cut of the last episode
	recovery         time.Duration // how long the climb back to wmax takes
	measured         bool          // a level was once measured between two episodes
	cutRate          float64       // the rate the last cut set
	lastCut          time.Time     // when the last episode was
	acceptedSinceCut int           // records accepted since
	pausedSinceCut   time.Duration // time the breaker held requests since
	grownAt          time.Time     // last update of the growth curve
	rateWaited       time.Time     // when a request last had to wait for rate tokens
	cutGen           uint64        // permits issued up to this one belong to the last cut's episode
	issued           uint64        // permits issued so far
	cuts             int           // rate cuts so far
	cutSignal        chan struct{} // closed at a cut, to wake the head
	pausedUntil      time.Time     // Retry-After of the last episode
	peak             peakMeter     // records accepted and refused per second, over ten seconds, of requests sent under a cap
	sent             rateMeter     // records sent
	goodput          rateMeter     // records accepted
	refused          rateMeter     // records refused with a 429

	perSecond   float64   // requests per second that batches are sized for, see maxBatch
	perSecondAt time.Time // its last update

	// concurrency
	conc      int
	slotsUsed int // of the lane's own slots
	inFlight  int // requests in flight, on any slots
	slotFreed chan struct{}
	slotBound bool   // every slot was taken, or a request waited for one, since the last growth
	slowStart bool   // concurrency doubles each round trip until the first sign of congestion
	concGen   uint64 // permits issued up to this one belong to the last change

	// batch size and latency
	limit        int // the most records a request may carry
	batch        int
	sized        int           // the largest size adopted on its latency: the start size, or a probe's
	ceilSize     int           // a size known to be too large; 0 when none
	ceilUntil    time.Time     // when ceilSize is forgotten
	probeSize    int           // size of the probe batch out, 0 when none
	probeSent    time.Time     // when the probe batch was formed
	probeStart   time.Time     // when it was sent; zero until then
	fullMin      minmax.Window // latencies (ns) of full batches at the current size
	fullMean     float64       // moving average of the same
	fullCount    int
	fullTimeouts int // timeouts of full batches since one of them succeeded

	breaker breaker
	budget  retryBudget
}

func newLane(c clock) *lane {
	now := c.Now()
	return &lane{
		clock:     c,
		head:      make(chan struct{}, 1),
		records:   rate.NewLimiter(rate.Inf, startBatchSize),
		requests:  rate.NewLimiter(rate.Inf, requestBurst),
		bytes:     rate.NewLimiter(rate.Inf, MaxRequestBytes),
		conc:      startConcurrency,
		slowStart: true,
		limit:     MaxBatchSize,
		batch:     startBatchSize,
		sized:     startBatchSize,
		perSecond: sizedRequestsPerSecond,
		budget:    newRetryBudget(now),
	}
}

// permit is one request's passage through the lane.
type permit struct {
	gen       uint64
	n         int
	start     time.Time
	slots     chan struct{} // the caller's fixed slots, or nil for the lane's
	probe     bool          // the breaker's probe
	sizeProbe bool          // a probe of a larger batch size
	capped    bool          // sent while the rate had a cap: not slow start's
}

func (ln *lane) state() LimiterState {
	now := ln.clock.Now()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	r := float64(ln.records.Limit())
	if ln.records.Limit() == rate.Inf {
		r = math.Inf(1)
	}
	return LimiterState{
		Rate:        r,
		Concurrency: ln.conc,
		BatchSize:   ln.batch,
		InFlight:    ln.inFlight,
		Paused:      ln.breaker.open || now.Before(ln.pausedUntil),
	}
}

// capRequests keeps the lane under Pinecone's limits of upsert requests
// and bytes per second per namespace (a tenth above them until the first
// 429 episode, see firstRequestRate and firstByteRate); lanes of other
// transports have no such caps.
func (ln *lane) capRequests() {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	now := ln.clock.Now()
	if ln.requests.Limit() == rate.Inf {
		ln.requests.SetLimitAt(now, firstRequestRate)
	}
	if ln.bytes.Limit() == rate.Inf {
		ln.bytes.SetLimitAt(now, firstByteRate)
	}
}

// concurrency returns how many requests may be in flight.
func (ln *lane) concurrency() int {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.conc
}

// nextBatch returns the size of the next batch, and whether it is a probe
// of a larger size. At most one probe is out at a time, and only once the
// current size has a latency to compare with.
func (ln *lane) nextBatch() (size int, probe bool) {
	now := ln.clock.Now()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.ceilSize > 0 && now.After(ln.ceilUntil) {
		ln.ceilSize = 0
	}
	if ln.probeSize > 0 {
		if now.Sub(ln.probeSent) > probeExpiry {
			ln.probeSize = 0
		} else if !ln.probeStart.IsZero() && ln.fullCount > 0 && float64(now.Sub(ln.probeStart)) > ln.probeBudget(ln.probeSize) {
			// The probe is already out longer than a size no worse than
			// the current one could take: too large, whenever it comes
			// back. Not waiting for it keeps a probe into a size that is
			// twenty times slower, or times out, from holding the batch
			// size for seconds.
			ln.setCeiling(ln.probeSize, now.Add(softCeilingFor))
			ln.probeSize = 0
		}
	}
	limit := ln.maxBatch()
	if want := min(limit, ln.sized); ln.batch != want {
		// The rate cut the batch size, or has grown back: the size
		// follows it, up to the size adopted on its latency, without
		// probing its way back. Batches much smaller than the rate
		// allows would spend requests: four writers cut to a few
		// thousand records/s each sent 45 requests/s apiece into a
		// namespace that takes 100.
		if want < ln.batch || 4*want > 5*ln.batch {
			ln.fullMin.Reset()
			ln.fullCount = 0
		}
		ln.batch = want
	}
	// A probe is judged against the latency of the current size, so it
	// waits for two samples of it; but in slow start a probe goes out
	// right behind the first request, since the samples come back before
	// the larger batch does.
	if ln.probeSize > 0 || ln.fullCount < 2 && !(ln.slowStart && ln.issued > 0) {
		return ln.batch, false
	}
	growth := 2
	if ln.slowStart {
		growth = 10
	}
	next := min(growth*ln.batch, limit)
	if ln.ceilSize > 0 {
		if ln.ceilSize-ln.batch <= max(1, ln.batch/20) {
			return ln.batch, false // close enough to the known limit
		}
		next = min(next, (ln.batch+ln.ceilSize)/2)
	}
	if next <= ln.batch {
		return ln.batch, false
	}
	ln.probeSize, ln.probeSent, ln.probeStart = next, now, time.Time{}
	return next, true
}

// sendLimit returns the most records a request may carry now: what
// maxBatch allows, and less than a size known to be too large. A batch of
// n records formed before the rate was cut or a ceiling was found is cut
// to it, so that one stale large batch does not hold the queue while it
// saves up a second's worth of tokens; when that batch is the size probe,
// the probe is forgotten, since it will not be sent.
func (ln *lane) sendLimit(n int, sizeProbe bool) int {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	limit := ln.maxBatch()
	if ln.ceilSize > 0 {
		limit = min(limit, max(1, ln.ceilSize-1))
	}
	if sizeProbe && n > limit {
		ln.probeSize = 0
	}
	return limit
}

// maxBatch is the largest batch size worth trying: Pinecone's limit, or,
// when the rate is capped, the rate over perSecond: a twentieth of a
// second's worth at first, so that a rate-limited index still gets a
// steady stream of small requests rather than a few that each drain its
// bucket.
//
// Twenty requests a second per writer is too many when more than four
// writers share a namespace (Pinecone takes 100 a second): their 429s
// then keep coming however far the rates are cut, since the batches
// shrink with them. A 429 episode right after a cut is that sign, and
// lowers perSecond (see cut); it grows back slowly. Without it, eight
// simulated writers on a 20k records/s index got 10-20% of it between
// them, with a fifth of their requests refused.
//
// Small batches at a low rate are also what keeps writers that share an
// index from starving one another: a writer cut far below the others
// sends small requests, which a nearly empty bucket still admits, so it
// climbs back. A floor of 100 records below 2000 records/s (fewer
// requests at low rates) left one of four simulated writers on a 3k
// records/s index at 60 records/s for good
// (TestLimiterSharesAnIndexWithoutStarvingAWriter); against upserttest it
// starved no one but took four such writers from 2.2% to 4.9% 429s, and
// four writers on a 20k index from about 3% to 2%. Not worth the risk.
func (ln *lane) maxBatch() int {
	limit := ln.limit
	if l := ln.records.Limit(); l != rate.Inf {
		limit = min(limit, max(startBatchSize/10, int(float64(l)/ln.perSecond)))
	}
	return limit
}

// acquire admits a request of n records, waiting as long as it takes: for
// the circuit breaker, for the Retry-After of the last 429 episode, for
// rate tokens, then for a concurrency slot. slots, when not nil, are the
// caller's own fixed concurrency slots, used instead of the lane's.
// sizeProbe marks the probe batch returned by nextBatch.
//
// Requests are admitted one at a time, in FIFO order: only the head of the
// queue holds a rate reservation, and it holds its tokens while it waits
// for a slot, so that at most one request's worth of tokens is ever stale.
// The head waits for tokens before it takes a slot, so no slot is held
// while waiting for the rate. A cut wakes the head, which reserves again
// at the new rate, since rate.Limiter does not move reservations that are
// already waiting.
func (ln *lane) acquire(ctx context.Context, n, bytes int, slots chan struct{}, sizeProbe bool) (permit, error) {
	return ln.admit(ctx, n, bytes, slots, sizeProbe, false)
}

// acquireOrRecut is acquire for a batch sized by the lane: when the batch
// has become larger than a request may carry (sendLimit) by the time it is
// at the head of the queue, it returns errStaleBatch instead of waiting
// for its whole size in tokens at the new rate, with every request queued
// behind it. Slow start's 1000-record size probe, formed before the first
// cut, held a 500 records/s index's lane idle for 2-2.5 s this way
// (upsertbench's tiny: 90-95% in about one run of three; 97.7-99.7% over
// five runs with this).
func (ln *lane) acquireOrRecut(ctx context.Context, n, bytes int, slots chan struct{}, sizeProbe bool) (permit, error) {
	return ln.admit(ctx, n, bytes, slots, sizeProbe, true)
}

func (ln *lane) admit(ctx context.Context, n, bytes int, slots chan struct{}, sizeProbe, recut bool) (permit, error) {
	probe, err := ln.waitBreaker(ctx)
	if err != nil {
		return permit{}, err
	}
	select {
	case ln.head <- struct{}{}:
	case <-ctx.Done():
		ln.abandonProbe(probe)
		return permit{}, ctx.Err()
	}
	defer func() { <-ln.head }()
	for {
		cuts, err := ln.waitRate(ctx, n, bytes, sizeProbe, recut)
		if err == nil {
			err = ln.takeSlot(ctx, slots)
		}
		if err != nil {
			ln.abandonProbe(probe)
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
		ln.sent.add(ln.clock.Now(), n)
		p := permit{gen: ln.issued, n: n, start: ln.clock.Now(), slots: slots, probe: probe, sizeProbe: sizeProbe, capped: ln.records.Limit() != rate.Inf}
		if sizeProbe && n == ln.probeSize {
			ln.probeStart = p.start
		}
		ln.mu.Unlock()
		return p, nil
	}
}

// waitBreaker waits while the breaker is open, and tells whether this
// request is the breaker's probe. Once the breaker has given up on the
// index, a request that is not the probe fails at once with its error.
func (ln *lane) waitBreaker(ctx context.Context) (probe bool, err error) {
	for {
		ln.mu.Lock()
		now := ln.clock.Now()
		ok, probe, wait := ln.breaker.admit(now)
		var down *Error
		if !ok {
			down = ln.breaker.gaveUp(now)
		}
		wake := ln.breaker.wake()
		ln.mu.Unlock()
		if ok {
			return probe, nil
		}
		if down != nil {
			return false, down
		}
		if err := sleepOrWake(ctx, ln.clock, wait, wake); err != nil && !errors.Is(err, errWoken) {
			return false, err
		}
	}
}

func (ln *lane) abandonProbe(probe bool) {
	if probe {
		ln.mu.Lock()
		ln.breaker.abandon(probe)
		ln.mu.Unlock()
	}
}

// waitRate blocks until a request of n records and bytes bytes may be sent
// and returns the number of cuts at that time. Only the head of the queue
// calls it. With recut, it returns errStaleBatch when n is more than a
// request may carry now (see acquireOrRecut).
func (ln *lane) waitRate(ctx context.Context, n, bytes int, sizeProbe, recut bool) (cuts int, err error) {
	for {
		if recut && n > ln.sendLimit(n, sizeProbe) {
			return 0, errStaleBatch
		}
		now := ln.clock.Now()
		ln.mu.Lock()
		if ln.records.Burst() < n {
			ln.records.SetBurstAt(now, n)
		}
		if ln.bytes.Burst() < bytes {
			ln.bytes.SetBurstAt(now, bytes)
		}
		rr := ln.records.ReserveN(now, n)
		qr := ln.requests.ReserveN(now, 1)
		br := ln.bytes.ReserveN(now, bytes)
		d := max(rr.DelayFrom(now), qr.DelayFrom(now), br.DelayFrom(now), ln.pausedUntil.Sub(now))
		cuts = ln.cuts
		if d <= 0 {
			ln.mu.Unlock()
			return cuts, nil
		}
		if rr.DelayFrom(now) > 0 {
			ln.rateWaited = now
		}
		if br.DelayFrom(now) > 0 {
			if now.Sub(ln.bytesWaited) > rateBoundFor {
				ln.bytesHeld = now
			}
			ln.bytesWaited = now
		}
		if ln.cutSignal == nil {
			ln.cutSignal = make(chan struct{})
		}
		wake := ln.cutSignal
		ln.mu.Unlock()
		err := sleepOrWake(ctx, ln.clock, d, wake)
		if err == nil {
			return cuts, nil
		}
		now = ln.clock.Now()
		rr.CancelAt(now)
		qr.CancelAt(now)
		br.CancelAt(now)
		if !errors.Is(err, errWoken) {
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
			if ln.slotsUsed == ln.conc {
				ln.slotBound = true // the last free slot: concurrency is what limits
			}
			ln.mu.Unlock()
			return nil
		}
		ln.slotBound = true
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
	ln.wakeSlots()
	ln.mu.Unlock()
}

func (ln *lane) wakeSlots() {
	if ln.slotFreed != nil {
		close(ln.slotFreed)
		ln.slotFreed = nil
	}
}

// awaitRetry waits until the retry budget allows one more retry.
func (ln *lane) awaitRetry(ctx context.Context) error {
	for {
		ln.mu.Lock()
		ok, wait := ln.budget.take(ln.clock.Now())
		wake := ln.budget.wake()
		ln.mu.Unlock()
		if ok {
			return nil
		}
		if err := sleepOrWake(ctx, ln.clock, wait, wake); err != nil && !errors.Is(err, errWoken) {
			return err
		}
	}
}

// release returns p's slot and feeds its outcome to the controls; e is nil
// for a success. It reports whether e is a server error that came while the
// breaker has been open for less than outagePatience after the index had
// answered: such an error does not spend a retry of its batch.
func (ln *lane) release(p permit, e *Error) (youngOutage bool) {
	if p.slots != nil {
		<-p.slots
	}
	now := ln.clock.Now()
	latency := now.Sub(p.start)
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if p.slots == nil {
		ln.slotsUsed--
		ln.wakeSlots()
	}
	ln.inFlight--
	tooLarge := p.sizeProbe && ln.judgeProbe(p, latency, e, now)
	if e == nil {
		ln.pausedSinceCut += ln.breaker.success(now)
		ln.budget.success(now)
		ln.goodput.add(now, p.n)
		if p.capped {
			ln.peak.add(now, p.n, 0)
		}
		ln.acceptedSinceCut += p.n
		ln.observeLatency(p, latency)
		ln.growConcurrency(p)
		ln.growRate(now)
		ln.growPerSecond(now)
		return false
	}
	switch e.Class {
	case ClassRateLimited:
		ln.pausedSinceCut += ln.breaker.success(now) // the index answers
		ln.refused.add(now, p.n)
		if p.capped {
			ln.peak.add(now, 0, p.n)
		}
		// Once per round trip: not for requests sent before the last cut,
		// nor for those that reached the index while it was still
		// refusing the overshoot that the cut answered (a round trip, and
		// at least minCutGap; longer, up to drainFor, while it has
		// accepted nothing since). Not for a probe that judgeProbe took
		// as too large for its 429.
		overshoot := ln.acceptedSinceCut == 0 && now.Sub(ln.lastCut) < drainFor
		if p.gen > ln.cutGen && p.start.Sub(ln.lastCut) >= max(time.Duration(ln.fullMean), minCutGap) && !tooLarge && !overshoot {
			ln.cut(now, e.RetryAfter)
		}
	case ClassTimeout:
		ln.breaker.failure(now, p.probe, true)
		// A timeout says little about the size of the batch, unless the
		// batch was larger than usual or timeouts keep hitting the usual
		// size: one timeout in a hundred requests should not halve every
		// batch after it.
		if full := 10*p.n >= 9*ln.batch; p.n > 1 && full {
			ln.fullTimeouts++
			if p.n > ln.batch || ln.fullTimeouts >= 2 {
				ln.setCeiling(p.n, now.Add(timeoutCeilingFor))
				ln.fullTimeouts = 0
			}
		}
		ln.shrinkConcurrency(p, ln.conc-1)
	case ClassServer:
		ln.breaker.failure(now, p.probe, false)
		youngOutage = ln.breaker.young(now)
	case ClassTooLarge:
		ln.pausedSinceCut += ln.breaker.success(now)
		if p.n > 1 {
			ln.setCeiling(p.n, now.Add(timeoutCeilingFor))
			ln.batch = min(ln.batch, max(1, p.n/2))
			ln.sized = min(ln.sized, max(1, p.n/2))
		}
	case ClassInvalid, ClassDenied:
		ln.pausedSinceCut += ln.breaker.success(now)
	default:
		ln.breaker.abandon(p.probe)
	}
	return youngOutage
}

// cut lowers the rate and the concurrency once for a 429 episode.
//
// The level the rate then climbs back to (along a cubic curve, see
// growRate) is the index's capacity as well as it can be told: the rate
// the index accepted since the last episode, when there was one long
// enough ago. An index that limits with a token bucket answers 429 when
// its bucket runs dry, so between two episodes it accepted exactly its
// rate. Otherwise the level is the rate the lane was sending at, and when
// the index refused slow start before accepting anything there is none:
// the rate climbs from the cut. The cut itself is to 85% of the level, or
// to 30% when the rate had no cap yet (slow start overshoots).
func (ln *lane) cut(now time.Time, retryAfter time.Duration) {
	window := ln.meterWindow()
	sent := ln.sent.rateOver(now, window)
	recent := ln.goodput.rateOver(now, window)
	level, beta, uncapped, fromCut, floorOnly := sent, rateCut, false, false, false
	switch since := now.Sub(ln.lastCut) - ln.pausedSinceCut; {
	case ln.records.Limit() == rate.Inf:
		// Slow start overshot: the index may have absorbed it in a burst,
		// so what it accepted recently is a measure only when lower.
		beta, uncapped = slowStartCut, true
		if recent > 0 {
			level = min(sent, recent)
			if now.Sub(ln.bytesWaited) < window && now.Sub(ln.bytesHeld) >= cappedFor && recent >= cappedAccepted*sent {
				// Slow start was held at Pinecone's byte limit (a
				// tenth above it) for seconds before the index's
				// bucket ran dry, and the index took nearly all of
				// it (before a first 429 nothing else was refused,
				// so what it has not taken is still in flight): the
				// overshoot is that tenth, not a round trip's
				// doubling. When the bucket ran dry sooner,
				// other writers share the namespace, and together
				// they overshoot by as many tenths as there are of
				// them: four writers of 1536-dimension records cut
				// to 85% then refused 21% of their requests in two
				// runs, 9-11% with slow start's cut.
				// Not so for the request limit, which holds back
				// slow start's first small batches on indexes that
				// limit records well below it.
				beta = rateCut
			}
		} else {
			// The index refused before it accepted anything: its bucket
			// holds less than slow start's first requests, and the
			// sending rate is no level (below).
			fromCut = true
		}
	case since >= minEpisodeGap && (ln.measured || ln.cuts >= 2 || now.Sub(ln.cutAt) >= ln.recovery):
		// Between two episodes a token-bucket index accepts its rate,
		// less what overflowed its bucket while the lane sent less: the
		// average is a floor of its capacity. What the lane sent over the
		// last second, as the bucket ran dry, is closer to it when the
		// lane spent most of the time below.
		//
		// Not while the lane still climbs back to slow start's guess,
		// the first time: a 429 then is the bucket that slow start
		// emptied, or one that comes whatever the rate. Taken as a
		// measure on an index that refuses 3% of requests at random, it
		// put the level at a fifth of the index's rate, and the climb
		// above took ten seconds. A guess too high to be reached is left
		// at the episode after.
		accepted := float64(ln.acceptedSinceCut) / since.Seconds()
		ln.measured = true
		lastSecond := ln.sent.rateOver(now, time.Second)
		if best := ln.peak.best; best > 0 && lastSecond > farAboveBest*best {
			// Not when the lane sent many times what the index ever
			// accepted in a second under a cap: then most of it was
			// refused, and only what was accepted is a floor. An index
			// of 2000 records/s with a 15-second burst, which slow
			// start leaves at 26k/s, held its level at nine tenths of
			// what was sent, and came down by 15% an episode: ten
			// seconds of 429s, 45% of its requests; 8-16% with this
			// (four runs). Not for every lane that the index refuses
			// more than it accepts: in a crowd of independent writers,
			// the unlucky ones cut to their small share starve (the
			// shared-index simulation: sixteen writers' smallest share
			// 0.47 -> 0.21 of a fair one).
			lastSecond = max(0, lastSecond-ln.refused.rateOver(now, time.Second))
		}
		level = min(sent, float64(ln.records.Limit()), max(accepted, acceptedFloor*lastSecond))
		// After a cut far below the level (slow start's), the average
		// is only a floor: while the lane climbed back, the index's
		// bucket filled and overflowed. The rate then moves past it
		// sooner, as past a guess. Taken as a measure, a 3k records/s
		// index (upsertbench's tight) got 2.7k for its first eight
		// seconds: 95.0-95.8% efficiency over four runs, 96.6-98.2%
		// with this.
		floorOnly = ln.cutRate < trustedCutShare*level
	default:
		// Too soon after the last episode to average over. The index
		// still refuses: cut again, but not below what it accepted over
		// the last second, so that a burst of 429s that has nothing to do
		// with the rate (a transient throttle) cannot grind it down.
		level = min(sent, float64(ln.records.Limit()))
		level = max(level, acceptedFloor*ln.goodput.rateOver(now, time.Second))
		// Cutting the rate did not stop the 429s. When writers together
		// send more requests than the namespace takes, it cannot: the
		// batch size falls with the rate, and the requests per second
		// stay. Fewer, larger requests can.
		ln.growPerSecond(now)
		ln.perSecond = max(1, requestsCut*ln.perSecond)
	}
	// 429s that come whatever the rate (a flaky or throttling index) must
	// not grind the rate down episode after episode: while the index
	// refuses only a small share of what is sent, the level stays at least
	// half the best rate it ever accepted in a second. When it refuses
	// much more (its capacity fell, other clients came), the floor goes.
	// Slow start's seconds do not count: an index with a large burst
	// accepts many times its rate until the burst is spent. Counted, an
	// index of 2000 records/s with a 15-second burst set the floor at
	// 15k/s, and each time its 429s had faded out of the ten seconds a
	// cut took the rate back there: a second storm.
	if ln.peak.refusedShare(now) < smallRefusedShare {
		level = max(level, peakShare*ln.peak.best)
	}
	if level <= 0 {
		// Nothing accepted to measure by: a plain multiplicative cut.
		level = float64(ln.batch)
		if l := ln.records.Limit(); l != rate.Inf {
			level = float64(l) * rateCut
		}
	}
	recovery := guessRecovery
	if ln.measured && !floorOnly {
		recovery = rateRecovery
	}
	wmax, origin := level, now
	if fromCut {
		// Climb from the cut rate as from a level: slowly at first, while
		// the index's bucket is empty, then ever faster. Back to the
		// sending rate within guessRecovery, a 500 records/s index with
		// a burst of 125 got three times its rate a second after the
		// cut, and eight more cuts before the lane settled.
		wmax, origin = max(minRate, beta*level), now.Add(-recovery)
	}
	ln.wmax, ln.cutAt, ln.cutBeta, ln.recovery, ln.grownAt = wmax, origin, beta, recovery, now
	ln.lastCut, ln.acceptedSinceCut, ln.pausedSinceCut = now, 0, 0
	ln.cutRate = max(minRate, beta*level)
	ln.records.SetLimitAt(now, rate.Limit(ln.cutRate))
	if t := int(ln.records.TokensAt(now)); uncapped && t > 0 {
		// Slow start's rate had no cap, and x/time/rate refills a bucket
		// to its burst when its rate becomes finite: the lane would send
		// a probe's worth of records at once into the index's bucket that
		// the overshoot has just emptied, and so would every writer
		// leaving slow start with it (four simulated writers on 20k
		// records/s: 20% of their requests refused in the first two
		// seconds, 14% with the tokens spent here). Later cuts keep
		// their tokens: a 429 that does not come from an empty
		// bucket (a flaky index's) would otherwise idle the lane for a
		// batch each time.
		ln.records.ReserveN(now, t) // t > 0: a negative n would add tokens
	}
	ln.cutGen = ln.issued
	ln.cuts++
	if ln.cutSignal != nil {
		close(ln.cutSignal)
		ln.cutSignal = nil
	}
	if retryAfter > 0 {
		ln.pausedUntil = now.Add(retryAfter)
	}
	if l := ln.requests.Limit(); l != rate.Inf && l > maxRequestRate {
		ln.requests.SetLimitAt(now, maxRequestRate)
	}
	if l := ln.bytes.Limit(); l != rate.Inf && l > maxByteRate {
		ln.bytes.SetLimitAt(now, maxByteRate)
	}
	ln.slowStart = false
	ln.conc = max(1, ln.conc-1)
	ln.concGen = ln.issued
}

// meterWindow is the span over which the sending rate is measured at a
// cut: four round trips, within [300 ms, 1 s].
func (ln *lane) meterWindow() time.Duration {
	rtt := time.Duration(ln.fullMean)
	return min(max(4*rtt, 300*time.Millisecond), time.Second)
}

// growRate raises a capped rate while requests wait for it, along the
// cubic curve of CUBIC congestion control, in rate instead of window: from
// the cut it climbs fast, flattens as it nears the level of the last 429
// episode (reached after rateRecovery), lingers there, then rises ever
// faster above it (twice as fast as it came) to find capacity that has
// grown. Time during which the
// cap held nothing back (the producer was slower) does not count.
func (ln *lane) growRate(now time.Time) {
	if ln.records.Limit() == rate.Inf {
		return
	}
	if now.Sub(ln.rateWaited) > rateBoundFor {
		// Hold the curve where it is by shifting its origin.
		ln.cutAt = ln.cutAt.Add(now.Sub(ln.grownAt))
		ln.grownAt = now
		return
	}
	ln.grownAt = now
	// x runs from -1 at the cut to 0 at the level; above it, it runs
	// twice as fast, to find grown capacity sooner.
	x := now.Sub(ln.cutAt).Seconds()/ln.recovery.Seconds() - 1
	if x > 0 {
		x *= 2
	}
	r := ln.wmax * (1 + (1-ln.cutBeta)*x*x*x)
	ln.records.SetLimitAt(now, rate.Limit(max(minRate, r)))
}

// growPerSecond raises the requests per second that batches are sized
// for by requestsGrowth each second, up to sizedRequestsPerSecond.
func (ln *lane) growPerSecond(now time.Time) {
	if !ln.perSecondAt.IsZero() {
		ln.perSecond = min(sizedRequestsPerSecond, ln.perSecond+requestsGrowth*now.Sub(ln.perSecondAt).Seconds())
	}
	ln.perSecondAt = now
}

// observeLatency keeps the latency baseline of full batches at the
// current size.
func (ln *lane) observeLatency(p permit, latency time.Duration) {
	if p.sizeProbe || 10*p.n < 9*ln.batch {
		return
	}
	ln.fullTimeouts = 0
	x := float64(latency)
	ln.fullMin.Add(x)
	if ln.fullCount == 0 {
		ln.fullMean = x
	} else {
		ln.fullMean += (x - ln.fullMean) / 8
	}
	ln.fullCount++
}

// queueing returns the recent latency of full batches over the best one,
// or 1 when they differ by less than latencySlack.
func (ln *lane) queueing() float64 {
	best := ln.fullMin.Min()
	if ln.fullCount < 4 || best <= 0 || ln.fullMean-best < float64(latencySlack) {
		return 1
	}
	return ln.fullMean / best
}

// growConcurrency raises concurrency when requests had to wait for a slot
// and the index is not queueing: by one per success in slow start (which
// doubles it each round trip), by one per round trip after.
func (ln *lane) growConcurrency(p permit) {
	q := ln.queueing()
	if q > shrinkRatio {
		ln.shrinkConcurrency(p, max(min(ln.conc, pipelined), ln.conc*3/4))
		return
	}
	if !ln.slotBound || ln.conc >= maxConcurrency || q > queueingRatio {
		return
	}
	if !ln.slowStart {
		if p.gen <= ln.concGen {
			return
		}
		ln.concGen = ln.issued
	}
	ln.conc++
	ln.slotBound = false
	ln.wakeSlots()
}

// shrinkConcurrency lowers concurrency to c, at most once per round trip,
// and ends slow start.
func (ln *lane) shrinkConcurrency(p permit, c int) {
	ln.slowStart = false
	if p.gen <= ln.concGen {
		return
	}
	ln.conc = max(1, c)
	ln.concGen = ln.issued
}

// judgeProbe adopts the size of a probe batch that cost no more per record
// than the current size (give or take latencySlack), and remembers it as
// too large otherwise. It reports whether it took the probe's 429 as a
// size too large, which then is no rate episode.
func (ln *lane) judgeProbe(p permit, latency time.Duration, e *Error, now time.Time) (refusedForSize bool) {
	ln.probeSize = 0
	if p.n <= ln.batch {
		// Sent before it filled (a stream's partial batch): it tells
		// nothing about the larger size.
		return false
	}
	switch {
	case e == nil && ln.fullMean == 0:
		// Nothing to compare with (the batches of the current size
		// failed or were not full): try again later.
	case e == nil:
		if float64(latency) > ln.probeBudget(p.n) {
			ln.setCeiling(p.n, now.Add(softCeilingFor))
			return false
		}
		if ln.slowStart {
			// Larger batches take longer: as many requests a second as
			// now need that many more in flight (Little's law). Waiting
			// for concurrency to double its way there would cost round
			// trips of the new, longer latency.
			want := int(math.Ceil(float64(ln.inFlight+1) * float64(latency) / ln.fullMean))
			ln.conc = max(ln.conc, min(want, maxConcurrency))
		}
		// The probe is the first sample of the new size, and enough of a
		// baseline for the next probe.
		ln.batch = p.n
		ln.sized = max(ln.sized, p.n)
		ln.fullMin.Reset()
		ln.fullMin.Add(float64(latency))
		ln.fullMean, ln.fullCount = float64(latency), 2
	case e.Class == ClassTimeout || e.Class == ClassTooLarge:
		ln.setCeiling(p.n, now.Add(timeoutCeilingFor))
	case e.Class == ClassRateLimited && ln.slowStart:
		// Slow start's probe is ten times the size, and an index whose
		// token bucket holds fewer records refuses it at any rate (3k
		// records/s with a burst of 750 never admits 1000 at once). Cut
		// for it, the rate would start from what the first few
		// milliseconds measured; the requests of the current size tell
		// whether the rate is too high as well. Slow start ends: the
		// next probes are the usual ones, which a 429 cuts for.
		ln.setCeiling(p.n, now.Add(softCeilingFor))
		ln.slowStart = false
		return true
	}
	return false
}

// probeBudget is the longest a probe batch of n records may take, in ns,
// for its size to be no worse per record than the current one.
func (ln *lane) probeBudget(n int) float64 {
	return probeWorse*ln.fullMean/float64(ln.batch)*float64(n) + float64(latencySlack)
}

// setCeiling remembers size as too large until until.
func (ln *lane) setCeiling(size int, until time.Time) {
	if ln.ceilSize == 0 || size <= ln.ceilSize {
		ln.ceilSize, ln.ceilUntil = size, until
	}
	if ln.sized >= size {
		ln.sized = max(1, size/2)
	}
	if ln.batch >= size {
		ln.batch = max(1, size/2)
		ln.fullMin.Reset()
		ln.fullCount = 0
	}
}

// rateMeter measures the rate of successful records over the last second,
// in ten buckets of 100 ms.
type rateMeter struct {
	buckets [10]int
	epoch   int64 // index of the newest bucket, in 100 ms units since the zero time
}

const meterBucket = 100 * time.Millisecond

func (m *rateMeter) add(now time.Time, n int) {
	m.advance(now)
	m.buckets[m.epoch%int64(len(m.buckets))] += n
}

// rateOver returns the rate over the last window, up to a second (whole
// buckets, the newest one partly elapsed). A meter younger than the window
// counts the time before it as empty: at the start, a burst that the
// index absorbed must not read as its capacity.
func (m *rateMeter) rateOver(now time.Time, window time.Duration) float64 {
	m.advance(now)
	n := int64(len(m.buckets))
	k := min(max(int64((window+meterBucket-1)/meterBucket), 1), n)
	sum := 0
	for i := range k {
		sum += m.buckets[(m.epoch-i)%n]
	}
	current := now.Sub(time.Unix(0, m.epoch*int64(meterBucket)))
	span := time.Duration(k-1)*meterBucket + current
	return float64(sum) / max(span, meterBucket/10).Seconds()
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

// peakMeter keeps the records accepted and refused in each of the last ten
// whole seconds, and the most ever accepted in one.
type peakMeter struct {
	accepted, refused [10]int
	sec               int64   // the newest second, in Unix seconds
	best              float64 // most records accepted in one whole second
}

func (m *peakMeter) add(now time.Time, accepted, refused int) {
	m.advance(now)
	i := m.sec % int64(len(m.accepted))
	m.accepted[i] += accepted
	m.refused[i] += refused
}

// refusedShare returns the share of records refused (429) over the last
// ten seconds.
func (m *peakMeter) refusedShare(now time.Time) float64 {
	m.advance(now)
	a, r := 0, 0
	for i := range m.accepted {
		a += m.accepted[i]
		r += m.refused[i]
	}
	if a+r == 0 {
		return 0
	}
	return float64(r) / float64(a+r)
}

func (m *peakMeter) advance(now time.Time) {
	s := now.Unix()
	if s <= m.sec {
		return
	}
	n := int64(len(m.accepted))
	if m.sec > 0 {
		// The second that ends is complete: it may be the best.
		m.best = max(m.best, float64(m.accepted[m.sec%n]))
	}
	for i := m.sec + 1; i <= s && i <= m.sec+n; i++ {
		m.accepted[i%n], m.refused[i%n] = 0, 0
	}
	m.sec = s
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

// errWoken reports a sleep cut short by its wake channel.
var errWoken = errors.New("woken")

// errStaleBatch reports a batch larger than a request may carry now, which
// acquireOrRecut did not admit: it is to be cut to sendLimit and tried
// again.
var errStaleBatch = errors.New("batch larger than the lane now allows")

// sleepOrWake sleeps d on c, returning early with errWoken when wake is
// closed, or with ctx's error when ctx ends.
func sleepOrWake(ctx context.Context, c clock, d time.Duration, wake <-chan struct{}) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-wake:
			cancel()
		case <-stop:
		}
	}()
	err := c.Sleep(wctx, d)
	if err != nil && ctx.Err() == nil {
		return errWoken
	}
	return err
}
