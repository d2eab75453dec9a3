package upsert

import (
	"context"
	"errors"
	"math"
	"time"
)

// maxHeld and maxHeldBytes bound the records that wait in batches not yet
// dispatched, across every namespace: four requests' worth. Beyond it the
// oldest batch goes out however few records it holds, so that memory does
// not grow with the number of namespaces (one namespace per record would
// otherwise hold the whole input); one namespace never reaches it.
func maxHeld(k *kind) int      { return 4 * k.maxBatch }
func maxHeldBytes(k *kind) int { return 4 * k.maxBytes }

// maxHeldRoutes bounds the namespaces whose batches wait undispatched, in
// a stream that forgets its idle routes: each is a route it cannot
// forget, and a membership of the lane's store when shared (one namespace
// per record held maxHeld of them).
const maxHeldRoutes = minRoutes / 2

// holding tracks what waits in the intake before it is dispatched: how many
// records and bytes, the routes whose current batch holds records in the
// order those batches started, and the routes whose ready batch could not
// be dispatched yet (stalled: no room, or no free worker). The intake's
// turn guards it.
type holding struct {
	records, bytes       int
	maxRecords, maxBytes int            // maxHeld and maxHeldBytes, or less in tests
	routes, maxRoutes    int            // the routes holding records (holds), and maxHeldRoutes or no bound
	queue                []pendingBatch // oldest first; entries of batches since taken are stale
	head                 int
	stalled              []*route
	kick                 chan struct{} // wakes the flusher when a batch stalls; nil without one
}

// pendingBatch is the current batch of rt when its gen started, at since.
type pendingBatch struct {
	rt    *route
	gen   int
	since time.Time
}

func (p pendingBatch) live() bool {
	return p.rt.batcher.gen == p.gen && len(p.rt.batcher.cur.items) > 0
}

// holds reports whether rt's batches hold records not dispatched yet.
func holds(rt *route) bool { return len(rt.ready.items) > 0 || len(rt.batcher.cur.items) > 0 }

// track counts rt in or out of the routes holding records, given whether
// it held some before a change.
func (h *holding) track(rt *route, before bool) {
	switch now := holds(rt); {
	case now && !before:
		h.routes++
	case before && !now:
		h.routes--
	}
}

// started records that rt's current batch started at now.
func (h *holding) started(rt *route, now time.Time) {
	if len(h.queue)-h.head > 2*h.maxRecords+64 {
		h.compact()
	}
	h.queue = append(h.queue, pendingBatch{rt: rt, gen: rt.batcher.gen, since: now})
}

// compact drops every stale entry of the queue, not only those at its
// head: a batch whose namespace has no room stays at the head while the
// batches of other namespaces come and go behind it. At most one entry per
// route is live, and each holds a record, so at most maxRecords stay.
func (h *holding) compact() {
	n := 0
	for _, p := range h.queue[h.head:] {
		if p.live() {
			h.queue[n] = p
			n++
		}
	}
	clear(h.queue[n:])
	h.queue, h.head = h.queue[:n], 0
}

// trim drops the stale entries at the head of the queue, and compacts it.
func (h *holding) trim() {
	for h.head < len(h.queue) && !h.queue[h.head].live() {
		h.queue[h.head] = pendingBatch{}
		h.head++
	}
	if h.head == len(h.queue) {
		h.queue, h.head = h.queue[:0], 0
	} else if h.head > len(h.queue)/2 {
		n := copy(h.queue, h.queue[h.head:])
		clear(h.queue[n:])
		h.queue, h.head = h.queue[:n], 0
	}
}

// stall records that rt's ready batch waits for a dispatch, and wakes the
// flusher, which sends it when a batch finishes.
func (h *holding) stall(rt *route) {
	if !rt.stalled {
		rt.stalled = true
		h.stalled = append(h.stalled, rt)
	}
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// errNoRoom says that a batch could not be dispatched now (no room for
// its namespace, or no free worker): it stays where it waits (its route's
// ready batch, stalled, or its current one), and the caller waits for a
// batch to finish (see intake.waitRoom and push) before it tries again.
var errNoRoom = errors.New("upsert: no room for the batch yet")

// makeRoom dispatches the oldest batches that can go now until a record of
// size bytes, for rt, can be held within the bounds (the bound on
// namespaces only when rt holds none yet). It returns errNoRoom when none
// of those left can go: the record must not be taken yet.
func (in *intake) makeRoom(size int, rt *route) error {
	if h := &in.hold; h.records < h.maxRecords && h.bytes+size <= h.maxBytes && (h.routes < h.maxRoutes || holds(rt)) {
		return nil // inlined: the path of nearly every record
	}
	return in.dispatchOldest(size, rt)
}

// dispatchOldest is makeRoom's loop: the stalled ready batches first (full
// ones), then the current batches in the order they started, skipping
// those that cannot go now.
func (in *intake) dispatchOldest(size int, rt *route) error {
	h := &in.hold
	over := func() bool {
		return h.records > 0 && (h.records >= h.maxRecords || h.bytes+size > h.maxBytes || h.routes >= h.maxRoutes && !holds(rt))
	}
	in.dispatchStalled(over)
	in.dispatchCurrent(func(pendingBatch) bool { return !over() })
	if over() {
		return errNoRoom
	}
	return nil
}

// dispatchStalled dispatches the stalled ready batches that can go now,
// oldest first, until enough (when not nil) says so; the others stay
// stalled.
func (in *intake) dispatchStalled(enough func() bool) {
	h := &in.hold
	list := h.stalled
	h.stalled = list[:0] // stall appends at most one route per route read: never past the one being read
	for i, rt := range list {
		if enough != nil && enough() || in.r.stuck() {
			h.stalled = append(h.stalled, list[i:]...)
			break
		}
		rt.stalled = false
		_ = in.dispatchReady(rt) // stalls rt again when it cannot go
	}
	clear(list[len(h.stalled):])
}

// dispatchAged dispatches the current batches started at or before
// cutoff, skipping those whose route cannot dispatch now; it reports
// whether it left one.
func (in *intake) dispatchAged(cutoff time.Time) (left bool) {
	return in.dispatchCurrent(func(p pendingBatch) bool { return p.since.After(cutoff) })
}

// dispatchCurrent dispatches the current batches in the order they
// started, until done says so of the next, skipping those whose route
// cannot dispatch now; it reports whether it left one before done.
func (in *intake) dispatchCurrent(done func(pendingBatch) bool) (left bool) {
	h := &in.hold
	h.trim()
	for i := h.head; i < len(h.queue); i++ {
		p := h.queue[i]
		if done(p) {
			break
		}
		if !p.live() {
			continue
		}
		if in.r.stuck() {
			left = true
			break
		}
		if in.dispatchRoute(p.rt) == errNoRoom {
			left = true
		}
	}
	h.trim()
	return left
}

// dispatchReady dispatches rt's ready batch, if any. When it cannot go
// now, it stays ready, stalled, and dispatchReady returns errNoRoom; when
// the run has stopped, it fails, and the stop error is returned.
func (in *intake) dispatchReady(rt *route) error {
	b := rt.ready
	if len(b.items) == 0 {
		return nil
	}
	kept, err := in.r.dispatch(rt, b)
	if kept {
		in.hold.stall(rt)
		return errNoRoom
	}
	// Dispatched, or failed for good because the run stopped.
	in.hold.records -= len(b.items)
	in.hold.bytes -= b.bytes
	rt.ready = batch{}
	in.hold.track(rt, true)
	return err
}

// dispatchRoute dispatches rt's ready batch and then its current one,
// however few records it holds, as far as they can go now.
func (in *intake) dispatchRoute(rt *route) error {
	err := in.dispatchReady(rt)
	if err == errNoRoom {
		return err // the ready batch stays, stalled: the current one waits behind it
	}
	// Dispatched, or failed because the run stopped: then the current
	// batch fails too, or no later pass may come for it (a Writer never
	// closed gets one). A current batch that cannot go now stays current
	// (and in the queue), rather than ready and stalled.
	if len(rt.batcher.cur.items) == 0 {
		return err
	}
	if !in.r.canGo(rt) {
		return errNoRoom
	}
	if b := rt.batcher.take(); len(b.items) > 0 {
		rt.ready = b
		return in.dispatchReady(rt)
	}
	return err
}

// flushBefore dispatches, however few records they hold, the batches of
// every route that holds a record taken before position pos, as far as
// they can go now. It returns errNoRoom when some must wait; when the run
// has stopped, they fail instead.
func (in *intake) flushBefore(pos int) error {
	var err error
	for _, rt := range in.r.routes.byKey {
		if !holdsBefore(rt.ready.items, pos) && !holdsBefore(rt.batcher.cur.items, pos) {
			continue
		}
		if in.dispatchRoute(rt) == errNoRoom {
			err = errNoRoom
			if in.r.stuck() {
				break
			}
		}
	}
	return err
}

// holdsBefore reports whether items hold a record taken before position
// pos. (A record that replaced one in its batch is later than those after
// it.)
func holdsBefore(items []item, pos int) bool {
	for i := range items {
		if items[i].seq < pos {
			return true
		}
	}
	return false
}

// flushAll dispatches every route's batches, however few records they
// hold, holding the producers' turn while it waits for room. It returns
// ctx's error when ctx ends first, and ErrClosed when closing (nil: never)
// closes first; when the run has stopped, the batches fail instead.
func (in *intake) flushAll(ctx context.Context, closing <-chan struct{}) error {
	return in.waitRoom(ctx, closing, func() error { return in.flushBefore(math.MaxInt) })
}

// waitRoom calls try, which dispatches what can go now, until it returns
// something other than errNoRoom, waiting between calls for a batch to
// finish, for the run to stop (the next call fails what is left), for ctx
// to end (its error) or for closing (nil: never) to close (ErrClosed). The
// producers' turn, if held, stays held: it is for the run's single
// producers (All), a Writer's Add waiting for the window of acks, and a
// Writer's end.
func (in *intake) waitRoom(ctx context.Context, closing <-chan struct{}, try func() error) error {
	r := in.r
	for {
		finished, err := r.tryOrWatch(try, nil)
		if err != errNoRoom {
			return err
		}
		select {
		case <-finished:
		case <-r.runCtx.Done():
		case <-ctx.Done():
			if r.runCtx.Err() == nil { // ctx may be the run's: then the next try fails what is left
				return ctx.Err()
			}
		case <-closing:
			return ErrClosed
		}
	}
}

// flushTaken is Writer.Flush's and Close's sending: it dispatches every
// batch that holds a record taken before the position it finds on its
// first turn, and returns that position. It waits for room without
// holding the producers' turn, so that the Adds of the namespaces with
// room go on meanwhile. first, when not nil, is called on the first turn
// and may refuse it (ErrClosed). It returns ctx's error when ctx ends
// first.
func (in *intake) flushTaken(ctx context.Context, first func() error) (pos int, err error) {
	r := in.r
	pos = -1
	for {
		if err := in.lock(ctx); err != nil {
			return 0, err
		}
		if pos < 0 {
			if first != nil {
				if err := first(); err != nil {
					in.unlock()
					return 0, err
				}
			}
			pos = in.next
		}
		finished, err := r.tryOrWatch(func() error { return in.flushBefore(pos) }, nil)
		in.unlock()
		if err != errNoRoom {
			return pos, nil
		}
		select {
		case <-finished:
		case <-r.runCtx.Done(): // the next pass fails what is left
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// startFlusher starts the goroutine that, every d/2, dispatches the
// batches that started d/2 ago or more, so that no record waits longer
// than d however steadily records trickle in, and, as soon as a batch
// finishes, the stalled batches that can go then (no Add may come for
// their namespace); and, when the run's context
// ends, fails what waits and lets go of the Limiter, so that a Writer that
// is never closed leaves nothing running, then calls ended (when not nil)
// with a context that ends when stop is called. stop ends it and waits
// for it.
func (in *intake) startFlusher(d time.Duration, ended func(stopped context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	in.hold.kick = make(chan struct{}, 1) // before any record: the flusher starts with the call
	go func() {
		defer close(stopped)
		tick := max(d/2, time.Millisecond)
		t := time.NewTicker(tick)
		defer t.Stop()
		var finished <-chan struct{} // while batches are stalled: one finished, a stalled one may go
		for {
			select {
			case <-ctx.Done():
				return
			case <-in.r.runCtx.Done():
				in.abandon(ctx)
				if ended != nil && ctx.Err() == nil {
					ended(ctx)
				}
				return
			case <-t.C:
			case <-finished:
			case <-in.hold.kick:
			}
			if in.lock(ctx) != nil {
				return
			}
			// Taken before the pass: a batch that finishes during it (the
			// workers take no turn) wakes the next.
			finished = in.r.batchFinished()
			// What cannot go now stays, stalled or current, for a later
			// pass: the flusher never waits for room.
			in.dispatchStalled(nil)
			left := in.dispatchAged(in.r.cfg.clock.Now().Add(-tick))
			select {
			case <-in.hold.kick: // its own stalls: the next pass waits for a finish
			default:
			}
			if len(in.hold.stalled) == 0 && !left {
				finished = nil
			}
			in.unlock()
		}
	}()
	return func() {
		cancel()
		<-stopped
	}
}

// abandon fails what waits in a run whose context ended, waits for its
// batches to end and lets go of its lanes' memberships and its Limiter.
// The call's own end does the same again, harmlessly.
func (in *intake) abandon(ctx context.Context) {
	if in.lock(ctx) != nil {
		return
	}
	_ = in.flushAll(in.r.runCtx, nil)
	in.r.routes.release() // under the producers' turn, as routes are made
	in.unlock()
	in.r.pool.wg.Wait()
	in.r.leaveShares()
	in.r.releaseLimiter()
}
