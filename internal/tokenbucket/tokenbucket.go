// Package tokenbucket is the admission token bucket of upserttest's
// capacity model. The limiter's simulations use it too, so that they meet
// the index the benchmarks and users' tests meet.
package tokenbucket

import "time"

// Bucket holds up to a burst of tokens and refills at a rate. A nil
// *Bucket admits everything. It is not safe for concurrent use.
//
// A request larger than the burst is admitted when the bucket is full and
// leaves it in debt, repaid by the refill before anything else is admitted,
// so that the bucket's rate is the capacity whatever the request sizes.
// Hand-written: golang.org/x/time/rate refuses any n above the burst
// (AllowN false, ReserveN not OK), and its AllowN takes the tokens where
// upserttest asks every bucket (Has) before charging any (Take).
type Bucket struct {
	rate   float64 // tokens per second
	burst  float64
	tokens float64 // may be negative: a debt
	last   time.Time
	begun  bool // last holds a time given (the zero time.Time is one a virtual clock may start at)
}

// New returns a full bucket of burst tokens refilling at rate tokens per
// second.
func New(rate float64, burst int) *Bucket {
	return &Bucket{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// refill adds the tokens earned since the last call, up to the burst.
func (b *Bucket) refill(now time.Time) {
	switch {
	case !b.begun:
		b.last, b.begun = now, true
	case now.After(b.last):
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
}

// Has reports whether a request of n units would be admitted at now.
func (b *Bucket) Has(now time.Time, n int) bool {
	if b == nil {
		return true
	}
	b.refill(now)
	return b.tokens >= min(float64(n), b.burst)
}

// Take charges n units; Has(now, n) was true just before.
func (b *Bucket) Take(now time.Time, n int) {
	if b == nil {
		return
	}
	b.refill(now)
	b.tokens -= float64(n)
}
