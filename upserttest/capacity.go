package upserttest

import (
	"context"
	"sync"
	"time"

	"github.com/upsertlib/upsert/internal/tokenbucket"
)

// This file holds the capacity model of a Server: per-namespace admission
// token buckets (WithRate, WithByteRate, WithRequestRate), per-namespace write
// slots with their FIFO queue (WithSlots), and the write latency
// (WithLatency, WithByteLatency, WithSlowAbove).

// nsCapacity is the capacity state of one namespace. It is created on the
// first Upsert request to the namespace and lives as long as the Server:
// Server.Reset refills its buckets but keeps its slots, which may be held by
// requests in flight.
type nsCapacity struct {
	mu       sync.Mutex          // serializes admission (Server.take), so that check-then-take is atomic
	vectors  *tokenbucket.Bucket // nil when disabled
	bytes    *tokenbucket.Bucket
	requests *tokenbucket.Bucket

	slots *slotPool // nil when unlimited
}

func newNSCapacity(cfg *config) *nsCapacity {
	c := &nsCapacity{}
	c.resetBuckets(cfg)
	if cfg.slots > 0 {
		c.slots = &slotPool{size: cfg.slots}
	}
	return c
}

// resetBuckets replaces every bucket by a full one.
func (c *nsCapacity) resetBuckets(cfg *config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.vectors = newBucket(cfg.vectorRate)
	c.bytes = newBucket(cfg.byteRate)
	c.requests = newBucket(cfg.requestRate)
}

// newBucket returns a full bucket, or nil (which admits everything) when c
// is disabled.
func newBucket(c bucketConfig) *tokenbucket.Bucket {
	if !c.enabled() {
		return nil
	}
	return tokenbucket.New(c.rate, c.burst)
}

// slotPool is a counting semaphore whose waiters are served in FIFO order.
type slotPool struct {
	mu    sync.Mutex
	size  int
	used  int
	queue []*slotWaiter
}

type slotWaiter struct {
	ready chan struct{} // closed when the slot is handed to the waiter
}

// acquire obtains a slot, waiting in the queue if none is free. It fails
// without holding a slot if ctx is done or stop is closed before a slot is
// obtained, or if ctx is already done by the time the slot is handed over
// (the request's client gave up while it was queued). queued is called with
// +1 when the request starts waiting and -1 when it stops. A nil pool always
// succeeds at once.
func (p *slotPool) acquire(ctx context.Context, stop <-chan struct{}, queued func(delta int)) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if p.used < p.size && len(p.queue) == 0 {
		p.used++
		p.mu.Unlock()
		return nil
	}
	w := &slotWaiter{ready: make(chan struct{})}
	p.queue = append(p.queue, w)
	p.mu.Unlock()

	queued(+1)
	defer queued(-1)

	var err error
	select {
	case <-w.ready:
		if err := ctx.Err(); err != nil {
			p.release()
			return err
		}
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-stop:
		err = errStopped
	}
	if !p.dequeue(w) {
		// The slot was handed over while we gave up: pass it on.
		p.release()
	}
	return err
}

// dequeue removes w from the queue and reports whether it was still there.
func (p *slotPool) dequeue(w *slotWaiter) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, q := range p.queue {
		if q == w {
			p.queue = append(p.queue[:i], p.queue[i+1:]...)
			return true
		}
	}
	return false
}

// release frees a slot, handing it directly to the first waiter if any.
func (p *slotPool) release() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) > 0 {
		w := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		close(w.ready)
		return
	}
	p.used--
}

// latency is the time a write of n vectors in a request of the given encoded
// size takes once it holds a slot.
func (c *config) latency(n, bytes int) time.Duration {
	d := c.latencyBase + time.Duration(n)*c.latencyPerVector
	if c.latencyPerMiB > 0 {
		d += time.Duration(float64(c.latencyPerMiB) * float64(bytes) / (1 << 20))
	}
	if c.slowAbove >= 0 && n > c.slowAbove {
		d = time.Duration(float64(d) * c.slowFactor)
	}
	return d
}
