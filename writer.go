package upsert

import (
	"context"
	"errors"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// ErrClosed is returned by [Writer.Add] and [Writer.Flush] once
// [Writer.Close] has been called.
var ErrClosed = errors.New("upsert: writer closed")

// Writer upserts records that a service produces continuously, in the
// manner of a bulk indexer: Add records as they come, Flush when a
// checkpoint of the caller's needs them landed, Close at the end. It
// batches, paces and retries exactly as [All] does, with one [Limiter]
// for its whole life.
//
// Add blocks while the index cannot take more (every batch slot busy, the
// index down): memory stays bounded, and the producer slows down to the
// index's pace. Records are taken one at a time: those of one goroutine in
// its order, those of several in the order they are taken. With
// [WithNamespaceOf], an Add waits for room in its own namespace only: one
// held back by its own 429s, a Retry-After or slow requests does not hold
// back the Adds of the others, from any goroutine, as long as the records
// waiting in partial or stalled batches across namespaces (four requests'
// worth at most) leave room; of the batches a run holds in flight (130,
// or 2n+2 under WithConcurrency(n)), the last eighth (one at least) go to
// namespaces with none in flight. A fixed [WithConcurrency] is the requests in flight the
// namespaces share: one paused by a Retry-After holds none of them, but
// one whose requests wait for its rate holds those queued. With
// [WithAcks] a full window of acks (which go in order) holds back every
// Add.
// Failures are reported as they happen to the Failure function of an
// [Observer], if one was given (a dead-letter file), and are in the Result
// that Close returns (only the first 1000 of them when an observer or the
// acks of [WithAcks] receive them all). To learn, record by record and in
// the order they were added, which records have landed (to commit a source's
// offsets as they do), pass [WithAcks] and add with [Writer.AddTagged].
//
// A Writer is safe for concurrent use, and every method returns when its
// context ends, also while another call waits for room. When the Writer's
// own context ends, it fails what it holds and stops by itself: nothing is
// left running even if Close is never called, and the observers' RunDone
// comes then, once. To shut a service down without failing what it holds,
// give NewWriter a context that outlives the shutdown signal
// (context.WithoutCancel of it, say) and bound Close's own context
// instead. Make a Writer with [NewWriter]: the zero value is not usable.
type Writer struct {
	in          *intake
	stopFlusher func()

	closing chan struct{} // holds a token while a Close runs
	done    bool          // the run has ended and res, err are final
	res     Result
	err     error
}

// NewWriter returns a Writer that sends with opts, which must name the
// index ([WithIndex] or [WithUpsertFunc]). An option a Writer cannot use
// ([WithCheckpoint]: a Writer has no input to replay) is an error matching
// [ErrBadOption]. ctx bounds the Writer's whole life: when it ends,
// records not yet landed fail with [ClassCanceled]. The Writer's requests
// descend from ctx (through the observers' StartRun), not from the
// contexts given to Add, since a request carries the records of many Add
// calls: trace context and values for the requests go in ctx.
func NewWriter(ctx context.Context, opts ...Option) (*Writer, error) {
	cfg, err := newConfig(opts, vectorKind, entryWriter)
	if err != nil {
		return nil, err
	}
	r := newRun(ctx, cfg, vectorKind, -1, "Writer")
	in := newIntake(r, forWriter)
	if failuresHandedOut(cfg) {
		r.results.keepFailed = failuresKept
	}
	w := &Writer{in: in, closing: make(chan struct{}, 1)}
	w.stopFlusher = in.startFlusher(cfg.maxDelay, w.finishStopped)
	return w, nil
}

// finishStopped ends the run of a Writer that stopped by itself (its
// context ended, or the index denied the caller) as Close would, so that
// observers get RunDone even if Close is never called; a later Close
// returns the same result. It waits for a Close under way, which ends the
// run instead (and stops the flusher: stopped ends) unless its context
// ends first.
func (w *Writer) finishStopped(stopped context.Context) {
	select {
	case w.closing <- struct{}{}:
	case <-stopped.Done():
		return
	}
	defer func() { <-w.closing }()
	if !w.done {
		w.res, w.err = w.in.close(nil)
		w.done = true
	}
}

// Add takes a copy of v in (its values, sparse values and metadata): the
// caller may reuse or change v as soon as Add returns. The copy is sent
// within a batch soon after, at most the max delay ([WithMaxDelay]) after
// the first record of its batch was added, and is what [Failure.Record]
// holds if it fails.
// Add blocks while the index cannot take more (and, with [WithAcks], while
// the window of acks is full). It returns an error, with v
// not taken, when ctx ends first (also while another Add waits for room),
// after Close was called ([ErrClosed]), or when the run stopped (the index
// denied the caller, or the Writer's context ended): then the error is the
// [*Error] that stopped it. A record that breaks a rule of the index (see
// [All]) is taken, and fails at once with [ClassInvalid], reported as any
// failure: Add returns nil for it.
func (w *Writer) Add(ctx context.Context, v *pinecone.Vector) error {
	return w.AddTagged(ctx, v, nil)
}

// AddTagged is [Writer.Add], and with [WithAcks] the record's [Ack]
// carries tag: the source's message or offset, so that the ack says what
// to commit. A pointer costs no allocation; an integer or a struct does
// (as any conversion to an interface does). The tag is kept until the ack
// is delivered. Without WithAcks, the tag is dropped.
func (w *Writer) AddTagged(ctx context.Context, v *pinecone.Vector, tag any) error {
	if w.in.closed.Load() {
		return ErrClosed // before copying
	}
	return w.in.push(ctx, &pushing{it: item{vec: cloneVector(v)}, tag: tag})
}

// Flush sends every record added before it was called, however few, and
// waits until each of them has landed or failed (and, with [WithAcks], its
// ack has been delivered), or ctx ends. Records added while it waits are
// not waited for, even one that replaced, before it was sent, a record of
// its id added before (see [Ack].Replaced: the later record settles the
// earlier, whose fate is its own). It returns ctx's error when ctx ends first, [ErrClosed]
// when Close was called before it, and the error that stopped the run when
// the Writer's context ended or the index denied the caller before the
// Writer finished; nil otherwise, even when some of the records failed
// (they are reported as failures, and counted in the Result of Close), and
// also when a Close called while Flush waits ends the Writer normally.
func (w *Writer) Flush(ctx context.Context) error {
	in := w.in
	if in.closed.Load() {
		return ErrClosed
	}
	added, err := in.flushTaken(ctx, func() error {
		if in.closed.Load() {
			return ErrClosed
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := in.settled.wait(ctx, added); err != nil {
		return err
	}
	if err := in.waitAcked(ctx, added); err != nil {
		return err
	}
	// A Close that finished the Writer meanwhile is no stop: the records
	// settled as they would have without it.
	if e := in.r.stoppedBy(); e != nil {
		return e
	}
	return nil
}

// Close stops taking records (Add and Flush return [ErrClosed] from the
// moment it is called), sends what is left, waits until every record has
// landed or failed (and, with [WithAcks], its ack has been delivered), and
// returns the result of the Writer's whole life, as
// [All] does. ctx bounds the wait: when it ends first, Close returns ctx's
// error and the Writer goes on sending in the background until its own
// context ends; a later Close waits again. Calling Close after it returned
// gives the same result.
func (w *Writer) Close(ctx context.Context) (Result, error) {
	in := w.in
	in.stopTaking() // from the moment it is called, whatever ctx
	select {
	case w.closing <- struct{}{}: // free: a Close that returned gives its result whatever ctx
	default:
		select {
		case w.closing <- struct{}{}:
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}
	defer func() { <-w.closing }()
	if w.done {
		return w.res, w.err
	}
	// Its first turn comes after closed was set: no record comes after.
	added, err := in.flushTaken(ctx, nil)
	if err != nil {
		return Result{}, err
	}
	if err := in.settled.wait(ctx, added); err != nil {
		return Result{}, err
	}
	if err := in.waitAcked(ctx, added); err != nil {
		return Result{}, err
	}
	w.stopFlusher()
	w.res, w.err = in.close(nil)
	w.done = true
	return w.res, w.err
}
