package upsert

import (
	"fmt"
	"sync/atomic"
)

// route is where the records of one namespace go.
type route struct {
	namespace string
	overhead  int // request bytes besides the records
	lane      *lane
	invalid   error // the rule the namespace breaks: its records fail before sending
	batcher   batcher
	ready     batch        // a full batch that could not be dispatched yet
	stalled   bool         // in the intake's list of routes whose ready batch waits
	line      line         // its dispatched batches, until each holds its place in the lane's
	active    atomic.Int64 // its batches dispatched and not finished
	resting   atomic.Int64 // of which waiting out a backoff or the retry budget
	finished  signal       // fired when one of its batches finishes or rests; the pool's doneMu guards it
	// lastFailure is the last server error or timeout of a request, for
	// the records the circuit breaker fails without sending them.
	lastFailure atomic.Pointer[Error]
	// downLogged is the breaker's opening (lane.openedAt, in Unix
	// nanoseconds) whose first batch failed unsent was logged.
	downLogged atomic.Int64
	// refused is the index's answer that it holds no room for this
	// namespace (stopsOneNamespace): the route's later batches fail with
	// it unsent, and the run goes on with the other namespaces.
	refused atomic.Pointer[Error]
}

// routeTable holds a run's routes; the producer's, but refused.
type routeTable struct {
	byKey map[string]*route // by namespaceKey
	// refused holds the namespaces the index refused to create, for a
	// route made again after a stream dropped the first.
	refused  refusals
	released bool // the routes' lanes were let go (release)
	// forgetIdle drops the routes with nothing waiting when the map has
	// doubled, so that a stream over many namespaces holds few: their
	// lanes live on in the Limiter, their memberships of shared lanes end
	// (leaveDropped). All keeps its routes, which it compares.
	forgetIdle bool
	sweepAt    int // the size of byKey at which to drop the idle ones
}

// minRoutes is the most routes a stream keeps without looking for idle
// ones.
const minRoutes = 1024

// route returns the route of namespace, creating it on first use. "" and
// "__default__" share one route, which sends under the name it first saw.
func (r *run) route(namespace string) *route {
	key := namespaceKey(namespace)
	rt, ok := r.routes.byKey[key]
	if !ok {
		if r.routes.forgetIdle && len(r.routes.byKey) >= r.routes.sweepAt {
			r.leaveDropped(r.routes.dropIdle())
		}
		id := laneID{host: r.laneHost(), key: r.kind.laneKey(key)}
		rt = &route{
			namespace: namespace,
			overhead:  r.kind.overhead(namespace),
			invalid:   checkNamespace(namespace, r.kind.inPath),
			lane:      r.cfg.limiter.holdLane(id, r.kind.maxBatch),
		}
		if key == "" {
			// Either name may go out (WithIndex sends its own): room
			// for the longer.
			rt.overhead = r.kind.overhead(defaultNamespace)
		}
		if r.described {
			rt.lane.indexAnswered()
		}
		if e, ok := r.routes.refused.load(key); ok {
			rt.refused.Store(e)
		}
		rt.batcher.maxBytes = r.kind.maxBytes - rt.overhead
		rt.batcher.next = rt.lane.nextBatch
		rt.lane.setLimits(r.cfg.indexLimits())
		r.joinShare(rt.lane, id.key) // the run's host goes apart (share.Lane)
		if r.cfg.batchSize > 0 {
			rt.batcher.next = func() (int, uint64) { return r.cfg.batchSize, 0 }
		}
		r.routes.byKey[key] = rt
	}
	return rt
}

// laneHost is the host that keys the run's lanes in its Limiter, so that
// a Limiter serving several indexes keeps what it learns of each apart:
// the index's, or "" when the run does not know it (WithUpsertFunc, or a
// connection whose host cannot be read: see indexKey).
func (r *run) laneHost() string {
	if r.cfg.index == nil {
		return ""
	}
	return indexHost(r.cfg.index)
}

// dropIdle forgets the routes with no records waiting, to be cut or
// admitted (a new route would let its batches go first), and no batch
// alive: one waiting out a Retry-After or backoff needs the route's hold
// on its lane, or the Limiter may forget the lane's pause, rate and
// breaker. It sets the size at which to look again: twice what is left,
// at least minRoutes. It returns the dropped routes' lanes, whose
// memberships of shared lanes the run is to leave (leaveDropped).
func (t *routeTable) dropIdle() (lanes []*lane) {
	for ns, rt := range t.byKey {
		if !holds(rt) && rt.active.Load() == 0 {
			delete(t.byKey, ns)
			rt.lane.holdRoute(-1)
			lanes = append(lanes, rt.lane)
		}
	}
	t.sweepAt = max(minRoutes, 2*len(t.byKey))
	return lanes
}

// release lets go of the routes' lanes, once, when the call ends: the
// Limiter may forget them once idle. The producers are done.
func (t *routeTable) release() {
	if t.released {
		return
	}
	t.released = true
	for _, rt := range t.byKey {
		rt.lane.holdRoute(-1)
	}
}

// refuse records that the index refused rt's namespace
// (stopsOneNamespace): its batches fail unsent from now on, also those of
// a route made again for it.
func (r *run) refuse(rt *route, e *Error) {
	rt.refused.Store(e)
	r.routes.refused.store(namespaceKey(rt.namespace), e)
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
