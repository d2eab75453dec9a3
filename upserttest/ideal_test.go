package upserttest_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert/upserttest"
)

func TestRequestBytesAreTheSDKs(t *testing.T) {
	ix := upserttest.Index{Dimension: 1536, Namespace: "bench"}
	assert.Equal(t, 6160, ix.RecordBytes(), "a record of 1536 dims with an id of 8 characters")
	assert.Equal(t, 7, ix.RequestBytes(0), "the namespace field")
	assert.Equal(t, 7+10*6160, ix.RequestBytes(10))
	assert.Equal(t, (2_000_000-7)/6160, ix.MaxBatch(), "2 MB bound the batch")
	assert.Equal(t, 1000, upserttest.Index{Dimension: 8}.MaxBatch(), "1000 records bound the batch")
	assert.Equal(t, 13, upserttest.Index{Dimension: 8}.RequestBytes(0), `"" is sent as "__default__"`)
}

func TestIdealTime(t *testing.T) {
	const timeout = 2 * time.Second
	serverless1536 := upserttest.Index{Dimension: 1536, Latency: time.Millisecond, PineconeLimits: 1}
	perByteRate := 50e6 * float64(serverless1536.MaxBatch()) / float64(serverless1536.RequestBytes(serverless1536.MaxBatch()))
	q1000 := 1 - 0.5*math.Erfc(-(math.Log(2/0.2)+0.18)/0.6/math.Sqrt2) // of 1000 records at 0.2 s, σ 0.6, timing out at 2 s
	tests := []struct {
		name    string
		ix      upserttest.Index
		records int
		want    float64 // seconds
	}{{
		name: "a vector rate: a batch at once (a full bucket takes a batch over its burst, into debt), " +
			"the rest at the rate, and the last batch's latency",
		ix:      upserttest.Index{Dimension: 8, VectorRate: 1000, VectorBurst: 500, Latency: 10 * time.Millisecond},
		records: 10_500,
		want:    9.5 + 0.010,
	}, {
		name: "a vector rate and a slow size: the rate's whole in batches at the slow size (1000 at 10 ms × 20), " +
			"the last one quickest in batches under it",
		ix: upserttest.Index{Dimension: 8, VectorRate: 1000, VectorBurst: 500, Latency: 10 * time.Millisecond,
			SlowAbove: 100, SlowFactor: 20},
		records: 10_500,
		want:    9.7,
	}, {
		name: "a jitter far under the timeout: the largest batch takes the burst at once, though a few millionths " +
			"more of its requests time out than of a batch of two",
		ix: upserttest.Index{Dimension: 8, VectorRate: 1000, VectorBurst: 5000, Latency: 100 * time.Millisecond,
			PerRecord: 100 * time.Microsecond, Jitter: 0.6},
		records: 10_000,
		// 5000 tokens at once, the rest at 1000 a second, each record
		// landed costing 1/(1 − q) of them; then a batch's 0.2 s.
		want: 10/(1-q1000) - 5 + 0.2,
	}, {
		name:    "slots: 2 batches of 1000 every 100 ms, whose first wave is in flight at once",
		ix:      upserttest.Index{Dimension: 8, Slots: 2, Latency: 100 * time.Millisecond},
		records: 20_000,
		want:    1.0,
	}, {
		name:    "Pinecone's request rate: 100 requests of 1000 a second, the burst taken as fast as 64 in flight allow",
		ix:      upserttest.Index{Dimension: 8, Latency: time.Millisecond, PineconeLimits: 1},
		records: 1_000_000,
		// 64 requests at once; the other 36 of the burst pass while the 64
		// in flight refill, within d = 36/(64/1 ms − 100/s), in which
		// d × 64/1 ms requests pass: 36 + 100 d. From then on, 100 requests/s:
		// d + (1M − 1000 × (64 + 36 + 100 d))/100k = (1M − 100k)/100k; plus 1 ms.
		want: (1_000_000-100_000)/100_000.0 + 0.001,
	}, {
		name:    "Pinecone's byte rate: 50 MB at once, then 50 MB/s in batches of 324 records of 1536 dims",
		ix:      serverless1536,
		records: 100_000,
		want:    (100_000-perByteRate)/perByteRate + 0.001,
	}, {
		name: "an outage: nothing from 3 s to 4 s, while the bucket refills its burst",
		ix: upserttest.Index{Dimension: 8, VectorRate: 1000, VectorBurst: 1000, Latency: 10 * time.Millisecond,
			OutageEvery: 4 * time.Second, OutageLength: time.Second},
		records: 7000,
		want:    6 + 0.010, // 1000 + 3 s × 1000, then 1000 at 4 s and 2 s × 1000
	}, {
		name: "a capacity change: half the rate from 2 s",
		ix: upserttest.Index{Dimension: 8, VectorRate: 1000, VectorBurst: 1000, Latency: 10 * time.Millisecond,
			Changes: []upserttest.CapacityChange{{At: 2 * time.Second, Factor: 0.5}}},
		records: 4000,
		want:    4 + 0.010, // 1000 + 2 s × 1000, then 2 s × 500
	}, {
		name:    "no batch fits the timeout: no ideal",
		ix:      upserttest.Index{Dimension: 8, Latency: 3 * time.Second},
		records: 1000,
		want:    0,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.InDelta(t, tt.want, tt.ix.IdealTime(tt.records, timeout).Seconds(), 1e-6)
		})
	}
}

// Before a capacity drop, the ideal client queues requests for the slots:
// here 1 request in the slot and 39 queued (the slot writes 39 in the
// timeout less 50 ms). The burst's 1000 records pass at once, then 80k/s
// while the 39 places fill at 80 − 20 = 60 requests/s (0.65 s, 53k
// records), then the slot's 20k/s; the last record, admitted at 1 s, is
// written with the 40 requests outstanding then, its own last: 2 s later.
// Without the queue: 41k records by the drop, the burst saved at it, then
// 10k/s, and 50 ms: 3.85 s.
func TestIdealTimeOfAQueueBeforeACapacityDrop(t *testing.T) {
	ix := upserttest.Index{Dimension: 8, VectorRate: 80_000, VectorBurst: 1000, Slots: 1, Latency: 50 * time.Millisecond,
		Changes: []upserttest.CapacityChange{{At: 2 * time.Second, Factor: 0.125}}}
	assert.InDelta(t, 1+40*0.05, ix.IdealTime(60_000, 2*time.Second).Seconds(), 1e-6)
}

// heldGoodput is C(1000) of an index without slots, 64 requests in flight
// of a mean latency of 20 s, σ 1, that time out at 2 s: a request holds a
// client's slot for min(latency, 2 s), E = 20 Φ(d − 1) + 2 (1 − Φ(d)).
func heldGoodput() float64 {
	phi := func(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }
	d := math.Log(2.0/20) + 0.5
	held := 20*phi(d-1) + 2*(1-phi(d))
	return phi(d) * 64 * 1000 / held
}

// goodput is C(n) of the jittery index of TestThroughput.
func goodput(n int) float64 {
	lat := 0.1 + 0.001*float64(n)
	q := 1 - 0.5*math.Erfc(-(math.Log(0.6/lat)+0.125)/0.5/math.Sqrt2)
	return (1 - q) * float64(n) / lat
}

func TestThroughput(t *testing.T) {
	const timeout = 2 * time.Second
	tests := []struct {
		name      string
		ix        upserttest.Index
		timeout   time.Duration
		factor    float64 // 0: 1
		perSecond float64
		batch     int
	}{{
		name:      "64 in flight bound an index without limits",
		ix:        upserttest.Index{Dimension: 8, Latency: 100 * time.Millisecond},
		perSecond: 64 * 1000 / 0.1, batch: 1000,
	}, {
		name:      "the largest batch whose latency fits the timeout",
		ix:        upserttest.Index{Dimension: 8, Latency: 100 * time.Millisecond, PerRecord: time.Millisecond, Slots: 1},
		timeout:   600 * time.Millisecond,
		perSecond: 500 / 0.6, batch: 500,
	}, {
		name: "with jitter, the batch whose records land fastest, counting those that time out and go again",
		// 1 slot, 100 ms + 1 ms a record, σ 0.5, 600 ms timeout: C(n) =
		// (1 − q(n)) × n / (0.1 + 0.001 n), q(n) = 1 − Φ((ln(0.6 / lat) +
		// σ²/2) / σ); at 258 records C is 649/s with 10% timing out,
		// against 523/s at 112, the largest whose p99 fits.
		ix:        upserttest.Index{Dimension: 8, Latency: 100 * time.Millisecond, PerRecord: time.Millisecond, Slots: 1, Jitter: 0.5},
		timeout:   600 * time.Millisecond,
		perSecond: goodput(258), batch: 258,
	}, {
		name: "without slots, a batch whose requests mostly time out: each holds a client's slot until the timeout, " +
			"and 64 of 1000 records of 20 s (96% timing out) reach more than 64 of 10 of 1 s (12%)",
		ix:        upserttest.Index{Seed: 1, Dimension: 8, Latency: time.Second, Jitter: 1, SlowAbove: 10, SlowFactor: 20},
		perSecond: heldGoodput(), batch: 1000,
	}, {
		name:      "batches below a slowdown when it costs more than it brings",
		ix:        upserttest.Index{Dimension: 8, Latency: 20 * time.Millisecond, SlowAbove: 300, SlowFactor: 20, Slots: 1},
		perSecond: 300 / 0.02, batch: 300,
	}, {
		name:      "the largest of the batches that reach a vector rate",
		ix:        upserttest.Index{Dimension: 8, VectorRate: 5000, Latency: 20 * time.Millisecond, Slots: 1, PineconeLimits: 1},
		perSecond: 5000, batch: 1000,
	}, {
		name:      "a capacity factor scales the buckets, not the slots",
		ix:        upserttest.Index{Dimension: 8, VectorRate: 5000, Latency: 100 * time.Millisecond, Slots: 1},
		factor:    4,
		perSecond: 10_000, batch: 1000, // min(4 × 5000, 1 × 1000 / 0.1 s)
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			perSecond, batch := tt.ix.Throughput(cmp.Or(tt.factor, 1), cmp.Or(tt.timeout, timeout))
			assert.InEpsilon(t, tt.perSecond, perSecond, 1e-9)
			assert.Equal(t, tt.batch, batch)
		})
	}
}

// vectorsNamed is n records of ix's dimension with ids prefix-0, prefix-1, …
func vectorsNamed(prefix string, n, dim int) []*pinecone.Vector {
	out := make([]*pinecone.Vector, n)
	for i := range out {
		values := make([]float32, dim)
		values[0] = 1
		out[i] = &pinecone.Vector{Id: fmt.Sprintf("%s-%d", prefix, i), Values: &values}
	}
	return out
}

// The vector bucket of the server (internal/tokenbucket) admits a request
// larger than its burst whenever it is full, leaving it in debt: for a
// client sending batches of n > VectorBurst, the bucket acts as one of
// burst n, and the ideal counts it so (it once gave the index only
// VectorBurst at once: a client sending batches of 1000 into a bucket of
// burst 10 was 1.5 times quicker than the "ideal").
func TestIdealTimeBoundsAClientSendingBatchesLargerThanTheVectorBurst(t *testing.T) {
	ix := upserttest.Index{
		Dimension: 8, Namespace: ns,
		VectorRate: 1000, VectorBurst: 10,
		Latency: time.Millisecond,
	}
	const records = 3000
	ideal := ix.IdealTime(records, upserttest.FamilyTimeout)

	clock := newVirtualClock()
	srv := start(t, append(ix.Options(), upserttest.WithClock(clock.Now))...)
	idx := connect(t, srv)
	// A batch of 1000 whenever the bucket is full again: at 0 s, 1 s, 2 s
	// of the server's clock (the admission runs on it).
	var last time.Duration
	for i := range 3 {
		if i > 0 {
			clock.Advance(time.Second)
			last += time.Second
		}
		_, err := idx.UpsertVectors(bg(t), vectorsNamed(fmt.Sprintf("b%d", i), 1000, ix.Dimension))
		require.NoError(t, err, "batch %d at %v", i, last)
	}
	require.Equal(t, records, srv.Count(ns), "every record landed")
	achieved := last + ix.Latency // the last batch admitted at 2 s, written 1 ms later
	assert.GreaterOrEqual(t, achieved.Seconds(), ideal.Seconds()*0.99,
		"a client wrote the run in %v, the ideal says no client can in under %v (efficiency %.2f)",
		achieved, ideal, ideal.Seconds()/achieved.Seconds())
}

// A family index's outage stops writes as well as arrivals: a request that
// waited in the slot queue and gets its slot during the outage fails. It
// was written, so that a client queueing requests for the slots before an
// outage (the article's 4 workers on an index of 1 slot: efficiency 1.10
// on seed 35) beat the ideal, which admits nothing during an outage: here
// 8 batches sent at once took 1.6 s where the ideal says 2.2 s.
func TestIdealTimeBoundsAClientThatQueuesForTheSlotsBeforeAnOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 2.5 s of real time")
	}
	ix := upserttest.Index{
		Dimension: 8, Namespace: ns,
		Slots: 1, Latency: 200 * time.Millisecond,
		OutageEvery: 1600 * time.Millisecond, OutageLength: 800 * time.Millisecond,
	}
	const batches, size = 8, 1000
	ideal := ix.IdealTime(batches*size, upserttest.FamilyTimeout)

	srv := start(t, ix.Options()...)
	idx := connect(t, srv)
	begin := time.Now()
	var wg sync.WaitGroup
	for i := range batches {
		wg.Go(func() {
			b := vectorsNamed(fmt.Sprintf("b%d", i), size, ix.Dimension)
			for ctx := bg(t); ctx.Err() == nil; {
				rctx, cancel := context.WithTimeout(ctx, upserttest.FamilyTimeout)
				_, err := idx.UpsertVectors(rctx, b)
				cancel()
				if code(err) == codes.OK {
					return
				}
				time.Sleep(10 * time.Millisecond) // an outage: again
			}
		})
	}
	wg.Wait()
	requireNotUnderIdeal(t, srv, batches*size, time.Since(begin), ideal)
}

// The server takes a request's admission tokens when it arrives, and the
// request then waits in the FIFO slot queue (up to the client's timeout):
// a client that knows the vector rate will drop can have its requests
// admitted at the high rate before the drop and written by the slots after
// it. The ideal once admitted only what the slots took, so after the drop
// it counted the low rate: this client took 3.06 s where it said 3.85 s.
// The ideal now queues up to IdealMaxInFlight − slots requests, as many as
// the slot writes within the timeout (39 here): 3.0 s.
func TestTheIdealQueuesRequestsForTheSlotsBeforeACapacityDrop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 s of real time")
	}
	ix := upserttest.Index{
		Dimension: 8, Namespace: ns,
		VectorRate: 80_000, VectorBurst: 1000,
		Slots: 1, Latency: 50 * time.Millisecond, // 20k records/s through the slot
		Changes: []upserttest.CapacityChange{{At: 2 * time.Second, Factor: 0.125}}, // 10k records/s from 2 s
	}
	const batches, size = 60, 1000
	ideal := ix.IdealTime(batches*size, upserttest.FamilyTimeout)

	srv := start(t, ix.Options()...)
	begin := time.Now()
	idx := connect(t, srv)
	var wg sync.WaitGroup
	for i := range batches {
		// Half the vector rate: each request is admitted on arrival, and
		// waits (i × 25 ms, under the timeout) for the slot.
		time.Sleep(time.Until(begin.Add(time.Duration(i) * 25 * time.Millisecond)))
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), upserttest.FamilyTimeout)
			defer cancel()
			_, err := idx.UpsertVectors(ctx, vectorsNamed(fmt.Sprintf("b%d", i), size, ix.Dimension))
			assert.NoError(t, err, "batch %d", i)
		})
	}
	wg.Wait()
	requireNotUnderIdeal(t, srv, batches*size, time.Since(begin), ideal)
}

// On an index without a slot limit, the ideal's requests in flight are
// the client's (at most IdealMaxInFlight), and a client gets a slot of its
// own back when its request times out, while the server still writes it.
// The ideal once charged each request the mean of its whole write latency
// instead, so that where the jitter makes requests time out, 64 requests
// in flight landed more records than it allowed (seed 515: q 0.50, seed
// 137: q 0.085): here 64 workers, batches of the ideal's size, each
// request within FamilyTimeout and sent again when it times out, landed
// in 5 s what the ideal said takes about 6 s; it now says about 5.1 s
// (the records landed by 5 s favour the quicker requests).
//
// Batches above 10 take 50 s (SlowFactor 50): at 20 s, batches of 1000
// would reach more than batches of 10, their requests holding a client's
// slot for 2 s at most (see TestThroughput).
func TestTheIdealFreesAClientSlotAtTheTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 5 s of real time")
	}
	ix := upserttest.Index{
		Seed: 1, Dimension: 8, Namespace: ns,
		Latency: time.Second, Jitter: 1, // 12% of requests take over 2 s
		SlowAbove: 10, SlowFactor: 50, // batches of 10 (a light test)
	}
	_, n := ix.Throughput(1, upserttest.FamilyTimeout)
	require.Equal(t, 10, n)

	begin := time.Now() // before NewServer: the ideal counts from it
	srv := start(t, ix.Options()...)
	idx := connect(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	var next atomic.Int64
	var wg sync.WaitGroup
	for range upserttest.IdealMaxInFlight {
		wg.Go(func() {
			for ctx.Err() == nil {
				b := vectorsNamed(fmt.Sprintf("b%d-", next.Add(1)), n, ix.Dimension)
				for ctx.Err() == nil { // again until it is answered OK
					rctx, rcancel := context.WithTimeout(ctx, upserttest.FamilyTimeout)
					_, err := idx.UpsertVectors(rctx, b)
					rcancel()
					if err == nil {
						break
					}
				}
			}
		})
	}
	const run = 5 * time.Second
	time.Sleep(time.Until(begin.Add(run)))
	landed := srv.Count(ns)
	cancel()
	wg.Wait()
	ideal := ix.IdealTime(landed, upserttest.FamilyTimeout)
	assert.LessOrEqual(t, ideal.Seconds(), run.Seconds()*1.05,
		"64 requests in flight landed %d records in %v; the ideal says no client can in under %v (efficiency %.2f)",
		landed, run, ideal, ideal.Seconds()/run.Seconds())
}

// One slot, no jitter: the slot writes one request at a time, a request
// of n records holding it for 5 ms + 0.1 ms × n (at most 1000 records, in
// 105 ms: 9,524 records a second at best), so no client writes 50,000
// records in under 5.25 s, whatever it queues or when (a request whose
// client gives up while it waits for the slot is dropped, not written).
//
// The quickest client that queues sends batches of 1000 with 18 requests
// queued behind the one written (about 2 s of writes outstanding); when
// the capacity drops to a tenth at 2 s, batches of 9 (5.9 ms) are the
// quickest. The ideal rescales the requests outstanding to the new batch
// (339 of 9), more than its places (64): it once clipped them to those,
// and so cut the 2 s of writes queued before the drop to 0.11 s, admitted
// records the slot had no time to write, and said 4.27 s. The requests
// outstanding beyond the places are now a debt, repaid as the slot writes
// them before anything more is admitted.
func TestWritesQueuedBeforeABatchChangeKeepTheSlotBusy(t *testing.T) {
	ix := upserttest.Index{
		Dimension: 8, Records: 50_000,
		VectorRate: 15_000, VectorBurst: 1000,
		Latency: 5 * time.Millisecond, PerRecord: 100 * time.Microsecond, Slots: 1,
		Changes: []upserttest.CapacityChange{{At: 2 * time.Second, Factor: 0.1}, {At: 2200 * time.Millisecond, Factor: 1}},
	}
	const slotBound = 50_000 * 0.105 / 1000 // seconds of the slot's writes, at best
	ideal := ix.IdealTime(ix.Records, upserttest.FamilyTimeout)
	assert.GreaterOrEqual(t, ideal.Seconds(), slotBound*(1-1e-9),
		"the one slot needs %.2f s to write the run; IdealTime says %v", slotBound, ideal)
}

// requireNotUnderIdeal checks that the client that wrote records to srv
// in took no less than ideal (within 5%, for the machine's timing): the
// ideal is what no client can beat.
func requireNotUnderIdeal(t *testing.T, srv *upserttest.Server, records int, took, ideal time.Duration) {
	t.Helper()
	require.Equal(t, records, srv.Count(ns), "every record landed")
	assert.GreaterOrEqual(t, took.Seconds(), ideal.Seconds()*0.95,
		"a client wrote the run in %v, the ideal says no client can in under %v (efficiency %.2f)",
		took, ideal, ideal.Seconds()/took.Seconds())
}
