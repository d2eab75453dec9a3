package upsert

import (
	"context"
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

// A progress report made because a request completed counts that
// request's records: a run of slow requests once showed each batch one
// report late, starting with "0 done, rate 0, ETA unknown" after its first
// batch landed.
func TestProgressCountsTheRequestThatTriggeredIt(t *testing.T) {
	clk := newFakeClock()
	fi := newFakeIndex(func(int, []string) error {
		clk.Advance(time.Second) // each request takes a second
		return nil
	})
	var got []Progress
	// One request: the report its completion triggers is the only one
	// but the final one (with two, either request's may come first).
	res, err := All(context.Background(), vectors(2, 2), WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand),
		WithBatchSize(2), WithConcurrency(1),
		WithProgress(time.Second, func(p Progress) { got = append(got, p) }))
	require.NoError(t, err)
	require.Equal(t, 2, res.Upserted)
	require.Len(t, fi.Calls(), 1)
	require.Len(t, got, 2)
	require.False(t, got[0].Final, "a report after the request, a second after the start")
	assert.Equal(t, 2, got[0].Done, "the batch had landed when its request's completion triggered the report")
	assert.Positive(t, got[0].Rate)
}

// A rate too low for the time left to fit a Duration gives the largest
// ETA, not an overflow: a negative ETA said the run was past its end.
func TestProgressETAOfATinyRateIsTheLargest(t *testing.T) {
	clk := newFakeClock()
	var got []Progress
	cfg := &config{clock: clk, limiter: &Limiter{clock: clk}, progressEvery: time.Second,
		progress: func(p Progress) { got = append(got, p) }}
	r := &run{cfg: cfg, kind: vectorKind, start: clk.Now(), total: 1 << 40}
	r.progress.last.Store(r.start.UnixNano())
	r.stats.upserted.Add(1)
	clk.Advance(1000 * time.Hour)
	r.maybeProgress()
	require.Len(t, got, 1)
	assert.Equal(t, maxETA, got[0].ETA)

	r.stats.upserted.Add(1 << 20)
	clk.Advance(time.Hour)
	r.maybeProgress()
	require.Len(t, got, 2)
	assert.Less(t, got[1].ETA, maxETA, "a rate that tells")
	assert.Positive(t, got[1].ETA)
}
