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
		{"a much quicker batch: more of its requests than the places, the rest owed", 0.5, 3.2, 64, -9},
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
// queued (they are sent again), it can lose. Across a capacity change it
// can also lose a little: its requests outlast their phase by the queue,
// and where the batch of the next phase writes quicker on the slots than
// this one (a batch that reaches a capacity bound by a rate, within the
// client's slack, need not be the one the slots write quickest), it
// writes more records in the slower one (seed 316: 8e-6 of the run).
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
				assert.LessOrEqual(t, with, plain*(1+1e-4), "seed %d %+v", seed, c)
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

// The index's bucket admits a batch larger than its burst when full, into
// debt: the model's bucket, widened to the batch, holds the debt as tokens
// short of its burst, and keeps it when it narrows back to the index's
// burst for smaller batches; the debt then only shrinks, at the refill
// rate, and nothing passes until it is repaid.
func TestABucketKeepsItsDebtWhenItsBurstNarrows(t *testing.T) {
	b := &flowBucket{tokens: 10, burst: 10, base: 10, rate: 100, cost: 1}
	b.widen(1000) // a batch of 1000 into a full bucket of burst 10
	b.tokens -= 1000
	b.widen(10) // back to batches of 10
	assert.InDelta(t, -990, b.tokens, 1e-9, "owed: the index's bucket holds 10 − 1000")
	assert.True(t, b.inDebt())
	bs := []*flowBucket{b}
	assert.InDelta(t, 9.9, untilRepaid(bs), 1e-9)
	assert.Zero(t, impulse(bs, 100))
	flow(bs, 0, 5)
	assert.InDelta(t, -490, b.tokens, 1e-9)
	flow(bs, 0, 5)
	assert.InDelta(t, 10, b.tokens, 1e-9)
	assert.Zero(t, untilRepaid(bs))
}

// One slot, 5 ms + 0.1 ms a record; the vector rate at half its 10k/s,
// then at 0.9 from 8.8 s; an outage from 9 s to 10 s. The quickest client
// that queues sends batches of 50 (10 ms: the slot writes the 5000
// records a second admitted), 64 requests in flight (0.64 s of writes,
// taken at once from the burst of 3200): the last of 45,200 records is
// admitted at 8.4 s, and the slot would write it by 9.04 s. At 8.8 s the
// client goes to batches of 450 (50 ms), none sent. At 9 s, 4 requests
// of 50 remain: the one in the slot is written, the 3 queued get the slot
// during the outage and fail, and their 150 records are sent again at
// 10 s, written 50 ms later (a whole batch's latency).
//
// The ideal once measured the queue's drain at 9 s (0.04 s) and added it
// to the last admission, 8.4 s: 8.44 s. And as it took the requests left
// for requests of 450 (50 ms each, so none queued at 9 s), it missed the
// drop: 9.04 s.
func TestTheRequestsLeftAtABatchChangeAreDrainedAndDroppedAsTheirOwn(t *testing.T) {
	ix := Index{
		Dimension: 8, VectorRate: 10_000, VectorBurst: 3200,
		Latency: 5 * time.Millisecond, PerRecord: 100 * time.Microsecond, Slots: 1,
		Changes:     []CapacityChange{{At: 0, Factor: 0.5}, {At: 8800 * time.Millisecond, Factor: 0.9}},
		OutageEvery: 10 * time.Second, OutageLength: time.Second,
	}
	m := ix.model(FamilyTimeout)
	assert.InDelta(t, 10.05, m.clientTime(45_200, idealClient{quickest: true, queue: true}).Seconds(), 1e-6)
}

// Requests in flight of three batches, at an outage starting at t = 10 s:
// those in their places at t are written, the others fail.
func TestDropQueuedFailsTheRequestsWaitingForAPlace(t *testing.T) {
	fm := &flowModel{
		inFlight: &flowBucket{rate: 10, cost: 0.01, burst: 10},
		places:   1,
		earlier: []slotWork{
			{until: 9.5, hold: 0.2, perSecond: 1},      // written
			{until: 10.05, hold: 0.1, perSecond: 1000}, // in its place
			{until: 10.4, hold: 0.2, perSecond: 2000},  // 0.15 s in place, 0.2 s queued
		},
	}
	// The current batch's: 0.3 s more, to 10.7 s; holding a place 0.1 s.
	fm.inFlight.tokens = fm.inFlight.burst - 0.7*fm.inFlight.rate
	assert.InDelta(t, 0.6, fm.queueWait(10), 1e-9, "the last one gets a place at 10.6 s")
	assert.InDelta(t, 0.2*2000+0.3*1000, fm.dropQueued(10), 1e-9)
	assert.InDelta(t, 0.2, drainTime(fm.inFlight), 1e-9, "those in their places: written by 10.2 s")
	assert.Zero(t, fm.queueWait(10))
	assert.Zero(t, fm.dropQueued(10), "none is queued any more")
}
