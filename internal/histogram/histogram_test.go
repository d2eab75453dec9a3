package histogram

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestEveryValueFallsInABucketThatHoldsIt(t *testing.T) {
	for _, us := range []int64{0, 1, 31, 32, 33, 63, 64, 100, 1000, 123_456, 1 << 40} {
		i := bucketOf(us)
		assert.LessOrEqual(t, us, upperEdge(i), "%d µs", us)
		if i > 0 {
			assert.Greater(t, us, upperEdge(i-1), "%d µs is above the previous bucket", us)
		}
	}
}

func TestQuantilesAreWithinThePrecision(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var h Histogram
	var samples []time.Duration
	for range 100_000 {
		d := time.Duration(rng.ExpFloat64() * float64(20*time.Millisecond))
		samples = append(samples, d)
		h.Record(d)
	}
	slices.Sort(samples)
	for _, q := range []float64{0.5, 0.95, 0.99} {
		exact := samples[int(q*float64(len(samples)))-1]
		got := h.Quantile(q)
		assert.InEpsilon(t, float64(exact), float64(got), 0.05, "p%v", q*100)
	}
	assert.InEpsilon(t, float64(20*time.Millisecond), float64(h.Mean()), 0.05)
	assert.Equal(t, samples[len(samples)-1].Truncate(time.Microsecond), h.Max())
}

func TestEmptyHistogramAnswersZero(t *testing.T) {
	var h Histogram
	assert.Zero(t, h.Quantile(0.99))
	assert.Zero(t, h.Mean())
	assert.Zero(t, h.Count())
}

func TestConcurrentRecordsAreAllCounted(t *testing.T) {
	var h Histogram
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 1000 {
				h.Record(time.Duration(i) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(8000), h.Count())
	assert.Equal(t, 999*time.Microsecond, h.Max())
}

// A share outside 0 to 1 is the nearest end (NaN the largest), and a
// duration beyond the last bucket's edge (200 days) is answered as
// itself, not as that edge.
func TestQuantilesAtTheEnds(t *testing.T) {
	var h Histogram
	h.Record(time.Millisecond)
	h.Record(time.Second)
	year := 365 * 24 * time.Hour
	h.Record(year)
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{
		{-1, time.Millisecond},
		{0, time.Millisecond},
		{1, year},
		{2, year},
		{math.Inf(1), year},
		{math.Inf(-1), time.Millisecond},
		{math.NaN(), year},
	} {
		got := h.Quantile(tt.q)
		assert.InEpsilon(t, float64(tt.want), float64(got), 1.0/32, "q %v", tt.q)
	}
}
