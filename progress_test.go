package upsert

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A report skipped because another was under way leaves the interval to the
// next one: its rate counts the records over the time since the last report
// made, not since the skipped one.
func TestProgressRateAfterASkippedReport(t *testing.T) {
	clk := newFakeClock()
	var got []Progress
	cfg := &config{clock: clk, limiter: &Limiter{clock: clk}, progressEvery: time.Second,
		progress: func(p Progress) { got = append(got, p) }}
	r := &run{cfg: cfg, kind: vectorKind, start: clk.Now(), total: -1}
	r.progress.last.Store(r.start.UnixNano())

	r.stats.upserted.Add(100)
	clk.Advance(time.Second)
	r.progress.mu.Lock() // a report under way
	r.maybeProgress()
	r.progress.mu.Unlock()
	require.Empty(t, got, "skipped while another report is under way")

	r.stats.upserted.Add(100)
	clk.Advance(time.Second)
	r.maybeProgress()
	require.Len(t, got, 1)
	assert.Equal(t, 200, got[0].Done)
	assert.InDelta(t, 100, got[0].Rate, 1e-9, "200 records over the 2 s since the last report made")

	r.maybeProgress()
	assert.Len(t, got, 1, "no second report within the interval")
}
