package upserttest

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// jitterFactors returns the latency factors of requests 1 to n of a server
// with a latency of 100 ms and the given jitter, read from the latency
// function the server applies.
func jitterFactors(sigma float64, seed int64, n int) []float64 {
	cfg := defaultConfig()
	WithLatency(100*time.Millisecond, 0)(&cfg)
	WithLatencyJitter(sigma, seed)(&cfg)
	out := make([]float64, n)
	for seq := 1; seq <= n; seq++ {
		out[seq-1] = float64(cfg.writeLatency(1, 0, seq)) / float64(100*time.Millisecond)
	}
	return out
}

func TestLatencyJitter(t *testing.T) {
	const n = 200_000
	for _, sigma := range []float64{0.1, 0.5, 1} {
		t.Run(fmt.Sprintf("σ=%v: the mean stays the latency and the quantiles are lognormal's", sigma), func(t *testing.T) {
			f := jitterFactors(sigma, 7, n)
			mean := 0.0
			for _, x := range f {
				mean += x / n
			}
			// The standard error of the mean is sqrt((e^σ² − 1)/n): 0.003 for σ = 1.
			assert.InDelta(t, 1, mean, 0.015, "σ = %v", sigma)
			slices.Sort(f)
			assert.InEpsilon(t, math.Exp(-sigma*sigma/2), f[n/2], 0.02, "median, σ = %v", sigma)
			assert.InEpsilon(t, JitterQuantile(sigma, 0.99), f[n*99/100], 0.03, "p99, σ = %v", sigma)
			assert.InEpsilon(t, math.Exp(2.326*sigma-sigma*sigma/2), JitterQuantile(sigma, 0.99), 1e-3)
		})
	}
	t.Run("the factors depend on the seed and the request's Seq alone", func(t *testing.T) {
		a, b, other := jitterFactors(0.5, 7, 1000), jitterFactors(0.5, 7, 1000), jitterFactors(0.5, 8, 1000)
		assert.Equal(t, a, b)
		differ := 0
		for i := range a {
			if a[i] != other[i] {
				differ++
			}
		}
		assert.Greater(t, differ, 990, "another seed, other factors")
	})
	t.Run("σ = 0 is no jitter", func(t *testing.T) {
		for _, x := range jitterFactors(0, 7, 100) {
			require.Equal(t, 1.0, x)
		}
	})
	t.Run("it multiplies the whole latency, slowdown included", func(t *testing.T) {
		cfg := defaultConfig()
		WithLatency(10*time.Millisecond, time.Millisecond)(&cfg)
		WithSlowAbove(2, 3)(&cfg)
		WithLatencyJitter(0.5, 1)(&cfg)
		want := float64(3*(10*time.Millisecond+5*time.Millisecond)) * cfg.jitter.factor(42)
		assert.InDelta(t, want, float64(cfg.writeLatency(5, 0, 42)), 1)
	})
	t.Run("a nonsense σ panics", func(t *testing.T) {
		for _, sigma := range []float64{-0.1, math.NaN(), math.Inf(1)} {
			assert.Panics(t, func() { WithLatencyJitter(sigma, 1) }, "σ = %v", sigma)
		}
	})
}
