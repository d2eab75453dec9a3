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
