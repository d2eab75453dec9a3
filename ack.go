package upsert

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// Ack tells a [Writer] or [Stream] user what became of one record: it
// landed, failed, or was replaced by a later record of its id. Acks come in
// input order (see [WithAcks]): the ack of position k means that every
// record before k has been acked too, so a consumer of a log may commit the
// source offset of k's record once it has dealt with the failures acked up
// to it.
type Ack struct {
	// Position is the record's input position, as in [Failure.Index] and
	// [Stale.Index]: for [Stream] and [Records] its index in the input
	// (counting the records a checkpoint skipped), for a [Writer] the
	// number of records added before it.
	Position int
	// Tag is the value given to [Writer.AddTagged] with the record; nil
	// for [Writer.Add], [Stream] and [Records].
	Tag any
	// ID is the record's id ("" for a nil record).
	ID string
	// Failure is the record's failure, as [Result.Failed] and the
	// observers see it, or nil when it landed or was replaced. It is not
	// reused after the call.
	Failure *Failure
	// Replaced reports a record that a later record of its id took the
	// place of before it was sent (it counts in Result.Duplicates): what
	// became of the id is in the later record's ack.
	Replaced bool
	// Resend reports a record that failed because the run stopped (its
	// context ended, the index denied the caller, the acknowledgement
	// function panicked), the index was down (the circuit breaker gave
	// up on it) or the caller's code panicked on it (the send function,
	// the SDK, the classifier: a [*PanicError]), not for a cause of its
	// own: sending it again may well succeed (once the bug is fixed). A
	// consumer must not commit past it; a restarted run sends it.
	// Failures that are not Resend are for good: a rule the record broke,
	// or retries that ran out after it was sent (the dead letters). A
	// [Checkpoint] stops at the same records.
	Resend bool
	// Stale is set for a record that landed while a request carrying an
	// earlier record of its id had ended without an answer, so that the
	// index may keep the earlier one; see [Stale]. Nil otherwise.
	Stale *Stale
}

// Landed reports whether the index confirmed the record.
func (a Ack) Landed() bool { return a.Failure == nil && !a.Replaced }

// WithAcks calls f with the acknowledgement of every record that a
// [Writer], [Stream] or [Records] takes, in input order: for a Writer, the
// order in which the Add calls took their records (an Add that returned
// before another began has the lower position, and the records of one
// goroutine are acked in the order it added them); for a stream, the order
// of its input.
//
// f is called from a goroutine of the run's own, never one that sends
// requests nor the caller's, one call at a time. The acks of a call are of
// consecutive positions, and each call starts where the previous one
// ended; the slice is reused once f returns (the Failures and Stales it
// points to are not). An ack is made once its record settled: landed only
// after the index confirmed it, failed after the observers' Failure
// function returned for it. Every record taken is acked exactly once (an
// Add that returned nil, each record a stream pulled, including those that
// fail because the run stopped), and Close, or the stream, returns only
// once f has returned for the last of them; a Flush that returns nil, once
// f has returned for every record added before it.
//
// An ack waits for every record before it: a record in a long retry holds
// back the acks of the records after it, in every namespace, though they
// are sent and land meanwhile. A slow f does not slow the requests, but at
// most the window's worth of records ([WithAckWindow]) are taken past the
// oldest one whose ack f has not returned for: beyond it, Add and the
// stream's pull wait (backpressure), so memory stays bounded. f must not
// call Add, AddTagged, Flush or Close of the Writer it acknowledges: they
// may wait for f.
//
// A panic in f is recovered: f is not called again, and the run stops as
// if its context had ended, so that no offset is committed by code that
// failed half-way. Records not landed fail with [ClassCanceled] and an
// error wrapping a [*PanicError]; Add returns that error, and Close, or the
// stream, returns an error that errors.As finds it in. The acks after the
// panic are not delivered.
//
// [All] rejects WithAcks with [ErrBadOption]: it returns once every record
// has settled, and its Result says what became of each.
func WithAcks(f func(acks []Ack)) Option {
	return func(c *config) {
		if f == nil {
			c.bad("WithAcks: nil function")
			return
		}
		c.acks.f = f
	}
}

// DefaultAckWindow is how many records a run with [WithAcks] takes, by
// default, past the oldest one whose ack has not been delivered.
const DefaultAckWindow = 1 << 16

// WithAckWindow sets how many records a run with [WithAcks] takes past the
// oldest one whose ack the acknowledgement function has not returned for,
// before Add and the stream's pull wait; default [DefaultAckWindow]. Each
// takes about 60 bytes (its tag, its id and its outcome) until acked. A
// window smaller than the records in flight slows the run down to the
// window: the oldest record's batch then goes out before it is full.
// A window under 1, or the option without [WithAcks], fails the call with
// [ErrBadOption].
func WithAckWindow(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.bad("WithAckWindow(%d): want 1 or more", n)
			return
		}
		c.acks.window = n
	}
}

// ackOptions are WithAcks's and WithAckWindow's.
type ackOptions struct {
	f      func([]Ack)
	window int // 0: DefaultAckWindow
}

// checkAcks rejects the acknowledgement options where they mean nothing.
func (c *config) checkAcks(use entry) {
	switch {
	case c.acks.f != nil && use == entryAll:
		c.bad("WithAcks: All cannot use it; it applies to Writer, Stream and Records (All's Result says what became of each record)")
	case c.acks.f == nil && c.acks.window != 0:
		c.bad("WithAckWindow without WithAcks")
	}
	if c.acks.window == 0 {
		c.acks.window = DefaultAckWindow
	}
}

// maxAcksPerCall bounds the slice given to the acknowledgement function,
// so that its buffer stays small whatever the window.
const maxAcksPerCall = 1024

// ackState is what became of a record, for its ack.
type ackState uint8

const (
	ackPending ackState = iota
	ackLanded
	ackFailed
	ackReplaced
)

// ackSlot is what an ack needs of one record until it is delivered.
type ackSlot struct {
	tag     any
	id      string
	failure *Failure
	stale   *Stale
	state   ackState
	resend  bool
}

// acker delivers the acks of a run in input order: the records settle in
// any order into a ring of slots, and a goroutine started when the settled
// prefix grows calls the acknowledgement function with it, then ends when
// it has caught up, so that nothing is left running between bursts, nor
// after a Writer whose context ended.
type acker struct {
	f      func([]Ack)
	window int
	halt   func(*Error) // stops the run, when f panicked
	// unacked takes the acks f did not return for (it panicked, or had
	// before): their failures and stale records reach the caller only
	// through the run's result then.
	unacked func([]Ack)

	// slots is a ring: position p is slots[p&(len-1)]. Only producers, in
	// their turn, grow it (under mu) and write tags (without it: the slot
	// of a position is not touched by anyone else until it settles).
	slots     []ackSlot
	delivered atomic.Int64 // head, for the producers to read without mu

	mu      sync.Mutex
	head    int           // f has returned for every position before it
	ready   int           // every position before it has settled
	running bool          // a goroutine delivers
	moved   chan struct{} // closed and replaced when head moves or delivery ends, while someone waits
	failed  *Error        // f panicked: it is not called again
	buf     []Ack
}

func newAcker(o ackOptions, halt func(*Error), unacked func([]Ack)) *acker {
	return &acker{f: o.f, window: o.window, halt: halt, unacked: unacked, slots: make([]ackSlot, 64)}
}

// start makes pos the first position, for a stream resumed from a
// checkpoint.
func (a *acker) start(pos int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.head, a.ready = pos, pos
	a.delivered.Store(int64(pos))
}

// full reports whether the producer, about to take position pos, must wait
// for acks to be delivered first.
func (a *acker) full(pos int) bool { return pos-int(a.delivered.Load()) >= a.window }

// take records that position pos was taken, with tag. The producers' turn
// is held.
func (a *acker) take(pos int, tag any) {
	if pos-int(a.delivered.Load()) >= len(a.slots) {
		a.grow(pos)
	}
	if tag != nil {
		a.slots[pos&(len(a.slots)-1)].tag = tag
	}
}

// grow makes room in the ring for position pos.
func (a *acker) grow(pos int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.slots
	if pos-a.head < len(old) {
		return
	}
	n := 2 * len(old)
	for n <= pos-a.head {
		n *= 2
	}
	slots := make([]ackSlot, n)
	for p := a.head; p < pos; p++ {
		slots[p&(n-1)] = old[p&(len(old)-1)]
	}
	a.slots = slots
}

// settle records what became of items: state, with their failures (fs[i]
// is items[i]'s, or fs is nil) and the stale records among them, and starts
// a delivery when the settled prefix grew.
func (a *acker) settle(items []item, fs []Failure, stale []Stale, state ackState, resend bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	mask := len(a.slots) - 1
	for i := range items {
		s := &a.slots[items[i].seq&mask]
		s.id, s.state, s.resend = items[i].id, state, resend
		if fs != nil {
			s.failure = &fs[i]
		}
	}
	for i := range stale {
		a.slots[stale[i].Index&mask].stale = &stale[i]
	}
	for a.ready-a.head < len(a.slots) && a.slots[a.ready&mask].state != ackPending {
		a.ready++
	}
	if a.ready > a.head && !a.running {
		a.running = true
		go a.deliver()
	}
}

// deliver calls f with the settled prefix, a slice at a time, until it
// has caught up.
func (a *acker) deliver() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.ready > a.head {
		end := min(a.ready, a.head+maxAcksPerCall)
		acks := a.collect(end)
		call := a.failed == nil
		a.mu.Unlock()
		if !call || !a.call(acks) {
			a.unacked(acks)
		}
		a.mu.Lock()
		clear(acks) // lets go of the tags, failures and stale records
		a.head = end
		a.delivered.Store(int64(end))
		a.signal()
	}
	a.running = false
	a.signal()
}

// collect moves the acks of the positions from head to end into buf,
// clearing their slots. mu is held.
func (a *acker) collect(end int) []Ack {
	mask := len(a.slots) - 1
	acks := a.buf[:0]
	for p := a.head; p < end; p++ {
		s := &a.slots[p&mask]
		acks = append(acks, Ack{
			Position: p, Tag: s.tag, ID: s.id, Failure: s.failure,
			Replaced: s.state == ackReplaced, Resend: s.resend, Stale: s.stale,
		})
		*s = ackSlot{}
	}
	a.buf = acks
	return acks
}

// call calls f, recovering a panic: f is not called again, and the run
// stops. It reports whether f returned.
func (a *acker) call(acks []Ack) (returned bool) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		e := &Error{Class: ClassCanceled, Err: &PanicError{Value: v, Stack: debug.Stack(), fn: "acknowledgement function"}}
		a.mu.Lock()
		a.failed = e
		a.mu.Unlock()
		a.halt(e)
	}()
	a.f(acks)
	return true
}

// signal wakes the calls waiting for head to move. mu is held.
func (a *acker) signal() {
	if a.moved != nil {
		close(a.moved)
		a.moved = nil
	}
}

// wait waits until f has returned for every position before pos and, when
// idle, no delivery runs; or until ctx ends (its error), stop is closed
// (errStopped) or closed is (ErrClosed).
func (a *acker) wait(ctx context.Context, stop, closed <-chan struct{}, pos int, idle bool) error {
	a.mu.Lock()
	for a.head < pos || idle && a.running {
		if a.moved == nil {
			a.moved = make(chan struct{})
		}
		ch := a.moved
		a.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return errStopped
		case <-closed:
			return ErrClosed
		}
		a.mu.Lock()
	}
	a.mu.Unlock()
	return nil
}

// errStopped is what wait returns when its stop channel closed.
var errStopped = errors.New("stopped")

// err adds to a run's error the panic of the acknowledgement function, so
// that the caller learns why the run stopped even when nothing failed.
func (a *acker) err(runErr error) error {
	a.mu.Lock()
	failed := a.failed
	a.mu.Unlock()
	return withPanic(runErr, failed)
}

// waitAckRoom waits, before the producer takes a record, until the window
// has room: it sends every batch held (the oldest unacked record may wait
// in one), then waits for acks to be delivered, or ctx or the run to end,
// or Close to be called (ErrClosed).
func (in *intake) waitAckRoom(ctx context.Context) error {
	if err := in.flushAll(ctx, in.closing); err != nil {
		return err
	}
	a := in.acks
	err := a.wait(ctx, in.r.runCtx.Done(), in.closing, in.next-a.window+1, false)
	if err == errStopped {
		return in.r.stopError()
	}
	return err
}

// ackSettled passes settled items to the acker, if any.
func (in *intake) ackSettled(items []item, fs []Failure, stale []Stale, state ackState, resend bool) {
	if in.acks != nil {
		in.acks.settle(items, fs, stale, state, resend)
	}
}

// waitAcked waits, for Flush and Close, until the acks of the positions
// before pos have been delivered; nil at once without acks.
func (in *intake) waitAcked(ctx context.Context, pos int) error {
	if in.acks == nil {
		return nil
	}
	return in.acks.wait(ctx, nil, nil, pos, false)
}
