package upsert

import (
	"errors"
	"slices"
	"sync"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// runResults is what a run keeps for its Result besides the counters.
type runResults struct {
	mu         sync.Mutex // guards failed and stale: the producer and workers append to them
	failed     []Failure
	keepFailed int     // most failures (and stale records) kept for the result; < 0 keeps all
	untaken    untaken // records All never looked at because the run stopped
	stale      []Stale
	unacked    *unackedIndex // what of failed and stale is known, once acks went undelivered
}

// unackedIndex knows which records failed and stale hold, by input
// position, so that the failures of undelivered acks join them once each.
type unackedIndex struct {
	failed, stale               map[int]bool
	failedScanned, staleScanned int // failed[:failedScanned] and stale[:staleScanned] are in the maps
}

// outcome is how records settled.
type outcome struct {
	landed    bool // the index confirmed them
	final     bool // they settled for good (settlesForGood): a checkpoint may pass them
	ambiguous bool // a request carrying them ended without an answer: it may be applied yet

	// failures are the items' own, when they failed (for their acks).
	failures []Failure
}

// untaken are the last records of All's slice, from position from on,
// which failed with err when the run stopped before they were looked at.
type untaken struct {
	records   []*pinecone.Vector
	from      int
	err       *Error
	namespace string // the run's one namespace; "" under WithNamespaceOf
}

// failure returns the failure of the i-th of them.
func (u untaken) failure(i int) Failure {
	f := Failure{Index: u.from + i, Namespace: u.namespace, Record: u.records[i], Class: u.err.Class, Err: u.err, Resend: !settlesForGood(u.err, 0)}
	if v := u.records[i]; v != nil {
		f.ID = v.Id
	}
	return f
}

// appendTo appends their failures to fs, in order, growing it once.
func (u untaken) appendTo(fs []Failure) []Failure {
	fs = slices.Grow(fs, len(u.records))
	for i := range u.records {
		fs = append(fs, u.failure(i))
	}
	return fs
}

// failPart fails p's records with e.
func (r *run) failPart(p *part, e *Error) {
	r.failAll(p.items, e, p.attempts, p.ambiguous)
}

// failAll fails items with e after attempts requests, reporting and
// settling them.
func (r *run) failAll(items []item, e *Error, attempts int, ambiguous bool) {
	if len(items) == 0 {
		return
	}
	final := settlesForGood(e, attempts)
	fs := make([]Failure, len(items))
	for i, it := range items {
		fs[i] = Failure{
			Index: it.seq, ID: it.id, Namespace: it.ns, Record: it.vec, Integrated: it.rec, Class: e.Class, Err: e,
			Attempts: attempts, MayHaveLanded: ambiguous, Resend: !final,
		}
	}
	r.report(fs)
	r.settle(items, outcome{final: final, ambiguous: ambiguous, failures: fs})
}

// settlesForGood reports whether a failure settles its records for good,
// so that a checkpoint may pass them (see [Checkpoint]): a rule they
// broke, or retries that ran out after they were sent. A run that
// stopped, an index that was down, or a panic of the caller's code (the
// send function, the SDK, the classifier) says nothing about the records:
// the resumed run must send them.
func settlesForGood(e *Error, attempts int) bool {
	switch {
	case e.Class == ClassCanceled || e.Class == ClassDenied || e.Class == ClassQuotaExceeded:
		return false
	case breakerGaveUp(e):
		return false // the circuit breaker gave up on them, sent before or not
	case isPanic(e):
		return false // a bug, fixed before the resume: the records go again
	case e.Class == ClassInvalid || e.Class == ClassTooLarge:
		return true
	default:
		return attempts > 0
	}
}

// report records failures: counted, passed to the observers, kept for the
// result (up to keepFailed, when set).
func (r *run) report(fs []Failure) {
	r.stats.fail(fs)
	for _, f := range fs {
		r.cfg.observers.failure(f)
	}
	res := &r.results
	res.mu.Lock()
	keep := fs
	if res.keepFailed >= 0 {
		keep = fs[:max(0, min(len(fs), res.keepFailed-len(res.failed)))]
	}
	res.failed = append(res.failed, keep...)
	res.mu.Unlock()
}

// unacked keeps, for the result, the failures and stale records of acks
// that the acknowledgement function did not return for (it panicked): a
// run that hands them to the acks keeps only failuresKept, and they would
// reach the caller nowhere else. An observer's Failure function had them.
func (r *run) unacked(acks []Ack) {
	if observersHaveFailure(r.cfg.observers) {
		return
	}
	res := &r.results
	res.mu.Lock()
	defer res.mu.Unlock()
	if res.unacked == nil {
		res.unacked = &unackedIndex{failed: map[int]bool{}, stale: map[int]bool{}}
	}
	u := res.unacked
	for ; u.failedScanned < len(res.failed); u.failedScanned++ {
		u.failed[res.failed[u.failedScanned].Index] = true
	}
	for ; u.staleScanned < len(res.stale); u.staleScanned++ {
		u.stale[res.stale[u.staleScanned].Index] = true
	}
	for _, a := range acks {
		if f := a.Failure; f != nil && !u.failed[f.Index] {
			res.failed = append(res.failed, *f)
			u.failed[f.Index] = true
		}
		if s := a.Stale; s != nil && !u.stale[s.Index] {
			res.stale = append(res.stale, *s)
			u.stale[s.Index] = true
		}
	}
	u.failedScanned, u.staleScanned = len(res.failed), len(res.stale)
}

// settle tells the intake that items landed or failed.
func (r *run) settle(items []item, o outcome) {
	if r.onSettle != nil {
		r.onSettle(items, o)
	}
}

// breakerGaveUp reports whether e is the circuit breaker's failure of a
// request it did not send (see breaker.gaveUp), also with the last
// failure added (withLastFailure), or a failure marked by downOr.
func breakerGaveUp(e *Error) bool {
	return errors.Is(e.Err, errNeverAnswered.Err) || errors.Is(e.Err, errOutageTooLong.Err) || errors.Is(e.Err, errIndexDown)
}
