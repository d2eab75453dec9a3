package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/upsertlib/upsert"
)

// errGaveUp is the cause of a run given up by --max-failure-seconds.
type errGaveUp struct{ limit time.Duration }

func (e errGaveUp) Error() string {
	return fmt.Sprintf("gave up: no record landed for %v (--max-failure-seconds)", e.limit)
}

// watchdog gives a run up when records wait and, since a request first
// failed after the last landing, none has landed for limit: an index that accepts
// nothing is not waited on forever, whatever the retries and the circuit
// breaker would still try. A run whose records all settled is not waiting,
// and one whose requests do not fail is not stuck, so a slow input never
// trips it. (A record replaced by a later one of its id settles with no
// event, so waiting alone cannot tell.) Only failures of the index count:
// a request refused for its records (invalid, too large) is split until
// the bad ones fail alone, and says nothing of an index that is down; it
// may be the run's last request, before a pause of the input.
type watchdog struct {
	limit time.Duration

	now func() time.Time // nil: time.Now

	mu      sync.Mutex
	waiting int       // records read and not settled, as far as events tell
	failed  bool      // a request failed since the last landing
	since   time.Time // the first failure since the last landing, or a later restart (read)
	event   time.Time // the last request answered or record failed
}

// watch returns a context that ends with ctx, or with errGaveUp when w
// gives up; stop ends the watch.
func (w *watchdog) watch(ctx context.Context) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(min(w.limit/4, time.Second))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				if w.idle(now) {
					cancel(errGaveUp{w.limit})
					return
				}
			}
		}
	}()
	return ctx, func() {
		close(done)
		<-stopped
		cancel(nil)
	}
}

// idle reports whether records wait and requests have failed for limit
// without any landing.
func (w *watchdog) idle(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiting > 0 && w.failed && now.Sub(w.since) >= w.limit
}

// read counts a record read. A record read when none waits, or after no
// request was answered for limit (the input paused; a replaced record
// settles with no event, so waiting may not say), restarts the clock: it
// gets limit to land however long ago the failures began.
func (w *watchdog) read() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now := w.clock(); w.waiting <= 0 || now.Sub(w.event) >= w.limit {
		w.since = now
	}
	w.waiting++
}

func (w *watchdog) clock() time.Time {
	if w.now != nil {
		return w.now()
	}
	return time.Now()
}

// observer counts records that land or fail.
func (w *watchdog) observer() upsert.Observer {
	return upsert.Observer{
		RequestDone: func(e upsert.RequestEvent) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.event = w.clock()
			if e.Err != nil {
				if e.Err.Class == upsert.ClassInvalid || e.Err.Class == upsert.ClassTooLarge {
					return // the records', not the index's
				}
				if !w.failed {
					w.failed, w.since = true, w.clock()
				}
				return
			}
			w.waiting -= e.Records
			w.failed = false
		},
		Failure: func(upsert.Failure) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.event = w.clock()
			w.waiting--
		},
	}
}
