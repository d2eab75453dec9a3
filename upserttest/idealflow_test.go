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

// heldTime is E[min(latency × F, timeout)], F the jitter's lognormal
// factor: here against the integral over the normal, by the midpoint rule.
func TestHeldTimeIsTheMeanLatencyCutAtTheTimeout(t *testing.T) {
	for _, tt := range []struct{ latency, sigma float64 }{
		{0.5, 0}, {3, 0}, {0.5, 0.6}, {1, 1}, {20, 1}, {1.9, 0.3},
	} {
		ix := Index{Dimension: 8, Latency: seconds(tt.latency), Jitter: tt.sigma}
		m := ix.model(2 * time.Second)
		const dz = 1e-4
		want := 0.0
		for z := -10 + dz/2; z < 10; z += dz {
			f := math.Exp(tt.sigma*z - tt.sigma*tt.sigma/2)
			want += min(tt.latency*f, 2) * math.Exp(-z*z/2) / math.Sqrt(2*math.Pi) * dz
		}
		assert.InDelta(t, want, m.heldTime(1), 1e-6, "latency %v σ %v", tt.latency, tt.sigma)
	}
}

// A queue for the slots only moves admission earlier: it gains before a
// capacity drop, and nothing where the capacity never drops (the queue
// drains at the end), but at an outage, whose start fails the records
// queued (they are sent again), it can lose.
func TestQueueingGainsOnlyBeforeACapacityDrop(t *testing.T) {
	gained := 0
	for seed := uint64(1); seed <= 800; seed++ {
		ix := DrawIndex(seed)
		for _, c := range idealClients[:3] {
			queued := c
			queued.queue = true
			plain := ix.model(FamilyTimeout).clientTime(ix.Records, c).Seconds()
			with := ix.model(FamilyTimeout).clientTime(ix.Records, queued).Seconds()
			switch {
			case ix.OutageEvery > 0:
				if !drops(ix) {
					assert.GreaterOrEqual(t, with, plain-1e-6, "seed %d %+v", seed, c)
				}
			case drops(ix):
				assert.LessOrEqual(t, with, plain*(1+1e-6), "seed %d %+v", seed, c)
			default:
				assert.InEpsilon(t, plain, with, 1e-6, "seed %d %+v", seed, c)
			}
			if with < plain-1e-3 {
				gained++
			}
		}
	}
	assert.Positive(t, gained, "queueing gains before some drops")
}

// drops reports whether a capacity change of ix lowers the factor.
func drops(ix Index) bool {
	f := 1.0
	for _, ch := range ix.Changes {
		if ch.Factor < f {
			return true
		}
		f = ch.Factor
	}
	return false
}
