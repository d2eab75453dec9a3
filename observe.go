package upsert

import (
	"context"
	"time"
)

// Observer receives events while a run goes, to feed metrics (Prometheus,
// OpenTelemetry) or a dead-letter store. Every field is optional. The
// functions are called from the run's workers, concurrently: they must be
// safe for concurrent use and return quickly, since a slow observer slows
// the run, and must not call the run's Writer (Add, Flush, Close): some
// events come while the Writer holds its producers' turn, and such a call
// would wait for ever. Nor must they panic: the library does not recover
// an observer's panic (on one of its goroutines, it ends the process; on
// the caller's, it leaves the run unfinished). [WithObserver] may be given
// several times; each observer gets every event.
//
// StartRun, StartRequest and RunDone carry the caller's context through
// the run, for tracing (package upsertotel): a span started in StartRun
// and StartRequest nests under the caller's own spans, and the request is
// sent with the context StartRequest returned, so that a span the
// transport starts (an otelgrpc-instrumented connection's) nests under
// the request's. A run without these three functions spends nothing on
// them.
type Observer struct {
	// RequestDone is called after every upsert request, successful or not.
	RequestDone func(RequestEvent)
	// Retry is called when a failed batch is about to be resent: once its
	// backoff has passed and the limiter admits the resend (a run that
	// stops before resends nothing, and tells nothing), or when it is
	// split in halves.
	Retry func(RetryEvent)
	// Failure is called once per record that did not land, as soon as its
	// failure is final: the dead-letter hook. The Write method of
	// ndjson.DeadLetters (package github.com/upsertlib/upsert/ndjson)
	// fits. A failure with Resend set is sent again by a run resumed from
	// a [Checkpoint]: with one, a hook that keeps only failures for good
	// skips it, or a replay of the dead letters would send it twice.
	Failure func(Failure)
	// Stale is called once per record that landed while an earlier record
	// of its id may still be applied after it (see [Stale]), as soon as
	// that is known: before a checkpoint ([WithCheckpoint]) passes the
	// record, so that a dead-letter store that keeps it is not lost to a
	// crash. Only [Stream], [Records] and [Writer] have such records.
	Stale func(Stale)

	// StartRun is called once as a run starts, with the caller's context:
	// the one given to All, Stream or Records, or to NewWriter for a
	// Writer, whose run lasts until Close. It returns the run's context,
	// ctx or one derived from it, which the run's requests descend from
	// and the other events carry.
	StartRun func(ctx context.Context, e RunEvent) context.Context
	// StartRequest is called just before each upsert request, with the
	// run's context. It returns the request's context, ctx or one derived
	// from it: the request is sent with it (under the per-request
	// timeout), and RequestDone finds it in [RequestEvent].Context. Its
	// event has no Latency and no Err yet.
	StartRequest func(ctx context.Context, e RequestEvent) context.Context
	// RunDone is called once when the run ends, after every other event
	// of the run, with its final figures and error.
	RunDone func(RunEvent)
}

// RunEvent describes a run: a call of [All], [Stream] or [Records], or the
// life of a [Writer], from [NewWriter] to [Writer.Close].
type RunEvent struct {
	// Context is the run's context: the caller's, as StartRun returned it.
	// It does not end with the run.
	Context context.Context
	// Operation is "All", "Stream", "Records" or "Writer".
	Operation string
	// Host is the index's host as the run's connection names it, lower
	// case and without the default port 443 ("name-abc.svc.region.pinecone.io";
	// "127.0.0.1:5081" for a local one), "" for a run that sends through
	// [WithUpsertFunc]. With Namespace it tells one index's runs from
	// another's.
	Host string
	// Namespace is the run's namespace (the index connection's), "" for
	// the default one, as in every event and [Failure]; with
	// [WithNamespaceOf], records may go to others as well.
	Namespace string
	// LimiterState returns what the run's [Limiter] has learned about
	// Namespace, now. It may be called from any goroutine, during the run
	// and after it.
	LimiterState func() LimiterState
	// Stats and Err are the run's final figures and error, as the call
	// returns them (for a Writer, Close); set for RunDone only.
	Stats Stats
	Err   error
}

// RequestEvent describes one upsert request. It never holds vector values
// or metadata.
type RequestEvent struct {
	// Context is the context the request was sent with (before the
	// per-request timeout): the run's, or what StartRequest returned.
	Context context.Context
	// Namespace is the request's namespace, "" for the default one.
	Namespace string
	// Worker identifies the batch slot that sent the request, for logs.
	Worker int
	// Records and Bytes are the request's size (Bytes as encoded for
	// gRPC, or as JSON for [Records]).
	Records, Bytes int
	// Attempt is 1 for the first request carrying these records, 2 for
	// the next, and so on; the halves of a split continue the count.
	Attempt int
	// Latency is the request's round trip, from sending to the answer.
	Latency time.Duration
	// Err is nil on success, otherwise the classified failure.
	Err *Error
}

// RetryEvent describes a failed batch that is about to be resent.
type RetryEvent struct {
	// Context is the run's context, as StartRun returned it.
	Context context.Context
	// Namespace is the batch's namespace, "" for the default one.
	Namespace string
	// Worker identifies the batch slot that sent the failed request, for
	// logs.
	Worker int
	// Records is the size of the batch that failed.
	Records int
	// Attempt is the failed request's attempt number.
	Attempt int
	// Split is true when the batch is split in halves that are sent one
	// after the other (timeouts, too large, invalid), false when it is
	// resent after Wait (whole, or cut to what a request may carry then).
	Split bool
	// Wait is the backoff planned before the resend (the end of the run
	// may cut it short); 0 for a split.
	Wait time.Duration
	// Err is the failure that caused the retry.
	Err *Error
}

// Progress is a snapshot of a run, passed to the function of
// [WithProgress].
type Progress struct {
	// Total is the number of records of the run, or -1 when the input is a
	// stream of unknown length.
	Total int
	// Done is how many records are settled: upserted, failed or
	// duplicates.
	Done int
	// Rate is the recent pace in records settled (upserted, failed or
	// duplicates) per second; for the final call, over the whole run.
	Rate float64
	// ETA estimates the time left at the recent rate; 0 when unknown, and
	// at most 1<<62 ns (146 years) when the rate is too low to tell.
	ETA time.Duration
	// Final is true for the last call, made when the run is over.
	Final bool
	// Stats holds the run's figures so far.
	Stats Stats
}

// DefaultProgressInterval is how often [WithProgress] reports by default.
const DefaultProgressInterval = time.Second

// WithObserver adds o's functions to the run's events.
func WithObserver(o Observer) Option {
	return func(c *config) {
		c.observers = append(c.observers, o)
	}
}

// WithProgress calls f with a [Progress] at most once per interval while
// requests complete, succeeding or failing (interval 0 means
// [DefaultProgressInterval]), and once more with Final set when the run is
// over. f is called from one goroutine at a time. A panic of f is
// recovered: f is not called again, and the run stops with a
// canceled-class [*Error] wrapping a [*PanicError], which the records not
// yet settled fail with; the call returns it even when every record had
// settled (a panic of the final call).
// A nil function or a negative interval fails the call with [ErrBadOption].
func WithProgress(interval time.Duration, f func(Progress)) Option {
	return func(c *config) {
		switch {
		case f == nil:
			c.bad("WithProgress: nil function")
		case interval < 0:
			c.bad("WithProgress(%v): want a positive interval, or 0 for the default", interval)
		default:
			if interval == 0 {
				interval = DefaultProgressInterval
			}
			c.progress, c.progressEvery = f, interval
		}
	}
}

// observers fans events out to every Observer of the run.
type observers []Observer

func (os observers) requestDone(e RequestEvent) {
	for _, o := range os {
		if o.RequestDone != nil {
			o.RequestDone(e)
		}
	}
}

func (os observers) retry(e RetryEvent) {
	for _, o := range os {
		if o.Retry != nil {
			o.Retry(e)
		}
	}
}

// traceRequests reports whether an observer starts something per request:
// only then does a request pay for StartRequest's event.
func (os observers) traceRequests() bool {
	for _, o := range os {
		if o.StartRequest != nil {
			return true
		}
	}
	return false
}

// startRun passes ctx through every StartRun in turn.
func (os observers) startRun(ctx context.Context, e RunEvent) context.Context {
	for _, o := range os {
		if o.StartRun != nil {
			e.Context = ctx
			if c := o.StartRun(ctx, e); c != nil {
				ctx = c
			}
		}
	}
	return ctx
}

// startRequest passes e.Context through every StartRequest in turn.
func (os observers) startRequest(e RequestEvent) context.Context {
	ctx := e.Context
	for _, o := range os {
		if o.StartRequest != nil {
			e.Context = ctx
			if c := o.StartRequest(ctx, e); c != nil {
				ctx = c
			}
		}
	}
	return ctx
}

func (os observers) runDone(e RunEvent) {
	for _, o := range os {
		if o.RunDone != nil {
			o.RunDone(e)
		}
	}
}

func (os observers) stale(s Stale) {
	for _, o := range os {
		if o.Stale != nil {
			o.Stale(s)
		}
	}
}

func (os observers) failure(f Failure) {
	for _, o := range os {
		if o.Failure != nil {
			o.Failure(f)
		}
	}
}
