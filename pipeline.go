package upsert

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// run is the streaming core under All: records flow in through add, are cut
// into batches, sent by a bounded set of workers, and end up counted as
// upserted or collected as failures. Memory is bounded by the number of
// batches in flight, since add blocks while every worker is busy.
type run struct {
	cfg   *config
	lane  *lane
	start time.Time

	ctx    context.Context // the caller's
	runCtx context.Context // ends with ctx, or when the index denies the caller
	halt   context.CancelCauseFunc

	validator validator
	batcher   batcher
	workers   chan int      // free worker ids; a batch in flight holds one
	slots     chan struct{} // when concurrency is fixed: one per request in flight
	wg        sync.WaitGroup

	upserted atomic.Int64
	stats    counters

	mu     sync.Mutex
	failed []Failure
}

// counters are the run's statistics while it runs.
type counters struct {
	duplicates                int // set before any batch is sent
	requests, retries, splits atomic.Int64
	retriesByClass            [numClasses]atomic.Int64
	errorsByClass             [numClasses]atomic.Int64
	mu                        sync.Mutex
	retriesPerBatch           []int
}

func newRun(ctx context.Context, cfg *config) *run {
	r := &run{
		cfg:   cfg,
		lane:  cfg.limiter.lane(cfg.namespace),
		start: cfg.clock.Now(),
		ctx:   ctx,
	}
	r.runCtx, r.halt = context.WithCancelCause(ctx)
	r.validator.overhead = requestOverhead(cfg.namespace)
	r.batcher.maxBytes = MaxRequestBytes - r.validator.overhead
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

// admitAll checks every record, reports the invalid ones, and returns the
// valid ones to send, keeping only the last occurrence of each id.
func (r *run) admitAll(records []*pinecone.Vector) []item {
	items := make([]item, 0, len(records))
	last := make(map[string]int, len(records)) // id -> index in items
	dups := 0
	for i, v := range records {
		size, err := r.validator.check(v)
		if err != nil {
			r.reject(i, v, err)
			continue
		}
		if j, ok := last[v.Id]; ok {
			items[j].vec = nil // superseded by this later record
			dups++
		}
		last[v.Id] = len(items)
		items = append(items, item{seq: i, vec: v, size: size})
	}
	if dups > 0 {
		items = slices.DeleteFunc(items, func(it item) bool { return it.vec == nil })
	}
	r.stats.duplicates = dups
	return items
}

// reject records a record that failed validation; it is never sent.
func (r *run) reject(seq int, v *pinecone.Vector, cause error) {
	id := ""
	if v != nil {
		id = v.Id
	}
	err := &Error{Class: ClassInvalid, Err: fmt.Errorf("record %d (id %q): %w", seq, id, cause)}
	r.addFailures(Failure{Index: seq, ID: id, Record: v, Class: ClassInvalid, Err: err})
}

// add puts it in the current batch and dispatches the batch when full. It
// returns false, having failed the batch, when the run has stopped.
func (r *run) add(it item) bool {
	full := r.batcher.add(it, r.batchSize())
	if full == nil {
		return true
	}
	return r.dispatch(full)
}

// flush dispatches the current batch, however small.
func (r *run) flush() bool {
	if b := r.batcher.take(); len(b) > 0 {
		return r.dispatch(b)
	}
	return true
}

func (r *run) batchSize() int {
	if r.cfg.batchSize > 0 {
		return r.cfg.batchSize
	}
	return r.lane.batchSize()
}

// dispatch hands a batch to a free worker, waiting for one: this is the
// backpressure that bounds memory.
func (r *run) dispatch(items []item) bool {
	select {
	case id := <-r.workers:
		r.wg.Add(1)
		go r.process(id, items)
		return true
	case <-r.runCtx.Done():
		r.failAll(items, r.stopError(), 0, false)
		return false
	}
}

// part is a batch or a piece of one, with what its records went through.
type part struct {
	items     []item
	retries   [numClasses]int // retries spent, per class, by this part and its ancestors
	attempts  int             // requests that carried these records
	ambiguous bool            // some request ended without a clear answer
}

// process sends one batch until each of its records has landed or failed.
// Halves of a split are sent one after the other, first half first.
func (r *run) process(worker int, items []item) {
	defer func() {
		r.workers <- worker
		r.wg.Done()
	}()
	stack := []*part{{items: items}}
	retries := 0
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if r.runCtx.Err() != nil {
			r.failPart(p, r.stopError())
			continue
		}
		e := r.attempt(p)
		if e == nil {
			r.upserted.Add(int64(len(p.items)))
			continue
		}
		c := e.Class
		r.stats.errorsByClass[c].Add(1)
		switch {
		case c == ClassDenied:
			r.log(slog.LevelError, "index denied the caller; stopping", worker, p, e)
			r.failPart(p, e)
			r.halt(e)
		case c == ClassCanceled:
			r.failPart(p, e)
		case len(p.items) > 1 && (c == ClassTimeout || c == ClassTooLarge || c == ClassInvalid):
			r.stats.splits.Add(1)
			r.log(slog.LevelWarn, "splitting batch", worker, p, e)
			a, b := split(p.items)
			stack = append(stack, p.child(b), p.child(a))
		case p.retries[c] < r.cfg.retry.maxRetries[c]:
			wait := r.backoff(c, p.retries[c], e.RetryAfter)
			p.retries[c]++
			retries++
			r.stats.retries.Add(1)
			r.stats.retriesByClass[c].Add(1)
			r.log(slog.LevelWarn, "retrying batch", worker, p, e, slog.Duration("backoff", wait))
			if err := r.cfg.clock.Sleep(r.runCtx, wait); err != nil {
				r.failPart(p, r.stopError())
				continue
			}
			stack = append(stack, p)
		default:
			r.log(slog.LevelError, "giving up on batch", worker, p, e)
			r.failPart(p, e)
		}
	}
	r.stats.addRetriesPerBatch(retries)
}

func (p *part) child(items []item) *part {
	c := *p
	c.items = items
	return &c
}

// attempt sends p once: it waits for rate tokens (holding no slot), then
// for a slot, then sends with the per-request timeout. It returns nil when
// the index confirmed every record.
func (r *run) attempt(p *part) *Error {
	n := len(p.items)
	if err := r.lane.waitRate(r.runCtx, n); err != nil {
		return r.describe(err)
	}
	if r.slots != nil {
		select {
		case r.slots <- struct{}{}:
			defer func() { <-r.slots }()
		case <-r.runCtx.Done():
			return r.stopError()
		}
	}
	perm, err := r.lane.acquire(r.runCtx, n, r.slots == nil)
	if err != nil {
		return r.describe(err)
	}
	batch := make([]*pinecone.Vector, n)
	for i, it := range p.items {
		batch[i] = it.vec
	}
	p.attempts++
	r.stats.requests.Add(1)
	ctx, cancel := context.WithTimeout(r.runCtx, r.cfg.requestTimeout)
	err = r.cfg.send(ctx, batch)
	cancel()
	if err == nil {
		r.lane.release(perm, 0)
		return nil
	}
	e := r.describe(err)
	switch e.Class {
	case ClassTimeout, ClassServer, ClassCanceled:
		// The request reached the index, or may have: its records may
		// have been written even though no success came back.
		p.ambiguous = true
	}
	r.lane.release(perm, e.Class)
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
	r.addFailures(fs...)
}

func (r *run) addFailures(fs ...Failure) {
	r.mu.Lock()
	r.failed = append(r.failed, fs...)
	r.mu.Unlock()
}

func (c *counters) addRetriesPerBatch(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.retriesPerBatch) <= n {
		c.retriesPerBatch = append(c.retriesPerBatch, 0)
	}
	c.retriesPerBatch[n]++
}

func (r *run) log(level slog.Level, msg string, worker int, p *part, e *Error, extra ...slog.Attr) {
	if !r.cfg.logger.Enabled(r.ctx, level) {
		return
	}
	attrs := append([]slog.Attr{
		slog.String("namespace", r.cfg.namespace),
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
func (r *run) finish(total int) (Result, error) {
	r.wg.Wait()
	r.halt(nil)
	res := Result{
		Upserted:   int(r.upserted.Load()),
		Failed:     r.failed,
		Duplicates: r.stats.duplicates,
		Stats:      r.stats.snapshot(),
	}
	res.Stats.Elapsed = r.cfg.clock.Now().Sub(r.start)
	slices.SortFunc(res.Failed, func(a, b Failure) int { return a.Index - b.Index })
	r.cfg.logger.LogAttrs(r.ctx, slog.LevelInfo, "upsert finished",
		slog.String("namespace", r.cfg.namespace),
		slog.Int("records", total),
		slog.Int("upserted", res.Upserted),
		slog.Int("failed", len(res.Failed)),
		slog.Int("requests", res.Stats.Requests),
		slog.Int("retries", res.Stats.Retries),
		slog.Duration("elapsed", res.Stats.Elapsed))
	if len(res.Failed) == 0 {
		return res, nil
	}
	return res, newRunError(res.Failed, total)
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

func (c *counters) snapshot() Stats {
	s := Stats{
		Requests:       int(c.requests.Load()),
		Retries:        int(c.retries.Load()),
		Splits:         int(c.splits.Load()),
		RetriesByClass: make(map[Class]int),
		ErrorsByClass:  make(map[Class]int),
	}
	for _, cl := range Classes() {
		if n := c.retriesByClass[cl].Load(); n > 0 {
			s.RetriesByClass[cl] = int(n)
		}
		if n := c.errorsByClass[cl].Load(); n > 0 {
			s.ErrorsByClass[cl] = int(n)
		}
	}
	c.mu.Lock()
	s.RetriesPerBatch = slices.Clone(c.retriesPerBatch)
	c.mu.Unlock()
	return s
}
