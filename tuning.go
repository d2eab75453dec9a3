package upsert

import "time"

// tuning holds every number of the limiter's controllers, each with the
// one reason it has that value. The evidence behind them (the simulated
// and the served family of indexes, rejected alternatives) is in
// docs/limiter.md, not here. It has more than twenty fields so that no
// number lives anywhere else.
type tuning struct {
	// Rate (ratecontrol.go).

	// recovery is how long the rate takes to climb back to the level
	// after a cut of recoveryDepth: long enough that the index's bucket
	// refills before it is probed again, short enough that a dip costs
	// little.
	recovery time.Duration
	// recoveryDepth is the depth of a cut whose climb back takes one
	// recovery; deeper ones take longer, as the cube root of the depth
	// (CUBIC's K).
	recoveryDepth float64
	// probeGain is how far the rate rises above the level one recovery
	// past it, as a share of it (eight times that two recoveries past):
	// slow at first, so that the index's bucket is overdrawn by little,
	// and capacity that grew fourfold is found within three recoveries.
	probeGain float64
	// probeSearch is how many times the level the probe reaches, no
	// request refused, before the limit searches up instead: the capacity
	// rose, and doubling finds it sooner than the cubic.
	probeSearch float64
	// cutDepth is how far below what the index accepted a cut goes: a
	// batch is a twentieth of a second's worth, and the index's bucket
	// refills one in half a second at that margin; deeper cuts give up
	// more of the plateau than the refusals they spare cost. The measure
	// it cuts from includes what the bucket had saved during the climb.
	cutDepth float64
	// noiseAnswers is the fewest answers the usual share of refusals is
	// counted over (those not seen yet count as accepted): most indexes
	// refuse nothing, and a bucket refilling late refuses a few.
	noiseAnswers float64
	// randomAnswers replaces noiseAnswers once the index refuses at random
	// (refusals in two episodes' climbs): those are its own, and a share
	// backed by fewer answers follows it sooner.
	randomAnswers float64
	// significance is how rarely refusals at the index's usual share may
	// start an episode by chance.
	significance float64
	// closeAnswers is how many of the last answers three refusals must
	// fall among to start the first episode (unless two come in a row),
	// or an episode while the limit climbs back: a bucket that overflows
	// refuses some of every round trip, and an index refusing 4% at random
	// gives three among 16 answers about once in 36 such spans, against
	// one in two among 64.
	closeAnswers int
	// drainFor is how long after a cut refusals while the index has
	// accepted nothing since belong to the episode: it still refuses
	// what came before the cut (a request larger than its bucket leaves
	// it in debt).
	drainFor time.Duration
	// minWindow and maxWindow bound the span over which a rate is
	// measured: a few round trips, so that it holds several answers, and
	// at most what the meters keep. A search from a measured level (a cut
	// other than the first, or a first floor measured under what the index
	// accepted) doubles no sooner than minWindow: it starts near the
	// capacity, and that pace spares its overshoot.
	minWindow, maxWindow time.Duration
	// firstSearchFor is the least time the search after a first cut whose
	// floor is a guess takes to double (others take minWindow): that floor
	// was set before anything was measured, often several doublings under
	// the capacity, and on a fast index a short run spends its seconds there.
	firstSearchFor time.Duration
	// windowRequests is how many requests that span holds at least, so
	// that one request more or less moves the measure little.
	windowRequests float64
	// boundFor is how recently a rate must have held a request back for
	// it to keep growing, and to shape batches: a cap that binds nothing
	// is no measure.
	boundFor time.Duration
	// bindingShare is how much of a rate the lane must send, over the
	// window that measures it, for that rate to keep the concurrency from
	// trying a higher level: requests sent in waves wait for tokens under
	// a rate they do not reach on average.
	bindingShare float64
	// minRecords, minRequests and minBytes keep a cut rate above zero: a
	// trickle still probes the index.
	minRecords, minRequests, minBytes float64
	// priorHeadroom is how far above a known limit of the index a rate
	// starts: the index's own bucket holds a burst to take in.
	priorHeadroom float64
	// priorMatch is how close to a known limit of the index what it
	// accepted at a cut must be for the limit to be confirmed (and no
	// longer probed above): a window of a few requests measures no
	// closer.
	priorMatch float64
	// burstFor is how much of a rate's tokens a lane saves up: requests
	// sent together within it do not wait for each other.
	burstFor time.Duration
	// minShare is the least fraction of a shared lane's rates a writer
	// holds (lane_share.go): a writer whose producer is slow is split a
	// small part, not none, so that it is not starved while its demand
	// catches up.
	minShare float64
	// shareHeadroom is how many times what it sends a writer of a shared
	// lane asks for while its part holds nothing back: room to grow into
	// before the next exchange with the store, without a round of being
	// held back first.
	shareHeadroom float64
	// shareDemandEvery is how often a shared lane reports its writer's
	// demand between answers, so that a writer gone quiet (a Writer
	// waiting for input) gives its part back within the meter's span.
	shareDemandEvery time.Duration
	// shareMeasureFor is the least span over which a cut of a shared lane
	// measures what the index accepted from all its writers since the
	// last cut: a cut follows refusals, so the index's bucket is empty at
	// both ends and its burst adds nothing; five of upsertredis's
	// exchanges, whose lag moves the count by one at each end.
	shareMeasureFor time.Duration

	// Concurrency (conccontrol.go).

	// startConcurrency is the article's pool of four; maxConcurrency
	// bounds the goroutines and the index's load.
	startConcurrency, maxConcurrency int
	// minConcurrency is the fewest requests the lane keeps in flight once
	// the batch size's first search is over, where twice the latency fits
	// the timeout: with two, one request's trip to the index overlaps the
	// other's service, where one alone leaves the index idle for every trip.
	minConcurrency int
	// epochAnswers is how many answers, at least, a concurrency level is
	// measured over out of slow start: fewer, and a heavy latency tail
	// decides.
	epochAnswers int
	// minGain is the share of the proportional gain in throughput that a
	// higher concurrency must bring to be kept: when the index is
	// saturated, more requests in flight only queue.
	minGain float64
	// judgeNoise is how many standard errors of the difference slow
	// start's trial may fall short of paying by and be measured on rather
	// than rejected: measured on half the level's answers, a doubling that
	// pays reads as not paying by chance on a jittery index, and its
	// rejection ends slow start.
	judgeNoise float64
	// retryNoise is how many standard errors of the difference a
	// doubling in slow start may fall short of paying by and be tried
	// once more rather than end slow start: one comparison of a jittery
	// index's few answers misreads a doubling that pays often enough, and
	// an early end leaves the level far under the index's for the run.
	retryNoise float64
	// downShare is the share of an epoch a lower level tried is measured
	// over: while tried it gives up throughput if it does not pay, and one
	// kept wrongly is undone by the next trial up (a higher level that only
	// queues is measured whole).
	downShare float64
	// queueShare is the share of the request timeout that slow start's
	// next doubling may take, at the mean latency it would have if the
	// index were saturated (the level's latency times the doubling), before
	// a lower level is tested: past it, a saturated index times out many of
	// that level's requests.
	queueShare float64
	// waveQueued is how many times the latency of the larger size's answer
	// that raised the level (rule 17c) its wave's answers must take, and
	// more than the spread, to have queued: waiting for a slot adds a
	// service time to the requests that wait, where the client's own
	// noise on a steady index adds a few percent.
	waveQueued float64
	// holdEpochs is how many epochs a level waits after a trial that
	// changed nothing before the next one, doubling at each such trial up
	// to maxHold: a level found is left alone, and looked at again.
	holdEpochs, maxHold int
	// sizeBand is how far (as a ratio) the batch size may drift from the
	// size a level's latencies were measured at before they are
	// forgotten: under a capped rate the size follows every move of the
	// rate, and an epoch restarted at each never ended.
	sizeBand float64

	// Batch size (batchcontrol.go).

	// startBatch is the article's safe start.
	startBatch int
	// startBracket is how many times the size adopted a size found too
	// large must be for slow start to go on trying between them: one
	// sample a step, so a few steps.
	startBracket float64
	// batchSamples is how many answers of full batches a size needs
	// before a larger one is tried, and how many a size tried is judged
	// on out of slow start.
	batchSamples int
	// probeWorse is how much more a size tried may cost per record than
	// the size kept and still be kept: a size no worse carries more per
	// request.
	probeWorse float64
	// costNoise is how many standard errors of the difference (at the
	// pooled spread) a size tried may cost per record above the size kept,
	// beyond probeWorse, and still be kept: judged on a few answers, a
	// larger size no worse per record reads worse by chance.
	costNoise float64
	// halfCheaper is how many times less per record, beyond probeWorse,
	// batches of half the size adopted must cost to be adopted untried:
	// they are the pieces of batches that timed out, sent while the lane
	// sheds, so they meet shorter queues than the size adopted met.
	halfCheaper float64
	// halfAnswers is how many such batches are enough: the two pieces of
	// one batch split.
	halfAnswers int
	// carryShare is how many times the capped rate the lane's requests in
	// flight must be able to carry in batches: where few slots keep the
	// concurrency down, only larger batches carry the whole rate.
	carryShare float64
	// ceilingFor is how long a size found too large stays off limits;
	// timeoutCeilingFor when it timed out or was refused as too large.
	ceilingFor, timeoutCeilingFor time.Duration
	// requestsPerSecond is how many requests a second batches are sized
	// for under a capped record rate: small requests pass a nearly empty
	// bucket, and 20 leave room under Pinecone's 100 a second.
	requestsPerSecond float64
	// requestShare is the share of the request rate's cap that batches
	// may use up under a capped record rate: the rest absorbs jitter.
	requestShare float64
	// latencyShare is the share of the request timeout that the 99th
	// percentile latency of a size tried may take: a slower size times out
	// in its tail.
	latencyShare float64
}

// defaultTuning is the tuning of every lane.
var defaultTuning = tuning{
	recovery:         1500 * time.Millisecond,
	recoveryDepth:    0.05,
	probeGain:        0.15,
	probeSearch:      2,
	cutDepth:         0.1,
	noiseAnswers:     256,
	randomAnswers:    128,
	significance:     0.01,
	closeAnswers:     16,
	drainFor:         time.Second,
	minWindow:        300 * time.Millisecond,
	maxWindow:        2 * time.Second,
	windowRequests:   16,
	firstSearchFor:   200 * time.Millisecond,
	boundFor:         time.Second,
	bindingShare:     0.8,
	minRecords:       10,
	minRequests:      1,
	minBytes:         10_000,
	priorHeadroom:    0.1,
	priorMatch:       0.15,
	burstFor:         100 * time.Millisecond,
	minShare:         0.01,
	shareHeadroom:    2,
	shareDemandEvery: 500 * time.Millisecond,
	shareMeasureFor:  500 * time.Millisecond,

	startConcurrency: 4,
	maxConcurrency:   64,
	minConcurrency:   2,
	epochAnswers:     16,
	minGain:          0.3,
	judgeNoise:       0.5,
	retryNoise:       1.5,
	downShare:        0.25,
	queueShare:       0.75,
	waveQueued:       1.3,
	holdEpochs:       2,
	maxHold:          32,
	sizeBand:         1.25,

	startBatch:        100,
	startBracket:      2,
	batchSamples:      3,
	probeWorse:        1.1,
	costNoise:         1,
	halfCheaper:       1.5,
	halfAnswers:       2,
	carryShare:        1.5,
	ceilingFor:        30 * time.Second,
	timeoutCeilingFor: time.Minute,
	requestsPerSecond: 20,
	requestShare:      0.8,
	latencyShare:      0.75,
}

// leastBatch is the fewest records a batch carries under a capped rate:
// a tenth of the start size (batchControl.maxSize; the search's pace,
// lane.leastAmount).
func (t *tuning) leastBatch() float64 { return float64(t.startBatch) / 10 }
