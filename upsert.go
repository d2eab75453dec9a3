// Package upsert writes vectors into a Pinecone index without losing any:
// every record either lands or is reported with its cause, and the index is
// used close to its capacity without tuning.
//
// [All] upserts a slice, [Stream] an iter.Seq of any length with bounded
// memory, and a [Writer] takes records as a service produces them;
// [Records] does the same for integrated-embedding records. Each cuts the
// records into requests by count and by encoded size, sends them through a
// bounded set of concurrent requests paced by an adaptive [Limiter], and
// classifies every failure ([Classify]): 429s are retried after a jittered
// backoff while the limiter slows down, timed-out batches are split in
// halves, a batch the index rejects as invalid is bisected so that only the
// bad records fail, and permanent errors are never retried.
//
//	pc, err := upsert.NewClient(pinecone.NewClientParams{ApiKey: key})
//	if err != nil {
//		return err
//	}
//	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: host, Namespace: "docs"}, upsert.PushbackDialOption())
//	if err != nil {
//		return err
//	}
//	res, err := upsert.All(ctx, vectors, upsert.WithIndex(idx))
//	if err != nil {
//		for _, f := range res.Failed {
//			log.Printf("record %s: %v", f.ID, f.Err)
//		}
//	}
//
// Package upserttest provides a loopback Pinecone data plane to test
// ingestion code against, package ndjson a dead-letter file, package
// upsertprom Prometheus metrics, package upsertotel OpenTelemetry traces
// and metrics, and package upsertredis a Store through which writers on
// several machines share what their limiters learn.
package upsert

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"

	"github.com/upsertlib/upsert/internal/share"
)

// UpsertFunc sends one batch of records to a namespace and reports whether
// all of them were written. [WithUpsertFunc] takes one, for transports
// other than [pinecone.IndexConnection] and for tests. It must return an
// error the classifier understands (see [Classify]) when the batch was not
// written, and must not keep batch after it returns. A panic in it fails
// the batch at once with a [*PanicError]; the process survives.
type UpsertFunc func(ctx context.Context, namespace string, batch []*pinecone.Vector) error

// Option configures a run: [All], [Stream], [Records] or a [Writer]
// ([NewWriter]). Options apply in the order given, and one given twice
// keeps its last value, except that [WithObserver] adds each observer,
// [WithMaxRetries] sets one class per call, and two of [WithIndex],
// [WithUpsertFunc] and [WithRecordsFunc] are an error ([ErrBadOption]).
// A nil Option is ignored.
type Option func(*config)

// config is what the options set: one field per option (more than twenty,
// as there are options), read-only once the run is set up.
type config struct {
	index          *pinecone.IndexConnection
	describe       func(ctx context.Context, now time.Time) (indexInfo, error) // nil: the index cannot be asked
	dimension      int                                                         // from WithDimension; 0: unknown
	send           UpsertFunc
	sendRecords    RecordsFunc
	sources        int // how many of WithIndex, WithUpsertFunc and WithRecordsFunc were given
	namespace      string
	namespaceOf    func(it *item) string
	checkpoint     Checkpoint
	acks           ackOptions
	maxDelay       time.Duration
	batchSize      int // 0: adaptive
	concurrency    int // 0: adaptive
	requestTimeout time.Duration
	retry          retryPolicy
	classify       func(error) Class
	limiter        *Limiter
	store          share.Store                         // from upsertredis; nil: each lane learns alone
	shareHost      string                              // the lanes' host without WithIndex: tests only
	limits         *IndexLimits                        // from WithIndexLimits; nil: the default for the source
	maxRate        float64                             // records a second, from WithMaxRate; 0: no cap
	nsOf           func(k *kind) func(it *item) string // from WithNamespaceOf, per kind
	logger         *slog.Logger
	observers      observers
	progress       func(Progress)
	progressEvery  time.Duration
	clock          clock
	rand           func(n int64) int64
	maxHeld        int           // records held undispatched; 0: maxHeld(kind) (tests set less)
	saveEvery      time.Duration // between a stream's checkpoint saves; 0: checkpointEvery (tests set less)
	errs           []error
}

// Defaults (see the README for why).
const (
	// DefaultRequestTimeout bounds each request. A shorter deadline turns
	// slow successes into retries; Pinecone's slow writes of large batches
	// take seconds.
	DefaultRequestTimeout = 30 * time.Second
)

// entry is the function a configuration is for, so that an option it
// cannot use is an error rather than ignored.
type entry struct {
	name       string
	replayable bool // its input can be replayed in order: a checkpoint means something
}

var (
	entryAll    = entry{name: "All"}
	entryStream = entry{name: "Stream and Records", replayable: true}
	entryWriter = entry{name: "NewWriter"}
)

func newConfig(opts []Option, k *kind, use entry) (*config, error) {
	c := &config{
		maxDelay:       DefaultMaxDelay,
		requestTimeout: DefaultRequestTimeout,
		retry:          defaultRetryPolicy(),
		classify:       Classify,
		clock:          realClock{},
		rand:           rand.Int64N,
	}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	switch {
	case c.sources == 0:
		c.errs = append(c.errs, fmt.Errorf("no index: pass WithIndex, WithUpsertFunc or WithRecordsFunc"))
	case c.sources > 1:
		c.errs = append(c.errs, fmt.Errorf("more than one of WithIndex, WithUpsertFunc and WithRecordsFunc given: pass one"))
	case k == vectorKind && c.send == nil && c.index == nil && len(c.errs) == 0:
		c.errs = append(c.errs, fmt.Errorf("WithRecordsFunc sends integrated records: use Records, or pass WithUpsertFunc"))
	case k == recordKind && c.sendRecords == nil && c.index == nil && len(c.errs) == 0:
		c.errs = append(c.errs, fmt.Errorf("WithUpsertFunc sends vectors: use All or Stream, or pass WithRecordsFunc"))
	}
	if c.checkpoint != nil && !use.replayable {
		c.bad("WithCheckpoint: %s cannot use it; it applies to Stream and Records, whose input can be replayed in order", use.name)
	}
	c.checkAcks(use)
	if c.batchSize > k.maxBatch {
		c.bad("WithBatchSize(%d): integrated records go at most %d to a request", c.batchSize, k.maxBatch)
	}
	if c.nsOf != nil {
		c.namespaceOf = c.nsOf(k)
		if c.namespaceOf == nil {
			c.errs = append(c.errs, fmt.Errorf("WithNamespaceOf: the function takes the other kind of record"))
		}
	}
	if len(c.errs) > 0 {
		return nil, fmt.Errorf("%w: %v", ErrBadOption, joinMessages(c.errs))
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

func joinMessages(errs []error) string {
	s := errs[0].Error()
	for _, e := range errs[1:] {
		s += "; " + e.Error()
	}
	return s
}

func (c *config) bad(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// WithIndex sends the records to idx, in idx's namespace unless
// [WithNamespaceOf] routes them: vectors with
// [pinecone.IndexConnection.UpsertVectors] (a reply that confirms fewer
// records than were sent counts as a server error and the batch is
// retried), integrated records with UpsertRecords (see [Records]). The
// Limiter starts from Pinecone serverless's limits per namespace
// ([ServerlessLimits]: 100 upsert requests and 50 MB of upsert data per
// second), a tenth above them, and probes above them as above any level
// (see [Limiter] and [IndexLimits]).
//
// Before sending vectors, a run asks the index its dimension and vector
// type (DescribeIndexStats, at most 5 s), so that a record of another
// dimension, with dense values for a sparse index or with sparse values
// only for a dense one, fails alone before anything is sent. The answer is
// kept for a minute (a process-wide cache that forgets idx when it is
// garbage-collected): calls through one connection ask once a minute at
// most, and an index deleted and created again with another dimension is
// seen within a minute. When the index cannot be asked, the dimension is
// that of the first dense record the index accepts.
//
// A nil idx, or one not made by [pinecone.Client.Index] (a zero value),
// fails the call with [ErrBadOption].
func WithIndex(idx *pinecone.IndexConnection) Option {
	return func(c *config) {
		c.sources++
		if idx == nil {
			c.bad("WithIndex: nil *pinecone.IndexConnection")
			return
		}
		if indexTarget(idx) == "" {
			// A zero IndexConnection has no client: the SDK would panic on it.
			c.bad("WithIndex: a *pinecone.IndexConnection with no host; make it with pinecone.Client.Index")
			return
		}
		c.index, c.namespace = idx, idx.Namespace()
		// The default namespace by its name, as v5's Index names it, also
		// for a connection named "" (idx.WithNamespace("")): its REST path
		// would have an empty segment.
		defaultConn := idx
		if idx.Namespace() != defaultNamespace {
			defaultConn = idx.WithNamespace(defaultNamespace) // shares the gRPC connection
		}
		conn := func(namespace string) *pinecone.IndexConnection {
			switch {
			case namespaceKey(namespace) == "":
				return defaultConn
			case sameNamespace(namespace, idx.Namespace()):
				return idx
			}
			// Shares the gRPC connection.
			return idx.WithNamespace(namespace)
		}
		c.describe = func(ctx context.Context, now time.Time) (indexInfo, error) { return describeIndex(ctx, idx, now) }
		host := indexTarget(idx) // as the caller wrote it, for errors
		c.send = func(ctx context.Context, namespace string, batch []*pinecone.Vector) error {
			n, err := conn(namespace).UpsertVectors(ctx, batch)
			if err == nil && int(n) != len(batch) {
				return &Error{Class: ClassServer, Err: fmt.Errorf("index confirmed %d of %d records", n, len(batch))}
			}
			return unreachable(host, err)
		}
		c.sendRecords = func(ctx context.Context, namespace string, batch []*pinecone.IntegratedRecord) error {
			return unreachable(host, conn(namespace).UpsertRecords(ctx, batch))
		}
	}
}

// WithUpsertFunc sends the records with f instead of an index connection:
// for other transports and for tests.
func WithUpsertFunc(f UpsertFunc) Option {
	return func(c *config) {
		c.sources++
		if f == nil {
			c.bad("WithUpsertFunc: nil function")
			return
		}
		c.send = f
	}
}

// WithNamespaceOf routes each record to the namespace f returns, instead of
// the index connection's: one run then writes to several namespaces, each
// with its own batches and its own [Limiter] state, since Pinecone's limits
// are per namespace. With [WithIndex], the namespaces share the index
// connection. T is *pinecone.Vector for [All], [Stream] and [Writer], and
// *pinecone.IntegratedRecord for [Records]. f sees the caller's record
// itself for All and Records, the copy the library took for Stream and
// Writer, and is never called with a nil record (which fails as invalid). A panic in f reaches the caller of All,
// Stream, Records or Writer.Add, once everything the call started has
// stopped.
func WithNamespaceOf[T *pinecone.Vector | *pinecone.IntegratedRecord](f func(T) string) Option {
	return func(c *config) {
		if f == nil {
			c.bad("WithNamespaceOf: nil function")
			return
		}
		c.nsOf = func(k *kind) func(it *item) string {
			switch f := any(f).(type) {
			case func(*pinecone.Vector) string:
				if k == vectorKind {
					return func(it *item) string { return f(it.vec) }
				}
			case func(*pinecone.IntegratedRecord) string:
				if k == recordKind {
					return func(it *item) string { return f(it.rec) }
				}
			}
			return nil
		}
	}
}

// WithDimension tells the run the index's dense dimension, for transports
// that cannot ask the index ([WithUpsertFunc]): records of another dense
// dimension fail alone as [ClassInvalid] before they are sent. Through
// [WithIndex] the index's own answer (DescribeIndexStats) takes precedence.
// Without either, the dimension is that of the first dense record the
// index accepts, and records sent before then are checked by the index.
// [Records] ignores it: integrated records carry text that the index
// embeds. Outside 1 to [MaxDimension], the call fails with [ErrBadOption].
func WithDimension(d int) Option {
	return func(c *config) {
		if d < 1 || d > MaxDimension {
			c.bad("WithDimension(%d): want 1 to %d", d, MaxDimension)
			return
		}
		c.dimension = d
	}
}

// WithBatchSize fixes how many records go in one request, 1 to
// [MaxBatchSize] for vectors and to [MaxRecordsBatchSize] for [Records]
// (more is an error, [ErrBadOption]). Requests are also cut so that none
// exceeds [MaxRequestBytes], and carry fewer as the halves of a request
// that timed out, or as the circuit breaker's probe after a minute of
// timeouts (one record). By default the batch size is adaptive: it starts at
// 100 and grows while larger requests succeed, and shrinks below a size
// that timed out.
func WithBatchSize(n int) Option {
	return func(c *config) {
		if n < 1 || n > MaxBatchSize {
			c.bad("WithBatchSize(%d): want 1 to %d", n, MaxBatchSize)
			return
		}
		c.batchSize = n
	}
}

// WithConcurrency fixes how many requests may be in flight at once, from 1
// to 256. By default concurrency is adaptive (see [Limiter]): it starts at
// 4 and grows while more requests in flight carry more records a second,
// up to 64; a timeout takes a quarter off. 429s set the rate, not the
// concurrency. Whatever the concurrency, a namespace's batches queue for
// the index in the order they were cut, so with 1 the index sees each
// namespace's records in input order, but for retries (sent when their backoff ends)
// and batches cut smaller while they waited (when the index refused a
// size), which go after the batches queued meanwhile, and for the batch
// first in line when a Retry-After pauses the namespace, which queues again
// after the pause (a later batch may go first; a record still waits for an
// earlier one of its id). Under [WithNamespaceOf] the namespaces share the n
// requests; a namespace paused by a Retry-After holds none of them.
// Outside 1 to 256, the call fails with [ErrBadOption].
func WithConcurrency(n int) Option {
	return func(c *config) {
		if n < 1 || n > 256 {
			c.bad("WithConcurrency(%d): want 1 to 256", n)
			return
		}
		c.concurrency = n
	}
}

// WithRequestTimeout bounds each request; default [DefaultRequestTimeout].
// A request that runs out of time is a [ClassTimeout] failure: its batch is
// split and retried, and its records may have landed.
// A timeout of 0 or less fails the call with [ErrBadOption].
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.bad("WithRequestTimeout(%v): want a positive duration", d)
			return
		}
		c.requestTimeout = d
	}
}

// WithMaxRetries sets how many times a batch is retried after a failure of
// class c before its records are reported failed. Defaults: 8 for
// [ClassRateLimited], 4 for [ClassTimeout] and [ClassServer]. Other classes
// are never retried unchanged (too-large and invalid batches are split
// instead), so n must be for one of those three classes; 0 disables
// retries of that class.
//
// Failures that say nothing about the batch spend none of them, as long
// as n > 0:
//   - server errors and timeouts during the first minute of an outage
//     (the [Limiter]'s circuit breaker open after the index had
//     answered), and, in the first minute of a run of failures with no
//     success between, a server error or timeout that follows another
//     (the batch's own, or another request's): a batch alone in flight
//     meets an outage before the breaker has its five failures, and
//     outages too short to open it fail the requests in flight in turn,
//     so that short outages fail no records; the first failure of each
//     such run spends one. A timeout spends one all the same once the
//     index answered a request sent after the batch's first timeout
//     came: the index takes other records, not these;
//   - a 429 of a request sent before the Limiter cut its rate for that
//     episode (not the one whose answer made the cut), or while the index
//     still refuses what came before the cut:
//     the limiter's overshoot, at most n such per batch;
//   - a 429 when other requests succeeded since the batch's last 429: the
//     index takes writes and asks for a slower pace, which the limiter's
//     rate answers. 429s spend retries only when nothing lands between
//     them.
//
// After that minute, or as soon as the breaker opens when the index never
// answered but with server errors, records fail with [ErrServer] without
// being sent (only the breaker's probes go out), so that a dead index or
// a wrong host ends the run in seconds, and one that drops every request
// (all timeouts) in a minute.
// A negative n, or a class other than rate-limited, timeout and server, fails the call with [ErrBadOption].
func WithMaxRetries(class Class, n int) Option {
	return func(c *config) {
		switch {
		case class != ClassRateLimited && class != ClassTimeout && class != ClassServer:
			c.bad("WithMaxRetries(%v, %d): only rate-limited, timeout and server failures are retried", class, n)
		case n < 0:
			c.bad("WithMaxRetries(%v, %d): want 0 or more", class, n)
		default:
			c.retry.maxRetries[class] = n
		}
	}
}

// WithBackoff sets the waits between retries: before the n-th retry (n
// from 0) the wait is uniformly random in [0, min(max, base·2^n)] ("full
// jitter"). A 429 uses twice base. Any retry, whatever its class, waits
// at least the index's Retry-After or gRPC pushback, counted up to a
// minute (a longer ask, which Pinecone's per-second and per-minute limits
// do not explain, waits a minute), and that wait pauses every request of
// the namespace. Defaults: base 250 ms, max 30 s. At the end of a call, when
// every batch left is waiting out a backoff and the last request landed,
// those waits end (not a Retry-After): they spread load that no longer
// comes.
// Unless 0 < base <= max, the call fails with [ErrBadOption].
func WithBackoff(base, max time.Duration) Option {
	return func(c *config) {
		if base <= 0 || max < base {
			c.bad("WithBackoff(%v, %v): want 0 < base <= max", base, max)
			return
		}
		c.retry.base, c.retry.cap = base, max
	}
}

// WithClassifier replaces [Classify], for transports whose errors it does
// not know. f must return a class for every non-nil error; an error it
// returns 0 for is treated as [ClassServer]. The caller's context ending is
// always [ClassCanceled], whatever f says, and an error that already is an
// [*Error] with a class (one of the library's [Transport], or one a send
// function returns) keeps it: f is not called for it.
func WithClassifier(f func(error) Class) Option {
	return func(c *config) {
		if f == nil {
			c.bad("WithClassifier: nil function")
			return
		}
		c.classify = f
	}
}

// WithLimiter makes the call use l, so that what l learned about the
// index (rate, concurrency, batch size, whether it is down, and the
// per-minute limits of integrated records, which hold for all of the
// index's namespaces) carries over from call to call, as a long-running
// service wants. One Limiter may
// serve calls into several indexes: it keeps what it learns of each index
// host (through [WithIndex]) and namespace apart.
//
// Without it, calls that write through [WithIndex] into one index at the
// same time, from goroutines of one process, share a Limiter (made for
// them, and dropped when the last of them ends): they split what the
// index accepts evenly, and one cut answers a 429 episode for all of them,
// whether they use one connection or one each. A call that starts while no
// other writes to its index starts with nothing learned. Calls through
// [WithUpsertFunc] or [WithRecordsFunc] each start a new Limiter.
//
// WithLimiter(NewLimiter()) keeps a call apart, as writers in separate
// processes are. Separate Limiters learn their shares only from their own
// 429s, which come to each with the same chance per request, so the
// shares drift apart: with four writers on one namespace (BENCHMARKS.md)
// the fastest gets 1.1 to 1.6 times the slowest, and the writers together
// draw 2.1-2.5% 429s, against 1.01-1.04 and 1.0-1.8% when they share.
// Calls in separate processes share through package upsertredis, whatever
// Limiter each uses.
func WithLimiter(l *Limiter) Option {
	return func(c *config) {
		if l == nil {
			c.bad("WithLimiter: nil *Limiter")
			return
		}
		c.limiter = l
	}
}

// WithLogger logs one line per failed request (its retry, split or final
// failure of its batch), and a summary at the end, each with the
// namespace, batch size, worker, attempt, class, code and message, and
// the record's id when the batch holds one record. A
// record refused before it is sent, or failed unsent because the run
// stopped, and a request cut off by the end of the call's context, are
// counted in the summary, not logged one by one: the Failure function of
// an [Observer] gets each record. When the circuit breaker gives up
// on the index, one line says so per namespace and outage, for the first
// batch it fails unsent. Vector values, metadata and the API
// key are never logged. By default nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.bad("WithLogger: nil *slog.Logger")
			return
		}
		c.logger = l
	}
}

// Result reports what happened to every record: each one was upserted, is
// in Failed, or was a duplicate of a later record with the same id, so
// Upserted + Stats.Failed + Duplicates equals the number of records given
// (and so does Upserted + len(Failed) + Duplicates when Failed keeps them all).
type Result struct {
	// Upserted is how many records the index confirmed.
	Upserted int
	// Failed holds one entry per record that did not land, in input order;
	// a [Stream], [Records] or [Writer] whose [Observer] has a Failure
	// function, or given [WithAcks], keeps only the first 1000 to fail
	// (Stats.Failed counts all), in input order; with WithAcks, also those
	// whose acks were not delivered (the acknowledgement function
	// panicked).
	Failed []Failure
	// Duplicates counts records skipped because a later record in the same
	// call has the same id: the last one wins and is sent once.
	Duplicates int
	// MayBeStale lists, in input order, records that landed (they count in
	// Upserted) while a request carrying an earlier record of their id had
	// ended without an answer, so that the index may keep the earlier one;
	// see [Stale]. Only the first 1000 to be reported are kept when an
	// [Observer] or [WithAcks] receives failures; Stats.MayBeStale counts
	// all.
	MayBeStale []Stale
	// Stats are the run's final figures; Stats.Upserted equals Upserted.
	Stats Stats
}

// Failure is one record that did not land.
type Failure struct {
	// Index is the record's position in the input.
	Index int
	// ID is the record's id ("" for a nil record).
	ID string
	// Namespace is the record's namespace, as routed (see
	// [WithNamespaceOf]), "" for the default one ("__default__"); also ""
	// when the run stopped before looking at the record under
	// WithNamespaceOf, and for a nil record under WithNamespaceOf (whose
	// function is not called for it).
	Namespace string
	// Record is the vector as given, so that it can be replayed: the
	// caller's own for All, the copy taken when the record was handed over
	// for Stream and Writer; nil for a nil record and for integrated
	// records.
	Record *pinecone.Vector
	// Integrated is the copy of the integrated record taken as it was
	// pulled, for [Records]: the caller's values, with text of its own
	// string types held as strings, as it is sent.
	Integrated *pinecone.IntegratedRecord
	// Class is the kind of the final failure.
	Class Class
	// Err is the final error, an [*Error]; errors.Is(Err, Class.Err()) holds.
	Err error
	// Attempts is how many requests carried the record (0 if it was
	// rejected before sending).
	Attempts int
	// MayHaveLanded reports that a request carrying the record ended
	// without a clear answer (a timeout, a server error, or a cancel while
	// in flight), so the index may hold it after all. Upserts are
	// idempotent: sending it again is safe.
	MayHaveLanded bool
	// Resend reports a failure that says nothing against the record: the
	// run stopped, the index was down, or the caller's code panicked (as
	// [Ack.Resend]). A [Checkpoint] stops before it and a resumed run
	// sends it again, so a dead-letter hook that keeps only failures for
	// good (a rule broken, retries run out) skips it.
	Resend bool
}

// All upserts records and returns when each one has landed or failed. It
// reads the records in place, without copying them: they must not change
// until All returns. The
// index comes from [WithIndex] or [WithUpsertFunc]; the other options have
// defaults that suit most indexes.
//
// Every record is checked before it is sent: a nil record, one that
// breaks Pinecone's rules (id, dimension and vector type of the index,
// finite and not all-zero dense values, sparse values, metadata types and
// size as compact JSON, strings in valid UTF-8, a namespace of ASCII
// without NUL, request size)
// is never sent and fails alone with [ClassInvalid]; the others are still
// sent. When an id appears more than once, only its last valid occurrence
// is sent. The dense dimension is the index's (see [WithIndex]), or, when
// the index cannot say, that of the first dense record it accepts (or
// [WithDimension]'s). Sending starts after one
// quick pass over the ids to find those that repeat (0.07 s per million
// records on the machine of BENCHMARKS.md), not after every record was
// checked.
//
// The error is nil only when every record landed. Otherwise it is a
// [*RunError] that matches the sentinel of each failure class present
// (errors.Is(err, ErrRateLimited)) and wraps an [*Error] per class; the
// records are in Result.Failed. When the options are wrong, nothing is
// sent and the error matches [ErrBadOption]. When ctx ends, All returns
// promptly: records not confirmed by then fail with [ClassCanceled].
func All(ctx context.Context, records []*pinecone.Vector, opts ...Option) (Result, error) {
	cfg, err := newConfig(opts, vectorKind, entryAll)
	if err != nil {
		return Result{}, err
	}
	r := newRun(ctx, cfg, vectorKind, len(records), "All")
	in := newIntake(r, forAll)
	in.admitAll(records) // a panic of the caller's code unwinds from there, the run ended
	return in.close(nil)
}
