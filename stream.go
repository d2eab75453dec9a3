package upsert

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"sync"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// Stream upserts the records of seq, pulling them as fast as the index
// takes them, and returns when each record pulled has landed or failed.
// Memory stays bounded whatever the input's length: Stream stops pulling
// while every batch slot is busy or the index is down.
//
// Records are checked as they come, with the rules of [All]. A stream
// cannot look ahead for duplicates, so a record whose id is still in
// flight waits until the earlier one has landed or failed, and a record
// that replaces one still waiting in the current batch takes its place
// (that one counts as a duplicate): either way the last one wins.
//
// With [WithCheckpoint], Stream skips the records that an earlier run with
// the same checkpoint settled, and saves its own progress as it goes: a
// backfill that was interrupted resumes where it stopped.
//
// Result.Failed holds every failure, unless an [Observer] with a Failure
// function was given: then the observer is where failures go, and
// Result.Failed keeps only the first 1000 (Stats.Failed counts all). When
// ctx ends, Stream stops pulling; records it pulled and did not land fail
// with [ClassCanceled].
func Stream(ctx context.Context, seq iter.Seq[*pinecone.Vector], opts ...Option) (Result, error) {
	return streamOf(ctx, seq, vectorKind, func(v *pinecone.Vector) item { return item{vec: v} }, opts)
}

// failuresKept is how many failures a stream keeps for its result when an
// observer already receives them all.
const failuresKept = 1000

func streamOf[T any](ctx context.Context, seq iter.Seq[T], k *kind, toItem func(T) item, opts []Option) (Result, error) {
	cfg, err := newConfig(opts, k, entryStream)
	if err != nil {
		return Result{}, err
	}
	r := newRun(ctx, cfg, k, -1)
	in := newIntake(r, true)
	if observersHaveFailure(cfg.observers) {
		r.keepFailed = failuresKept
	}
	skip := 0
	if cfg.checkpoint != nil {
		if skip, err = in.resume(ctx); err != nil {
			r.halt(nil)
			r.releaseLimiter()
			return Result{}, err
		}
		defer in.saveCheckpoint()
	}
	stop := in.lingerFlush(cfg.maxDelay)
	for v := range seq {
		if skip > 0 {
			skip--
			continue
		}
		if err := in.push(ctx, toItem(v)); err != nil {
			// Pulled, so it must be accounted for.
			in.refuse(toItem(v), err)
			break
		}
	}
	stop()
	return in.close()
}

// lingerFlush sends batches that wait longer than d for more records,
// until the returned function is called.
func (in *intake) lingerFlush(d time.Duration) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(d / 2)
		defer t.Stop()
		seen := -1
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			in.mu.Lock()
			// Flush when nothing came in for half the delay: a batch then
			// waits at most d.
			if in.next == seen {
				_ = in.flushLocked(in.r.runCtx)
			}
			seen = in.next
			in.mu.Unlock()
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// DefaultMaxDelay is how long a partial batch of a [Writer] or [Stream]
// waits for more records before it is sent anyway.
const DefaultMaxDelay = time.Second

// WithMaxDelay sets how long a partial batch of a [Writer] or [Stream] may
// wait for more records before it is sent anyway; default
// [DefaultMaxDelay]. [All] has every record at hand and never waits.
func WithMaxDelay(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.bad("WithMaxDelay(%v): want a positive duration", d)
			return
		}
		c.maxDelay = d
	}
}

// ErrClosed is returned by [Writer.Add] and [Writer.Flush] after
// [Writer.Close].
var ErrClosed = errors.New("upsert: writer closed")

// Writer upserts records that a service produces continuously, in the
// manner of a bulk indexer: Add records as they come, Flush when a
// checkpoint of the caller's needs them landed, Close at the end. It
// batches, paces and retries exactly as [All] does, with one [Limiter]
// for its whole life.
//
// Add blocks while the index cannot take more (every batch slot busy, the
// index down): memory stays bounded, and the producer slows down to the
// index's pace. Failures are reported as they happen to the Failure
// function of an [Observer], if one was given (a dead-letter file), and
// are in the Result that Close returns (only the first 1000 of them when
// an observer receives them all).
//
// A Writer is safe for concurrent use. Close may be called more than once;
// Add after Close returns [ErrClosed].
type Writer struct {
	in       *intake
	stopTick func()

	mu     sync.Mutex // guards closed
	closed bool

	closeMu  sync.Mutex // serializes Close
	stopOnce sync.Once
	done     bool // the run has ended and res, err are final
	res      Result
	err      error
}

// NewWriter returns a Writer that sends with opts, which must name the
// index ([WithIndex] or [WithUpsertFunc]). An option a Writer cannot use
// ([WithCheckpoint]: a Writer has no input to replay) is an error matching
// [ErrBadOption]. ctx bounds the Writer's whole
// life: when it ends, records not yet landed fail with [ClassCanceled].
func NewWriter(ctx context.Context, opts ...Option) (*Writer, error) {
	cfg, err := newConfig(opts, vectorKind, entryWriter)
	if err != nil {
		return nil, err
	}
	r := newRun(ctx, cfg, vectorKind, -1)
	in := newIntake(r, true)
	if observersHaveFailure(cfg.observers) {
		r.keepFailed = failuresKept
	}
	return &Writer{in: in, stopTick: in.lingerFlush(cfg.maxDelay)}, nil
}

// Add takes v in; it is sent within a batch soon after. Add blocks while
// the index cannot take more. It returns an error, with v not taken, when
// ctx ends first, when the Writer is closed ([ErrClosed]), or when the run
// stopped (the index denied the caller, or the Writer's context ended):
// then the error is the [*Error] that stopped it.
func (w *Writer) Add(ctx context.Context, v *pinecone.Vector) error {
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return w.in.push(ctx, item{vec: v})
}

// Flush sends every record added so far, however few, and waits until each
// has landed or failed, or ctx ends.
func (w *Writer) Flush(ctx context.Context) error {
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if err := w.in.flush(ctx); err != nil {
		return err
	}
	return w.in.awaitIdle(ctx)
}

// Close sends what is left, waits until every record has landed or failed,
// and returns the result of the Writer's whole life, as [All] does. ctx
// bounds the wait: when it ends first, Close returns ctx's error and the
// Writer goes on in the background until its own context ends; a later
// Close waits again. Calling Close after it returned gives the same result.
func (w *Writer) Close(ctx context.Context) (Result, error) {
	w.closeMu.Lock()
	defer w.closeMu.Unlock()
	if w.done {
		return w.res, w.err
	}
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.stopOnce.Do(w.stopTick)
	if err := w.in.flush(ctx); err != nil && ctx.Err() != nil {
		return Result{}, err
	}
	if err := w.in.awaitIdle(ctx); err != nil {
		return Result{}, err
	}
	w.res, w.err = w.in.close()
	w.done = true
	return w.res, w.err
}

func observersHaveFailure(os observers) bool {
	for _, o := range os {
		if o.Failure != nil {
			return true
		}
	}
	return false
}

// logWarn logs a problem of the intake's own (a checkpoint that cannot be
// saved) without failing the run: the records are unaffected.
func (in *intake) logWarn(msg string, err error) {
	in.r.cfg.logger.LogAttrs(in.r.ctx, slog.LevelWarn, msg, slog.String("error", err.Error()))
}
