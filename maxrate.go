package upsert

import (
	"math"
	"sync"
	"time"
)

// WithMaxRate caps the records this call sends a second, in every
// namespace together: for an index that also serves queries (a pod-based
// index's writes and queries share its pods), or a backfill that must
// leave room for other writers. Without it, the default, a call sends as
// fast as the index accepts.
//
// Requests are spaced, not counted per second: each waits, before the
// Limiter admits it, until the records sent before it have had their
// time at recordsPerSecond, so over any span the call sends at most the
// cap's records plus one request's. Retries count, as they are records
// sent. The wait holds no slot of the Limiter, which sees a source
// slower than the index; only requests the Limiter held past their turn
// (a Retry-After, every slot busy) wait again, in their slot, so that
// they do not go out together. Calls that share a Limiter each keep their own
// cap. A rate that is not a finite number above 0 is an error
// ([ErrBadOption]).
func WithMaxRate(recordsPerSecond float64) Option {
	return func(c *config) {
		if !(recordsPerSecond > 0) || math.IsInf(recordsPerSecond, 0) {
			c.bad("WithMaxRate(%v): want a finite number of records a second above 0", recordsPerSecond)
			return
		}
		c.maxRate = recordsPerSecond
	}
}

// pacer spaces a run's requests under its cap (WithMaxRate): each request
// starts when the records before it have had their time, so the first
// goes at once and an idle spell earns no burst. A nil *pacer admits
// everything at once. It is safe for concurrent use.
type pacer struct {
	mu       sync.Mutex
	rate     float64   // records a second
	next     time.Time // when the next request may start waiting for the Limiter
	nextSend time.Time // when the next request may be sent
}

// paceCap waits until a request of n records fits under the caller's cap
// (WithMaxRate), before it asks the Limiter; it returns the run's
// context's error if the run stops first.
func (r *run) paceCap(n int) error { return r.paceBy((*pacer).reserveAt, n) }

// paceSend waits, once the Limiter admitted a request of n records, until
// it may be sent under the caller's cap, holding its slot; the Limiter
// held it past its turn. It returns the run's context's error if the run
// stops first.
func (r *run) paceSend(n int) error { return r.paceBy((*pacer).sendAt, n) }

// paceBy sleeps the wait that book gives a request of n records.
func (r *run) paceBy(book func(*pacer, time.Time, int) time.Duration, n int) error {
	if wait := book(r.pacer, r.cfg.clock.Now(), n); wait > 0 {
		return r.cfg.clock.Sleep(r.runCtx, wait)
	}
	return nil
}

func newPacer(recordsPerSecond float64) *pacer {
	if recordsPerSecond <= 0 {
		return nil
	}
	return &pacer{rate: recordsPerSecond}
}

// reserveAt books the time of a request of n records asked for at now,
// and returns how long it must wait before it asks the Limiter. The
// booking holds whether or not the request is sent: one given up on (the
// run stopped, or the batch went back to be cut) slows the requests after
// it, never speeds them.
func (p *pacer) reserveAt(now time.Time, n int) time.Duration {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.book(&p.next, now, n)
}

// sendAt books the sending of a request of n records admitted by the
// Limiter at now, and returns how long it must still wait: requests the
// Limiter held together (a Retry-After, every slot busy) must not go out
// together. Booked with reserveAt first, a request waits here only then.
func (p *pacer) sendAt(now time.Time, n int) time.Duration {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.book(&p.nextSend, now, n)
}

// book moves *next past a request of n records that starts at now or at
// *next, whichever is later, and returns the wait until it starts; p.mu is
// held.
func (p *pacer) book(next *time.Time, now time.Time, n int) time.Duration {
	start := now
	if next.After(now) {
		start = *next
	}
	*next = start.Add(p.spacing(n))
	return start.Sub(now)
}

// spacing is n records' time at the rate, saturated rather than
// overflowed for a tiny rate.
func (p *pacer) spacing(n int) time.Duration {
	d := float64(n) / p.rate * float64(time.Second)
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(d)
}
