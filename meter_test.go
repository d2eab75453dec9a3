package upsert

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A meter tells the rate over its window at any time a clock may give: an
// injected clock, or a virtual one that ran far ahead, is no reason to
// panic (UnixNano is undefined past 2262).
func TestMeterTellsTheRateAtAnyTime(t *testing.T) {
	for _, start := range []time.Time{
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(3485, 6, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 58, 0, time.UTC),
	} {
		var m meter
		for i := range 20 { // 100 a second for two seconds
			m.add(start.Add(time.Duration(i)*meterBucket), 10)
		}
		now := start.Add(20 * meterBucket)
		assert.InDelta(t, 100, m.rateOver(now, time.Second), 1e-9, "%v", start)
		assert.InDelta(t, 100, m.rateOver(now, meterSpan), 1e-9, "%v", start)
		assert.Zero(t, m.rateOver(now.Add(time.Hour), time.Second), "%v: an hour later", start)
	}
}

// Time the index was down is no part of a window: the rate is the one
// while it was up, before 1970 and past 2262 too.
func TestMeterLeavesOutDownTime(t *testing.T) {
	for _, start := range []time.Time{
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(3485, 6, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 58, 0, time.UTC),
	} {
		at := func(d time.Duration) time.Time { return start.Add(d) }
		for _, tt := range []struct {
			name         string
			up           []time.Duration // 10 added every 10 ms from each, for 100 ms
			down         [2]time.Duration
			now, window  time.Duration
			want, within float64
		}{
			{"100 a second before a second down: 100, not 50",
				[]time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond,
					500 * time.Millisecond, 600 * time.Millisecond, 700 * time.Millisecond, 800 * time.Millisecond, 900 * time.Millisecond},
				[2]time.Duration{time.Second, 2 * time.Second}, 2 * time.Second, 2 * time.Second, 1000, 1},
			{"an outage within buckets: the time up only",
				[]time.Duration{0, 100 * time.Millisecond, 800 * time.Millisecond, 900 * time.Millisecond},
				[2]time.Duration{250 * time.Millisecond, 750 * time.Millisecond}, time.Second - time.Microsecond, time.Second, 4 * 100 / 0.5, 1},
			{"a window all down reaches back to the time up before it",
				[]time.Duration{500 * time.Millisecond, 600 * time.Millisecond, 700 * time.Millisecond, 800 * time.Millisecond, 900 * time.Millisecond},
				[2]time.Duration{time.Second, 1800 * time.Millisecond}, 1800 * time.Millisecond, 300 * time.Millisecond, 1000, 1},
			{"but not to before the first amount",
				[]time.Duration{0, 100 * time.Millisecond},
				[2]time.Duration{200 * time.Millisecond, 1800 * time.Millisecond}, 1800 * time.Millisecond, 500 * time.Millisecond, 2 * 100 / 0.2, 1},
			{"a window all down but what landed as it ended: a bucket's worth at least",
				[]time.Duration{1900 * time.Millisecond},
				[2]time.Duration{0, 1900 * time.Millisecond}, 2 * time.Second, 2 * time.Second, 100 / 0.1, 1},
		} {
			var m meter
			m.add(at(0), 0)
			for _, from := range tt.up {
				for i := range 10 {
					m.add(at(from+time.Duration(i)*10*time.Millisecond), 10)
				}
			}
			m.markDown(at(tt.down[0]), at(tt.down[1]))
			assert.InDelta(t, tt.want, m.rateOver(at(tt.now), tt.window), tt.within, "%v: %s", start, tt.name)
		}
	}
}

// An outage longer than the meter keeps marks only the buckets it keeps:
// each one down whole but the newest, which it ended as it began.
func TestMeterMarksALongOutageInTheBucketsKept(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var m meter
	m.add(start, 10)
	end := start.Add(time.Hour)
	m.markDown(start, end)
	for i, d := range m.down {
		want := meterBucket
		if i == m.slot(m.epoch) {
			want = 0
		}
		assert.Equal(t, want, d, "bucket %d", i)
	}
	assert.Zero(t, m.rateOver(end, meterSpan))
}
