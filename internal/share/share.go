// Package share states what the writers of one namespace share across
// processes, whatever holds it (package upsertredis holds it in Redis):
// the [Store] and [Member] interfaces a lane of the limiter talks to, the
// [View] it reads, and the pure rule that turns the lane's total rate into
// one writer's part of it ([View.Allocation]).
//
// What moves to shared state is the namespace's admitted rate, as the
// anchors of its curve (the rate and level of the last 429 episode, when it
// was cut, how long the climb back takes), the 429 episodes themselves
// (counted once for all writers), a Retry-After, the circuit breaker's
// verdict, and who is writing. Everything else stays with each writer:
// concurrency, batch sizes, retries, and the enforcement of its own part of
// the rate, so that the hot path never waits for the store. See
// docs/redis-sharing.md.
//
// The package holds no state and imports only the standard library, so that
// the core package can import it.
package share

import (
	"context"
	"errors"
	"time"
)

// Lane names what the writers share: one namespace of one index.
type Lane struct {
	// Host is the index's host, as the SDK was given it.
	Host string
	// Namespace is the namespace, "" and "__default__" being distinct
	// strings here (the caller normalises them if it wants them shared).
	Namespace string
}

// Store coordinates the writers of every lane. Implementations are safe for
// concurrent use.
type Store interface {
	// Join registers a writer of lane and keeps its view fresh until
	// Leave. It tries one exchange with the store before it returns
	// (bounded by the store's timeout, and by ctx), so that a writer that
	// joins a running lane starts from what the others learned; it never
	// fails because the store is unreachable: the member is then detached
	// (its View's Shared is false) until the store answers again.
	Join(ctx context.Context, lane Lane) Member
}

// Member is one writer's membership of a lane. View, Accepted and Demand do
// no I/O and never block: they are for the hot path. Cut and Breaker make
// one round trip to the store, bounded by its timeout; call them without
// holding a lock that requests wait for.
type Member interface {
	// View returns the latest view of the lane.
	View() View
	// Changed returns a channel that is closed at the next change of the
	// view that a writer must act on: a cut by any writer, a Retry-After,
	// the breaker opening or closing, the writers or their shares, the
	// store going away or coming back.
	Changed() <-chan struct{}
	// Accepted counts n records the index accepted from this writer. They
	// are reported at the next exchange with the store, so that every
	// writer can measure what the index accepted from all of them.
	Accepted(n int)
	// Demand sets how many records per second this writer could send now:
	// +Inf (the default) while its part of the rate holds it back, else
	// what it sends. The store splits the rate by demand (see
	// [View.Allocation]).
	Demand(perSecond float64)
	// Cut proposes the decision of a 429 episode. The store applies it
	// unless the refused request belongs to an episode already cut: it was
	// sent under an older view (c.Seen below the lane's Epoch), or less
	// than c.MinGap after the last cut; a proposal with c.Refusals above
	// 1 only when it completes that count. It returns the lane's view after
	// the call and whether c was applied; an error (matching
	// [ErrUnavailable]) means the store did not answer, and the writer
	// decides alone.
	Cut(ctx context.Context, c Cut) (v View, applied bool, err error)
	// Breaker reports that this writer's circuit breaker opened (open is
	// true: the lane's outage starts now unless it had already started)
	// or closed (the index answered: the outage is over for every
	// writer). A writer that reported it open is in the outage for
	// [OutageLapse] from its latest report, while it is a member; the
	// outage lasts while one of its writers is in it: once they all left,
	// died or stopped failing (idle), nobody still sees it (the index may
	// have answered since, unseen), and it ends without the index marked
	// answered. A writer that fails in an outage it did not open reports
	// so with InOutage. An outage whose writers the store does not know
	// (its state rebuilt) lasts until a close. An error matches
	// [ErrUnavailable].
	Breaker(ctx context.Context, open bool) (View, error)
	// InOutage reports that this writer, its breaker open, failed in the
	// lane's outage that began at since (a View.OpenSince this member
	// gave): the store marks it in that outage, or renews its mark, as a
	// Breaker(true) would; but when the lane's outage is another by now,
	// or none (an answer closed it, or no writer in it was left), it does
	// nothing: one writer's failure does not open the lane's outage again
	// for the others. A writer whose breaker the lane's outage opened
	// reports at its own first failure in it, one whose breaker is open at
	// its first failure in an outage other than the one it reported itself
	// in (View.OpenSince tells them apart), and at a failure once its last
	// report is [OutageRenewal] old. An error matches [ErrUnavailable].
	InOutage(ctx context.Context, since time.Time) (View, error)
	// Leave ends the membership; when the last writer of a lane leaves,
	// the lane's shared state is dropped, so that a writer that starts
	// alone later starts with nothing learned. Leave is idempotent.
	Leave(ctx context.Context) error
}

// How long a writer's report that its breaker is open keeps it in the
// lane's outage (see [Member.Breaker]).
const (
	// OutageLapse is how long after a writer's latest report the store
	// keeps it in the lane's outage: it exceeds OutageRenewal plus the
	// longest a failing writer goes between failures (a probe wait
	// stretched to 30 s by the host's open breakers, then a probe that
	// hangs until its 30-s timeout), with room for a slow round trip, so
	// that a writer still failing is never dropped; an idle one is, and an
	// outage nobody still fails in ends.
	OutageLapse = 2 * time.Minute
	// OutageRenewal is how old a writer's last report is when its next
	// failure in the lane's outage reports it again: a quarter of
	// OutageLapse, so that a writer failing at every probe makes one
	// round trip for it per OutageRenewal, not one per failure.
	OutageRenewal = OutageLapse / 4
)

// ErrUnavailable is matched by the errors of a Member whose store did not
// answer in time (down, slow, unreachable), or was not tried because an
// earlier call failed moments ago. The writer then decides alone.
var ErrUnavailable = errors.New("shared state unavailable")

// View is what a writer knows of its lane. Rates are for all the lane's
// writers together, in records per second but for Rate and Level (see
// Unit); times are on the local clock (the store's clock is mapped to it,
// so hosts need not agree on the time).
type View struct {
	// Shared is false while the store does not answer: the writer decides
	// alone, from its own observations, starting from this view.
	Shared bool
	// Epoch counts the 429 episodes cut in the lane, by any writer; 0
	// before the first.
	Epoch uint64
	// Unit is what Rate and Level count: the rate the last cut's 429
	// named (Pinecone names requests or upsert size).
	Unit Unit
	// Rate is the lane's rate set by the last cut, in Units per second;
	// +Inf before the first.
	Rate float64
	// Level is the rate that the last cut's climb heads back to.
	Level float64
	// Recovery is how long the climb back to Level takes.
	Recovery time.Duration
	// CutAt is when the last cut was made; zero before the first.
	CutAt time.Time
	// PausedUntil is the end of the last Retry-After; zero when none.
	PausedUntil time.Time
	// Accepted is how many records all writers reported accepted since
	// AcceptedSince (as of each one's last exchange with the store): the
	// last cut, or when the store rebuilt the lane's state after losing
	// it. Accepted over the time since is what the index took from all
	// of them.
	Accepted      int64
	AcceptedSince time.Time
	// Recent is how many records all writers reported accepted over
	// RecentSpan, the span between two of this writer's exchanges about
	// a second apart, the later one its last: what the index accepts
	// now, where Accepted counts since the last cut (and, after a search,
	// the climb since). RecentSpan is zero before two exchanges.
	Recent     int64
	RecentSpan time.Duration
	// OpenSince is when the first writer's breaker opened in the
	// current outage; zero while no breaker is open, or once no writer
	// that reported its breaker open in it within OutageLapse is left
	// (see Member.Breaker).
	// It is the same time in every view of one outage: a different one
	// is another outage.
	OpenSince time.Time
	// Answered is true once the index has answered any writer.
	Answered bool
	// Writers is the number of live writers, this one included.
	Writers int
	// own is this writer's demand, sorted every writer's (see want).
	own    float64
	sorted []float64
}

// WithDemands returns v naming the writers' demands, this writer's first:
// for stores building a View.
func (v View) WithDemands(own float64, others []float64) View {
	v.own = want(own)
	v.sorted = sortDemands(append([]float64{own}, others...))
	v.Writers = len(v.sorted)
	return v
}

// Unit is what a lane's shared rate counts.
type Unit int

// The units of a lane's rate, one per limit a 429 may name.
const (
	UnitRecords  Unit = iota // records (vectors) per second
	UnitRequests             // requests per second
	UnitBytes                // bytes of requests per second
)

// Cut is a writer's proposal for a 429 episode: the decision its own
// controller made, in terms of the whole lane.
type Cut struct {
	// Seen is the Epoch of the view in force when the refused request was
	// sent.
	Seen uint64
	// Sent is when the refused request was sent; zero means now.
	Sent time.Time
	// MinGap is how long after a cut a request must have been sent to
	// start a new episode (a round trip, as the lane measures it: requests
	// sent sooner met the overshoot the cut answered).
	MinGap time.Duration
	// Unit, Rate, Level and Recovery are the proposed anchors of the
	// rate's curve (see View); a Recovery of 0 means no level was
	// measured: the rate searches up from Rate.
	Unit        Unit
	Rate, Level float64
	Recovery    time.Duration
	// RetryAfter, when positive, pauses every writer of the lane for that
	// long from the cut.
	RetryAfter time.Duration
	// Refusals, when above 1, makes the proposal a refusal that the
	// writer's own answers do not call an episode: the store counts it,
	// and cuts only when it is the Refusals-th of the lane's episode
	// within Window (the time the lane takes to give the answers the
	// writer's test counts). A writer sees its part of the lane's
	// answers, so its own count of refusals lags the lane's.
	Refusals int
	Window   time.Duration
}
