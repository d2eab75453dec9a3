package upsert

import (
	"errors"
	"time"
)

// breaker pauses every request of a namespace together when the index
// keeps failing (a run of server errors or timeouts with no success in
// between: an outage), instead of letting each batch retry on its own, and
// lets one probe request through at a time until one succeeds. It is a
// pure controller: the lane holds it under its mutex and wakes the
// requests waiting on it when a method reports a change. Hand-written:
// sony/gobreaker reads the clock itself (the limiter's simulation runs in
// virtual time), waits one fixed Timeout before a half-open probe (not
// every 100 ms, then longer), and has no "never answered" verdict.
type breaker struct {
	failures  int       // consecutive server failures, in the order their requests were sent
	firstSent time.Time // when the request of the first of those failures was sent
	answered  bool      // the index answered once: it is not dead or misconfigured
	// hostAnswered: the index answered a request of another lane of its
	// host, another namespace of the same index (the lane brings it in,
	// see lane.heardHost): a namespace first written during an outage is
	// not on a wrong host.
	hostAnswered bool
	// lastAnswered is when the latest request the index answered was sent.
	lastAnswered time.Time
	// closedAt is when the request was sent whose answer last closed it
	// after it had been open: an outage ended.
	closedAt time.Time
	// timedOut is how many records the request whose timeout was the last
	// failure carried (0: the last failure was no timeout): a timeout says
	// less about the index than a server error, and one of a batch less
	// than one of a single record (the batch may be too large for it).
	timedOut    int
	lastFailure time.Time // when the last failure was counted
	open        bool
	openedAt    time.Time
	nextProbe   time.Time
	probing     bool   // a probe request is in flight
	probes      uint64 // probes admitted: the one in flight is number probes
	// rechecking: the probe in flight went out once the verdict was no
	// longer borne out (borneOut: the lane sat idle, or the index answered
	// another namespace since): it, not the old verdict, decides whether
	// the index is still down.
	rechecking bool
	// hostOpen is how many breakers of the index host are open, this one
	// counted (the lane tells it before a probe is scheduled, see
	// lane.heardOpen; 0 for a lane without a host): the host's namespaces
	// share one breaker's pace of probes, each probing that many times
	// less often (schedule).
	hostOpen int
	// heardBack is the latest backAt of the host this breaker heard of
	// (hostBack): each recovery makes it probe at once only once.
	heardBack time.Time
	// hostBackAt is the latest backAt of the host this breaker knows of
	// (hostBack, hearHostBack): a failure before it no longer bears the
	// verdict out (borneOut).
	hostBackAt time.Time
	// failureScheduled: a failure of this writer scheduled the next probe,
	// not another writer's outage (heard): only then does the wait count
	// toward the verdict's life (borneOut).
	failureScheduled bool
	// heardOnly: the lane's outage opened this breaker (heard), and no
	// failure of this writer's has been counted since: its outage is the
	// lane's, dated from the lane's start, and ends with it (unheard).
	heardOnly bool
	// shared is what the writers of the lane in other processes know of
	// the outage, when the lane is shared (see heard).
	shared struct {
		openSince time.Time // when the first writer's breaker opened; zero: none open
		answered  bool      // the index answered some writer
	}
}

const (
	// breakerThreshold is how many failures in a row open the breaker.
	breakerThreshold = 5
	// probeEvery is the wait between probes for the first
	// probeFastFor of an outage, so that the end of a short outage is
	// noticed within a tenth of a second; after that the wait doubles up
	// to probeMax, so that a dead index gets a trickle of requests. The
	// pace is per index host: the namespaces of an index whose breakers
	// are open share it, each probing as many times less often as there
	// are (schedule), and all of them probe at once when one is answered
	// (hostBack), so that an index written through many namespaces gets
	// about one namespace's probes, and notices its end as soon.
	probeEvery   = 100 * time.Millisecond
	probeFastFor = 5 * time.Second
	probeMax     = 5 * time.Second
	// probeSpreadMax caps a namespace's wait between probes stretched by
	// the host's open breakers, so that each still tests the index itself
	// twice within outagePatience however many are open (beyond six, the
	// host gets more than one breaker's pace: one probe per namespace
	// every 30 s).
	probeSpreadMax = outagePatience / 2
	// outagePatience is how long requests wait out an outage: the
	// breaker open after the index had answered. Until then a server
	// error spends no retry of its batch: it tells about the outage,
	// which the breaker already knows of, not about the batch (probes
	// every 100 ms spent a batch's four retries in half a second, and a
	// 5-second outage failed eight batches of 1000 records that the
	// index took a few seconds later). After it, and at once when the
	// index never answered (a wrong host, a dead index), the breaker
	// gives up: requests other than its probes fail without being sent,
	// so that the run ends in seconds rather than after every batch has
	// spent its retries one probe at a time (hours, for a million
	// records, at one probe every 5 s). Probes still go out, and the
	// first success closes the breaker.
	outagePatience = time.Minute
)

// The errors of requests that the breaker failed without sending them.
var (
	errNeverAnswered = &Error{Class: ClassServer, Err: errors.New("not sent: the index has answered nothing but server errors (circuit breaker open)")}
	errOutageTooLong = &Error{Class: ClassServer, Err: errors.New("not sent: every request has failed (server errors or timeouts) for over a minute (circuit breaker open)")}
	// errIndexDown is added to the failure that spent a batch's last
	// retry when the breaker had given up on the index by then.
	errIndexDown = errors.New("the circuit breaker has given up on the index")
)

// admit reports whether a request may go now and whether it is the
// probe; when it may not, wait is how long until it may ask again.
func (b *breaker) admit(now time.Time) (ok, probe bool, wait time.Duration) {
	switch {
	case !b.open:
		return true, false, 0
	case b.probing:
		return false, false, probeMax
	case now.Before(b.nextProbe):
		return false, false, b.nextProbe.Sub(now)
	default:
		b.probing = true
		b.probes++
		b.rechecking = !b.borneOut(now)
		return true, true, 0
	}
}

// success takes an answer of the index to a request sent at sent, and
// closes the breaker: the index answers again. An answer to a request sent
// before the first of the failures counted says nothing of the index since
// (a request admitted before an outage may be answered during it, while
// every request sent then fails): it neither resets the count nor closes
// the breaker. It reports whether the breaker closed.
func (b *breaker) success(sent time.Time) (closed bool) {
	b.answered = true
	if sent.After(b.lastAnswered) {
		b.lastAnswered = sent
	}
	if b.failures > 0 && sent.Before(b.firstSent) {
		return false
	}
	b.failures = 0
	if !b.open {
		return false
	}
	b.open, b.probing, b.timedOut, b.heardOnly = false, false, 0, false // a later outage's probe is decided by its own failures
	b.closedAt = sent
	// The close ends the lane's shared outage too (the lane proposes it,
	// and the store ends it at the first close): a view read before that
	// lands is no close of another writer, and a new outage starts anew.
	b.shared.openSince = time.Time{}
	return true
}

// failure counts a server failure or a timeout of a request sent at sent;
// probe tells whether it was the probe, timedOut how many records the
// request carried when it timed out (0 for a server failure). It reports
// whether the next probe is scheduled (waiters should look again). A
// failure of a request sent before one the index answered says nothing of
// the index since (requests hung in a blip that time out later): it is not
// counted, as success ignores answers older than the failures.
func (b *breaker) failure(now, sent time.Time, probe bool, timedOut int) (rescheduled bool) {
	if !probe && sent.Before(b.lastAnswered) {
		return false
	}
	if b.failures == 0 || sent.Before(b.firstSent) {
		b.firstSent = sent
	}
	b.failures++
	b.timedOut, b.lastFailure, b.rechecking, b.heardOnly = timedOut, now, false, false
	if probe {
		b.probing = false
		b.schedule(now, b.probeWait(now))
		b.failureScheduled = true
		return true
	}
	if !b.open && b.failures >= breakerThreshold {
		b.open, b.openedAt = true, now
		b.schedule(now, probeEvery)
		b.failureScheduled = true
	}
	return false
}

// young reports whether the breaker has been open for less than
// outagePatience, after the index had answered.
func (b *breaker) young(now time.Time) bool {
	return b.open && b.everAnswered() && now.Sub(b.outageStart()) < outagePatience
}

// followsFailure reports whether the failure just counted follows another
// in a run of failures (no success between) that is waited out as an
// outage's: the index had answered, and the run is younger than
// outagePatience.
func (b *breaker) followsFailure(now time.Time) bool {
	return b.failures > 1 && b.everAnswered() && now.Sub(b.firstSent) < outagePatience
}

// everAnswered reports whether the index answered this writer, in this
// namespace or another, or any writer of a shared lane: one that never
// got an answer itself must not call a live index dead.
func (b *breaker) everAnswered() bool { return b.answered || b.hostAnswered || b.shared.answered }

// outageStart is when the outage began: when this breaker opened, or the
// first breaker of a shared lane, whichever is earlier, so that a writer
// that joins during an outage does not wait a fresh outagePatience.
func (b *breaker) outageStart() time.Time {
	if s := b.shared.openSince; !s.IsZero() && s.Before(b.openedAt) {
		return s
	}
	return b.openedAt
}

// heard takes what the lane's other writers know of the outage. An outage
// that another writer's breaker opened opens this one too (it probes
// within probeEvery rather than spend five failures finding out). It
// reports whether the breaker opened. A breaker that only heard the
// outage (heardOnly) is dated from the lane's outage, whichever it is
// now: one that replaced the outage it heard (closed, then opened anew
// between two views) is not counted from the start of the one before.
func (b *breaker) heard(now, openSince time.Time, answered bool) (opened bool) {
	b.shared.openSince, b.shared.answered = openSince, answered
	if openSince.IsZero() {
		return false
	}
	if b.open {
		if b.heardOnly {
			b.openedAt = openSince
		}
		return false
	}
	b.open, b.openedAt, b.heardOnly = true, openSince, true
	b.schedule(now, probeEvery)
	b.failureScheduled = false
	return true
}

// unheard closes a breaker that only the lane's outage opened (heardOnly:
// no failure of this writer's was counted since) once the lane holds no
// outage: the index answered another writer, or no writer in the outage
// is left to see it go on (it may have ended unseen, minutes ago). The
// writer then goes on as one that joins now: its own failures open its
// breaker, and date its outage, anew, rather than count from a start
// that nobody in the lane still sees (its first failed probe would give
// up on a two-minute-old outage that a dead writer saw). A probe in
// flight counts as a failure of a closed breaker. It reports whether the
// breaker closed.
func (b *breaker) unheard() bool {
	if !b.open || !b.heardOnly {
		return false
	}
	b.open, b.probing, b.heardOnly = false, false, false
	return true
}

// hostBack takes backAt, when the latest request was sent that another
// namespace of the index host got an answer to (closing its breaker):
// a breaker that opened before then, with no probe in flight, probes at
// once rather than after its share of the host's pace (schedule), once
// per such answer. It reports whether the probe may go now.
func (b *breaker) hostBack(backAt, now time.Time) (probeNow bool) {
	b.hearHostBack(backAt)
	if !backAt.After(b.heardBack) {
		return false
	}
	b.heardBack = backAt
	if !b.open || b.probing || !b.openedAt.Before(backAt) || !now.Before(b.nextProbe) {
		return false
	}
	b.nextProbe = now
	return true
}

// hearHostBack takes backAt, as hostBack does, for the verdict only: it
// schedules no probe.
func (b *breaker) hearHostBack(backAt time.Time) {
	if backAt.After(b.hostBackAt) {
		b.hostBackAt = backAt
	}
}

// schedule sets the next probe wait after now, times the host's open
// breakers (hostOpen), so that they probe together at about one
// breaker's pace, up to probeSpreadMax. A verdict lasts until the next
// probe is due and probeMax more (borneOut), unless the index answers
// another namespace of the host meanwhile.
func (b *breaker) schedule(now time.Time, wait time.Duration) {
	if b.hostOpen > 1 {
		wait = min(wait*time.Duration(b.hostOpen), max(wait, probeSpreadMax))
	}
	b.nextProbe = now.Add(wait)
}

// answeredSince reports whether the index answered a request this writer
// sent after t: an outage that began at t is over for it.
func (b *breaker) answeredSince(t time.Time) bool { return b.lastAnswered.After(t) }

// gaveUp returns the error that fails a request without sending it when
// the breaker is open and no longer waits the outage out (see
// outagePatience), or nil. An index that never answered is given up on at
// once, unless its last failure was a timeout: requests too large for an
// index that answers small ones in time time out from the first, and
// their halves get through; a host that drops every packet (all
// timeouts) is given up on after outagePatience, as an outage is, once a
// request of one record timed out too (probesAlone): until then the
// timeouts may be of batches too large for an index that is up. A
// verdict that no failure bears out is stale (borneOut: the lane sat
// idle, as a Limiter does between calls, or the index answered another
// namespace of its host since): requests wait for the next probe, which
// decides again.
func (b *breaker) gaveUp(now time.Time) *Error {
	switch {
	case !b.current(now):
		return nil
	case !b.everAnswered() && b.timedOut == 0 && b.failures > 0:
		// failures > 0: this writer's own requests failed; an outage
		// heard of from other writers alone fails nothing at once.
		return errNeverAnswered
	case now.Sub(b.outageStart()) >= outagePatience && b.timedOut <= 1:
		return errOutageTooLong
	default:
		return nil
	}
}

// probesAlone reports whether the probe goes as one record: the outage
// has outlasted outagePatience on timeouts (see gaveUp).
func (b *breaker) probesAlone(now time.Time) bool {
	return b.timedOut > 0 && now.Sub(b.outageStart()) >= outagePatience
}

// current reports whether the breaker is open on a verdict that failures
// still bear out: not rechecking after the lane sat idle, the index having
// answered no other namespace of its host since the last failure (also
// while a probe is out), and borne out now (see gaveUp).
func (b *breaker) current(now time.Time) bool {
	return b.open && !b.rechecking && !b.hostBackAt.After(b.lastFailure) && (b.probing || b.borneOut(now))
}

// borneOut reports whether the last failure still bears the verdict out
// at now: the index has answered no request sent since, in this namespace
// (lastAnswered: a breaker opened by another writer's outage) or another
// of the host (hostBackAt), and now is within two probe periods
// (2×probeMax) of it, or within probeMax of the next probe when a failure
// of this writer scheduled it, whichever is later: a lane idle longer no
// longer knows.
func (b *breaker) borneOut(now time.Time) bool {
	if b.lastFailure.IsZero() || b.hostBackAt.After(b.lastFailure) || b.lastAnswered.After(b.lastFailure) {
		return false
	}
	lasts := 2 * probeMax
	if b.failureScheduled {
		lasts = max(lasts, b.nextProbe.Sub(b.lastFailure)+probeMax)
	}
	return now.Sub(b.lastFailure) <= lasts
}

// abandon releases the probe slot of a probe that ended without an answer
// about the index (the caller stopped, or a non-server error). It reports
// whether the slot was released.
func (b *breaker) abandon(probe bool) bool {
	if probe && b.probing {
		b.probing = false
		return true
	}
	return false
}

func (b *breaker) probeWait(now time.Time) time.Duration {
	over := now.Sub(b.outageStart()) - probeFastFor
	if over <= 0 {
		return probeEvery
	}
	wait := probeEvery
	for d := time.Duration(0); d < over && wait < probeMax; d += wait {
		wait *= 2
	}
	return min(wait, probeMax)
}
