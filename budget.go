package upsert

import (
	"math"
	"time"
)

// retryBudget keeps retries a small share of the traffic, so that an index
// in trouble does not get several times the load it can take: every
// successful request earns a fraction of a retry, and the budget also
// refills slowly with time so that it can never stall for good. A retry
// that finds the budget empty waits; it is never dropped. It is a pure
// controller, held by the lane under its mutex.
type retryBudget struct {
	tokens  float64
	updated time.Time
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
	// Rounded up: a wait of 0 would find the budget as short again.
	return false, time.Duration(math.Ceil((1 - b.tokens) / budgetPerSecond * float64(time.Second)))
}

// success earns a fraction of a retry. It reports whether a retry may go
// now.
func (b *retryBudget) success(now time.Time) bool {
	b.refill(now)
	b.tokens = min(budgetMax, b.tokens+budgetPerSuccess)
	return b.tokens >= 1
}

func (b *retryBudget) refill(now time.Time) {
	if dt := now.Sub(b.updated); dt > 0 {
		b.tokens = min(budgetMax, b.tokens+dt.Seconds()*budgetPerSecond)
		b.updated = now
	}
}
