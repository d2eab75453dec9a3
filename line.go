package upsert

import (
	"context"
	"slices"
	"sync"
)

// line is a FIFO of places: each place waits until every place taken
// before it has been left. Taking a place never blocks, so that a caller
// knows it holds its place before it waits; leaving wakes the next place
// alone. A lane admits its requests through one (its head), and a route
// sends its batches to the lane through one, in the order it dispatched
// them: the goroutines that send them start in any order, and without it
// a call with one request in flight sent its third batch first, which left
// a checkpoint's watermark behind records that had landed. The zero value
// is an empty line.
type line struct {
	mu     sync.Mutex
	places []*place // not left yet, in the order taken; the first is served
}

// place is a place in a line, used by one goroutine; nil is no place,
// which never waits.
type place struct {
	line  *line
	ready chan struct{} // closed once every place before it has left
	left  bool
}

// take returns a new place at the end of l.
func (l *line) take() *place {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &place{line: l, ready: make(chan struct{})}
	if len(l.places) == 0 {
		close(p.ready)
	}
	l.places = append(l.places, p)
	return p
}

// empty reports whether no place is held or waiting.
func (l *line) empty() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.places) == 0
}

// wait blocks until every place taken before p has left, or ctx ends. A
// nil or left place does not wait. After an error, p must still be left.
func (p *place) wait(ctx context.Context) error {
	if p == nil || p.left {
		return nil
	}
	select {
	case <-p.ready:
		return nil // served, even if ctx has ended too
	default:
	}
	select {
	case <-p.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leave gives up p, served or still waiting, and wakes the next place
// when p was served. Leaving a nil or left place does nothing.
func (p *place) leave() {
	if p == nil || p.left {
		return
	}
	p.left = true
	l := p.line
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.Index(l.places, p)
	l.places = slices.Delete(l.places, i, i+1)
	if i == 0 && len(l.places) > 0 {
		close(l.places[0].ready)
	}
}
