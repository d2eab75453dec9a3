package upsert

import (
	"math"
	"time"
)

// meter counts an amount (records, requests, bytes) over the last two
// seconds, in buckets of 100 ms, to tell the rate over a recent window.
// Time the index was down (markDown) is no part of the window: the rate is
// the one while it was up. The time is passed in; the zero meter is empty.
type meter struct {
	buckets [20]float64
	down    [20]time.Duration // of each bucket, the time the index was down
	epoch   int64             // index of the newest bucket, in meterBucket units since 1970 (bucketOf)
	first   int64             // index of the bucket of the first amount
	started bool              // epoch is set
}

const meterBucket = 100 * time.Millisecond

// meterSpan is the longest window a meter tells.
const meterSpan = 20 * meterBucket

func (m *meter) add(now time.Time, x float64) {
	m.advance(now)
	m.buckets[m.slot(m.epoch)] += x
}

// bucketOf is the index of now's bucket, in meterBucket units since 1970:
// from the Unix seconds, which hold any year, where UnixNano does not
// past 2262.
func bucketOf(now time.Time) int64 {
	perSecond := int64(time.Second / meterBucket)
	return now.Unix()*perSecond + int64(now.Nanosecond())/int64(meterBucket)
}

// slot is where bucket e is kept, for any e, before 1970 too.
func (m *meter) slot(e int64) int {
	n := int64(len(m.buckets))
	return int((e%n + n) % n)
}

// rateOver returns the amount per second over the last window, up to
// meterSpan: whole buckets, the newest one partly elapsed, less the time
// the index was down in them (but at least a bucket's worth, or the span
// when shorter: an amount landed as an outage ends is no rate). The
// window reaches back past the time the index was down, for as much time
// up as it asks (back to the meter's first amount): just after an outage,
// the rate is the one before it, not the nothing it took while down. Time
// before the first amount counts as empty, so a burst at the start does
// not read as a rate.
func (m *meter) rateOver(now time.Time, window time.Duration) float64 {
	m.advance(now)
	n := int64(len(m.buckets))
	k0 := min(max(int64((window+meterBucket-1)/meterBucket), 1), n)
	sum, down := 0.0, time.Duration(0)
	// The window's buckets, then older ones while the time up in them
	// falls short of the window's.
	want, k := time.Duration(k0)*meterBucket, int64(0)
	for k < k0 || k < n && m.epoch-k >= m.first && time.Duration(k)*meterBucket-down < want {
		sum += m.buckets[m.slot(m.epoch-k)]
		down += m.down[m.slot(m.epoch-k)]
		k++
	}
	// How far now is into the newest bucket (before it, when the clock
	// went back).
	current := time.Duration(bucketOf(now)-m.epoch)*meterBucket + time.Duration(now.Nanosecond())%meterBucket
	span := time.Duration(k-1)*meterBucket + current
	up := max(span-down, min(span, meterBucket))
	return sum / max(up, meterBucket/10).Seconds()
}

// markDown counts from to to as time the index was down, in the buckets
// the meter still keeps.
func (m *meter) markDown(from, to time.Time) {
	m.advance(to)
	if oldest := bucketStart(m.epoch - int64(len(m.buckets)) + 1); from.Before(oldest) {
		from = oldest // a long outage: only the buckets kept
	}
	for t := from; t.Before(to); {
		end := bucketStart(bucketOf(t) + 1)
		if to.Before(end) {
			end = to
		}
		m.down[m.slot(bucketOf(t))] += end.Sub(t)
		t = end
	}
}

// bucketStart is when bucket e (bucketOf's units) begins.
func bucketStart(e int64) time.Time {
	perSecond := int64(time.Second / meterBucket)
	sec := e / perSecond
	if e%perSecond < 0 {
		sec-- // floor, before 1970
	}
	return time.Unix(sec, (e-sec*perSecond)*int64(meterBucket))
}

func (m *meter) advance(now time.Time) {
	e := bucketOf(now)
	if !m.started {
		m.epoch, m.first, m.started = e, e, true
		return
	}
	if e <= m.epoch {
		return
	}
	steps := min(e-m.epoch, int64(len(m.buckets)))
	for i := int64(1); i <= steps; i++ {
		m.buckets[m.slot(m.epoch+i)] = 0
		m.down[m.slot(m.epoch+i)] = 0
	}
	m.epoch = e
}

// spreadMeter estimates the spread of the index's latency (the standard
// deviation of its logarithm) from deviations measured against the mean
// of like requests (same size, same concurrency). The spread is the
// index's, whatever the size and the level, so the controllers pool it.
type spreadMeter struct {
	n    int
	var_ float64
}

// spreadSamples is how many deviations the estimate averages over.
const spreadSamples = 32

// add takes the deviation of one log latency from the mean of the n
// like ones before it.
func (m *spreadMeter) add(dev float64, n int) {
	if n < 2 {
		return
	}
	x := dev * dev * float64(n) / float64(n+1) // the deviation from a mean of n has variance (1+1/n) σ²
	m.n++
	w := 1 / float64(min(m.n, spreadSamples))
	m.var_ += (x - m.var_) * w
}

// spread returns the estimate, or fallback while fewer than 4 deviations
// were seen.
func (m *spreadMeter) spread(fallback float64) float64 {
	if m.n < 4 {
		return fallback
	}
	return math.Sqrt(m.var_)
}
