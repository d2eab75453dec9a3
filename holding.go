package upsert

import (
	"context"
	"time"
)

// maxHeld and maxHeldBytes bound the records that wait in batches not yet
// dispatched, across every namespace: four requests' worth. Beyond it the
// oldest batch goes out however few records it holds, so that memory does
// not grow with the number of namespaces (one namespace per record would
// otherwise hold the whole input); one namespace never reaches it.
func maxHeld(k *kind) int      { return 4 * k.maxBatch }
func maxHeldBytes(k *kind) int { return 4 * k.maxBytes }

// holding tracks what waits in the intake before it is dispatched: how many
// records and bytes, the routes whose current batch holds records in the
// order those batches started, and the routes whose ready batch could not
// be dispatched before its caller's context ended. The intake's turn
// guards it.
type holding struct {
	records, bytes       int
	maxRecords, maxBytes int            // maxHeld and maxHeldBytes, or less in tests
	queue                []pendingBatch // oldest first; entries of batches since taken are stale
	head                 int
	stalled              []*route
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

// started records that rt's current batch started at now.
func (h *holding) started(rt *route, now time.Time) {
	h.queue = append(h.queue, pendingBatch{rt: rt, gen: rt.batcher.gen, since: now})
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

// oldest returns the route of the batch that has waited longest, a
// stalled one first; ok is false when nothing waits. With a non-zero
// cutoff it returns only a current batch started at or before it.
func (h *holding) oldest(cutoff time.Time) (rt *route, ok bool) {
	for len(h.stalled) > 0 {
		rt = h.stalled[0]
		h.stalled = h.stalled[1:]
		rt.stalled = false
		if len(rt.ready.items) > 0 {
			return rt, true
		}
	}
	h.trim()
	if h.head == len(h.queue) {
		return nil, false
	}
	p := h.queue[h.head]
	if !cutoff.IsZero() && p.since.After(cutoff) {
		return nil, false
	}
	h.queue[h.head] = pendingBatch{}
	h.head++
	return p.rt, true
}

// stall records that rt's ready batch waits for a dispatch.
func (h *holding) stall(rt *route) {
	if !rt.stalled {
		rt.stalled = true
		h.stalled = append(h.stalled, rt)
	}
}

// makeRoom dispatches the oldest batches until a record of size bytes can
// be held within the bounds. It returns ctx's error when ctx ends first.
func (in *intake) makeRoom(ctx context.Context, size int) error {
	if h := &in.hold; h.records < h.maxRecords && h.bytes+size <= h.maxBytes {
		return nil // inlined: the path of nearly every record
	}
	return in.dispatchOldest(ctx, size)
}

// dispatchOldest is makeRoom's loop.
func (in *intake) dispatchOldest(ctx context.Context, size int) error {
	h := &in.hold
	for h.records > 0 && (h.records >= h.maxRecords || h.bytes+size > h.maxBytes) {
		rt, ok := h.oldest(time.Time{})
		if !ok {
			return nil
		}
		if err := in.dispatchRoute(ctx, rt); err != nil && in.r.runCtx.Err() == nil {
			return err
		}
	}
	return nil
}

// dispatchReady dispatches rt's ready batch, if any. When ctx ends first,
// the batch stays ready, and stalled for the flusher.
func (in *intake) dispatchReady(ctx context.Context, rt *route) error {
	b := rt.ready
	if len(b.items) == 0 {
		return nil
	}
	kept, err := in.r.dispatch(ctx, rt, b)
	if !kept { // dispatched, or failed for good because the run stopped
		in.hold.records -= len(b.items)
		in.hold.bytes -= b.bytes
		rt.ready = batch{}
		return err
	}
	in.hold.stall(rt)
	return err
}

// dispatchRoute dispatches rt's ready batch and then its current one,
// however few records it holds.
func (in *intake) dispatchRoute(ctx context.Context, rt *route) error {
	err := in.dispatchReady(ctx, rt)
	if err != nil && (len(rt.ready.items) > 0 || in.r.runCtx.Err() == nil) {
		return err // the ready batch stays, stalled: the current one waits behind it
	}
	// Dispatched, or failed because the run stopped: then the current
	// batch fails too, or no later pass may come for it (a Writer never
	// closed gets one).
	if b := rt.batcher.take(); len(b.items) > 0 {
		rt.ready = b
		return in.dispatchReady(ctx, rt)
	}
	return err
}

// flushAll dispatches every route's batches, however few records they
// hold. It returns ctx's error when ctx ends first; when the run has
// stopped, the batches fail instead and it goes on.
func (in *intake) flushAll(ctx context.Context) error {
	for _, rt := range in.r.routes.byKey {
		if err := in.dispatchRoute(ctx, rt); err != nil && in.r.runCtx.Err() == nil {
			return err
		}
	}
	return nil
}

// startFlusher starts the goroutine that, every d/2, dispatches the
// batches that started d/2 ago or more, so that no record waits longer
// than d however steadily records trickle in; and, when the run's context
// ends, fails what waits and lets go of the Limiter, so that a Writer that
// is never closed leaves nothing running, then calls ended (when not nil)
// with a context that ends when stop is called. stop ends it and waits
// for it.
func (in *intake) startFlusher(d time.Duration, ended func(stopped context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := max(d/2, time.Millisecond)
		t := time.NewTicker(tick)
		defer t.Stop()
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
			}
			if in.lock(ctx) != nil {
				return
			}
			cutoff := in.r.cfg.clock.Now().Add(-tick)
			for {
				rt, ok := in.hold.oldest(cutoff)
				if !ok || in.dispatchRoute(ctx, rt) != nil {
					break
				}
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
	_ = in.flushAll(in.r.runCtx)
	in.r.routes.release() // under the producers' turn, as routes are made
	in.unlock()
	in.r.pool.wg.Wait()
	in.r.leaveShares()
	in.r.releaseLimiter()
}
