package upsert

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
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
// else may run on the workers.
type run struct {
	cfg   *config
	start time.Time
	total int // records expected, or -1 for a stream

	ctx    context.Context // the caller's
	runCtx context.Context // ends with ctx, or when the index denies the caller
	halt   context.CancelCauseFunc

	validator validator
	routes    map[string]*route // by namespace; the producer's
	workers   chan int          // free worker ids; a batch in flight holds one
	slots     chan struct{}     // when concurrency is fixed: one per request in flight
	wg        sync.WaitGroup
	active    atomic.Int64  // batches in flight
	resting   atomic.Int64  // of which waiting out a backoff or the retry budget
	doneMu    sync.Mutex    // guards batchDone
	batchDone chan struct{} // closed and replaced when a batch finishes

	stats        counters
	lastProgress atomic.Int64 // clock time of the last progress report, in ns
	lastDone     atomic.Int64 // records settled at the last progress report
	progressMu   sync.Mutex

	mu     sync.Mutex
	failed []Failure
}

// route is where the records of one namespace go.
type route struct {
	namespace string
	lane      *lane
	batcher   batcher
}

func newRun(ctx context.Context, cfg *config, total int) *run {
	r := &run{
		cfg:    cfg,
		start:  cfg.clock.Now(),
		total:  total,
		ctx:    ctx,
		routes: make(map[string]*route),
	}
	r.runCtx, r.halt = context.WithCancelCause(ctx)
	r.lastProgress.Store(r.start.UnixNano())
	maxInFlight := maxConcurrency
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

// route returns the route of namespace, creating it on first use.
func (r *run) route(namespace string) *route {
	rt, ok := r.routes[namespace]
	if !ok {
		rt = &route{namespace: namespace, lane: r.cfg.limiter.lane(namespace)}
		rt.batcher.maxBytes = MaxRequestBytes - requestOverhead(namespace)
		rt.batcher.next = rt.lane.nextBatch
		if r.cfg.batchSize > 0 {
			rt.batcher.next = func() (int, bool) { return r.cfg.batchSize, false }
		}
		r.routes[namespace] = rt
	}
	return rt
}

// admitAll checks every record, reports the invalid ones, and returns the
// valid ones to send, keeping only the last occurrence of each id.
func (r *run) admitAll(records []*pinecone.Vector) []item {
	r.stats.records.Store(int64(len(records)))
	r.validator.overhead = requestOverhead(r.cfg.namespace)
	items := make([]item, 0, len(records))
	for i, v := range records {
		size, err := r.validator.check(v)
		if err != nil {
			r.reject(i, v, err)
			continue
		}
		items = append(items, item{seq: i, vec: v, size: size})
	}
	seed := maphash.MakeSeed()
	hash := func(id string) uint64 { return maphash.String(seed, id) }
	if dups := dropDuplicates(&items, hash); dups > 0 {
		r.stats.duplicates.Store(int64(dups))
	}
	return items
}

// dropDuplicates removes from items every record whose id appears again
// later, and returns how many it removed. Ids are keyed by their 64-bit
// hash, which halves the memory of a map of strings and its cache misses;
// a hash match is confirmed by comparing the ids.
func dropDuplicates(items *[]item, hash func(string) uint64) int {
	its := *items
	last := make(map[uint64]int32, len(its)) // hash -> index in its of the latest record
	var collided map[string]int              // ids whose hash matched another id's
	dups := 0
	for i := range its {
		id := its[i].vec.Id
		h := hash(id)
		j, seen := last[h]
		switch {
		case !seen:
			last[h] = int32(i)
		case its[j].vec.Id == id:
			its[j].vec = nil // superseded by this later record
			last[h] = int32(i)
			dups++
		default:
			// Two ids with one hash: track this one exactly.
			if collided == nil {
				collided = make(map[string]int)
			}
			if k, ok := collided[id]; ok {
				its[k].vec = nil
				dups++
			}
			collided[id] = i
		}
	}
	if dups > 0 {
		*items = slices.DeleteFunc(its, func(it item) bool { return it.vec == nil })
	}
	return dups
}

// reject reports a record that failed validation; it is never sent.
func (r *run) reject(seq int, v *pinecone.Vector, cause error) {
	id := ""
	if v != nil {
		id = v.Id
	}
	err := &Error{Class: ClassInvalid, Err: fmt.Errorf("record %d (id %q): %w", seq, id, cause)}
	r.report([]Failure{{Index: seq, ID: id, Record: v, Class: ClassInvalid, Err: err}})
}

// add puts it in its namespace's current batch and dispatches the batch
// when full. It returns false, having failed the batch, when the run has
// stopped.
func (r *run) add(rt *route, it item) bool {
	full, ok := rt.batcher.add(it)
	if !ok {
		return true
	}
	return r.dispatch(rt, full)
}

// flush dispatches every namespace's current batch, however small.
func (r *run) flush() bool {
	ok := true
	for _, rt := range r.routes {
		if b := rt.batcher.take(); len(b.items) > 0 {
			ok = r.dispatch(rt, b) && ok
		}
	}
	return ok
}

// dispatch hands a batch to a worker once fewer batches are ready to send
// than the lane lets requests in flight, plus two: enough to keep every
// slot busy, few enough that a new batch size takes effect at once.
// Batches waiting out a backoff do not count, but the worker pool bounds
// them. Waiting here is the backpressure that bounds memory.
func (r *run) dispatch(rt *route, b batch) bool {
	for {
		conc := r.cfg.concurrency
		if conc == 0 {
			conc = rt.lane.concurrency()
		}
		if r.active.Load()-r.resting.Load() < int64(conc+2) {
			break
		}
		select {
		case <-r.batchFinished():
		case <-r.runCtx.Done():
			r.failAll(b.items, r.stopError(), 0, false)
			return false
		}
	}
	select {
	case id := <-r.workers:
		r.active.Add(1)
		r.wg.Add(1)
		go r.process(id, rt, b)
		return true
	case <-r.runCtx.Done():
		r.failAll(b.items, r.stopError(), 0, false)
		return false
	}
}

// batchFinished returns a channel closed when the next batch finishes.
func (r *run) batchFinished() <-chan struct{} {
	r.doneMu.Lock()
	defer r.doneMu.Unlock()
	if r.batchDone == nil {
		r.batchDone = make(chan struct{})
	}
	return r.batchDone
}

func (r *run) finishBatch(worker int) {
	r.active.Add(-1)
	r.signalBatch()
	r.workers <- worker
	r.wg.Done()
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
	if r.batchDone != nil {
		close(r.batchDone)
		r.batchDone = nil
	}
	r.doneMu.Unlock()
}

// part is a batch or a piece of one, with what its records went through.
type part struct {
	items     []item
	retries   [numClasses]int // retries spent, per class, by this part and its ancestors
	attempts  int             // requests that carried these records
	ambiguous bool            // some request ended without a clear answer
	sizeProbe bool            // the batch probes a larger size (until first sent)
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
		e := r.attempt(worker, rt, p)
		if e == nil {
			r.stats.upserted.Add(int64(len(p.items)))
			r.maybeProgress()
			continue
		}
		c := e.Class
		switch {
		case c == ClassDenied:
			r.log(slog.LevelError, "index denied the caller; stopping", worker, rt, p, e)
			r.failPart(p, e)
			r.halt(e)
		case c == ClassCanceled:
			r.failPart(p, e)
		case len(p.items) > 1 && (c == ClassTimeout || c == ClassTooLarge || c == ClassInvalid):
			r.stats.splits.Add(1)
			r.log(slog.LevelWarn, "splitting batch", worker, rt, p, e)
			r.cfg.observers.retry(RetryEvent{Namespace: rt.namespace, Worker: worker, Records: len(p.items), Attempt: p.attempts, Split: true, Err: e})
			a, b := split(p.items)
			stack = append(stack, p.child(b), p.child(a))
		case p.retries[c] < r.cfg.retry.maxRetries[c]:
			wait := r.backoff(c, p.retries[c], e.RetryAfter)
			p.retries[c]++
			retries++
			r.stats.retry(c)
			r.log(slog.LevelWarn, "retrying batch", worker, rt, p, e, slog.Duration("backoff", wait))
			r.cfg.observers.retry(RetryEvent{Namespace: rt.namespace, Worker: worker, Records: len(p.items), Attempt: p.attempts, Wait: wait, Err: e})
			r.rest(+1)
			err := r.cfg.clock.Sleep(r.runCtx, wait)
			if err == nil {
				err = rt.lane.awaitRetry(r.runCtx)
			}
			r.rest(-1)
			if err != nil {
				r.failPart(p, r.stopError())
				continue
			}
			stack = append(stack, p)
		default:
			r.log(slog.LevelError, "giving up on batch", worker, rt, p, e)
			r.failPart(p, e)
		}
	}
	r.stats.batchDone(retries)
}

// attempt sends p once: it waits for the lane to admit it (rate tokens,
// then a slot), then sends with the per-request timeout. It returns nil when
// the index confirmed every record.
func (r *run) attempt(worker int, rt *route, p *part) *Error {
	n := len(p.items)
	perm, err := rt.lane.acquire(r.runCtx, n, r.slots, p.sizeProbe)
	p.sizeProbe = false
	if err != nil {
		return r.describe(err)
	}
	batch := make([]*pinecone.Vector, n)
	bytes := requestOverhead(rt.namespace)
	for i, it := range p.items {
		batch[i] = it.vec
		bytes += it.size
	}
	p.attempts++
	ctx, cancel := context.WithTimeout(r.runCtx, r.cfg.requestTimeout)
	err = r.cfg.send(ctx, rt.namespace, batch)
	cancel()
	latency := r.cfg.clock.Now().Sub(perm.start)
	var e *Error
	if err != nil {
		e = r.describe(err)
		switch e.Class {
		case ClassTimeout, ClassServer, ClassCanceled:
			// The request reached the index, or may have: its records
			// may have been written even though no success came back.
			p.ambiguous = true
		}
	}
	rt.lane.release(perm, e)
	r.stats.request(n, latency, e)
	r.cfg.observers.requestDone(RequestEvent{
		Namespace: rt.namespace, Worker: worker, Records: n, Bytes: bytes,
		Attempt: p.attempts, Latency: latency, Err: e,
	})
	return e
}

// describe classifies err, knowing what the classifier cannot: whether the
// caller's context ended or the run was halted.
func (r *run) describe(err error) *Error {
	if r.runCtx.Err() != nil {
		return r.stopError()
	}
	e := describe(err, r.cfg.classify)
	if e.Class == ClassCanceled {
		// The caller's context is alive, so the transport canceled the
		// request on its own: worth another try.
		e = &Error{Class: ClassServer, GRPCCode: e.GRPCCode, StatusCode: e.StatusCode, Err: e.Err}
	}
	return e
}

// stopError is the error of records cut off because the run stopped: the
// caller's context ended (canceled class), or the index denied the caller.
func (r *run) stopError() *Error {
	if err := r.ctx.Err(); err != nil {
		return &Error{Class: ClassCanceled, Err: context.Cause(r.ctx)}
	}
	var e *Error
	if errors.As(context.Cause(r.runCtx), &e) {
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
			Index: it.seq, ID: it.vec.Id, Record: it.vec, Class: e.Class, Err: e,
			Attempts: attempts, MayHaveLanded: ambiguous,
		}
	}
	r.report(fs)
}

// report settles failed records: counted, passed to the observers, kept
// for the result.
func (r *run) report(fs []Failure) {
	r.stats.fail(fs)
	for _, f := range fs {
		r.cfg.observers.failure(f)
	}
	r.mu.Lock()
	r.failed = append(r.failed, fs...)
	r.mu.Unlock()
}

// snapshot returns the run's figures now.
func (r *run) snapshot() Stats {
	s := r.stats.snapshot()
	s.Elapsed = r.cfg.clock.Now().Sub(r.start)
	s.Limiter = r.cfg.limiter.State(r.cfg.namespace)
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
	s := r.snapshot()
	res := Result{Upserted: s.Upserted, Failed: r.failed, Duplicates: s.Duplicates, Stats: s}
	slices.SortFunc(res.Failed, func(a, b Failure) int { return a.Index - b.Index })
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
	if s.Failed == 0 {
		return res, nil
	}
	return res, newRunError(res.Failed, s.Records)
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
