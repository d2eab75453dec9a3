package upsert

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// Stream upserts the records of seq, pulling them as fast as the index
// takes them, and returns when each record pulled has landed or failed.
// Memory stays bounded whatever the input's length and however many
// namespaces it spreads over: Stream stops pulling while every batch slot
// is busy or the index is down, and at most four requests' worth of
// records wait in partial batches (beyond that the oldest goes out).
//
// Records are checked as they come, with the rules of [All]. A stream
// cannot look ahead for duplicates, so a record whose id is still in
// flight waits until the earlier one has landed or failed, and a record
// that replaces one still waiting in the current batch takes its place
// (that one counts as a duplicate): either way the last one wins.
//
// Stream copies each record as it pulls it (its values, sparse values and
// metadata): the iterator may reuse or change a record once it resumes,
// as a decoder reusing its buffers does. [Failure.Record] is that copy.
//
// With [WithCheckpoint], Stream skips the records that an earlier run with
// the same checkpoint settled, and saves its own progress as it goes: a
// backfill that was interrupted resumes where it stopped. With [WithAcks],
// Stream acknowledges each record it pulled, in input order, before it
// returns.
//
// Result.Failed holds every failure, unless an [Observer] with a Failure
// function, or [WithAcks], was given: then that is where failures go, and
// Result.Failed keeps only the first 1000 (Stats.Failed counts all). When
// ctx ends, Stream stops pulling; records it pulled and did not land fail
// with [ClassCanceled]. When seq returns after ctx ended (an iterator that
// watches ctx stops for it), the input may not be whole: the call's error
// matches [ErrCanceled], though every record pulled landed; when that is
// while the checkpoint's records are skipped, the checkpoint is left as
// it was. A panic in seq or in the namespace function reaches the caller
// once Stream has stopped everything it started.
func Stream(ctx context.Context, seq iter.Seq[*pinecone.Vector], opts ...Option) (Result, error) {
	return streamOf(ctx, seq, vectorKind, func(v *pinecone.Vector) item { return item{vec: cloneVector(v)} }, opts)
}

// failuresKept is how many failures (and stale records) a stream keeps for
// its result when the caller already receives them all.
const failuresKept = 1000

// failuresHandedOut reports whether cfg hands every failure to the caller
// as it happens (an observer's Failure function, or the acks): a long
// stream or Writer then keeps only failuresKept for its result, so that
// its memory does not grow with its failures.
func failuresHandedOut(cfg *config) bool {
	return cfg.acks.f != nil || observersHaveFailure(cfg.observers)
}

func streamOf[T any](ctx context.Context, seq iter.Seq[T], k *kind, toItem func(T) item, opts []Option) (Result, error) {
	op := "Stream"
	if k == recordKind {
		op = "Records"
	}
	if seq == nil {
		return Result{}, fmt.Errorf("%w: %s was given a nil sequence", ErrBadOption, op)
	}
	cfg, err := newConfig(opts, k, entryStream)
	if err != nil {
		return Result{}, err
	}
	r := newRun(ctx, cfg, k, -1, op)
	in := newIntake(r, forStream)
	if failuresHandedOut(cfg) {
		r.results.keepFailed = failuresKept
	}
	skip := 0
	if cfg.checkpoint != nil {
		if skip, err = in.resume(ctx); err != nil {
			return Result{}, r.abandon(err)
		}
		defer func() { _ = in.saveCheckpoint() }() // after a panic of the caller's code; the end below saves otherwise
	}
	stop := in.startFlusher(cfg.maxDelay, nil) // the call's own end finishes the run
	ended := false
	defer func() {
		if !ended {
			in.abort(stop, nil)
		}
	}()
	pulledAll := true // seq returned of itself
	for v := range seq {
		if skip > 0 {
			skip--
			if skip > 0 && ctx.Err() != nil { // as push does after the skip: a skip of millions stops at a cancel too
				pulledAll = false
				break
			}
			continue
		}
		p := pushing{it: toItem(v)}
		if err := in.push(ctx, &p); err != nil {
			in.refuse(&p, err) // pulled, so it must be accounted for
			pulledAll = false
			break
		}
	}
	stop()
	end := in.skipEnd(ctx, skip)
	if end == nil && pulledAll && ctx.Err() != nil {
		end = canceledEnd(&Error{Class: ClassCanceled, Err: fmt.Errorf("the input ended after the context did, and may not be whole: %w", context.Cause(ctx))})
	}
	if cfg.checkpoint != nil {
		end = in.withFinalSave(end)
	}
	res, err := in.close(end)
	ended = true
	return res, err
}

// skipEnd returns the end (see run.finish) of a resumed stream that
// stopped pulling with left of the records its checkpoint settled still
// to skip, or nil when left is 0; Stats.Skipped, counted in full at the
// start, is corrected to the records skipped. When ctx has ended, the run
// was canceled ([ErrCanceled], joined to the run's error, if any): the
// input may be whole, and the checkpoint right. Otherwise the input ended
// before the checkpoint's position: [ErrCheckpointPastEnd].
func (in *intake) skipEnd(ctx context.Context, left int) func(error) error {
	if left == 0 {
		return nil
	}
	in.r.stats.skipped.Add(-int64(left))
	skipped := int(in.ckpt.loaded) - left
	if ctx.Err() != nil {
		return canceledEnd(&Error{Class: ClassCanceled, Err: fmt.Errorf("stopped while skipping the %d records the checkpoint settled, %d skipped: %w",
			in.ckpt.loaded, skipped, context.Cause(ctx))})
	}
	return func(error) error {
		return fmt.Errorf("%w: it says %d records settled, and the input has %d records: the input changed, or the checkpoint belongs to another",
			ErrCheckpointPastEnd, in.ckpt.loaded, skipped)
	}
}

// canceledEnd returns the end (see run.finish) of a stream that stopped
// pulling because its context ended: canceled, joined to the run's own
// error unless that says so already (records that failed canceled, a
// *RunError, which callers may assert).
func canceledEnd(canceled *Error) func(error) error {
	return func(err error) error {
		switch {
		case err == nil:
			return canceled
		case errors.Is(err, ErrCanceled):
			return err
		}
		return errors.Join(err, canceled)
	}
}

// errCallerPanicked stops a run whose caller's code (an iterator, a
// namespace function) panicked on the call's goroutine.
var errCallerPanicked = &Error{Class: ClassCanceled, Err: errors.New("stopped: the caller's iterator or namespace function panicked")}

// abort ends a call that is unwinding from a panic in the caller's code:
// it stops the flusher (stop may be nil), halts the run and waits for
// everything the run started, and lets go of the Limiter, so that the
// panic reaches the caller with nothing left running.
//
// failRest, when not nil, fails what the call had not taken in once the
// run is halted. The run's error, for RunDone, is errCallerPanicked when
// no record failed.
func (in *intake) abort(stop, failRest func()) {
	if stop != nil {
		stop()
	}
	in.r.halt(errCallerPanicked)
	if failRest != nil {
		failRest()
	}
	_, _ = in.close(func(err error) error {
		if err == nil {
			return errCallerPanicked
		}
		return err
	})
}

// DefaultMaxDelay is how long a partial batch of a [Writer] or [Stream]
// waits for more records before it is sent anyway.
const DefaultMaxDelay = time.Second

// WithMaxDelay sets how long a partial batch of a [Writer] or [Stream] may
// wait for more records, counted from its first record, before it is sent
// anyway, however steadily records trickle in; default [DefaultMaxDelay].
// [All] has every record at hand and never waits.
// A delay of 0 or less fails the call with [ErrBadOption].
func WithMaxDelay(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.bad("WithMaxDelay(%v): want a positive duration", d)
			return
		}
		c.maxDelay = d
	}
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
