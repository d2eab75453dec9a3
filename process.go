package upsert

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// part is a batch or a piece of one, with what its records went through.
type part struct {
	items      []item
	retries    [numClasses]int // retries spent, per class, by this part and its ancestors
	attempts   int             // requests that carried these records
	ambiguous  bool            // some request ended without a clear answer
	trial      uint64          // the trial of a batch size the batch is of, until first sent (lane.nextBatch)
	overMinute bool            // its last request was refused on a per-minute tokens limit
	// afterTimeout: a piece of a batch whose request timed out, so that
	// its own timeout says the size is too large (batchControl.answer).
	afterTimeout bool
	free         bool          // its last failure spends no retry (see failureNote)
	failures     batchFailures // what tells whether the next failure does
	// resend is the retry this part's next request makes, counted and
	// told once the lane admits it (see resending).
	resend *RetryEvent
}

// child is a piece of p, items, with what p went through; it probes no
// size, and is no half of a timeout unless the split says so.
func (p *part) child(items []item) *part {
	c := *p
	c.items, c.trial, c.resend, c.overMinute, c.afterTimeout = items, 0, nil, false, false
	return &c
}

// process sends one batch until each of its records has landed or failed.
// Halves of a split are sent one after the other, first half first (but
// see goesBehind).
func (r *run) process(worker int, rt *route, b batch) {
	defer r.finishBatch(worker, rt)
	defer b.turn.leave() // when the run stopped before its first attempt
	stack := []*part{{items: b.items, trial: b.trial}}
	retries, sent := 0, false
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if r.runCtx.Err() != nil {
			dropTrial(rt, p)
			r.failPart(p, r.stopError())
			continue
		}
		if pieces := r.recutToLane(rt, p); pieces != nil {
			stack = append(stack, pieces...)
			continue
		}
		resending, attempts := p.resend != nil, p.attempts
		e := r.attempt(worker, rt, p, b.turn)
		if resending && p.resend == nil {
			retries++
		}
		sent = sent || p.attempts > attempts
		switch e {
		case errRecut:
			stack = append(stack, p) // cut to the lane's limit above
			continue
		case errProbeCut:
			stack = append(stack, cutPart(p, [][]item{p.items[:1:1], p.items[1:]})...)
			continue
		}
		if e == nil {
			r.shape.learn(p.items)
			r.stats.upserted.Add(int64(len(p.items)))
			r.settle(p.items, outcome{landed: true, final: true, ambiguous: p.ambiguous})
			r.maybeProgress() // after counting, so that the report has this request's records
			continue
		}
		r.maybeProgress()
		p.overMinute = e.Class == ClassRateLimited && e.Limit == LimitEmbedTokens
		next := r.afterFailure(worker, rt, p, e)
		stack = append(stack, next...)
		if goesBehind(p, e, next) && len(stack) > 1 {
			last := len(stack) - 1
			stack[last-1], stack[last] = stack[last], stack[last-1]
		}
	}
	if sent { // a batch failed unsent is in no request's retries
		r.stats.batchDone(retries)
	}
}

// goesBehind reports whether p, resent as next, goes behind the next piece
// of its batch: a record alone that timed out. The piece's answer tells
// whether the index is up (and the record's timeouts its own:
// batchFailures.outages), and a record that keeps timing out is not the
// breaker's every probe while its batch's others wait.
func goesBehind(p *part, e *Error, next []*part) bool {
	return e.Class == ClassTimeout && len(p.items) == 1 && len(next) == 1 && next[0] == p
}

// dropTrial tells p's lane that p, a trial batch of its size, leaves
// unsent (lane.trialUnsent); nothing for any other part.
func dropTrial(rt *route, p *part) {
	if p.trial != 0 {
		rt.lane.trialUnsent(p.trial)
		p.trial = 0
	}
}

// recutToLane cuts p to the most records the lane lets a request carry
// now, and the per-minute gate (minuteGate.fits), returning the pieces in
// the order they go on the stack (last piece first), or nil when p fits or
// the caller pinned the batch size.
func (r *run) recutToLane(rt *route, p *part) []*part {
	if r.cfg.batchSize != 0 || len(p.items) == 0 {
		return nil
	}
	var pieces [][]item
	switch limit, fit := rt.lane.sendLimit(), r.minute.fits(p.items, p.overMinute); {
	case fit < min(limit, len(p.items)):
		// By tokens, not by count: the records that fit go first, and the
		// rest is cut again when its turn comes. A size trial above the
		// cut is over (sendLimit ends one the lane cuts).
		pieces = [][]item{p.items[:fit:fit], p.items[fit:]}
		rt.lane.endTrialOver(fit)
	case len(p.items) > limit:
		pieces = recut(p.items, limit)
	default:
		return nil
	}
	return cutPart(p, pieces)
}

// cutPart returns the parts of p's pieces, in the order they go on the
// stack (last piece first); the piece sent first resends the batch.
func cutPart(p *part, pieces [][]item) []*part {
	parts := make([]*part, 0, len(pieces))
	for i := len(pieces) - 1; i >= 0; i-- {
		parts = append(parts, p.child(pieces[i]))
	}
	parts[len(parts)-1].resend = p.resend
	return parts
}

// afterFailure decides what becomes of p after its attempt failed with e:
// it fails p, or returns the parts to send next (its halves, or p itself
// after its backoff). A line is logged per failed request (attempt logs a
// refusal); batches failed unsent are counted, not logged, but for the
// first the breaker fails in a namespace in each outage.
func (r *run) afterFailure(worker int, rt *route, p *part, e *Error) []*part {
	dropTrial(rt, p) // failed before the lane admitted it
	c := e.Class
	switch {
	case stopsOneNamespace(e): // attempt logged the index's refusal, or it came before
		r.failPart(p, e)
	case c == ClassDenied, c == ClassQuotaExceeded: // attempt logged the index's refusal
		r.failPart(p, e)
		r.halt(e)
	case c == ClassCanceled:
		r.failPart(p, e)
	case isPanic(e):
		r.log(slog.LevelError, "send function panicked; batch failed", worker, rt, p, e)
		r.failPart(p, e) // a retry would panic again
	case e == errNeverAnswered || e == errOutageTooLong:
		if opened := rt.lane.openedAt().UnixNano(); rt.downLogged.Swap(opened) != opened {
			r.log(slog.LevelError, "index down; the namespace's batches fail unsent", worker, rt, p, e)
		}
		r.failPart(p, rt.withLastFailure(e))
	case len(p.items) > 1 && (c == ClassTimeout || c == ClassTooLarge || c == ClassInvalid):
		r.stats.splits.Add(1)
		r.log(slog.LevelWarn, "splitting batch", worker, rt, p, e)
		r.cfg.observers.retry(RetryEvent{Context: r.obsCtx, Namespace: namespaceKey(rt.namespace), Worker: worker, Records: len(p.items), Attempt: p.attempts, Split: true, Err: e})
		a, b := split(p.items)
		first, second := p.child(a), p.child(b)
		first.afterTimeout, second.afterTimeout = c == ClassTimeout, c == ClassTimeout
		return []*part{second, first}
	case p.retries[c] < r.cfg.retry.maxRetries[c] || p.free && r.cfg.retry.maxRetries[c] > 0:
		if r.retryAfterBackoff(worker, rt, p, e) {
			return []*part{p}
		}
		return nil // not resent: the run stopped during the backoff
	default:
		r.log(slog.LevelError, "giving up on batch", worker, rt, p, e)
		r.failPart(p, downOr(rt, e))
	}
	return nil
}

// downOr returns e, the failure that spent a batch's last retry, marked
// as the index's when the breaker has given up on the index by then: the
// batch whose failures tripped it (a wrong host) failed as the index did,
// not for a cause of its own, and a resumed run sends it (see Checkpoint).
func downOr(rt *route, e *Error) *Error {
	if (e.Class != ClassServer && e.Class != ClassTimeout) || !rt.lane.gaveUp() {
		return e
	}
	marked := *e
	marked.Err = errIndexDown
	if e.Err != nil { // an UpsertFunc's *Error may carry none
		marked.Err = fmt.Errorf("%w; %w", e.Err, errIndexDown)
	}
	return &marked
}

// retryAfterBackoff spends a retry of p's class (none when p.free),
// waits out its backoff and the lane's retry budget, and reports whether
// p is to be sent again (its resend pending: see resending); when the
// run stops meanwhile, p fails.
func (r *run) retryAfterBackoff(worker int, rt *route, p *part, e *Error) bool {
	c := e.Class
	wait := r.backoff(c, p.failures.backoffStep(c, p.retries[c]), e.RetryAfter)
	if !p.free {
		p.retries[c]++
	}
	r.log(slog.LevelWarn, "retrying batch", worker, rt, p, e, slog.Duration("backoff", wait))
	wake := r.restWaker()
	r.rest(rt, +1)
	r.wakeResting() // the others may have landed since p's refusal
	woke, err := r.sleepBackoff(wait, e.RetryAfter, wake)
	p.failures.woke = woke
	if err == nil {
		err = rt.lane.awaitRetry(r.runCtx)
	}
	r.rest(rt, -1)
	if err != nil {
		r.failPart(p, r.stopError())
		return false
	}
	p.resend = &RetryEvent{Context: r.obsCtx, Namespace: namespaceKey(rt.namespace), Worker: worker, Records: len(p.items), Attempt: p.attempts, Wait: wait, Err: e}
	return true
}

// resending counts and tells p's pending retry, now that the lane admitted
// its request: Stats.Retries and the observers' Retry count resends, and a
// run that stops while the retry waits for its turn, its rate or a slot
// resends nothing.
func (r *run) resending(p *part) {
	if p.resend == nil {
		return
	}
	r.stats.retry(p.resend.Err.Class)
	r.cfg.observers.retry(*p.resend)
	p.resend = nil
}

// sleepBackoff waits out a backoff of wait, or until wake is closed once
// the index's retryAfter (part of wait) has passed, and reports whether
// wake ended it.
func (r *run) sleepBackoff(wait, retryAfter time.Duration, wake <-chan struct{}) (woke bool, err error) {
	if retryAfter > 0 {
		if err := r.cfg.clock.Sleep(r.runCtx, retryAfter); err != nil {
			return false, err
		}
		wait -= retryAfter
	}
	err = sleepOrWake(r.runCtx, r.cfg.clock, wait, wake)
	if errors.Is(err, errWoken) {
		return true, nil
	}
	return false, err
}

// isPanic reports whether e is a recovered panic (see [PanicError]).
// errCallerCode is what the controllers are told of a request whose send
// function panicked: nothing of the index, as for a canceled request.
var errCallerCode = &Error{Class: ClassCanceled, Err: errors.New("the send function panicked")}

func isPanic(e *Error) bool {
	_, ok := e.Err.(*PanicError)
	return ok
}

// backoff is the wait before a retry of class c at step n of its backoff:
// the policy's, but never shorter than the index asked (retryAfter).
func (r *run) backoff(c Class, n int, retryAfter time.Duration) time.Duration {
	b := r.cfg.retry.backoffFor(c, r.cfg.rand)
	b.n = n
	return max(b.NextBackOff(), retryAfter)
}

// log logs what became of p's request, unless the logger drops level.
func (r *run) log(level slog.Level, msg string, worker int, rt *route, p *part, e *Error, extra ...slog.Attr) {
	if !r.cfg.logger.Enabled(r.ctx, level) {
		return
	}
	attrs := append([]slog.Attr{
		slog.String("namespace", namespaceKey(rt.namespace)), // "" for the default one, as in events
		slog.Int("batch_size", len(p.items)),
		slog.Int("worker", worker),
		slog.Int("attempt", p.attempts),
		slog.String("class", e.Class.String()),
		slog.String("code", e.Code()),
		slog.String("error", errMessage(e)),
	}, extra...)
	if len(p.items) == 1 {
		// A batch bisected down to one record: which one (an id, never
		// its values or metadata).
		attrs = append(attrs, slog.String("id", shortID(p.items[0].id)))
	}
	r.cfg.logger.LogAttrs(r.ctx, level, msg, attrs...)
}

// errMessage is the underlying error's text without the class prefix that
// the class attribute already carries.
func errMessage(e *Error) string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return e.Class.String()
}
