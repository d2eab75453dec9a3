package upserttest

import (
	"math"
	"time"
)

// This file holds the changes of an Index's run that keep the index:
// Scaled and Shortened; and RateScaled, which moves its vector bucket.

// Scaled returns ix with a run of f times its records (at least 1), its
// capacity changes at f times their times, so at the same shares of the
// run, and its vector burst at most a quarter of the run, as [DrawIndex]
// keeps it. The rest of the index is unchanged. Scaled panics unless f is
// a positive finite number.
func (ix Index) Scaled(f float64) Index {
	if !(f > 0) || math.IsInf(f, 0) {
		panic("upserttest: Index.Scaled: need a positive finite factor")
	}
	out := ix
	out.Records = max(1, int(math.Round(float64(ix.Records)*f)))
	out.Changes = make([]CapacityChange, len(ix.Changes))
	for i, ch := range ix.Changes {
		out.Changes[i] = CapacityChange{At: time.Duration(float64(ch.At) * f).Round(time.Millisecond), Factor: ch.Factor}
	}
	if out.VectorRate > 0 {
		out.VectorBurst = max(1, min(ix.VectorBurst, out.Records/4))
	}
	return out
}

// Shortened returns ix scaled down ([Index.Scaled]) so that its ideal time
// ([Index.IdealTime] with [FamilyTimeout]) is at most maxIdeal, or ix
// itself if it already is: the same index with a shorter run, its capacity
// changes at the same shares of it. The outages keep their period, so a
// shorter run sees fewer of them. maxIdeal must be at least the
// family's least ideal time, 2 s, for the shortened run to stay
// measurable; a smaller one is taken as 2 s.
func (ix Index) Shortened(maxIdeal time.Duration) Index {
	limit := max(maxIdeal, time.Duration(familyMinIdeal*float64(time.Second)))
	out, over := ix, 1.0 // over: a share of the records whose ideal is over the limit
	for range 50 {
		ideal := out.IdealTime(out.Records, FamilyTimeout)
		if ideal <= limit || out.Records <= 1 {
			break
		}
		// Aim a little below the limit: the ideal is not quite linear
		// in the records (bursts, outages, changes).
		over = float64(out.Records) / float64(ix.Records)
		out = ix.Scaled(over * 0.98 * limit.Seconds() / ideal.Seconds())
	}
	if out.Records == ix.Records {
		return out
	}
	// Then as many records as fit: the step can land well under the limit.
	under := float64(out.Records) / float64(ix.Records)
	for range 12 {
		mid := (under + over) / 2
		if c := ix.Scaled(mid); c.IdealTime(c.Records, FamilyTimeout) <= limit {
			out, under = c, mid
		} else {
			over = mid
		}
	}
	return out
}

// RateScaled returns ix with its vector bucket's rate and burst f times
// theirs (a burst of at least one record): the same index, taking f times
// the records a second where its vector bucket limits it, such as one
// outside the family's range of 300 to 100,000. An index without a vector
// rate is returned unchanged. RateScaled panics unless f is a positive
// finite number.
func (ix Index) RateScaled(f float64) Index {
	if !(f > 0) || math.IsInf(f, 0) {
		panic("upserttest: Index.RateScaled: need a positive finite factor")
	}
	out := ix
	if ix.VectorRate > 0 {
		out.VectorRate = ix.VectorRate * f
		out.VectorBurst = max(1, int(float64(ix.VectorBurst)*f))
	}
	return out
}
