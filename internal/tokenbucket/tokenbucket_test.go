package tokenbucket

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A bucket refills at its rate from the first time it is given, whatever
// that time is: a virtual clock may start at the zero time.Time
// (upserttest's WithClock asks only that it never go back), whose first
// interval's refill, or the repayment of a debt taken at it, was lost.
func TestABucketRefillsAtItsRateFromTheFirstTimeGiven(t *testing.T) {
	for name, t0 := range map[string]time.Time{
		"the zero time": {},
		"a wall time":   time.Unix(1_700_000_000, 0),
	} {
		t.Run(name, func(t *testing.T) {
			b := New(10, 10)
			assert.True(t, b.Has(t0, 10), "a new bucket is full")
			b.Take(t0, 10)
			assert.False(t, b.Has(t0.Add(500*time.Millisecond), 10), "half refilled")
			assert.True(t, b.Has(t0.Add(time.Second), 10), "refilled after a second")

			b = New(100, 10)
			b.Take(t0, 20) // admitted whole, 10 in debt
			assert.False(t, b.Has(t0.Add(100*time.Millisecond), 10), "the debt repaid, nothing more")
			assert.True(t, b.Has(t0.Add(200*time.Millisecond), 10), "the debt and the burst refilled")
		})
	}
}

// Time that goes back or stands still adds nothing, and the refill stops
// at the burst.
func TestABucketNeitherRefillsBackwardsNorPastItsBurst(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	b := New(10, 10)
	b.Take(t0, 10)
	assert.False(t, b.Has(t0.Add(-time.Hour), 1), "time went back")
	assert.False(t, b.Has(t0, 1), "time stood still")
	assert.True(t, b.Has(t0.Add(time.Hour), 10))
	b.Take(t0.Add(time.Hour), 10)
	assert.False(t, b.Has(t0.Add(time.Hour), 1), "an hour refilled no more than the burst")
	assert.True(t, (*Bucket)(nil).Has(t0, 1<<30), "a nil bucket admits everything")
}
