package upsert

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// progressReports is when and how far a run last reported its progress.
type progressReports struct {
	last     atomic.Int64          // clock time of the last progress report, in ns; written under mu
	lastDone atomic.Int64          // records settled at the last progress report
	mu       sync.Mutex            // held while reporting, so that reports do not overlap
	panicked atomic.Pointer[Error] // the caller's function panicked: it is not called again
}

// snapshot returns the run's figures now.
func (r *run) snapshot() Stats {
	s := r.stats.snapshot()
	s.Elapsed = r.cfg.clock.Now().Sub(r.start)
	s.Limiter = r.limiterState()
	r.shareStats(&s)
	return s
}

// maybeProgress reports progress when an interval has passed since the
// last report. Only one goroutine reports at a time; the others skip, and
// the interval runs from the last report made, so that a skipped one does
// not shorten the next one's rate.
func (r *run) maybeProgress() {
	if r.cfg.progress == nil {
		return
	}
	now, every := r.cfg.clock.Now().UnixNano(), int64(r.cfg.progressEvery)
	if now-r.progress.last.Load() < every || !r.progress.mu.TryLock() {
		return
	}
	defer r.progress.mu.Unlock()
	last := r.progress.last.Load()
	if now-last < every {
		return // another goroutine reported meanwhile
	}
	r.progress.last.Store(now)
	r.emitProgress(time.Duration(now-last), false)
}

// emitProgress reports progress, the last report when final; since is the
// time since the previous report, for the rate (0 when there is none).
func (r *run) emitProgress(since time.Duration, final bool) {
	s := r.snapshot()
	done := s.Upserted + s.Failed + s.Duplicates
	p := Progress{Total: r.total, Done: done, Final: final, Stats: s}
	prev := r.progress.lastDone.Swap(int64(done))
	if since > 0 {
		p.Rate = float64(done-int(prev)) / since.Seconds()
	}
	if final && s.Elapsed > 0 {
		p.Rate = float64(done) / s.Elapsed.Seconds()
	}
	if r.total >= 0 && p.Rate > 0 && !final {
		p.ETA = maxETA
		if eta := float64(r.total-done) / p.Rate * float64(time.Second); eta < float64(maxETA) {
			p.ETA = time.Duration(eta)
		}
	}
	r.callProgress(p)
}

// maxETA is the largest Progress.ETA: a rate so low that the time left
// overflows a Duration.
const maxETA = time.Duration(1 << 62)

// callProgress calls the caller's progress function with p, recovering a
// panic as the function of WithAcks is: the function is not called again,
// and the run stops with a canceled-class *Error wrapping a *PanicError,
// kept in r.progress.panicked for the call to return even when every
// record had settled.
func (r *run) callProgress(p Progress) {
	if r.progress.panicked.Load() != nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			e := &Error{Class: ClassCanceled, Err: &PanicError{Value: v, Stack: debug.Stack(), fn: "progress function"}}
			r.progress.panicked.Store(e)
			r.halt(e)
		}
	}()
	r.cfg.progress(p)
}
