package upsert

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// errRecut is what attempt returns for a batch that the lane did not
// admit because it had become larger than a request may carry: it was not
// sent, and goes back to be cut.
var errRecut = &Error{Class: ClassRateLimited, Err: errStaleBatch}

// errProbeCut is what attempt returns for a batch that the lane did not
// admit because the breaker's probe goes as one record (errProbeAlone):
// it was not sent, and goes back with its first record cut off.
var errProbeCut = &Error{Class: ClassTimeout, Err: errProbeAlone}

// attempt sends p once: it waits for the lane to admit it (rate tokens,
// then a slot), then sends with the per-request timeout. It returns nil when
// the index confirmed every record. first is the batch's place in its
// route's line, left once its first request holds a place in the lane's
// (see line), or failed.
func (r *run) attempt(worker int, rt *route, p *part, first *place) *Error {
	perm, pass, bytes, e := r.admit(rt, p, first)
	if e != nil {
		return e
	}
	r.resending(p)
	n := len(p.items)
	p.attempts++
	ev := RequestEvent{
		Context: r.runCtx, Namespace: namespaceKey(rt.namespace), Worker: worker, Records: n, Bytes: bytes,
		Attempt: p.attempts,
	}
	if r.traced {
		ev.Context = r.cfg.observers.startRequest(ev)
	}
	r.minute.sending(pass)
	ctx, cancel := context.WithTimeout(ev.Context, r.cfg.requestTimeout)
	err := recovered(func() error { return r.kind.send(ctx, r.cfg, rt.namespace, p.items) })
	cancel()
	latency := r.cfg.clock.Now().Sub(perm.start)
	answer := e // what the index said of this request: the lane, the stats and RequestDone hear it
	if err != nil {
		var ambiguous bool
		e, answer, ambiguous = r.readFailure(err)
		p.ambiguous = p.ambiguous || ambiguous
		if (e.Class == ClassServer || e.Class == ClassTimeout) && !isPanic(e) {
			rt.lastFailure.Store(e)
		}
		switch {
		case stopsOneNamespace(e):
			r.refuse(rt, e) // before the slot is released, as below
		case e.Class == ClassDenied || e.Class == ClassQuotaExceeded:
			// Stop before the slot is released, so that no request
			// waiting for it goes out after the answer.
			r.halt(e)
		}
		r.logStopping(worker, rt, p, e, answer)
	}
	r.pool.lastLanded.Store(e == nil)
	heard := answer
	if answer != nil && isPanic(answer) {
		heard = errCallerCode // the index's answer, if any, never reached us
	}
	p.free = p.failures.free(rt.lane.release(perm, heard), r.cfg.retry.maxRetries[ClassRateLimited])
	r.minute.done(pass, heard)
	r.stats.request(n, latency, answer)
	ev.Latency, ev.Err = latency, answer
	r.cfg.observers.requestDone(ev)
	return e
}

// logStopping logs the line of a request whose records fail with e, a
// refusal that stops the run (afterFailure logs none for those): its own
// refusal, or its own answer after another's refusal stopped the run; a
// request the refusal cut off (answerOf: canceled) logs none.
func (r *run) logStopping(worker int, rt *route, p *part, e, answer *Error) {
	switch {
	case stopsOneNamespace(answer):
		r.log(slog.LevelError, "index refused a new namespace; its records fail", worker, rt, p, answer)
	case answer.Class == ClassDenied || answer.Class == ClassQuotaExceeded:
		r.log(slog.LevelError, "index refused the caller; stopping", worker, rt, p, answer)
	case e.Class != ClassDenied && e.Class != ClassQuotaExceeded, answer.Class == ClassCanceled:
	case isPanic(answer):
		r.log(slog.LevelError, "send function panicked; batch failed", worker, rt, p, answer)
	default:
		r.log(slog.LevelError, "batch failed; the run had stopped", worker, rt, p, answer)
	}
}

// admit waits for p's turn (see line), for its pass of the per-minute
// limits, then for the lane to admit it, and returns the permit, the pass
// and the request's bytes; or the error that stops the attempt unsent
// (errRecut when the lane wants it cut first), with anything taken given
// back.
func (r *run) admit(rt *route, p *part, first *place) (permit, *minutePass, int, *Error) {
	if first.wait(r.runCtx) != nil {
		return permit{}, nil, 0, r.stopError()
	}
	defer first.leave() // the lane's queue left it already, unless p did not get there

	if e := rt.refused.Load(); e != nil { // before any wait or booking; again once admitted
		return permit{}, nil, 0, e
	}
	acquire := rt.lane.acquireOrRecut
	if r.cfg.batchSize > 0 {
		acquire = rt.lane.acquire // a pinned size is never cut
	}
	bytes := rt.overhead
	for _, it := range p.items {
		bytes += it.size
	}
	// The caller's cap and the per-minute limits first: their waits must
	// not hold a slot of the lane.
	if err := r.paceCap(len(p.items)); err != nil {
		return permit{}, nil, 0, r.stopError()
	}
	pass, err := r.paceMinute(p.items)
	if err != nil {
		return permit{}, nil, 0, r.classified(err)
	}
	q := request{n: len(p.items), bytes: bytes, slots: r.pool.slots, sizeProbe: p.trial != 0, afterTimeout: p.afterTimeout, timeout: r.cfg.requestTimeout, turn: first}
	if r.minute != nil {
		q.overLimit = func() bool { return r.minute.overLimit(p.items) }
	}
	perm, err := acquire(r.runCtx, q)
	if err != nil {
		dropTrial(rt, p)
		r.minute.withdraw(pass)
		switch {
		case r.runCtx.Err() != nil:
		case errors.Is(err, errStaleBatch):
			return permit{}, nil, 0, errRecut
		case errors.Is(err, errProbeAlone):
			return permit{}, nil, 0, errProbeCut
		}
		return permit{}, nil, 0, r.classified(err)
	}
	p.trial = 0 // sent: its answer is the trial's (release's, if not sent)
	if e := r.unsentOnceAdmitted(rt, len(p.items)); e != nil {
		r.minute.withdraw(pass)
		rt.lane.release(perm, &Error{Class: ClassCanceled})
		return permit{}, nil, 0, e
	}
	if r.pacer != nil {
		perm.start = r.cfg.clock.Now() // sent now: its wait is no latency
	}
	return perm, pass, bytes, nil
}

// unsentOnceAdmitted returns why a request of n records, admitted by rt's
// lane, is not to be sent after all: the index refused its namespace
// while it waited (for the lane, or for WithMaxRate's pace after it), or
// the run stopped (a slot freed by the answer that stopped it); nil to
// send it.
func (r *run) unsentOnceAdmitted(rt *route, n int) *Error {
	if e := rt.refused.Load(); e != nil {
		return e
	}
	if r.paceSend(n) != nil || r.runCtx.Err() != nil {
		return r.stopError()
	}
	return rt.refused.Load()
}

// paceMinute waits until integrated records fit under the per-minute
// limits learned so far (minutegate.go); vectors do not wait.
func (r *run) paceMinute(items []item) (*minutePass, error) {
	if r.minute == nil {
		return nil, nil
	}
	return r.minute.wait(r.runCtx, estimateTokens(items))
}

// recovered calls f, the caller's code on a library goroutine, and turns a
// panic into a server-class [*Error] wrapping a [*PanicError].
func recovered(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &Error{Class: ClassServer, Err: &PanicError{Value: v, Stack: debug.Stack()}}
		}
	}()
	return f()
}

// readFailure reads err, a failed request's: what its records fail with
// (see classified), what the request counts as (answerOf) and whether it
// may have landed. A method of err's chain that panics (a typed nil of the
// caller's own error type: its Error, Unwrap, GRPCStatus…) fails the
// request with a *PanicError instead, as a panicking send does: the
// library reads err on a worker goroutine, where the panic would kill the
// process. A panic of the caller's classifier is its own (readAnswer).
func (r *run) readFailure(err error) (e, answer *Error, mayHaveLanded bool) {
	defer func() {
		if v := recover(); v != nil {
			e = &Error{Class: ClassServer, Err: &PanicError{Value: v, Stack: debug.Stack(), fn: "send function's error (a method of its chain)"}}
			answer, mayHaveLanded = e, true
		}
	}()
	_ = err.Error() // e wraps err: its text is logged and returned later
	e = r.classified(err)
	return e, r.answerOf(err, e), r.mayHaveLanded(err, e)
}

// unreadable returns the panic of err's Error method (a typed nil of the
// caller's own error type) as a *PanicError of fn, or nil: the library
// reads the text of the caller's errors on its own goroutines, where the
// panic would kill the process.
func unreadable(err error, fn string) (pe *PanicError) {
	if err == nil {
		return nil
	}
	defer func() {
		if v := recover(); v != nil {
			pe = &PanicError{Value: v, Stack: debug.Stack(), fn: fn}
		}
	}()
	_ = err.Error()
	return nil
}

// classified classifies err, knowing what the classifier cannot: whether the
// caller's context ended or the run was halted.
func (r *run) classified(err error) *Error {
	if r.runCtx.Err() != nil {
		return r.stopError()
	}
	return r.readAnswer(err)
}

// readAnswer is classified for a run that has not stopped: err's class by
// the run's classifier (a panic of it is the request's failure), a
// cancellation read as the transport's own.
func (r *run) readAnswer(err error) *Error {
	var e *Error
	if perr := recovered(func() error { e = describe(err, r.cfg.classify); return nil }); perr != nil {
		e = perr.(*Error)
		e.Err.(*PanicError).fn = "classifier"
	}
	if e.Class == ClassCanceled {
		// The caller's context is alive, so the transport canceled the
		// request on its own: worth another try.
		e = &Error{Class: ClassServer, GRPCCode: e.GRPCCode, StatusCode: e.StatusCode, Err: e.Err}
	}
	return e
}

// answerOf returns what a request that failed with err is counted and
// reported as, when e is what classified made of err (what its records
// fail with). That is e, unless e is the error that stopped the run while
// the request was in flight: another request's answer (a 401, a spent
// quota), which the index did not give this one. A request the stop cut
// off (its error a cancellation, or the stop itself, which net/http
// returns as a canceled request's error) then counts as canceled, as one
// cut off by the caller's context does; one the index answered anyway
// counts as that answer.
func (r *run) answerOf(err error, e *Error) *Error {
	if e.Class == ClassCanceled || e != asError(context.Cause(r.runCtx)) {
		return e // its own answer, or a cancel: counted as its records fail
	}
	var stop *stopCause
	if Classify(err) == ClassCanceled || errors.As(err, &stop) { // the library's rule: a caller's classifier cannot say "cut off"
		return &Error{Class: ClassCanceled, Err: fmt.Errorf("%w: %w", errCutOff, err)}
	}
	return r.readAnswer(err)
}

// errCutOff is the cause of a request counted as canceled because the run
// stopped for another request's answer while it was in flight.
var errCutOff = errors.New("cut off unanswered: the run stopped")

// mayHaveLanded reports whether a request that failed with err may have
// written its records anyway: it reached the index, or may have, and no
// answer said it was refused. A request cut off by the run's stop was in
// flight, so it may have landed; one that could not connect cannot have.
// e is what classified made of err.
func (r *run) mayHaveLanded(err error, e *Error) bool {
	if r.runCtx.Err() != nil {
		return !neverSent(err) // cut off in flight, whatever e says of the stop
	}
	switch e.Class {
	case ClassTimeout, ClassServer, ClassCanceled:
		return !neverSent(err)
	}
	return false
}
