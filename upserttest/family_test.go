package upserttest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/upsertlib/upsert/upserttest"
)

// familySeeds is how many seeds the family's tests draw.
func familySeeds() uint64 {
	if testing.Short() {
		return 500
	}
	return 2000
}

func TestDrawIndexIsDeterministic(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		require.Equal(t, upserttest.DrawIndex(seed), upserttest.DrawIndex(seed), "seed %d", seed)
	}
	assert.NotEqual(t, upserttest.DrawIndex(1), upserttest.DrawIndex(2))
	assert.Equal(t, uint64(7), upserttest.DrawIndex(7).Seed)
}

func TestDrawnIndexesKeepTheirBounds(t *testing.T) {
	for seed := uint64(1); seed <= familySeeds(); seed++ {
		ix := upserttest.DrawIndex(seed)
		checkDrawnIndex(t, ix)
		if t.Failed() {
			t.Fatalf("seed %d: %v", seed, ix)
		}
	}
}

// checkDrawnIndex checks the documented ranges and bounds of DrawIndex.
func checkDrawnIndex(t *testing.T, ix upserttest.Index) {
	t.Helper()
	assert.GreaterOrEqual(t, ix.Dimension, 8)
	assert.LessOrEqual(t, ix.Dimension, 4096)
	assert.GreaterOrEqual(t, ix.Records, 10_000)
	assert.LessOrEqual(t, ix.Records, 1_000_000)
	if ix.VectorRate > 0 {
		assert.GreaterOrEqual(t, ix.VectorRate, 300.0)
		assert.LessOrEqual(t, ix.VectorRate, 100_000.0)
		assert.GreaterOrEqual(t, ix.VectorBurst, 1)
		assert.LessOrEqual(t, ix.VectorBurst, ix.Records/4+1)
	}
	assert.GreaterOrEqual(t, ix.Latency, time.Millisecond-time.Microsecond)
	assert.LessOrEqual(t, ix.Latency, 300*time.Millisecond)
	assert.LessOrEqual(t, ix.PerRecord, 300*time.Microsecond)
	assert.LessOrEqual(t, ix.PerMiB, 200*time.Millisecond)
	assert.True(t, ix.Jitter >= 0 && ix.Jitter <= 1)
	assert.True(t, ix.Slots >= 0 && ix.Slots <= 256)
	if ix.SlowAbove > 0 {
		assert.True(t, ix.SlowAbove >= 10 && ix.SlowAbove <= 900 && ix.SlowFactor >= 2 && ix.SlowFactor <= 20)
	}
	assert.LessOrEqual(t, len(ix.Changes), 2)
	factors := []float64{1}
	for _, ch := range ix.Changes {
		assert.True(t, ch.Factor >= 0.25 && ch.Factor <= 4 && ch.At > 0)
		factors = append(factors, ch.Factor)
	}
	if ix.OutageEvery > 0 {
		assert.True(t, ix.OutageEvery >= 3*time.Second && ix.OutageEvery <= 15*time.Second)
		assert.True(t, ix.OutageLength >= 200*time.Millisecond-time.Microsecond && ix.OutageLength <= ix.OutageEvery/4)
	}
	assert.True(t, ix.RandomRateLimited >= 0 && ix.RandomRateLimited <= 0.05)
	assert.True(t, ix.PineconeLimits == 0 || ix.PineconeLimits == 1 || (ix.PineconeLimits >= 2 && ix.PineconeLimits <= 10))

	for i, f := range factors {
		c, n := ix.Throughput(f, upserttest.FamilyTimeout)
		require.Positive(t, n, "a batch fits the timeout")
		if i == 0 {
			assert.GreaterOrEqual(t, c, 300.0, "records/s at the start")
		}
		assert.LessOrEqual(t, c, 100_000.0, "records/s at ×%v", f)
		assert.LessOrEqual(t, c*float64(ix.RequestBytes(n))/float64(n), 80e6, "bytes/s at ×%v", f)
	}
	ideal := ix.DrawnIdealTime()
	assert.LessOrEqual(t, ix.IdealTime(ix.Records, upserttest.FamilyTimeout), ideal)
	if ix.Records > 10_000 {
		assert.LessOrEqual(t, ideal, 45*time.Second)
	}
	if ix.Records < 1_000_000 {
		assert.GreaterOrEqual(t, ideal, 2*time.Second)
	}
}

func TestDrawnIndexesCoverTheFamily(t *testing.T) {
	n := familySeeds()
	var rate, serverless, raised, none, changes, outages, random429s float64
	for seed := uint64(1); seed <= n; seed++ {
		ix := upserttest.DrawIndex(seed)
		count := func(c *float64, ok bool) {
			if ok {
				*c += 1 / float64(n)
			}
		}
		count(&rate, ix.VectorRate > 0)
		count(&serverless, ix.PineconeLimits == 1)
		count(&raised, ix.PineconeLimits > 1)
		count(&none, ix.PineconeLimits == 0)
		count(&changes, len(ix.Changes) > 0)
		count(&outages, ix.OutageEvery > 0)
		count(&random429s, ix.RandomRateLimited > 0)
	}
	// The shares of the documented probabilities, within 4.5 standard errors at 500 seeds.
	for _, s := range []struct {
		name      string
		got, want float64
	}{
		{"a vector rate", rate, 0.8}, {"serverless limits", serverless, 1 / 3.0}, {"raised limits", raised, 1 / 3.0},
		{"no Pinecone limits", none, 1 / 3.0}, {"capacity changes", changes, 0.25}, {"outages", outages, 0.2},
		{"random 429s", random429s, 0.25},
	} {
		assert.InDelta(t, s.want, s.got, 0.095, s.name)
	}
}

func TestIndexOptionsMakeItsServer(t *testing.T) {
	ix := upserttest.Index{
		Seed: 3, Records: 100, Dimension: 4, Namespace: ns, VectorRate: 1, VectorBurst: 10,
		Latency: time.Millisecond, RandomRateLimited: 1, PineconeLimits: 1,
	}
	srv := start(t, ix.Options()...)
	idx := connect(t, srv)
	_, err := idx.UpsertVectors(bg(t), batch("a", 5, 4))
	require.Equal(t, codes.ResourceExhausted, code(err), "every request is answered 429")
	assert.Equal(t, "Request failed. You've reached the max upsert size limit per second for index upserttest. "+
		"Pace your upserts or contact Pinecone Support (https://app.pinecone.io/organizations/-/settings/support/ticket) to request a higher limit.",
		status.Convert(err).Message(), "a random 429 says one of Pinecone's rate-limit messages")
	assert.Zero(t, srv.Stats().RateLimited, "not one of the index's limits")

	ix.RandomRateLimited = 0
	srv = start(t, ix.Options()...)
	idx = connect(t, srv)
	_, err = idx.UpsertVectors(bg(t), batch("a", 5, 3))
	assert.Equal(t, codes.InvalidArgument, code(err), "the index has its dimension")
	_, err = idx.UpsertVectors(bg(t), batch("a", 10, 4))
	require.NoError(t, err)
	_, err = idx.UpsertVectors(bg(t), batch("b", 1, 4))
	assert.Equal(t, codes.ResourceExhausted, code(err), "and its vector burst")
}

func TestIndexString(t *testing.T) {
	ix := upserttest.Index{
		Records: 120_000, Dimension: 384, VectorRate: 8200, VectorBurst: 4100,
		Latency: 12 * time.Millisecond, PerRecord: 3 * time.Microsecond, PerMiB: 20 * time.Millisecond, Jitter: 0.4,
		SlowAbove: 200, SlowFactor: 5, Slots: 16,
		Changes:     []upserttest.CapacityChange{{At: 3200 * time.Millisecond, Factor: 0.5}},
		OutageEvery: 6 * time.Second, OutageLength: 800 * time.Millisecond, RandomRateLimited: 0.021, PineconeLimits: 1,
	}
	assert.Equal(t, "120k records of 384 dims; 8.20k/s burst 4.10k; 12ms+3µs/rec+20ms/MiB σ0.40; ×5.0 above 200; 16 slots; "+
		"capacity ×0.50 at 3.2s; outage 800ms every 6s; 2.1% random 429s; serverless limits", ix.String())
	assert.Equal(t, "10.0k records of 8 dims; no vector rate; 1ms σ0.00; 1 slot; no Pinecone limits",
		upserttest.Index{Records: 10_000, Dimension: 8, Latency: time.Millisecond, Slots: 1}.String())
}

// An index of the family, its server and its ideal time.
func ExampleDrawIndex() {
	ix := upserttest.DrawIndex(1)
	srv := upserttest.NewServer(ix.Options()...)
	defer srv.Close()

	ideal := ix.IdealTime(ix.Records, upserttest.FamilyTimeout)
	perSecond, batch := ix.Throughput(1, upserttest.FamilyTimeout)
	fmt.Println(ix)
	fmt.Printf("ideal %v: %.0f records/s in batches of %d at the start\n", ideal.Round(time.Millisecond), perSecond, batch)
	// Output:
	// 203k records of 282 dims; 5.11k/s burst 396; 64.441ms+15.34µs/rec σ0.47; ×3.0 above 573; 33 slots; capacity ×0.75 at 10.6s; capacity ×2.75 at 20.5s; serverless limits ×5.4
	// ideal 28.428s: 5111 records/s in batches of 573 at the start
}

func TestScaledKeepsTheIndex(t *testing.T) {
	ix := upserttest.DrawIndex(1)
	require.Len(t, ix.Changes, 2)
	half := ix.Scaled(0.5)
	assert.Equal(t, (ix.Records+1)/2, half.Records)
	for i, ch := range half.Changes {
		assert.Equal(t, (ix.Changes[i].At / 2).Round(time.Millisecond), ch.At, "the changes keep their share of the run")
		assert.Equal(t, ix.Changes[i].Factor, ch.Factor)
	}
	small := ix.Scaled(0.001)
	assert.Equal(t, 203, small.Records)
	assert.Equal(t, 50, small.VectorBurst, "a burst of at most a quarter of the run")
	small.Records, small.Changes, small.VectorBurst = ix.Records, ix.Changes, ix.VectorBurst
	assert.Equal(t, ix, small, "nothing else changes")
	assert.Panics(t, func() { ix.Scaled(0) })
}

func TestShortened(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		ix := upserttest.DrawIndex(seed)
		short := ix.Shortened(10 * time.Second)
		ideal := ix.IdealTime(ix.Records, upserttest.FamilyTimeout)
		if ideal <= 10*time.Second {
			assert.Equal(t, ix, short, "seed %d: short enough already", seed)
			continue
		}
		got := short.IdealTime(short.Records, upserttest.FamilyTimeout)
		assert.LessOrEqual(t, got, 10*time.Second, "seed %d", seed)
		assert.Greater(t, got, 8*time.Second, "seed %d: not much shorter than asked", seed)
	}
}

func TestRateScaledMovesTheVectorBucket(t *testing.T) {
	ix := upserttest.DrawIndex(1) // 5.11k records/s, a burst of 396
	slow := ix.RateScaled(0.1)
	assert.InDelta(t, ix.VectorRate/10, slow.VectorRate, 1e-9)
	assert.Equal(t, ix.VectorBurst/10, slow.VectorBurst)
	assert.Greater(t, slow.IdealTime(slow.Records, upserttest.FamilyTimeout), 5*ix.IdealTime(ix.Records, upserttest.FamilyTimeout), "the ideal follows the rate")
	slow.VectorRate, slow.VectorBurst = ix.VectorRate, ix.VectorBurst
	assert.Equal(t, ix, slow, "nothing else changes")
	assert.Equal(t, 1, ix.RateScaled(1e-6).VectorBurst, "a burst of one record at least")
	none := upserttest.Index{Records: 10, Latency: time.Millisecond}
	assert.Equal(t, none, none.RateScaled(0.1), "no vector rate: unchanged")
	assert.Panics(t, func() { ix.RateScaled(0) })
}
