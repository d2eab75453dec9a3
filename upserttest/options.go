package upserttest

import (
	"fmt"
	"math"
	"time"
)

// DefaultMaxRequestBytes is the default largest Upsert request, in encoded
// bytes, that a [Server] accepts: 2 MiB, Pinecone's "2 MB" request limit.
// See [WithMaxRequestBytes].
const DefaultMaxRequestBytes = 2 * 1024 * 1024

// An Option configures a [Server]. Options are applied in order by
// [NewServer]; when two options set the same thing, the last one wins.
//
// The functions that make Options panic when given a value that can never
// make sense (a negative duration, a NaN rate); such a call is a bug in the
// test, not a condition to simulate.
type Option func(*config)

// config is the fixed configuration of a Server, built by NewServer from its
// Options and never changed afterwards (except faults, see Server.SetFaults).
type config struct {
	dimension       int    // 0: fixed by the first dense vector stored
	apiKey          string // "": any key is accepted
	maxRequestBytes int

	vectorRate  bucketConfig // vectors per second
	byteRate    bucketConfig // request bytes per second
	requestRate bucketConfig // requests per second

	slots int // 0: unlimited

	latencyBase      time.Duration
	latencyPerVector time.Duration
	latencyPerMiB    time.Duration
	slowAbove        int     // -1: disabled
	slowFactor       float64 // used when a request has more than slowAbove vectors

	faults FaultFunc
}

// bucketConfig describes one token bucket. A zero rate disables it.
type bucketConfig struct {
	rate  float64
	burst int
}

func (b bucketConfig) enabled() bool { return b.rate > 0 }

func defaultConfig() config {
	return config{
		maxRequestBytes: DefaultMaxRequestBytes,
		slowAbove:       -1,
		slowFactor:      1,
	}
}

// WithDimension fixes the dimension of the index: every dense vector in an
// Upsert request must have exactly d values, or the whole request is rejected
// with codes.InvalidArgument and a message such as
//
//	Vector dimension 3 does not match the dimension of the index 4
//
// which, like every validation message of this package, names no record.
//
// The default, d == 0, behaves like an index created with the dimension of
// its first dense vector: the first dense vector stored fixes the dimension,
// and later mismatches are rejected. [Server.Reset] forgets a dimension
// learned that way, but not one set with WithDimension. Sparse values are not
// subject to the dimension. WithDimension panics if d < 0 or d exceeds
// MaxDimension.
func WithDimension(d int) Option {
	if d < 0 || d > MaxDimension {
		panic(fmt.Sprintf("upserttest: WithDimension(%d): dimension must be in [0, %d]", d, MaxDimension))
	}
	return func(c *config) { c.dimension = d }
}

// WithAPIKey makes the server require the given API key: a request whose
// "api-key" metadata (the header the Pinecone SDK sends, filled from
// pinecone.NewClientParams.ApiKey) differs from key, or is missing, is
// answered codes.Unauthenticated and is not passed to the fault script.
// This applies to every gRPC method, not only Upsert, and to REST records
// upserts, whose "Api-Key" header is checked likewise and which are answered
// 401 Unauthorized.
//
// By default, or with key == "", any key (or none) is accepted.
func WithAPIKey(key string) Option {
	return func(c *config) { c.apiKey = key }
}

// WithMaxRequestBytes sets the largest Upsert request the server accepts, in
// bytes of the encoded protobuf message. The default is
// [DefaultMaxRequestBytes] (2 MiB).
//
// The limit is enforced by gRPC itself, as its maximum receive message size,
// so a larger request gets exactly what the real service answers:
// codes.ResourceExhausted with the message
//
//	grpc: received message larger than max (2100000 vs. 2097152)
//
// Such a request never reaches the service: it is not passed to the fault
// script, gets no [Request.Seq], and its bytes are not counted in
// [Stats.BytesReceived]; it is counted in [Stats.Requests] and
// [Stats.Codes], possibly a moment after the client got its answer.
// The limit also applies to Fetch and DescribeIndexStats requests, and to
// the body of REST records upserts, which are answered 413 Request Entity
// Too Large (counted under codes.ResourceExhausted in [Stats.Codes]) and do
// not reach the service either. WithMaxRequestBytes panics if n < 1.
func WithMaxRequestBytes(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("upserttest: WithMaxRequestBytes(%d): limit must be positive", n))
	}
	return func(c *config) { c.maxRequestBytes = n }
}

// WithRate limits, per namespace, how many vectors the server admits:
// an admission token bucket that refills at vectorsPerSecond tokens per
// second and holds at most burst tokens. It starts full.
//
// Each Upsert request needs one token per vector, and each REST records
// upsert one token per record (its vectors being embedded by the service);
// records and vectors upserted into the same namespace share its buckets,
// and its slots ([WithSlots]). A request is admitted only
// if every configured bucket of its namespace ([WithRate], [WithByteRate],
// [WithRequestRate]) holds enough tokens at its arrival; only then are tokens
// taken from all of them. Otherwise it is answered codes.ResourceExhausted
// with the message
//
//	Request failed. You've reached the max upsert size limit per second for index upserttest. Pace your upserts or contact Pinecone support to request a higher limit.
//
// nothing is written, no tokens are taken, and [Stats.RateLimited] is
// incremented. A request that needs more tokens than burst is admitted when
// the bucket is full and leaves it in debt, repaid by the refill before
// anything else is admitted: no request is rejected forever, and the rate
// stays the namespace's capacity whatever the request sizes.
//
// Admission happens at arrival, before a request waits for a write slot
// ([WithSlots]). Rate limiting is off by default; vectorsPerSecond <= 0
// turns it off. A burst < 1 means one second's worth of tokens
// (vectorsPerSecond rounded up).
func WithRate(vectorsPerSecond float64, burst int) Option {
	b := newBucketConfig("WithRate", vectorsPerSecond, burst)
	return func(c *config) { c.vectorRate = b }
}

// WithByteRate is like [WithRate], but the bucket holds request bytes (the
// encoded size of the Upsert request, or the body size of a REST request,
// as in [Request.Bytes]) instead of vectors.
func WithByteRate(bytesPerSecond float64, burst int) Option {
	b := newBucketConfig("WithByteRate", bytesPerSecond, burst)
	return func(c *config) { c.byteRate = b }
}

// WithRequestRate is like [WithRate], but each Upsert request needs a single
// token, whatever its size.
func WithRequestRate(perSecond float64, burst int) Option {
	b := newBucketConfig("WithRequestRate", perSecond, burst)
	return func(c *config) { c.requestRate = b }
}

// Serverless returns an Option that applies the per-namespace upsert limits
// of a Pinecone serverless index: 50 MB of upsert data per second (taken as
// 50 MiB, like the 2 MB request limit is 2 MiB) and 100 Upsert requests per
// second, each with a burst of one second's worth:
//
//	WithByteRate(50<<20, 50<<20), WithRequestRate(100, 100)
//
// Options given after Serverless override it.
func Serverless() Option {
	bytes := WithByteRate(50<<20, 50<<20)
	requests := WithRequestRate(100, 100)
	return func(c *config) {
		bytes(c)
		requests(c)
	}
}

func newBucketConfig(name string, perSecond float64, burst int) bucketConfig {
	if math.IsNaN(perSecond) {
		panic(fmt.Sprintf("upserttest: %s: rate is NaN", name))
	}
	if perSecond <= 0 {
		return bucketConfig{}
	}
	if burst < 1 {
		burst = int(math.Min(math.Ceil(perSecond), math.MaxInt32))
	}
	return bucketConfig{rate: perSecond, burst: burst}
}

// WithSlots limits, per namespace, how many Upsert requests are written at
// once to n. An admitted request first waits for a free slot, in an unbounded
// first-in first-out queue; it holds the slot while its latency
// ([WithLatency]) elapses and its vectors are written, then frees it.
//
// A request whose client gives up (its context is canceled or its deadline
// passes) while it is still queued is dropped without writing. Once a request
// holds a slot, it is written even if its client has gone away.
// [Stats.MaxInFlight] and [Stats.MaxQueued] show how full the slots and the
// queue got.
//
// The default, and n <= 0, is unlimited.
func WithSlots(n int) Option {
	if n < 0 {
		n = 0
	}
	return func(c *config) { c.slots = n }
}

// WithLatency sets how long an Upsert request takes to write once it holds a
// write slot: base + perVector*n, where n is the number of vectors in the
// request. It adds to [WithByteLatency] and is scaled by [WithSlowAbove].
//
// The write is applied at the end of that time, and then the answer is sent,
// even if the client has already timed out or canceled: the ambiguous
// timeout of a real service, where the client cannot know whether its write
// landed. The default is no latency. WithLatency panics if either duration is
// negative.
func WithLatency(base, perVector time.Duration) Option {
	if base < 0 || perVector < 0 {
		panic(fmt.Sprintf("upserttest: WithLatency(%v, %v): negative duration", base, perVector))
	}
	return func(c *config) {
		c.latencyBase = base
		c.latencyPerVector = perVector
	}
}

// WithByteLatency adds perMiB for each MiB (2^20 bytes, pro rata) of the
// encoded Upsert request to the write latency of [WithLatency]. The default
// is 0. WithByteLatency panics if perMiB is negative.
func WithByteLatency(perMiB time.Duration) Option {
	if perMiB < 0 {
		panic(fmt.Sprintf("upserttest: WithByteLatency(%v): negative duration", perMiB))
	}
	return func(c *config) { c.latencyPerMiB = perMiB }
}

// WithSlowAbove multiplies the write latency ([WithLatency],
// [WithByteLatency]) by factor for Upsert requests with more than vectors
// vectors, so that large batches can be made to time out at the client while
// small ones succeed. By default no request is slowed down. WithSlowAbove
// panics if vectors < 0 or factor is negative or NaN.
func WithSlowAbove(vectors int, factor float64) Option {
	if vectors < 0 || !(factor >= 0) || math.IsInf(factor, 0) {
		panic(fmt.Sprintf("upserttest: WithSlowAbove(%d, %v): invalid argument", vectors, factor))
	}
	return func(c *config) {
		c.slowAbove = vectors
		c.slowFactor = factor
	}
}

// WithFaults installs a fault script, consulted once for every upsert
// request (gRPC Upsert or REST records upsert) that reaches the service and
// passes the API key check ([WithAPIKey]), before validation and admission;
// see [Fault] for what its answer can do. It can be replaced while the
// server runs with [Server.SetFaults]. The default, and nil, is no faults.
func WithFaults(f FaultFunc) Option {
	return func(c *config) { c.faults = f }
}
