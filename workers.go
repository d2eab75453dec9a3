package upsert

import (
	"sync"
	"sync/atomic"
)

// workerPool is a run's bounded set of workers, each sending one batch
// (process), and the signals between them and the producer.
type workerPool struct {
	workers    chan int      // free worker ids; a batch in flight holds one
	slots      chan struct{} // when concurrency is fixed: one per request in flight
	wg         sync.WaitGroup
	active     atomic.Int64 // batches in flight
	resting    atomic.Int64 // of which waiting out a backoff or the retry budget
	reserve    int          // workers kept for routes with none in flight (freeWorkerFor)
	doneMu     sync.Mutex   // guards batchDone, restWake and the routes' finished
	batchDone  signal       // fired when a batch finishes or rests
	restWake   signal       // fired to end the backoffs under way (wakeResting)
	drained    atomic.Bool  // the producer has dispatched every batch (producerDone)
	lastLanded atomic.Bool  // the last request answered landed
}

// start fills the pool with workers; concurrency is the caller's fixed
// number of requests in flight, or 0 when the lanes tune it.
func (p *workerPool) start(concurrency int) {
	maxInFlight := defaultTuning.maxConcurrency
	if concurrency > 0 {
		maxInFlight = concurrency
		p.slots = make(chan struct{}, concurrency)
	}
	// Twice as many batches as requests in flight keep every slot busy
	// while some batches wait out a backoff.
	nWorkers := 2*maxInFlight + 2
	p.reserve = max(1, nWorkers/8) // one at least: WithConcurrency(1) has four workers
	p.workers = make(chan int, nWorkers)
	for i := range nWorkers {
		p.workers <- i
	}
}

// dispatch hands a batch to a worker, at once, when fewer batches are
// ready to send than the lane lets requests in flight, plus two: enough to
// keep every slot busy, few enough that a new batch size takes effect at
// once. Batches waiting out a backoff do not count, but the worker pool
// bounds them. See hasRoom for which batches count.
//
// It never waits: when there is no room, or no free worker for it
// (freeWorkerFor), it returns kept true, with b not dispatched and still
// the caller's, which waits for a batch to finish (batchFinished, taken
// before the call so that no wakeup is lost) without holding the
// producers' turn, and tries again: that wait is the backpressure that
// bounds memory. When the run has
// stopped it fails b's records and returns the stop error.
func (r *run) dispatch(rt *route, b batch) (kept bool, err error) {
	if r.runCtx.Err() != nil {
		if b.trial != 0 {
			rt.lane.trialUnsent(b.trial)
		}
		return false, r.failStopped(b.items)
	}
	if !r.canGo(rt) {
		return true, nil
	}
	select {
	case id := <-r.pool.workers:
		r.pool.active.Add(1)
		rt.active.Add(1)
		r.pool.wg.Add(1)
		b.turn = rt.line.take()
		go r.process(id, rt, b)
		return false, nil
	default:
		return true, nil
	}
}

// canGo reports whether a batch of rt can be dispatched now (or fails at
// once, the run having stopped). The producers' turn is held: no other
// producer takes a worker meanwhile.
func (r *run) canGo(rt *route) bool {
	return r.freeWorkerFor(rt) && r.hasRoom(rt) || r.runCtx.Err() != nil
}

// freeWorkerFor reports whether a batch of rt may take a free worker. The
// last few (the reserve) go only to routes with none in flight: namespaces
// whose batches are held back (slow requests, backoffs) cannot take every
// worker from one whose batches would land. The producers' turn is held.
func (r *run) freeWorkerFor(rt *route) bool {
	free := len(r.pool.workers)
	return free > r.pool.reserve || free > 0 && rt.active.Load() == 0
}

// stuck reports whether no batch of any route can be dispatched now: no
// worker is free. The producers' turn is held.
func (r *run) stuck() bool {
	return len(r.pool.workers) == 0 && r.runCtx.Err() == nil
}

// hasRoom reports whether a batch of rt may be dispatched. Pinecone's
// limits are per namespace, so each route counts its own batches against
// its concurrency, its lane's or the fixed WithConcurrency (whose slots
// the namespaces share once at the head of their lanes); the worker pool
// bounds them all (see freeWorkerFor).
func (r *run) hasRoom(rt *route) bool {
	conc := r.cfg.concurrency
	if conc == 0 {
		conc = rt.lane.concurrency()
	}
	return rt.active.Load()-rt.resting.Load() < int64(conc+2)
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
	r.pool.doneMu.Lock()
	defer r.pool.doneMu.Unlock()
	return r.pool.batchDone.wait()
}

// routeFinished returns a channel closed when the next batch of rt
// finishes or rests.
func (r *run) routeFinished(rt *route) <-chan struct{} {
	r.pool.doneMu.Lock()
	defer r.pool.doneMu.Unlock()
	return rt.finished.wait()
}

// tryOrWatch calls try, which dispatches what can go now; while it finds no
// room (errNoRoom), it takes the signal of the next batch to finish and
// tries once more, so that a batch finishing in between is not missed, and
// returns that signal to wait on. When try waits for the route that
// waitsFor (not nil) returns alone, its ready batch having no room in its
// namespace, the signal is of that route's next batch: the others'
// finishing makes no room for it.
func (r *run) tryOrWatch(try func() error, waitsFor func() *route) (finished <-chan struct{}, err error) {
	if err := try(); err != errNoRoom {
		return nil, err
	}
	finished = r.batchFinished()
	var rt *route
	var own <-chan struct{}
	if waitsFor != nil {
		if rt = waitsFor(); rt != nil {
			own = r.routeFinished(rt)
		}
	}
	if err := try(); err != errNoRoom {
		return nil, err
	}
	if rt != nil && len(rt.ready.items) > 0 && !r.hasRoom(rt) {
		return own, errNoRoom
	}
	return finished, errNoRoom
}

// finishBatch counts rt's batch, sent by worker, finished, and frees the
// worker.
func (r *run) finishBatch(worker int, rt *route) {
	rt.active.Add(-1)
	r.pool.active.Add(-1)
	// The worker is free before the signal: a producer it wakes finds it.
	r.pool.workers <- worker
	r.signalBatch(rt)
	r.wakeResting()
	r.pool.wg.Done()
}

// producerDone tells the run that every batch it will send is dispatched.
func (r *run) producerDone() {
	r.pool.drained.Store(true)
	r.wakeResting()
}

// restWaker returns the channel that wakeResting closes: a batch about to
// rest takes it before it counts as resting.
func (r *run) restWaker() <-chan struct{} {
	r.pool.doneMu.Lock()
	defer r.pool.doneMu.Unlock()
	return r.pool.restWake.wait()
}

// wakeResting ends the backoffs under way when every batch left rests:
// the index took the last request, and a backoff spreads load that no
// longer comes (the run's last batches, once the producer is done). Each
// still waits out its Retry-After, the retry budget and the lane's
// admission; one refused again rests its full backoff unless another
// batch lands meanwhile.
func (r *run) wakeResting() {
	if !r.pool.drained.Load() || !r.pool.lastLanded.Load() {
		return
	}
	if n := r.pool.resting.Load(); n == 0 || r.pool.active.Load() != n {
		return
	}
	r.pool.doneMu.Lock()
	defer r.pool.doneMu.Unlock()
	r.pool.restWake.fire()
}

// rest counts a batch of rt entering (+1) or leaving (-1) a backoff: a
// batch that rests makes room for another to be formed.
func (r *run) rest(rt *route, delta int64) {
	rt.resting.Add(delta)
	r.pool.resting.Add(delta)
	if delta > 0 {
		r.signalBatch(rt)
	}
}

// signalBatch tells the waiters for a batch, of any route or of rt, that
// one of rt's finished or rests.
func (r *run) signalBatch(rt *route) {
	r.pool.doneMu.Lock()
	defer r.pool.doneMu.Unlock()
	r.pool.batchDone.fire()
	rt.finished.fire()
}
