package upserttest

import (
	"fmt"
	"math"
	"time"
)

// DefaultMaxRequestBytes is the default largest Upsert request, in encoded
// bytes, that a [Server] accepts: Pinecone's "2 MB" request limit, read as
// 2,000,000 bytes (its documentation gives no unit beyond "MB"; the
// decimal reading is the safe one). See [WithMaxRequestBytes].
const DefaultMaxRequestBytes = 2_000_000

// An Option configures a [Server]. Options are applied in order by
// [NewServer]; when two options set the same thing, the last one wins.
//
// The functions that make Options panic when given a value that can never
// make sense (a negative duration, a NaN rate), and NewServer when given
// options that contradict each other (a sparse index with a dimension);
// such a call is a bug in the test, not a condition to simulate.
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

	// Index-wide limits, shared by every namespace (limits.go).
	writeUnitRate     bucketConfig // write units per second
	embedTokens       bucketConfig // embedding tokens per second, a minute's worth of burst
	monthlyWriteUnits int64        // 0: unlimited
	maxNamespaces     int          // 0: unlimited

	fieldMap   string        // the text field records must hold; "": any string field
	vectorType string        // "dense", "sparse", or "": the first write decides
	statsLag   time.Duration // how long DescribeIndexStats takes to count a new record
	now        func() time.Time

	slots int // 0: unlimited

	latencyBase      time.Duration
	latencyPerVector time.Duration
	latencyPerMiB    time.Duration
	slowAbove        int     // -1: disabled
	slowFactor       float64 // used when a request has more than slowAbove vectors
	jitter           jitterConfig

	changes []CapacityChange // sorted by At

	faults FaultFunc

	// stall is an outage that also fails the requests that reach their
	// write slot during it (a family index's; see withStall).
	stall struct{ every, length time.Duration }
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
		now:             time.Now,
	}
}

// WithDimension fixes the dimension of the index: every dense vector in an
// Upsert request must have exactly d values, or the whole request is rejected
// with codes.InvalidArgument and a message such as
//
//	Vector dimension 3 does not match the dimension of the index 4
//
// which, like Pinecone's and like most validation messages of this package,
// names no record (those that do are listed at [MaxVectorsPerRequest]).
//
// The default, d == 0, behaves like an index created with the dimension of
// its first dense vector: the first dense vector stored fixes the dimension,
// and later mismatches are rejected. [Server.Reset] forgets a dimension
// learned that way, but not one set with WithDimension. An index with a
// dimension is dense: a vector without dense values (sparse values only,
// or none) gets the dimension error, as on Pinecone:
//
//	Vector dimension 0 does not match the dimension of the index 4
//
// The sparse values of a hybrid vector are not subject to the dimension.
// WithDimension panics if d < 0 or d exceeds MaxDimension, and NewServer
// if d > 0 is combined with WithVectorType(VectorTypeSparse): a sparse
// index has no dimension.
func WithDimension(d int) Option {
	if d < 0 || d > MaxDimension {
		panic(fmt.Sprintf("upserttest: WithDimension(%d): dimension must be in [0, %d]", d, MaxDimension))
	}
	return func(c *config) { c.dimension = d }
}

// initialShape is the shape of the index before any write: the type of
// WithVectorType and the dimension of WithDimension. An index with a
// dimension is dense, WithVectorType or not.
func (c *config) initialShape() indexShape {
	shape := indexShape{vectorType: c.vectorType, dim: c.dimension}
	if shape.dim > 0 {
		shape.vectorType = VectorTypeDense
	}
	return shape
}

// check panics if options contradict each other, which no index could
// satisfy: WithVectorType(VectorTypeSparse) with WithDimension(d > 0), a
// sparse index having no dimension. NewServer calls it.
func (c *config) check() {
	if c.vectorType == VectorTypeSparse && c.dimension > 0 {
		panic(fmt.Sprintf("upserttest: NewServer: WithVectorType(%q) with WithDimension(%d): a sparse index has no dimension", VectorTypeSparse, c.dimension))
	}
}

// WithAPIKey makes the server require the given API key: a request whose
// "api-key" metadata (the header the Pinecone SDK sends, filled from
// pinecone.NewClientParams.ApiKey) differs from key, or is missing, is
// answered codes.Unauthenticated and is not passed to the fault script.
// This applies to every gRPC method, not only Upsert, and to REST records
// upserts, whose "Api-Key" header is checked likewise, before their body is
// read, and which are answered 401 Unauthorized whatever their body. An
// upsert refused so, of either API, gets no [Request.Seq] and its bytes
// are not counted in [Stats.BytesReceived]; it counts in Stats.Requests
// and, as codes.Unauthenticated, in Stats.Codes.
//
// By default, or with key == "", any key (or none) is accepted.
func WithAPIKey(key string) Option {
	return func(c *config) { c.apiKey = key }
}

// WithMaxRequestBytes sets the largest Upsert request the server accepts, in
// bytes of the encoded protobuf message. The default is
// [DefaultMaxRequestBytes] (2,000,000).
//
// The limit is enforced by gRPC itself, as its maximum receive message size,
// so a larger request gets what gRPC answers (what Pinecone answers to a
// gRPC request over 2 MB is not published): codes.ResourceExhausted with the
// message
//
//	grpc: received message larger than max (2100000 vs. 2000000)
//
// Such a request never reaches the service: it is not passed to the fault
// script, gets no [Request.Seq], and its bytes are not counted in
// [Stats.BytesReceived]; it is counted in [Stats.Requests] and
// [Stats.Codes], possibly a moment after the client got its answer.
// The limit also applies to Fetch and DescribeIndexStats requests, and to
// the body of REST records upserts, which are answered 400 Bad Request
// with code 3 (codes.InvalidArgument) in the error body, as Pinecone
// answers them (pinecone-ts-client issue #23; the TypeScript client's
// PineconeBadRequestError in pinecone-vercel-starter PR #28), counted
// under codes.InvalidArgument in [Stats.Codes], and do not reach the
// service either; the message is Pinecone's, "Your request is larger than
// the maximum supported size - 2MB. Please try to reduce your batch
// size.", with the default limit, and names n in bytes otherwise.
// WithMaxRequestBytes panics if n < 1.
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
// with Pinecone's message for the limit (the vector and byte buckets
// answer the upsert size's, the request bucket the request rate's, naming
// the namespace and its rate):
//
//	Request failed. You've reached the max upsert size limit per second for index upserttest. Pace your upserts or contact Pinecone Support (https://app.pinecone.io/organizations/-/settings/support/ticket) to request a higher limit.
//	Request failed. You've reached the upsert QPS limit for namespace docs (100 QPS). Pace your upsert requests or contact Pinecone Support (https://app.pinecone.io/organizations/-/settings/support/ticket) to request a higher limit.
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
// of a Pinecone serverless index: 50 MB of upsert data per second (read as
// 50,000,000 bytes, as the 2 MB request limit is 2,000,000) and 100 Upsert
// requests per second, each with a burst of one second's worth:
//
//	WithByteRate(50e6, 50e6), WithRequestRate(100, 100)
//
// Options given after Serverless override it.
func Serverless() Option {
	bytes := WithByteRate(50e6, 50e6)
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

// WithWriteUnitRate limits the write units per second of the whole index,
// shared by all its namespaces: Pinecone meters an upsert at 1 write unit
// per KB (1,000 bytes, rounded up) of request, at least 5 per request, plus
// 1 per KB (rounded up) of the records it overwrites (the size of each
// stored under an id it writes: its Vector message, or its NDJSON line for
// a record). It is an admission bucket like [WithRate]'s, checked together
// with the namespace's buckets for the request's units; the overwrite
// units are only known once the write is done, and are taken then,
// possibly leaving the bucket in debt, which its refill repays before the
// next request is admitted. A request it refuses is answered
// codes.ResourceExhausted (HTTP 429) with
//
//	Request failed. You've reached the max write units per second for index upserttest. Pace your upserts or contact Pinecone Support (https://app.pinecone.io/organizations/-/settings/support/ticket) to request a higher limit.
//
// Pinecone has such a limit but publishes neither its figure nor its
// message: this one is written in the manner of its others. Off by
// default; perSecond <= 0 turns it off.
func WithWriteUnitRate(perSecond float64, burst int) Option {
	b := newBucketConfig("WithWriteUnitRate", perSecond, burst)
	return func(c *config) { c.writeUnitRate = b }
}

// WithMonthlyWriteUnits gives the project a monthly quota of write units
// (Pinecone's Starter plan has 2,000,000, Builder 5,000,000), counted as
// [WithWriteUnitRate] says, overwrites included, over every admitted upsert
// request since NewServer or [Server.Reset] ([Stats.WriteUnits]). Once they
// are spent,
// every upsert request, of either API, is answered codes.ResourceExhausted
// (HTTP 429) with Pinecone's message
//
//	Request failed. You've reached your write unit limit for the current month. To continue writing data, upgrade your plan.
//
// and counted in [Stats.QuotaExceeded]. The request that crosses the quota
// is still admitted. Off by default; n <= 0 turns it off.
func WithMonthlyWriteUnits(n int64) Option {
	return func(c *config) { c.monthlyWriteUnits = max(n, 0) }
}

// WithMaxNamespaces limits the namespaces of the index that hold vectors
// or records (Pinecone's Starter plan allows 100 per serverless index): an
// upsert into a new namespace beyond n is answered
// codes.PermissionDenied (HTTP 403; the control plane names it
// QUOTA_EXCEEDED, the data plane's body carries only the code, 7) with
// Pinecone's message
//
//	Request failed. You've reached the max namespaces allowed in serverless index upserttest. To add more namespaces, upgrade your plan.
//
// and counted in [Stats.QuotaExceeded], nothing of it written. The quota
// is checked at admission, and a namespace counts from the admission of
// its first upsert, before that upsert has written (it stops counting if
// the upsert writes nothing, refused or faulted): upserts into new
// namespaces that arrive together cannot exceed n. Off by default; n <= 0
// turns it off.
func WithMaxNamespaces(n int) Option {
	return func(c *config) { c.maxNamespaces = max(n, 0) }
}

// WithEmbedTokensPerMinute limits the embedding tokens per minute of REST
// records upserts (integrated embedding), for the whole server, as Pinecone
// limits them per model and project (llama-text-embed-v2 passages: 250,000
// on Starter, 1,000,000 on Standard). A record costs a token per 4 bytes of
// the text it embeds, rounded up, at least 1 (the server embeds nothing;
// the count is an estimate of the same order as a tokenizer's). With
// [WithFieldMap], that text is the field map's field alone, as Pinecone
// embeds only that field: metadata beside it, however long, costs no
// tokens. Without WithFieldMap the server cannot tell the text from the
// metadata and counts every string field but the id, which overestimates
// a record with string metadata. It is an admission bucket refilling
// tokens/60 per second that holds a minute's worth; a request it refuses
// is answered codes.ResourceExhausted (HTTP 429) with Pinecone's message
//
//	Request failed. You've reached the max embedding tokens per minute (250000) model 'llama-text-embed-v2' and input type 'passage' for the current project. To increase this limit, upgrade your plan.
//
// and counted in [Stats.RateLimited]. Off by default; tokens <= 0 turns
// it off.
func WithEmbedTokensPerMinute(tokens int) Option {
	b := newBucketConfig("WithEmbedTokensPerMinute", float64(tokens)/60, tokens)
	return func(c *config) { c.embedTokens = b }
}

// WithFieldMap names the text field of the index's field_map: the field
// of each record that an index with integrated embedding embeds (such as
// "chunk_text"). A REST records upsert holding a record without that
// field as a non-empty string is refused whole with codes.InvalidArgument
// (HTTP 400), nothing of it written, with a message such as
//
//	Record must have the field 'chunk_text' of the index's field_map, a non-empty string to embed
//
// Pinecone refuses such records, but its wording is not published: this
// message is not Pinecone's verified text, and a test should not match
// it. Without WithFieldMap, and with "", the server refuses only the
// records that no field map could embed: those with no string field
// besides "_id" or "id" (an empty string counts as one).
//
// The field map also decides what [WithEmbedTokensPerMinute] charges: with
// it, only that field's text; without it, every string field but the id.
func WithFieldMap(field string) Option {
	return func(c *config) { c.fieldMap = field }
}

// WithVectorType makes the index dense or sparse, as Pinecone's indexes
// are: a sparse index refuses a vector with dense values, a dense index
// one with sparse values only, with codes.InvalidArgument (a dense index
// with a known dimension answers the dimension error, see
// [WithDimension]); and DescribeIndexStats says the type (VectorType).
//
// By default, and with "", the first vector written decides, as if the
// index had been created for it: after a vector with sparse values only,
// the index is sparse and refuses dense values ("Sparse index does not
// support dense values"); after one with dense values, it is dense and has
// that dimension. Within a request, each vector decides for the next ones.
// An index with [WithDimension] (d > 0) is dense from the start. Like
// Pinecone's, DescribeIndexStats says the type however it was decided; it
// says none only while nothing has decided it (no option, no vector
// written yet: records of REST records upserts do not decide it).
// [Server.Reset] forgets a type decided by a write. A test that needs both
// kinds needs two servers. WithVectorType panics on another value, and
// NewServer when VectorTypeSparse is combined with WithDimension(d > 0).
func WithVectorType(t string) Option {
	if t != "" && t != VectorTypeDense && t != VectorTypeSparse {
		panic(fmt.Sprintf("upserttest: WithVectorType(%q): want %q, %q or \"\"", t, VectorTypeDense, VectorTypeSparse))
	}
	return func(c *config) { c.vectorType = t }
}

// The vector types of [WithVectorType].
const (
	VectorTypeDense  = "dense"
	VectorTypeSparse = "sparse"
)

// WithStatsLag makes DescribeIndexStats count a new vector, or a new
// record of a REST records upsert, only d after it was written, as Pinecone's eventually consistent stats do: a test that
// reads counts right after an upsert must wait for them, as it would with
// a real index. [Server.Count] and the other accessors are not delayed.
// The default is 0, counts at once, so that existing tests keep working;
// turn it on to check that yours do not assume instant counts. It panics
// if d is negative.
func WithStatsLag(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("upserttest: WithStatsLag(%v): negative duration", d))
	}
	return func(c *config) { c.statsLag = d }
}

// WithClock makes the server read the time from now instead of time.Now
// for its limits: the admission buckets, the embedding tokens per minute,
// the stats lag, and [Request.Time] and [Request.Elapsed]. A test whose
// client runs on virtual time can so meet per-minute limits without
// waiting minutes. Latencies, delays and timeouts still pass in real time.
// now must be safe for concurrent use and never go back; nil is time.Now.
func WithClock(now func() time.Time) Option {
	if now == nil {
		now = time.Now
	}
	return func(c *config) { c.now = now }
}

// withStall makes the outage windows of [Outage](every, length, …) stop
// writes as well as arrivals: a request that waited for a write slot and
// gets it during one fails with codes.Unavailable instead of being
// written, as an index that is down writes nothing (the fault script sees
// only arrivals). Requests already being written finish.
func withStall(every, length time.Duration) Option {
	return func(c *config) { c.stall.every, c.stall.length = every, length }
}

// stalled reports whether elapsed, from NewServer, falls in an outage
// window of withStall.
func (c *config) stalled(elapsed time.Duration) bool {
	every, length := c.stall.every, c.stall.length
	return every > 0 && elapsed >= 0 && elapsed%every >= every-length
}
