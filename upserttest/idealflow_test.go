package upserttest

import (
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// idealWithoutBursts is ix's ideal time if every bucket of the index
// started with one token rather than full: the head start that the
// index's bursts give the ideal client, which knows them, at the start.
func idealWithoutBursts(ix Index, records int) time.Duration {
	best := time.Duration(math.MaxInt64)
	for _, c := range idealClients {
		m := ix.model(FamilyTimeout)
		for _, b := range []*bucketConfig{&m.cfg.vectorRate, &m.cfg.byteRate, &m.cfg.requestRate} {
			if b.rate > 0 {
				b.burst = 1
			}
		}
		best = min(best, m.clientTime(records, c))
	}
	return best
}

// TestIdealCountsTheBursts checks that the bursts only ever shorten the
// ideal. With UPSERTTEST_BURSTS=N it prints seeds 1–N with both ideal
// times, for docs/limiter.md's measure of what the bursts are worth.
func TestIdealCountsTheBursts(t *testing.T) {
	n := 50
	if v := os.Getenv("UPSERTTEST_BURSTS"); v != "" {
		_, err := fmt.Sscan(v, &n)
		assert.NoError(t, err)
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		ix := DrawIndex(seed)
		ideal := ix.IdealTime(ix.Records, FamilyTimeout)
		without := idealWithoutBursts(ix, ix.Records)
		assert.GreaterOrEqual(t, without, ideal-time.Microsecond, "seed %d: full buckets never slow the ideal", seed)
		if os.Getenv("UPSERTTEST_BURSTS") != "" {
			fmt.Printf("seed %d ideal %.3f without bursts %.3f\n", seed, ideal.Seconds(), without.Seconds())
		}
	}
}

func TestKeepBusyTime(t *testing.T) {
	tests := []struct {
		name              string
		tokens, rate, new float64
		want              float64
	}{
		{"a slower batch: the slots in use free in the old batch's time", 0, 64, 3.2, 0.95},
		{"a quicker batch: the deficit grows, freed as slowly as before", 0.9, 3.2, 6.4, 0.8},
		{"capped: no fewer than no slots free", 0.5, 3.2, 64, 0},
		{"no change of rate", 0.3, 10, 10, 0.3},
		{"from the first phase (no rate yet)", 1, 0, 10, 1},
		{"to a batch that takes no time", 0.3, 10, math.Inf(1), 0.3},
	}
	for _, tt := range tests {
		b := flowBucket{tokens: tt.tokens, burst: 1, rate: tt.rate}
		b.keepBusyTime(tt.new)
		assert.InDelta(t, tt.want, b.tokens, 1e-9, tt.name)
	}
}
