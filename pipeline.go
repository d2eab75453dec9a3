package upsert

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// run is the streaming core under All: records flow in through add, are cut
// into batches per namespace, sent by a bounded set of workers, and end up
// counted as upserted or reported as failures. Memory is bounded by the
// number of batches in flight, since add blocks while every worker is busy.
//
// add and flush are called from one goroutine, the producer; everything
// else may run on the workers. It has more than twenty fields because it
// is the one state a call's producer and workers share; each field is
// used by one concern (contexts, routes, workers, progress, settling).
type run struct {
	cfg   *config
	kind  *kind
	shape *indexShape // of the index, for vectors; nil for integrated records
	// minute paces integrated records under per-minute limits; nil for
	// vectors.
	minute *minuteGate
	start  time.Time
	total  int // records expected, or -1 for a stream

	ctx    context.Context // the caller's
	obsCtx context.Context // the caller's, as the observers' StartRun returned it
	runCtx context.Context // obsCtx's, ending with ctx or when the index denies the caller
	halt   context.CancelCauseFunc
	op     string // the RunEvent's Operation
	traced bool   // an observer starts something per request

	routes map[string]*route // by namespaceKey; the producer's
	// forgetIdleRoutes drops the routes with nothing waiting when the map
	// has doubled, so that a stream over many namespaces holds few: their
	// lanes live on in the Limiter. All keeps its routes, which it compares.
	forgetIdleRoutes bool
	sweepAt          int           // the size of routes at which to drop the idle ones
	workers          chan int      // free worker ids; a batch in flight holds one
	slots            chan struct{} // when concurrency is fixed: one per request in flight
	wg               sync.WaitGroup
	active           atomic.Int64 // batches in flight
	resting          atomic.Int64 // of which waiting out a backoff or the retry budget
	doneMu           sync.Mutex   // guards batchDone and restWake
	batchDone        signal       // fired when a batch finishes or rests
	restWake         signal       // fired to end the backoffs under way (wakeResting)
	drained          atomic.Bool  // the producer has dispatched every batch (producerDone)
	lastLanded       atomic.Bool  // the last request answered landed

	stats        counters
	lastProgress atomic.Int64 // clock time of the last progress report, in ns
	lastDone     atomic.Int64 // records settled at the last progress report
	progressMu   sync.Mutex

	// onSettle, when set, is told of every record that landed or failed,
	// from the workers: the intake's bookkeeping of ids in flight,
	// settled positions, the checkpoint and ids that may be stale.
	onSettle func(items []item, o outcome)

	// releaseLimiter ends the run's use of a Limiter shared by default
	// with the other calls writing into its index (shared.go).
	releaseLimiter func()
	// shares are the run's memberships of lanes shared across processes.
	shares runShares

	mu         sync.Mutex
	failed     []Failure
	keepFailed int     // most failures (and stale records) kept for the result; < 0 keeps all
	untaken    untaken // records All never looked at because the run stopped
	stale      []Stale
}

// outcome is how records settled.
type outcome struct {
	landed    bool // the index confirmed them
	final     bool // they settled for good (settlesForGood): a checkpoint may pass them
	ambiguous bool // a request carrying them ended without an answer: it may be applied yet

	// failures are the items' own, when they failed (for their acks).
	failures []Failure
}

// untaken are the last records of All's slice, from position from on,
// which failed with err when the run stopped before they were looked at.
type untaken struct {
	records []*pinecone.Vector
	from    int
	err     *Error
}

// failure returns the failure of the i-th of them.
func (u untaken) failure(i int) Failure {
	f := Failure{Index: u.from + i, Record: u.records[i], Class: u.err.Class, Err: u.err}
	if v := u.records[i]; v != nil {
		f.ID = v.Id
	}
	return f
}

// appendTo appends their failures to fs, in order, growing it once.
func (u untaken) appendTo(fs []Failure) []Failure {
	fs = slices.Grow(fs, len(u.records))
	for i := range u.records {
		fs = append(fs, u.failure(i))
	}
	return fs
}

// route is where the records of one namespace go.
type route struct {
	namespace string
	overhead  int // request bytes besides the records
	lane      *lane
	invalid   error // the rule the namespace breaks: its records fail before sending
	batcher   batcher
	ready     batch // a full batch that could not be dispatched yet
	stalled   bool  // in the intake's list of routes whose ready batch waits
	// lastFailure is the last server error or timeout of a request, for
	// the records the circuit breaker fails without sending them.
	lastFailure atomic.Pointer[Error]
}

// newRun starts a run; op names the call ("All", "Stream", "Records" or
// "Writer") for the observers.
func newRun(ctx context.Context, cfg *config, k *kind, total int, op string) *run {
	r := &run{
		cfg:        cfg,
		kind:       k,
		start:      cfg.clock.Now(),
		total:      total,
		ctx:        ctx,
		op:         op,
		traced:     cfg.observers.traceRequests(),
		routes:     make(map[string]*route),
		keepFailed: -1,
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
	if k == vectorKind {
		r.shape = newIndexShape(ctx, cfg)
	} else {
		r.minute = newMinuteGate(cfg.clock)
	}
	r.obsCtx = cfg.observers.startRun(ctx, r.runEvent(Stats{}, nil))
	r.runCtx, r.halt = context.WithCancelCause(r.obsCtx)
	r.lastProgress.Store(r.start.UnixNano())
	maxInFlight := defaultTuning.maxConcurrency
	if cfg.concurrency > 0 {
		maxInFlight = cfg.concurrency
		r.slots = make(chan struct{}, cfg.concurrency)
	}
	// Twice as many batches as requests in flight keep every slot busy
	// while some batches wait out a backoff.
	nWorkers := 2*maxInFlight + 2
	r.workers = make(chan int, nWorkers)
	for i := range nWorkers {
		r.workers <- i
	}
	return r
}

// route returns the route of namespace, creating it on first use. "" and
// "__default__" share one route, which sends under the name it first saw.
func (r *run) route(namespace string) *route {
	key := namespaceKey(namespace)
	rt, ok := r.routes[key]
	if !ok {
		if r.forgetIdleRoutes && len(r.routes) >= r.sweepAt {
			r.dropIdleRoutes()
		}
		rt = &route{
			namespace: namespace,
			overhead:  r.kind.overhead(namespace),
			invalid:   checkNamespace(namespace),
			lane:      r.cfg.limiter.lane(r.kind.lanePrefix+key, r.kind.maxBatch),
		}
		if key == "" {
			// Either name may go out (WithIndex sends its own): room
			// for the longer.
			rt.overhead = r.kind.overhead(defaultNamespace)
		}
		rt.batcher.maxBytes = r.kind.maxBytes - rt.overhead
		rt.batcher.next = rt.lane.nextBatch
		rt.lane.setLimits(r.cfg.indexLimits())
		r.joinShare(rt.lane, r.kind.lanePrefix+key)
		if r.cfg.batchSize > 0 {
			rt.batcher.next = func() (int, bool) { return r.cfg.batchSize, false }
		}
		r.routes[key] = rt
	}
	return rt
}

// dropIdleRoutes forgets the routes with no records waiting, and sets the
// size at which to look again: twice what is left, at least minRoutes.
func (r *run) dropIdleRoutes() {
	for ns, rt := range r.routes {
		if len(rt.ready.items) == 0 && len(rt.batcher.cur.items) == 0 {
			delete(r.routes, ns)
		}
	}
	r.sweepAt = max(minRoutes, 2*len(r.routes))
}

// minRoutes is the most routes a stream keeps without looking for idle
// ones.
const minRoutes = 1024

// dispatch hands a batch to a worker once fewer batches are ready to send
// than the lane lets requests in flight, plus two: enough to keep every
// slot busy, few enough that a new batch size takes effect at once.
// Batches waiting out a backoff do not count, but the worker pool bounds
// them. Waiting here is the backpressure that bounds memory.
//
// It returns kept true and ctx's error, with b not dispatched and still the
// caller's, when ctx ends first; when the run has stopped it fails b's
// records and returns the stop error. The caller must go by kept, not by
// whether the run has stopped since: a run that stops just after ctx ended
// has not failed b.
func (r *run) dispatch(ctx context.Context, rt *route, b batch) (kept bool, err error) {
	if r.runCtx.Err() != nil {
		return false, r.failStopped(b.items)
	}
	room := func() bool {
		conc := r.cfg.concurrency
		if conc == 0 {
			conc = rt.lane.concurrency()
		}
		return r.active.Load()-r.resting.Load() < int64(conc+2)
	}
	for !room() {
		finished := r.batchFinished()
		if room() {
			break // a batch finished before the channel existed, and closed none
		}
		select {
		case <-finished:
		case <-r.runCtx.Done():
			return false, r.failStopped(b.items)
		case <-ctx.Done():
			return r.notDispatched(ctx, b)
		}
	}
	select {
	case id := <-r.workers:
		r.active.Add(1)
		r.wg.Add(1)
		go r.process(id, rt, b)
		return false, nil
	case <-r.runCtx.Done():
		return false, r.failStopped(b.items)
	case <-ctx.Done():
		return r.notDispatched(ctx, b)
	}
}

// notDispatched returns ctx's error for a batch that was not dispatched,
// kept by the caller, unless the run stopped meanwhile (ctx may be the
// run's): then b's records fail.
func (r *run) notDispatched(ctx context.Context, b batch) (kept bool, err error) {
	if r.runCtx.Err() != nil {
		return false, r.failStopped(b.items)
	}
	return true, ctx.Err()
}

// failStopped fails items that will never be sent because the run stopped,
// and returns the stop error.
func (r *run) failStopped(items []item) error {
	e := r.stopError()
	r.failAll(items, e, 0, false)
	return e
}

// batchFinished returns a channel closed when the next batch finishes.
func (r *run) batchFinished() <-chan struct{} {
	r.doneMu.Lock()
	defer r.doneMu.Unlock()
	return r.batchDone.wait()
}

func (r *run) finishBatch(worker int) {
	r.active.Add(-1)
	r.signalBatch()
	r.wakeResting()
	r.workers <- worker
	r.wg.Done()
}

// producerDone tells the run that every batch it will send is dispatched.
func (r *run) producerDone() {
	r.drained.Store(true)
	r.wakeResting()
}

// restWaker returns the channel that wakeResting closes: a batch about to
// rest takes it before it counts as resting.
func (r *run) restWaker() <-chan struct{} {
	r.doneMu.Lock()
	defer r.doneMu.Unlock()
	return r.restWake.wait()
}

// wakeResting ends the backoffs under way when every batch left rests:
// the index took the last request, and a backoff spreads load that no
// longer comes (the run's last batches, once the producer is done). Each
// still waits out its Retry-After, the retry budget and the lane's
// admission; one refused again rests its full backoff unless another
// batch lands meanwhile.
func (r *run) wakeResting() {
	if !r.drained.Load() || !r.lastLanded.Load() {
		return
	}
	if n := r.resting.Load(); n == 0 || r.active.Load() != n {
		return
	}
	r.doneMu.Lock()
	defer r.doneMu.Unlock()
	r.restWake.fire()
}

// rest counts a batch entering (+1) or leaving (-1) a backoff: a batch
// that rests makes room for another to be formed.
func (r *run) rest(delta int64) {
	r.resting.Add(delta)
	if delta > 0 {
		r.signalBatch()
	}
}

func (r *run) signalBatch() {
	r.doneMu.Lock()
	defer r.doneMu.Unlock()
	r.batchDone.fire()
}

// part is a batch or a piece of one, with what its records went through.
type part struct {
	items     []item
	retries   [numClasses]int // retries spent, per class, by this part and its ancestors
	attempts  int             // requests that carried these records
	ambiguous bool            // some request ended without a clear answer
	sizeProbe bool            // the batch probes a larger size (until first sent)
	free      bool            // its last failure spends no retry (see failureNote)
	failures  batchFailures   // what tells whether the next failure does
}

func (p *part) child(items []item) *part {
	c := *p
	c.items, c.sizeProbe = items, false
	return &c
}

// process sends one batch until each of its records has landed or failed.
// Halves of a split are sent one after the other, first half first.
func (r *run) process(worker int, rt *route, b batch) {
	defer r.finishBatch(worker)
	stack := []*part{{items: b.items, sizeProbe: b.probe}}
	retries := 0
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if r.runCtx.Err() != nil {
			r.failPart(p, r.stopError())
			continue
		}
		if pieces := r.recutToLane(rt, p); pieces != nil {
			stack = append(stack, pieces...)
			continue
		}
		e := r.attempt(worker, rt, p)
		if e == errRecut {
			stack = append(stack, p) // cut to the lane's limit above
			continue
		}
		r.maybeProgress()
		if e == nil {
			r.shape.learn(p.items)
			r.stats.upserted.Add(int64(len(p.items)))
			r.settle(p.items, outcome{landed: true, final: true, ambiguous: p.ambiguous})
			continue
		}
		next, retried := r.afterFailure(worker, rt, p, e)
		if retried {
			retries++
		}
		stack = append(stack, next...)
	}
	r.stats.batchDone(retries)
}

// recutToLane cuts p to the most records the lane lets a request carry
// now, returning the pieces in the order they go on the stack (last piece
// first), or nil when p fits or the caller pinned the batch size.
func (r *run) recutToLane(rt *route, p *part) []*part {
	if r.cfg.batchSize != 0 {
		return nil
	}
	limit := rt.lane.sendLimit()
	if len(p.items) <= limit {
		return nil
	}
	pieces := recut(p.items, limit)
	parts := make([]*part, 0, len(pieces))
	for i := len(pieces) - 1; i >= 0; i-- {
		parts = append(parts, p.child(pieces[i]))
	}
	return parts
}

// afterFailure decides what becomes of p after its request failed with
// e: it fails p, or returns the parts to send next (its halves, or p
// itself after its backoff) and whether a retry was spent.
func (r *run) afterFailure(worker int, rt *route, p *part, e *Error) (next []*part, retried bool) {
	c := e.Class
	switch {
	case c == ClassDenied, c == ClassQuotaExceeded:
		r.log(slog.LevelError, "index refused the caller; stopping", worker, rt, p, e)
		r.failPart(p, e)
		r.halt(e)
	case c == ClassCanceled:
		r.failPart(p, e)
	case isPanic(e):
		r.log(slog.LevelError, "send function panicked; batch failed", worker, rt, p, e)
		r.failPart(p, e) // a retry would panic again
	case e == errNeverAnswered || e == errOutageTooLong:
		r.log(slog.LevelError, "index down; batch not sent", worker, rt, p, e)
		r.failPart(p, rt.withLastFailure(e))
	case len(p.items) > 1 && (c == ClassTimeout || c == ClassTooLarge || c == ClassInvalid):
		r.stats.splits.Add(1)
		r.log(slog.LevelWarn, "splitting batch", worker, rt, p, e)
		r.cfg.observers.retry(RetryEvent{Context: r.obsCtx, Namespace: rt.namespace, Worker: worker, Records: len(p.items), Attempt: p.attempts, Split: true, Err: e})
		a, b := split(p.items)
		return []*part{p.child(b), p.child(a)}, false
	case p.retries[c] < r.cfg.retry.maxRetries[c] || p.free && r.cfg.retry.maxRetries[c] > 0:
		if r.retryAfterBackoff(worker, rt, p, e) {
			return []*part{p}, true
		}
		return nil, true
	default:
		r.log(slog.LevelError, "giving up on batch", worker, rt, p, e)
		r.failPart(p, e)
	}
	return nil, false
}

// retryAfterBackoff spends a retry of p's class (none when p.free),
// waits out its backoff and the lane's retry budget, and reports whether
// p is to be sent again; when the run stops meanwhile, p fails.
func (r *run) retryAfterBackoff(worker int, rt *route, p *part, e *Error) bool {
	c := e.Class
	wait := r.backoff(c, p.failures.backoffStep(c, p.retries[c]), e.RetryAfter)
	if !p.free {
		p.retries[c]++
	}
	r.stats.retry(c)
	r.log(slog.LevelWarn, "retrying batch", worker, rt, p, e, slog.Duration("backoff", wait))
	r.cfg.observers.retry(RetryEvent{Context: r.obsCtx, Namespace: rt.namespace, Worker: worker, Records: len(p.items), Attempt: p.attempts, Wait: wait, Err: e})
	wake := r.restWaker()
	r.rest(+1)
	r.wakeResting() // the others may have landed since p's refusal
	woke, err := r.sleepBackoff(wait, e.RetryAfter, wake)
	p.failures.woke = woke
	if err == nil {
		err = rt.lane.awaitRetry(r.runCtx)
	}
	r.rest(-1)
	if err != nil {
		r.failPart(p, r.stopError())
		return false
	}
	return true
}

// sleepBackoff waits out a backoff of wait, or until wake is closed once
// the index's retryAfter (part of wait) has passed, and reports whether
// wake ended it.
func (r *run) sleepBackoff(wait, retryAfter time.Duration, wake <-chan struct{}) (woke bool, err error) {
	if retryAfter > 0 {
		if err := r.cfg.clock.Sleep(r.runCtx, retryAfter); err != nil {
			return false, err
		}
		wait -= retryAfter
	}
	err = sleepOrWake(r.runCtx, r.cfg.clock, wait, wake)
	if errors.Is(err, errWoken) {
		return true, nil
	}
	return false, err
}

// isPanic reports whether e is a recovered panic (see [PanicError]).
func isPanic(e *Error) bool {
	_, ok := e.Err.(*PanicError)
	return ok
}

// errRecut is what attempt returns for a batch that the lane did not
// admit because it had become larger than a request may carry: it was not
// sent, and goes back to be cut.
var errRecut = &Error{Class: ClassRateLimited, Err: errStaleBatch}

// attempt sends p once: it waits for the lane to admit it (rate tokens,
// then a slot), then sends with the per-request timeout. It returns nil when
// the index confirmed every record.
func (r *run) attempt(worker int, rt *route, p *part) *Error {
	perm, pass, bytes, e := r.admit(rt, p)
	if e != nil {
		return e
	}
	n := len(p.items)
	p.attempts++
	ev := RequestEvent{
		Context: r.runCtx, Namespace: rt.namespace, Worker: worker, Records: n, Bytes: bytes,
		Attempt: p.attempts,
	}
	if r.traced {
		ev.Context = r.cfg.observers.startRequest(ev)
	}
	r.minute.sending(pass)
	ctx, cancel := context.WithTimeout(ev.Context, r.cfg.requestTimeout)
	err := recovered(func() error { return r.kind.send(ctx, r.cfg, rt.namespace, p.items) })
	cancel()
	latency := r.cfg.clock.Now().Sub(perm.start)
	if err != nil {
		e = r.describe(err)
		if r.mayHaveLanded(err, e) {
			p.ambiguous = true
		}
		if e.Class == ClassServer || e.Class == ClassTimeout {
			rt.lastFailure.Store(e)
		}
		if e.Class == ClassDenied || e.Class == ClassQuotaExceeded {
			// Stop before the slot is released, so that no request
			// waiting for it goes out after the answer.
			r.halt(e)
		}
	}
	r.lastLanded.Store(e == nil)
	p.free = p.failures.free(rt.lane.release(perm, e), r.cfg.retry.maxRetries[ClassRateLimited])
	r.minute.done(pass, e)
	r.stats.request(n, latency, e)
	ev.Latency, ev.Err = latency, e
	r.cfg.observers.requestDone(ev)
	return e
}

// admit waits for p's pass of the per-minute limits, then for the lane to
// admit it, and returns the permit, the pass and the request's bytes; or
// the error that stops the attempt unsent (errRecut when the lane wants it
// cut first), with anything taken given back.
func (r *run) admit(rt *route, p *part) (permit, *minutePass, int, *Error) {
	acquire := rt.lane.acquireOrRecut
	if r.cfg.batchSize > 0 {
		acquire = rt.lane.acquire // a pinned size is never cut
	}
	bytes := rt.overhead
	for _, it := range p.items {
		bytes += it.size
	}
	// The per-minute limits first: a wait of up to a minute must not hold
	// a slot of the lane.
	pass, err := r.paceMinute(p.items)
	if err != nil {
		return permit{}, nil, 0, r.describe(err)
	}
	perm, err := acquire(r.runCtx, request{n: len(p.items), bytes: bytes, slots: r.slots, sizeProbe: p.sizeProbe, timeout: r.cfg.requestTimeout})
	p.sizeProbe = false
	if err != nil {
		r.minute.withdraw(pass)
		if errors.Is(err, errStaleBatch) && r.runCtx.Err() == nil {
			return permit{}, nil, 0, errRecut
		}
		return permit{}, nil, 0, r.describe(err)
	}
	if r.runCtx.Err() != nil {
		// Admitted as the run stopped (a slot freed by the answer that
		// stopped it): not sent.
		r.minute.withdraw(pass)
		rt.lane.release(perm, &Error{Class: ClassCanceled})
		return permit{}, nil, 0, r.stopError()
	}
	return perm, pass, bytes, nil
}

// paceMinute waits until integrated records fit under the per-minute
// limits learned so far (minutegate.go); vectors do not wait.
func (r *run) paceMinute(items []item) (*minutePass, error) {
	if r.minute == nil {
		return nil, nil
	}
	return r.minute.wait(r.runCtx, estimateTokens(items))
}

// recovered calls f, the caller's code on a library goroutine, and turns a
// panic into a server-class [*Error] wrapping a [*PanicError].
func recovered(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &Error{Class: ClassServer, Err: &PanicError{Value: v, Stack: debug.Stack()}}
		}
	}()
	return f()
}

// describe classifies err, knowing what the classifier cannot: whether the
// caller's context ended or the run was halted.
func (r *run) describe(err error) *Error {
	if r.runCtx.Err() != nil {
		return r.stopError()
	}
	var e *Error
	if perr := recovered(func() error { e = describe(err, r.cfg.classify); return nil }); perr != nil {
		e = perr.(*Error)
	}
	if e.Class == ClassCanceled {
		// The caller's context is alive, so the transport canceled the
		// request on its own: worth another try.
		e = &Error{Class: ClassServer, GRPCCode: e.GRPCCode, StatusCode: e.StatusCode, Err: e.Err}
	}
	return e
}

// mayHaveLanded reports whether a request that failed with err may have
// written its records anyway: it reached the index, or may have, and no
// answer said it was refused. A request cut off by the run's stop was in
// flight, so it may have landed; one that could not connect cannot have.
// e is what describe made of err.
func (r *run) mayHaveLanded(err error, e *Error) bool {
	if r.runCtx.Err() != nil {
		return !neverSent(err) // cut off in flight, whatever e says of the stop
	}
	switch e.Class {
	case ClassTimeout, ClassServer, ClassCanceled:
		return !neverSent(err)
	}
	return false
}

// breakerGaveUp reports whether e is the circuit breaker's failure of a
// request it did not send (see breaker.gaveUp), also with the last
// failure added (withLastFailure).
func breakerGaveUp(e *Error) bool {
	return errors.Is(e.Err, errNeverAnswered.Err) || errors.Is(e.Err, errOutageTooLong.Err)
}

// withLastFailure returns e, an error of a batch the circuit breaker
// failed without sending it, with the last failure the namespace's
// requests met, which says why the index is taken for down (the host
// that does not resolve, the connection refused).
func (rt *route) withLastFailure(e *Error) *Error {
	last := rt.lastFailure.Load()
	if last == nil {
		return e
	}
	return &Error{Class: e.Class, Err: fmt.Errorf("%w; the last request failed with: %v", e.Err, last)}
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

func (r *run) backoff(c Class, n int, retryAfter time.Duration) time.Duration {
	b := r.cfg.retry.backoffFor(c, r.cfg.rand)
	b.n = n
	return max(b.NextBackOff(), retryAfter)
}

func (r *run) failPart(p *part, e *Error) {
	r.failAll(p.items, e, p.attempts, p.ambiguous)
}

func (r *run) failAll(items []item, e *Error, attempts int, ambiguous bool) {
	if len(items) == 0 {
		return
	}
	fs := make([]Failure, len(items))
	for i, it := range items {
		fs[i] = Failure{
			Index: it.seq, ID: it.id, Record: it.vec, Integrated: it.rec, Class: e.Class, Err: e,
			Attempts: attempts, MayHaveLanded: ambiguous,
		}
	}
	r.report(fs)
	r.settle(items, outcome{final: settlesForGood(e, attempts), ambiguous: ambiguous, failures: fs})
}

// settlesForGood reports whether a failure settles its records for good,
// so that a checkpoint may pass them (see [Checkpoint]): a rule they
// broke, or retries that ran out after they were sent. A run that
// stopped, or an index that was down, says nothing about the records:
// the resumed run must send them.
func settlesForGood(e *Error, attempts int) bool {
	switch {
	case e.Class == ClassCanceled || e.Class == ClassDenied || e.Class == ClassQuotaExceeded:
		return false
	case breakerGaveUp(e):
		return false // the circuit breaker gave up on them, sent before or not
	case e.Class == ClassInvalid || e.Class == ClassTooLarge:
		return true
	default:
		return attempts > 0
	}
}

// report records failures: counted, passed to the observers, kept for the
// result (up to keepFailed, when set).
func (r *run) report(fs []Failure) {
	r.stats.fail(fs)
	for _, f := range fs {
		r.cfg.observers.failure(f)
	}
	r.mu.Lock()
	keep := fs
	if r.keepFailed >= 0 {
		keep = fs[:max(0, min(len(fs), r.keepFailed-len(r.failed)))]
	}
	r.failed = append(r.failed, keep...)
	r.mu.Unlock()
}

// settle tells the intake that items landed or failed.
func (r *run) settle(items []item, o outcome) {
	if r.onSettle != nil {
		r.onSettle(items, o)
	}
}

// snapshot returns the run's figures now.
func (r *run) snapshot() Stats {
	s := r.stats.snapshot()
	s.Elapsed = r.cfg.clock.Now().Sub(r.start)
	s.Limiter = r.limiterState()
	r.shareStats(&s)
	return s
}

// maybeProgress reports progress when an interval has passed since the
// last report. Only one goroutine reports at a time; the others skip.
func (r *run) maybeProgress() {
	if r.cfg.progress == nil {
		return
	}
	now := r.cfg.clock.Now().UnixNano()
	last := r.lastProgress.Load()
	if now-last < int64(r.cfg.progressEvery) || !r.lastProgress.CompareAndSwap(last, now) {
		return
	}
	if !r.progressMu.TryLock() {
		return
	}
	defer r.progressMu.Unlock()
	r.emitProgress(time.Duration(now-last), false)
}

func (r *run) emitProgress(since time.Duration, final bool) {
	s := r.snapshot()
	done := s.Upserted + s.Failed + s.Duplicates
	p := Progress{Total: r.total, Done: done, Final: final, Stats: s}
	prev := r.lastDone.Swap(int64(done))
	if since > 0 {
		p.Rate = float64(done-int(prev)) / since.Seconds()
	}
	if final && s.Elapsed > 0 {
		p.Rate = float64(done) / s.Elapsed.Seconds()
	}
	if r.total >= 0 && p.Rate > 0 && !final {
		p.ETA = time.Duration(float64(r.total-done) / p.Rate * float64(time.Second))
	}
	r.cfg.progress(p)
}

func (r *run) log(level slog.Level, msg string, worker int, rt *route, p *part, e *Error, extra ...slog.Attr) {
	if !r.cfg.logger.Enabled(r.ctx, level) {
		return
	}
	attrs := append([]slog.Attr{
		slog.String("namespace", rt.namespace),
		slog.Int("batch_size", len(p.items)),
		slog.Int("worker", worker),
		slog.Int("attempt", p.attempts),
		slog.String("class", e.Class.String()),
		slog.String("code", e.Code()),
		slog.String("error", errMessage(e)),
	}, extra...)
	r.cfg.logger.LogAttrs(r.ctx, level, msg, attrs...)
}

// errMessage is the underlying error's text without the class prefix that
// the class attribute already carries.
func errMessage(e *Error) string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return e.Class.String()
}

// finish waits for every batch and assembles the result.
func (r *run) finish() (Result, error) {
	r.wg.Wait()
	r.halt(nil)
	if r.cfg.progress != nil {
		r.progressMu.Lock()
		r.emitProgress(0, true)
		r.progressMu.Unlock()
	}
	r.leaveShares()
	s := r.snapshot()
	r.releaseLimiter()
	res := Result{Upserted: s.Upserted, Failed: r.failed, Duplicates: s.Duplicates, MayBeStale: r.sortedStale(), Stats: s}
	slices.SortFunc(res.Failed, func(a, b Failure) int { return a.Index - b.Index })
	res.Failed = r.untaken.appendTo(res.Failed) // all after the others
	r.cfg.logger.LogAttrs(r.ctx, slog.LevelInfo, "upsert finished",
		slog.String("namespace", r.cfg.namespace),
		slog.Int("records", s.Records),
		slog.Int("upserted", s.Upserted),
		slog.Int("failed", s.Failed),
		slog.Int("duplicates", s.Duplicates),
		slog.Int("requests", s.Requests),
		slog.Int("retries", s.Retries),
		slog.Int("splits", s.Splits),
		slog.Duration("p99_latency", s.Latency.P99),
		slog.Duration("elapsed", s.Elapsed))
	var err error
	if s.Failed > 0 {
		err = newRunError(res.Failed, s.Records)
	}
	r.cfg.observers.runDone(r.runEvent(s, err))
	return res, err
}

// abandon ends a run that stopped before taking any record in, with err.
func (r *run) abandon(err error) {
	r.halt(nil)
	r.leaveShares()
	r.releaseLimiter()
	r.cfg.observers.runDone(r.runEvent(r.snapshot(), err))
}

// runEvent describes the run for the observers.
func (r *run) runEvent(s Stats, err error) RunEvent {
	return RunEvent{
		Context: r.obsCtx, Operation: r.op, Namespace: r.cfg.namespace,
		LimiterState: r.limiterState, Stats: s, Err: err,
	}
}

// limiterState returns the state of the run's namespace in its Limiter,
// with the concurrency and batch size the run pinned, if it did.
func (r *run) limiterState() LimiterState {
	st := r.cfg.limiter.State(r.kind.lanePrefix + namespaceKey(r.cfg.namespace))
	if r.cfg.concurrency > 0 {
		st.Concurrency = r.cfg.concurrency
	}
	if r.cfg.batchSize > 0 {
		st.BatchSize = r.cfg.batchSize
	}
	return st
}

func newRunError(failed []Failure, total int) *RunError {
	e := &RunError{Failed: len(failed), Total: total, ByClass: make(map[Class]int)}
	var first [numClasses]error
	for _, f := range failed {
		e.ByClass[f.Class]++
		if first[f.Class] == nil {
			first[f.Class] = f.Err
		}
	}
	for _, err := range first {
		if err != nil {
			e.Errs = append(e.Errs, err)
		}
	}
	return e
}
