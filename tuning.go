package upsert

import "time"

// tuning holds every number of the limiter's controllers, each with the
// one reason it has that value. The evidence behind them (measurements on
// the randomized family of indexes, rejected alternatives) is in
// docs/limiter.md, not here.
type tuning struct {
	// Rate (ratecontrol.go).

	// recovery is how long the rate takes to climb back to the level of
	// the last 429 episode: long enough that the index's bucket refills
	// a little before it is probed again.
	recovery time.Duration
	// probeGain is how fast the rate rises above the level, as a share of
	// it one recovery past the level (eight times that two recoveries
	// past): slow at first, so that the index's bucket is not overdrawn
	// by much, and capacity that grew is found in a few recoveries.
	probeGain float64
	// cutDepth is how far below what the index accepted a cut goes, so
	// that its bucket refills within a fraction of a second (a batch is a
	// twentieth of a second's worth) instead of refusing the next request.
	cutDepth float64
	// recoveryDepth is the depth of a cut whose climb back takes one
	// recovery; deeper ones take longer, as the cube root of the depth.
	recoveryDepth float64
	// noiseAnswers is about how many answers the share of refusals an
	// index makes anyway is measured over (up to four times as many):
	// enough to tell it from an episode, few enough to follow a change.
	noiseAnswers float64
	// significance is how rarely refusals at the index's usual share
	// may start an episode by chance.
	significance float64

	// drainFor is how long after a cut 429s belong to its episode while
	// the index has accepted nothing since: it still refuses what came
	// before the cut (a request larger than its bucket leaves it in debt).
	drainFor time.Duration
	// minWindow and maxWindow bound the span over which the accepted rate
	// is measured at a cut: a few round trips, so that it holds several
	// answers, and at most what the index's bucket could blur.
	minWindow, maxWindow time.Duration
	// windowRequests is how many requests that span holds at least, so
	// that one request more or less moves the measure little.
	windowRequests float64
	// boundFor is how recently the rate must have held a request back for
	// it to keep growing: a cap that binds nothing is no measure.
	boundFor time.Duration
	// minRecords, minRequests and minBytes keep a cut rate above zero: a
	// trickle still probes the index.
	minRecords, minRequests, minBytes float64
	// priorHeadroom is how far above a known limit of the index the rate
	// starts: its bucket's burst is taken in until the first 429.
	priorHeadroom float64
	// burstFor is how much of a rate's tokens a lane saves up: requests
	// sent together within it do not wait for each other.
	burstFor time.Duration

	// Concurrency (conccontrol.go).

	startConcurrency, maxConcurrency int
	// epochAnswers is how many answers a concurrency level is measured
	// over before it is compared with another: fewer, and a heavy latency
	// tail decides.
	epochAnswers int
	// minGain is the share of the proportional gain in throughput that a
	// higher concurrency must bring to be kept: when the index is
	// saturated, more requests in flight only queue.
	minGain float64
	// holdEpochs is how many epochs a level waits after a trial that
	// changed nothing before the next one, doubling at each such trial up
	// to maxHold.
	holdEpochs, maxHold int

	// Batch size (batchcontrol.go).

	startBatch int
	// batchSamples is how many answers of full batches a size needs
	// before a larger one is probed, and how many a probe size needs to
	// be judged.
	batchSamples int
	// probeWorse is how much more a probe may cost per record than the
	// current size and still be adopted: a size that is no worse carries
	// more per request.
	probeWorse float64
	// ceilingFor is how long a size found too large stays off limits;
	// timeoutCeilingFor when it timed out.
	ceilingFor, timeoutCeilingFor time.Duration
	// requestsPerSecond is how many requests a second batches are sized
	// for under a capped record rate: small requests pass a nearly empty
	// bucket, and 20 leave room under Pinecone's 100 a second.
	requestsPerSecond float64
	// requestShare is the share of the request rate's cap that batches
	// may use up under a capped record rate: the rest is the request
	// cap's room to absorb jitter.
	requestShare float64
	// latencyShare is the share of the request timeout that a batch's
	// 99th percentile latency may take: a slower size times out in the
	// tail of an index that slows down now and then.
	latencyShare float64
}

// defaultTuning is the tuning of every lane.
var defaultTuning = tuning{
	recovery:       2 * time.Second,
	probeGain:      0.15,
	cutDepth:       0.15,
	recoveryDepth:  0.05,
	noiseAnswers:   256,
	significance:   0.01,
	drainFor:       time.Second,
	minWindow:      300 * time.Millisecond,
	maxWindow:      2 * time.Second,
	windowRequests: 16,
	boundFor:       time.Second,
	minRecords:     10,
	minRequests:    1,
	minBytes:       10_000,
	priorHeadroom:  0.1,
	burstFor:       100 * time.Millisecond,

	startConcurrency: 4,
	maxConcurrency:   64,
	epochAnswers:     16,
	minGain:          0.3,
	holdEpochs:       2,
	maxHold:          32,

	startBatch:        100,
	batchSamples:      3,
	probeWorse:        1.1,
	ceilingFor:        30 * time.Second,
	timeoutCeilingFor: time.Minute,
	requestsPerSecond: 20,
	requestShare:      0.8,
	latencyShare:      0.75,
}
