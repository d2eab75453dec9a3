// Package upsert writes vectors into a Pinecone index without losing any:
// every record either lands or is reported with its cause.
//
// [All] cuts the records into requests by count and by encoded size, sends
// them through a bounded set of concurrent requests paced by an adaptive
// [Limiter], and classifies every failure ([Classify]): 429s are retried
// after a jittered backoff while the limiter slows down, timed-out batches
// are split in halves, a batch the index rejects as invalid is bisected so
// that only the bad records fail, and permanent errors are never retried.
//
//	idx, _ := pc.Index(pinecone.NewIndexConnParams{Host: host, Namespace: "docs"})
//	res, err := upsert.All(ctx, vectors, upsert.WithIndex(idx))
//	if err != nil {
//		for _, f := range res.Failed {
//			log.Printf("record %s: %v", f.ID, f.Err)
//		}
//	}
package upsert

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// UpsertFunc sends one batch of records to a namespace and reports whether
// all of them were written. [WithUpsertFunc] takes one, for transports
// other than [pinecone.IndexConnection] and for tests. It must return an
// error the classifier understands (see [Classify]) when the batch was not
// written, and must not keep batch after it returns.
type UpsertFunc func(ctx context.Context, namespace string, batch []*pinecone.Vector) error

// Option configures [All].
type Option func(*config)

type config struct {
	index          *pinecone.IndexConnection
	send           UpsertFunc
	sources        int // how many of WithIndex and WithUpsertFunc were given
	namespace      string
	batchSize      int // 0: adaptive
	concurrency    int // 0: adaptive
	requestTimeout time.Duration
	retry          retryPolicy
	classify       func(error) Class
	limiter        *Limiter
	logger         *slog.Logger
	observers      observers
	progress       func(Progress)
	progressEvery  time.Duration
	clock          clock
	rand           func(n int64) int64
	errs           []error
}

// Defaults (see the README for why).
const (
	// DefaultRequestTimeout bounds each request. A shorter deadline turns
	// slow successes into retries; Pinecone's slow writes of large batches
	// take seconds.
	DefaultRequestTimeout = 30 * time.Second
)

func newConfig(opts []Option) (*config, error) {
	c := &config{
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
		c.errs = append(c.errs, fmt.Errorf("no index: pass WithIndex or WithUpsertFunc"))
	case c.sources > 1:
		c.errs = append(c.errs, fmt.Errorf("both WithIndex and WithUpsertFunc given: pass one"))
	}
	if len(c.errs) > 0 {
		return nil, fmt.Errorf("%w: %v", ErrBadOption, joinMessages(c.errs))
	}
	if c.limiter == nil {
		c.limiter = &Limiter{clock: c.clock}
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

// WithIndex sends the records to idx with [pinecone.IndexConnection.UpsertVectors],
// in idx's namespace. A reply that confirms fewer records than were sent
// counts as a server error and the batch is retried.
func WithIndex(idx *pinecone.IndexConnection) Option {
	return func(c *config) {
		c.sources++
		if idx == nil {
			c.bad("WithIndex: nil *pinecone.IndexConnection")
			return
		}
		c.index, c.namespace = idx, idx.Namespace()
		c.send = func(ctx context.Context, namespace string, batch []*pinecone.Vector) error {
			conn := idx
			if namespace != idx.Namespace() {
				conn = idx.WithNamespace(namespace)
			}
			n, err := conn.UpsertVectors(ctx, batch)
			if err == nil && int(n) != len(batch) {
				return &Error{Class: ClassServer, Err: fmt.Errorf("index confirmed %d of %d records", n, len(batch))}
			}
			return err
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

// WithBatchSize fixes how many records go in one request, 1 to
// [MaxBatchSize]. Requests are also cut so that none exceeds
// [MaxRequestBytes]. By default the batch size is adaptive: it starts at
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
// to 256. By default concurrency is adaptive: it starts at 4, grows while
// requests succeed and drops by one on a 429.
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
// jitter"). A 429 uses twice base, and never waits less than the index's
// Retry-After. Defaults: base 250 ms, max 30 s.
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
// always [ClassCanceled], whatever f says.
func WithClassifier(f func(error) Class) Option {
	return func(c *config) {
		if f == nil {
			c.bad("WithClassifier: nil function")
			return
		}
		c.classify = f
	}
}

// WithLimiter shares l with other [All] calls, so that what it learned
// about the index (rate, concurrency, batch size) carries over. By default
// each call starts a new Limiter.
func WithLimiter(l *Limiter) Option {
	return func(c *config) {
		if l == nil {
			c.bad("WithLimiter: nil *Limiter")
			return
		}
		c.limiter = l
	}
}

// WithLogger logs one line per retry, split and final failure, and a
// summary at the end, each with the namespace, batch size, worker, attempt,
// class, code and message. Vector values, metadata and the API key are
// never logged. By default nothing is logged.
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
// Upserted + len(Failed) + Duplicates equals the number of records given.
type Result struct {
	// Upserted is how many records the index confirmed.
	Upserted int
	// Failed holds one entry per record that did not land, in input order.
	Failed []Failure
	// Duplicates counts records skipped because a later record in the same
	// call has the same id: the last one wins and is sent once.
	Duplicates int
	// Stats are the run's final figures; Stats.Upserted equals Upserted.
	Stats Stats
}

// Failure is one record that did not land.
type Failure struct {
	// Index is the record's position in the input.
	Index int
	// ID is the record's id ("" for a nil record).
	ID string
	// Record is the record as given, so that it can be replayed.
	Record *pinecone.Vector
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
}

// All upserts records and returns when each one has landed or failed. The
// index comes from [WithIndex] or [WithUpsertFunc]; the other options have
// defaults that suit most indexes.
//
// Records are checked before anything is sent: a nil record, one that
// breaks Pinecone's rules (id, dimension, finite values, sparse values,
// metadata types and size, request size) fails alone with [ClassInvalid]
// and the others are still sent. When an id appears more than once, only
// its last valid occurrence is sent. The dense dimension of a run is that
// of its first dense record.
//
// The error is nil only when every record landed. Otherwise it is a
// [*RunError] that matches the sentinel of each failure class present
// (errors.Is(err, ErrRateLimited)) and wraps an [*Error] per class; the
// records are in Result.Failed. When the options are wrong, nothing is
// sent and the error matches [ErrBadOption]. When ctx ends, All returns
// promptly: records not confirmed by then fail with [ClassCanceled].
func All(ctx context.Context, records []*pinecone.Vector, opts ...Option) (Result, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return Result{}, err
	}
	r := newRun(ctx, cfg, len(records))
	items := r.admitAll(records)
	rt := r.route(cfg.namespace)
	for i, it := range items {
		if !r.add(rt, it) {
			// The run stopped: whatever follows was never handed over.
			r.failAll(items[i+1:], r.stopError(), 0, false)
			break
		}
	}
	r.flush()
	return r.finish()
}
