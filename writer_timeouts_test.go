package upsert

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireEveryRecordOnce checks that res accounts every one of n records once.
func requireEveryRecordOnce(t *testing.T, n int, res Result, stored int) {
	t.Helper()
	s := res.Stats
	assert.Equal(t, n, s.Records, "records taken")
	assert.Equal(t, n, s.Upserted+s.Failed+s.Duplicates, "Upserted+Failed+Duplicates")
	assert.Equal(t, s.Failed, len(res.Failed), "Failed list vs Stats.Failed")
	seen := map[int]bool{}
	for _, f := range res.Failed {
		if seen[f.Index] {
			t.Errorf("position %d failed twice", f.Index)
		}
		seen[f.Index] = true
	}
	assert.True(t, slices.IsSortedFunc(res.Failed, func(a, b Failure) int { return a.Index - b.Index }))
	if stored >= 0 {
		assert.Equal(t, n, stored+len(res.Failed), "stored + failed")
	}
}

// writeThrough writes n records through a Writer with acks, flushing every
// flushEvery, and returns the result, the acks and Close's error. The
// result's Failed holds every failure, as the acks carried them (checked
// against what the Writer kept: the first failuresKept).
func writeThrough(t *testing.T, ix *sizeCapIndex, n, flushEvery int, opts ...Option) (Result, *ackLog, error) {
	t.Helper()
	log := &ackLog{}
	ctx := context.Background()
	all := append([]Option{WithUpsertFunc(ix.upsert), withClock(ix.clk), withRand(maxRand), WithAcks(log.f)}, opts...)
	w, err := NewWriter(ctx, all...)
	require.NoError(t, err)
	recs := vectors(n, 8)
	for i, v := range recs {
		require.NoError(t, w.AddTagged(ctx, v, i))
		if flushEvery > 0 && (i+1)%flushEvery == 0 {
			fctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			err := w.Flush(fctx)
			cancel()
			require.NoError(t, err, "Flush after %d records", i+1)
			acks := log.all()
			require.Len(t, acks, i+1, "Flush returned before every record added had its ack")
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	res, err := w.Close(cctx)
	require.NoError(t, cctx.Err(), "Close hangs")
	res = ackedResult(t, res, log)
	t.Logf("virtual %v, requests %d (timeouts %d), upserted %d, failed %d, splits %d, retries %d, errors %v, sizes %v",
		ix.clk.Now().Sub(ix.clk.start), res.Stats.Requests, ix.timeouts, res.Upserted, len(res.Failed),
		res.Stats.Splits, res.Stats.Retries, res.Stats.ErrorsByClass, ix.sizes)
	return res, log, err
}

// newSizeCapIndex is a sizeCapIndex on its own event clock.
func newSizeCapIndex(limit, slowFrom int, timeout time.Duration) *sizeCapIndex {
	return &sizeCapIndex{clk: newEventClock(), limit: limit, slowFrom: slowFrom, timeout: timeout, stored: map[string]bool{}, sizes: map[int]int{}}
}

// A Writer on a host that black-holes every request from its fourth: Close
// returns, each record is acked once and in order, as Result.Failed says,
// and none is a dead letter (with a Flush every 500, the batch after it
// was at times alone in flight and its first record failed for good).
func TestAWriterOnABlackHoledHostAcksEveryRecordOnceAndDeadLettersNone(t *testing.T) {
	for _, c := range []struct {
		name  string
		flush int
		opts  []Option
	}{
		{"sized-noflush", 0, nil},
		{"sized-flush500", 500, nil},
		{"pinned-conc1", 0, []Option{WithBatchSize(50), WithConcurrency(1)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ix := newSizeCapIndex(0, 3, 2*time.Second)
			const n = 2000
			res, log, _ := writeThrough(t, ix, n, c.flush, append([]Option{WithRequestTimeout(2 * time.Second)}, c.opts...)...)
			log.requireClean(t)
			requireEveryRecordOnce(t, n, res, len(ix.stored))
			requireAcksMatch(t, log.all(), res, 0)
			for _, f := range forGood(res) {
				t.Errorf("record %s failed for good after %d attempts while the host was black-holed: %v", f.ID, f.Attempts, f.Err)
			}
		})
	}
}

// On an index that times out every batch above 20 records, each Flush
// returns once every record added before it has its ack, and all land.
func TestAWritersFlushesWaitForEveryRecordOnAnIndexThatTimesOutLargeBatches(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"sized", nil},
		{"pinned", []Option{WithBatchSize(100)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ix := newSizeCapIndex(20, 0, 5*time.Second)
			const n = 2000
			res, log, err := writeThrough(t, ix, n, 700, append([]Option{WithRequestTimeout(5 * time.Second)}, c.opts...)...)
			log.requireClean(t)
			requireEveryRecordOnce(t, n, res, len(ix.stored))
			requireAcksMatch(t, log.all(), res, 0)
			assert.NoError(t, err)
			assert.Equal(t, n, res.Upserted)
		})
	}
}

// A Stream saving its checkpoint every millisecond on a black-holed host
// never saves a position past the first record marked for resend.
func TestACheckpointNeverPassesARecordToResendOnABlackHoledHost(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"sized", nil},
		{"pinned", []Option{WithBatchSize(100)}},
		{"one", []Option{WithBatchSize(1), WithConcurrency(1)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ix := newSizeCapIndex(0, 3, 2*time.Second)
			cp := &memCheckpoint{}
			log := &ackLog{}
			const n = 1500
			opts := append([]Option{WithUpsertFunc(ix.upsert), withClock(ix.clk), withRand(maxRand), WithAcks(log.f),
				WithRequestTimeout(2 * time.Second), WithCheckpoint(cp), withSaveEvery(time.Millisecond)}, c.opts...)
			res, _ := Stream(context.Background(), slices.Values(vectors(n, 8)), opts...)
			log.requireClean(t)
			res = ackedResult(t, res, log)
			requireEveryRecordOnce(t, n, res, len(ix.stored))
			firstResend := n
			for _, f := range res.Failed {
				if f.Resend {
					firstResend = f.Index
					break
				}
			}
			cp.mu.Lock()
			defer cp.mu.Unlock()
			for _, s := range cp.saves {
				assert.LessOrEqual(t, s, int64(firstResend), "checkpoint passed a record that must be resent")
			}
			t.Logf("saves %v, first resend %d, for good %d", cp.saves[len(cp.saves)-1], firstResend, len(forGood(res)))
		})
	}
}

// cancelOnProbeIndex wraps a sizeCapIndex and cancels the Writer's context
// at the first one-record request after the breaker's patience.
type cancelOnProbeIndex struct {
	*sizeCapIndex
	after  time.Time
	cancel context.CancelFunc
	once   sync.Once
}

func (c *cancelOnProbeIndex) upsert(ctx context.Context, ns string, b []*pinecone.Vector) error {
	if len(b) == 1 && c.clk.Now().After(c.after) {
		c.once.Do(c.cancel)
	}
	return c.sizeCapIndex.upsert(ctx, ns, b)
}

// A Writer whose context ends at the breaker's first one-record probe:
// Flush returns the stop, Close returns, every record is acked once, and
// Add and Flush after Close return ErrClosed.
func TestAWriterCanceledDuringTheBreakersOneRecordProbesAccountsForEveryRecord(t *testing.T) {
	for _, pinned := range []bool{false, true} {
		t.Run(fmt.Sprint("pinned ", pinned), func(t *testing.T) {
			base := newSizeCapIndex(0, 10, 2*time.Second)
			wctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ix := &cancelOnProbeIndex{sizeCapIndex: base, after: base.clk.Now().Add(outagePatience), cancel: cancel}
			log := &ackLog{}
			opts := []Option{WithUpsertFunc(ix.upsert), withClock(base.clk), withRand(maxRand), WithAcks(log.f), WithRequestTimeout(2 * time.Second)}
			if pinned {
				opts = append(opts, WithBatchSize(100))
			}
			w, err := NewWriter(wctx, opts...)
			require.NoError(t, err)
			ctx := context.Background()
			const n = 2000
			taken := 0
			for i, v := range vectors(n, 8) {
				if err := w.AddTagged(ctx, v, i); err != nil {
					break
				}
				taken++
			}
			flushErr := w.Flush(ctx)
			t.Logf("flush: %v", flushErr)
			cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
			defer ccancel()
			res, err := w.Close(cctx)
			require.NoError(t, cctx.Err(), "Close hangs")
			t.Logf("taken %d, res %d upserted %d failed, err %v", taken, res.Upserted, len(res.Failed), err)
			log.requireClean(t)
			requireEveryRecordOnce(t, taken, res, len(base.stored))
			requireAcksMatch(t, log.all(), res, 0)
			assert.ErrorIs(t, w.AddTagged(ctx, idVec("late"), nil), ErrClosed)
			assert.ErrorIs(t, w.Flush(ctx), ErrClosed)
		})
	}
}

// A host that never answered fails every record for resend, at a 2-s and
// at the default 30-s request timeout.
func TestAHostThatNeverAnsweredFailsEveryRecordForResend(t *testing.T) {
	for _, to := range []time.Duration{2 * time.Second, 30 * time.Second} {
		ix := newSizeCapIndex(0, 0, to)
		res, log, _ := writeThrough(t, ix, 500, 0, WithRequestTimeout(to))
		log.requireClean(t)
		requireEveryRecordOnce(t, 500, res, len(ix.stored))
		for _, f := range forGood(res) {
			t.Errorf("timeout %v: record %s failed for good after %d attempts: %v", to, f.ID, f.Attempts, f.Err)
		}
	}
}
