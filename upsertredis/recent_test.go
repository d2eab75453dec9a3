package upsertredis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestRecentCountsOverTheLastSecond(t *testing.T) {
	start := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		samples   int // one every 100 ms, the count rising by 1000 each
		wantCount int64
		wantSpan  time.Duration
	}{
		{name: "none", samples: 0},
		{name: "one: nothing to measure by", samples: 1},
		{name: "less than a second: from the oldest", samples: 4, wantCount: 3000, wantSpan: 300 * time.Millisecond},
		{name: "more: the last second", samples: 20, wantCount: 10000, wantSpan: time.Second},
		{name: "more than it keeps: the last second still", samples: 100, wantCount: 10000, wantSpan: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r recent
			for i := range tc.samples {
				r.add(start.Add(time.Duration(i)*100*time.Millisecond), int64(i)*1000)
			}
			n, d := r.over(recentSpan)
			assert.Equal(t, tc.wantCount, n)
			assert.Equal(t, tc.wantSpan, d)
		})
	}
}

func TestRecentSpansTheOldestWhenExchangesAreSparse(t *testing.T) {
	start := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	var r recent
	r.add(start, 0)
	r.add(start.Add(3*time.Second), 6000) // Redis did not answer in between
	n, d := r.over(recentSpan)
	assert.Equal(t, int64(6000), n)
	assert.Equal(t, 3*time.Second, d)
}

func TestRecentGoesOnAcrossARestartOfTheCount(t *testing.T) {
	start := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	var r recent
	r.restart(0) // no samples: nothing to move
	r.add(start, 5000)
	r.add(start.Add(500*time.Millisecond), 6000)
	r.restart(0) // the state was created anew: its count starts from 0
	r.add(start.Add(time.Second), 400)
	n, d := r.over(recentSpan)
	assert.Equal(t, int64(1400), n, "what the samples saw before the restart, and the new count")
	assert.Equal(t, time.Second, d)
}
