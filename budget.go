package upsert

import "time"

// retryBudget keeps retries a small share of the traffic, so that an index
// in trouble does not get several times the load it can take: every
// successful request earns a fraction of a retry, and the budget also
// refills slowly with time so that it can never stall for good. A retry
// that finds the budget empty waits; it is never dropped. Its state is
// guarded by the lane's mutex.
type retryBudget struct {
	tokens  float64
	updated time.Time
	changed chan struct{} // closed when tokens are added
}

const (
	// budgetPerSuccess is the retries earned by a successful request: in
	// the long run retries are at most a fifth of the requests.
	budgetPerSuccess = 0.2
	// budgetPerSecond refills the budget when nothing succeeds. It is not
	// what protects a dead index (the breaker holds every request back
	// then); it keeps a run whose traffic is all retries (every batch
	// waiting on the budget, so nothing succeeds to earn more) from
	// crawling at one request a second through an index that fails a
	// third of the time.
	budgetPerSecond = 10.0
	// budgetMax is the most retries that can be saved up, and the budget a
	// lane starts with.
	budgetMax = 50.0
)

func newRetryBudget(now time.Time) retryBudget {
	return retryBudget{tokens: budgetMax, updated: now}
}

// take spends one retry if the budget allows it, or returns how long
// until time alone refills one.
func (b *retryBudget) take(now time.Time) (ok bool, wait time.Duration) {
	b.refill(now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / budgetPerSecond * float64(time.Second))
}

// success earns a fraction of a retry.
func (b *retryBudget) success(now time.Time) {
	b.refill(now)
	b.tokens = min(budgetMax, b.tokens+budgetPerSuccess)
	if b.tokens >= 1 && b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
}

func (b *retryBudget) refill(now time.Time) {
	if dt := now.Sub(b.updated); dt > 0 {
		b.tokens = min(budgetMax, b.tokens+dt.Seconds()*budgetPerSecond)
		b.updated = now
	}
}

// wake returns a channel closed when a success adds to the budget.
func (b *retryBudget) wake() <-chan struct{} {
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	return b.changed
}
