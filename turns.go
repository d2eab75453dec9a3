package upsert

import (
	"context"
	"sync"
)

// turns lines up a route's batches for their first admission by the lane,
// in the order they were dispatched: the goroutines that send them start
// in any order, and without it a call with one request in flight sent its
// third batch first, which left a checkpoint's watermark behind records
// that had landed. A batch holds its turn until the lane admits it, so a
// route has one batch at a time in the lane's queue. Retries and the
// halves of a split take no turn: they are older than any batch waiting.
// The zero value is ready to use.
type turns struct {
	mu      sync.Mutex
	next    uint64          // the number the next dispatched batch takes
	serving uint64          // the number whose holder may go
	gaveUp  map[uint64]bool // numbers not yet served whose holders passed
	moved   signal          // fired when serving moves
}

// turn is a batch's place in its route's line, used by the goroutine that
// sends the batch; nil is no place.
type turn struct {
	line   *turns
	n      uint64
	passed bool
}

// take returns the next place in line.
func (q *turns) take() *turn {
	q.mu.Lock()
	defer q.mu.Unlock()
	t := &turn{line: q, n: q.next}
	q.next++
	return t
}

// idle reports whether no batch holds a place in line.
func (q *turns) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.serving == q.next
}

// wait blocks until every batch ahead of t has passed, or ctx ends. A nil
// or passed turn does not wait. After an error, t must still be passed.
func (t *turn) wait(ctx context.Context) error {
	if t == nil || t.passed {
		return nil
	}
	q := t.line
	for {
		q.mu.Lock()
		if q.serving == t.n {
			q.mu.Unlock()
			return nil
		}
		moved := q.moved.wait()
		q.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pass gives up t's place, served or not, so that the batches behind it
// go on; a batch that stopped waiting passes a place not yet served, which
// is skipped when its time comes. A nil or passed turn passes nothing.
func (t *turn) pass() {
	if t == nil || t.passed {
		return
	}
	t.passed = true
	q := t.line
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.n != q.serving {
		if q.gaveUp == nil {
			q.gaveUp = make(map[uint64]bool)
		}
		q.gaveUp[t.n] = true
		return
	}
	q.serving++
	for q.gaveUp[q.serving] {
		delete(q.gaveUp, q.serving)
		q.serving++
	}
	q.moved.fire()
}
