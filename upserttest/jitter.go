package upserttest

import (
	"fmt"
	"math"
	"time"
)

// This file holds the latency jitter of a Server (WithLatencyJitter): a
// lognormal factor on each request's write latency.

// jitterConfig is the jitter of the write latency; the zero value is none.
type jitterConfig struct {
	sigma float64
	seed  int64
}

// WithLatencyJitter multiplies the write latency of each upsert request
// ([WithLatency], [WithByteLatency], [WithSlowAbove]) by a lognormal factor
//
//	exp(σZ − σ²/2), Z a standard normal,
//
// whose mean is 1: the mean latency stays what the other options say, and σ
// only widens the spread and the tail. The median is exp(−σ²/2) of the mean
// and the p99 exp(2.326σ − σ²/2): 0.88 and 2.83 times the mean for σ = 0.5,
// 0.61 and 6.21 times for σ = 1 (see [JitterQuantile]).
//
// Z is drawn from seed and the request's [Request.Seq] alone, as
// [ErrorRate] decides its requests, so a run is reproducible given the
// order of arrival, whatever the interleaving of concurrent requests.
// The default, and σ = 0, is no jitter. WithLatencyJitter panics if σ is
// negative, infinite or NaN.
func WithLatencyJitter(sigma float64, seed int64) Option {
	if !(sigma >= 0) || math.IsInf(sigma, 0) {
		panic(fmt.Sprintf("upserttest: WithLatencyJitter(%v): σ must be a finite number ≥ 0", sigma))
	}
	return func(c *config) { c.jitter = jitterConfig{sigma: sigma, seed: seed} }
}

// JitterQuantile returns the q-quantile (0 < q < 1) of the latency factor
// of [WithLatencyJitter] with the given σ: exp(σ·Φ⁻¹(q) − σ²/2), Φ the
// standard normal distribution function. JitterQuantile(σ, 0.99) is how
// much longer than the mean the slowest 1% of requests take at least.
func JitterQuantile(sigma, q float64) float64 {
	return math.Exp(sigma*normalQuantile(q) - sigma*sigma/2)
}

// normalQuantile is Φ⁻¹(q), the quantile of a standard normal.
func normalQuantile(q float64) float64 {
	return math.Sqrt2 * math.Erfinv(2*q-1)
}

// saltJitter keeps the jitter of a seed independent of the fault scripts
// made with the same seed.
const saltJitter = 0x6a09_e667_f3bc_c908

// factor is the latency factor of the request with the given Seq.
func (j jitterConfig) factor(seq int) float64 {
	if j.sigma == 0 {
		return 1
	}
	// Half a step above chance's [0, 1) grid keeps u in (0, 1), where
	// the quantile is finite.
	u := chance(j.seed, saltJitter, seq) + 0x1p-54
	return math.Exp(j.sigma*normalQuantile(u) - j.sigma*j.sigma/2)
}

// writeLatency is the time the write of the request with the given Seq,
// of n vectors and the given encoded size, takes once it holds a slot:
// the latency of the options, times the request's jitter.
func (c *config) writeLatency(n, bytes, seq int) time.Duration {
	d := c.latency(n, bytes)
	if c.jitter.sigma == 0 {
		return d
	}
	return time.Duration(min(float64(d)*c.jitter.factor(seq), 1<<62)) // 1<<62: far from overflow
}
