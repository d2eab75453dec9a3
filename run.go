package upsert

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// run is the streaming core under All: records flow in through add, are cut
// into batches per namespace, sent by a bounded set of workers, and end up
// counted as upserted or reported as failures. Memory is bounded by the
// number of batches in flight, since add blocks while every worker is busy.
//
// add and flush are called from one goroutine, the producer; everything
// else may run on the workers. Its state is grouped by concern: contexts,
// routes (routes.go), workers (workers.go), progress (progress.go) and
// results (settle.go).
type run struct {
	cfg   *config
	kind  *kind
	shape *indexShape // of the index, for vectors; nil for integrated records
	// minute paces integrated records under per-minute limits; nil for
	// vectors.
	minute *minuteGate
	// pacer spaces requests under the caller's cap (WithMaxRate); nil
	// for none.
	pacer *pacer
	start time.Time
	total int // records expected, or -1 for a stream

	runContexts // embedded: r.runCtx and r.halt are used all over the package

	routes   routeTable
	pool     workerPool
	stats    counters // the run's figures, for progress and the result
	progress progressReports
	results  runResults

	// onSettle, when set, is told of every record that landed or failed,
	// from the workers: the intake's bookkeeping of ids in flight,
	// settled positions, the checkpoint and ids that may be stale.
	onSettle func(items []item, o outcome)

	// releaseLimiter ends the run's use of a Limiter shared by default
	// with the other calls writing into its index (shared.go).
	releaseLimiter func()
	// shares are the run's memberships of lanes shared across processes.
	shares runShares
	// described: the index answered the run's DescribeIndexStats.
	described bool
}

// runContexts are a run's contexts, and what its observers were told of it.
type runContexts struct {
	ctx    context.Context         // the caller's
	obsCtx context.Context         // the caller's, as the observers' StartRun returned it
	runCtx context.Context         // obsCtx's, ending with ctx or when the index denies the caller
	cancel context.CancelCauseFunc // runCtx's; see halt
	op     string                  // the RunEvent's Operation
	traced bool                    // an observer starts something per request
}

// halt stops the run for e: runCtx ends with e's stopCause.
func (c *runContexts) halt(e *Error) { c.cancel(&stopCause{e}) }

// stopCause is the cause of runCtx when the run stopped for an error of
// its own: a wrapper that only the run makes, so that a request whose
// error carries it (net/http returns a canceled request's context cause)
// is known to be cut off by the stop, whatever *Error a caller's send
// function returns for its own answers.
type stopCause struct{ err *Error }

func (s *stopCause) Error() string { return s.err.Error() }
func (s *stopCause) Unwrap() error { return s.err }

// newRun starts a run; op names the call ("All", "Stream", "Records" or
// "Writer") for the observers.
func newRun(ctx context.Context, cfg *config, k *kind, total int, op string) *run {
	r := &run{
		cfg:         cfg,
		kind:        k,
		start:       cfg.clock.Now(),
		total:       total,
		runContexts: runContexts{ctx: ctx, op: op, traced: cfg.observers.traceRequests()},
		routes:      routeTable{byKey: make(map[string]*route)},
		results:     runResults{keepFailed: -1},
	}
	r.releaseLimiter = func() {}
	if cfg.limiter == nil {
		_, realTime := cfg.clock.(realClock)
		if cfg.index != nil && realTime {
			cfg.limiter, r.releaseLimiter = shareLimiter(cfg.index)
		} else {
			cfg.limiter = &Limiter{clock: cfg.clock}
		}
	}
	r.shares.start(cfg)
	r.pacer = newPacer(cfg.maxRate)
	if k == vectorKind {
		// The host is right when describe answered: a blip of errors at
		// the start is an outage to wait out, not a wrong host to give up
		// on. Each route's lane hears it (route).
		r.shape, r.described = newIndexShape(ctx, cfg)
	} else {
		r.minute = cfg.limiter.minuteGateOf(r.laneHost(), cfg.clock)
	}
	started := false
	defer func() {
		if !started { // a StartRun observer panicked: the call lets go of what it took
			r.releaseLimiter()
		}
	}()
	r.obsCtx = cfg.observers.startRun(ctx, r.runEvent(Stats{}, nil))
	started = true
	r.runCtx, r.cancel = context.WithCancelCause(r.obsCtx)
	r.progress.last.Store(r.start.UnixNano())
	r.pool.start(cfg.concurrency)
	return r
}

// stopError is the error of records cut off because the run stopped: the
// caller's context ended (canceled class), or the index denied the caller.
func (r *run) stopError() *Error {
	if err := r.ctx.Err(); err != nil {
		return &Error{Class: ClassCanceled, Err: context.Cause(r.ctx)}
	}
	if e := asError(context.Cause(r.runCtx)); e != nil {
		return e
	}
	return &Error{Class: ClassCanceled, Err: context.Cause(r.runCtx)}
}

// errRunFinished is the cause of the run's context once the run ended
// normally (finish, abandon): unlike a stop, it says nothing against the
// records. It wraps context.Canceled, which the cause was before.
var errRunFinished = fmt.Errorf("upsert: the run finished: %w", context.Canceled)

// stoppedBy returns the error that stopped the run before it finished (see
// stopError), or nil while it runs or once it finished normally.
func (r *run) stoppedBy() *Error {
	if r.runCtx.Err() == nil || errors.Is(context.Cause(r.runCtx), errRunFinished) {
		return nil
	}
	return r.stopError()
}

// finish waits for every batch, assembles the result and tells the
// observers. end, when not nil, makes the call's error of the run's, so
// that RunDone carries what the call returns.
func (r *run) finish(end func(error) error) (Result, error) {
	r.pool.wg.Wait()
	s := r.end()
	res := Result{Upserted: s.Upserted, Failed: r.results.failed, Duplicates: s.Duplicates, MayBeStale: r.sortedStale(), Stats: s}
	slices.SortFunc(res.Failed, func(a, b Failure) int { return a.Index - b.Index })
	res.Failed = r.results.untaken.appendTo(res.Failed) // all after the others
	var err error
	if s.Failed > 0 {
		err = r.stats.runError(s.Records)
	}
	err = withPanic(err, r.progress.panicked.Load())
	if end != nil {
		err = end(err)
	}
	r.cfg.observers.runDone(r.runEvent(s, err))
	return res, err
}

// namespaceAttr names the run's namespace for its summary line: "" for
// the default one, as in events; "(per record)" when WithNamespaceOf
// routes the records, whose namespaces the connection's does not say.
func (r *run) namespaceAttr() slog.Attr {
	if r.cfg.namespaceOf != nil {
		return slog.String("namespace", "(per record)")
	}
	return slog.String("namespace", namespaceKey(r.cfg.namespace))
}

// abandon ends a run that stopped before taking any record in, with err,
// and returns the call's error: err, with a panic of the progress function.
func (r *run) abandon(err error) error {
	s := r.end()
	if p := r.progress.panicked.Load(); p != nil {
		err = errors.Join(err, p) // err may carry a panic of its own: the checkpoint's
	}
	r.cfg.observers.runDone(r.runEvent(s, err))
	return err
}

// end ends the run once nothing is in flight: its last progress report,
// the lanes let go, and its summary line. It returns the run's Stats.
func (r *run) end() Stats {
	r.cancel(errRunFinished)
	if r.cfg.progress != nil {
		r.progress.mu.Lock()
		r.emitProgress(0, true)
		r.progress.mu.Unlock()
	}
	r.leaveShares()
	s := r.snapshot() // before the lanes are let go: a sweep may then forget them
	r.routes.release()
	r.releaseLimiter()
	r.cfg.logger.LogAttrs(r.ctx, slog.LevelInfo, "upsert finished",
		r.namespaceAttr(),
		slog.Int("records", s.Records),
		slog.Int("upserted", s.Upserted),
		slog.Int("failed", s.Failed),
		slog.Int("duplicates", s.Duplicates),
		slog.Int("requests", s.Requests),
		slog.Int("retries", s.Retries),
		slog.Int("splits", s.Splits),
		slog.Duration("p99_latency", s.Latency.P99),
		slog.Duration("elapsed", s.Elapsed))
	return s
}

// withPanic returns the run's error err with p, the error wrapping a panic
// of the caller's code that stopped the run (the ack or the progress
// function), if any: the caller has a bug to hear of, also when every
// record settled, or failed for another cause. A run error that carries a
// panic already (the records it failed) is returned as it is.
func withPanic(err error, p *Error) error {
	var pe *PanicError
	switch {
	case p == nil:
		return err
	case err == nil:
		return p
	case errors.As(err, &pe):
		return err
	}
	return errors.Join(err, p)
}

// runEvent describes the run for the observers.
func (r *run) runEvent(s Stats, err error) RunEvent {
	return RunEvent{
		Context: r.obsCtx, Operation: r.op, Host: r.laneHost(), Namespace: namespaceKey(r.cfg.namespace),
		LimiterState: r.limiterState, Stats: s, Err: err,
	}
}

// limiterState returns the state of the run's namespace in its Limiter,
// with the concurrency and batch size the run pinned, if it did.
func (r *run) limiterState() LimiterState {
	l := r.cfg.limiter
	id := laneID{host: r.laneHost(), key: r.kind.laneKey(namespaceKey(r.cfg.namespace))}
	st := l.stateOf(func() *lane { return l.lanes[id] }, r.kind.maxBatch) // this run's index's, not another's

	if r.cfg.concurrency > 0 {
		st.Concurrency = r.cfg.concurrency
	}
	if r.cfg.batchSize > 0 {
		st.BatchSize = r.cfg.batchSize
	}
	return st
}
