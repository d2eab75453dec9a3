// Package histogram records durations in fixed memory and answers
// quantiles within a few percent, for latency percentiles that must not
// keep every sample.
package histogram

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// subBits sets the precision: each power of two is cut into 2^subBits
// buckets, so a quantile is off by at most 1/2^subBits (about 3%).
const (
	subBits    = 5
	subBuckets = 1 << subBits
	// Durations are recorded in microseconds; 40 groups of a power of two
	// each, above the first 32 µs, reach beyond 200 days.
	powers     = 40
	numBuckets = powers * subBuckets
)

// Histogram counts durations. The zero value is ready to use and safe for
// concurrent use. Hand-written: HdrHistogram (hdrhistogram-go) needs a lock
// around Record and would add a dependency to the core for 60 lines.
type Histogram struct {
	counts [numBuckets]atomic.Int64
	total  atomic.Int64
	sum    atomic.Int64 // microseconds
	max    atomic.Int64 // microseconds
}

// Record adds one duration. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	us := max(d.Microseconds(), 0)
	h.counts[bucketOf(us)].Add(1)
	h.total.Add(1)
	h.sum.Add(us)
	for {
		m := h.max.Load()
		if us <= m || h.max.CompareAndSwap(m, us) {
			break
		}
	}
}

// Count returns how many durations were recorded.
func (h *Histogram) Count() int64 { return h.total.Load() }

// Mean returns the average duration, or 0 when empty.
func (h *Histogram) Mean() time.Duration {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load()/n) * time.Microsecond
}

// Max returns the largest duration recorded.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) * time.Microsecond }

// Quantile returns the duration below which a share q (0 to 1: below, the
// smallest; above, or NaN, the largest) of the samples fall, as the upper
// edge of its bucket, capped at Max (the last bucket's, beyond 200 days,
// is Max); 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	rank := int64(1)
	switch {
	case q >= 1 || math.IsNaN(q):
		rank = n
	case q > 0:
		rank = min(max(int64(math.Ceil(q*float64(n))), 1), n)
	}
	var seen int64
	for i := range numBuckets - 1 {
		seen += h.counts[i].Load()
		if seen >= rank {
			return min(time.Duration(upperEdge(i))*time.Microsecond, h.Max())
		}
	}
	return h.Max()
}

// bucketOf maps microseconds to a bucket: values below subBuckets get a
// bucket each; above, the power of two picks a group and the next subBits
// bits the bucket inside it.
func bucketOf(us int64) int {
	if us < subBuckets {
		return int(us)
	}
	p := bits.Len64(uint64(us)) - 1 // us is in [2^p, 2^(p+1))
	sub := int(us>>(p-subBits)) - subBuckets
	i := (p-subBits+1)*subBuckets + sub
	return min(i, numBuckets-1)
}

// upperEdge returns the largest value that falls in bucket i.
func upperEdge(i int) int64 {
	if i < subBuckets {
		return int64(i)
	}
	group := i/subBuckets - 1 // p - subBits
	sub := int64(i % subBuckets)
	p := group + subBits
	return (int64(subBuckets)+sub+1)<<(p-subBits) - 1
}
