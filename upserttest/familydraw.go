package upserttest

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// This file draws the indexes of the family (DrawIndex).

// FamilyTimeout is the request timeout that [DrawIndex] draws indexes
// for: every drawn index can be written with requests that time out after
// it (see [Index.IdealTime]).
const FamilyTimeout = 2 * time.Second

// The bounds of the family. The bounds on rates keep every index within
// what one machine of two cores serves, client and server in one process
// over loopback gRPC; those on the ideal time keep each run long enough to
// measure and short enough to run hundreds.
const (
	familyMinRate      = 300     // records per second, at the start
	familyMaxRate      = 100_000 // records per second, at any capacity factor
	familyMaxBytes     = 80e6    // request bytes per second, likewise
	familyMinRecords   = 10_000
	familyMaxRecords   = 1_000_000
	familyMinIdeal     = 2.0  // seconds
	familyMaxIdeal     = 45.0 // seconds
	familyNamespace    = "family"
	familySalt         = 0x243f_6a88_85a3_08d3
	familyServiceTries = 10_000
)

// DrawIndex draws an index of the family from seed: the same seed gives
// the same Index (and the same server, faults and jitter included),
// whatever the machine. Each parameter is drawn independently, from these
// ranges (log-uniform where it says so, uniform otherwise), and then
// bounded as said below:
//
//   - Dimension: log-uniform in 8–4096.
//   - Pinecone's per-namespace limits (PineconeLimits): those of a
//     serverless index, raised by a log-uniform ×2–×10, or none (a
//     pod-based index), a third each.
//   - Vector rate: with probability 0.8, log-uniform from 300 records/s up
//     to what the machine serves (100k records/s and 80 MB/s of
//     requests, divided by the largest capacity factor of the run), with
//     a burst of a log-uniform 0.05–2 s of it (at most a quarter of the
//     run); otherwise none.
//   - Latency: base log-uniform in 1–300 ms; with probability 0.5, a cost
//     per record log-uniform in 1–300 µs; with probability 0.3, a cost per
//     MiB log-uniform in 5–200 ms; with probability 0.7, a jitter σ
//     uniform in 0–1; with probability 0.25, a slowdown log-uniform ×2–×20
//     above a size log-uniform in 10–900 records.
//   - Write slots: with probability 0.7, log-uniform in 1–256; otherwise
//     unlimited.
//   - Capacity changes: with probability 0.25, one (or, one time in three,
//     two) of factor log-uniform ×0.25–×4, at a uniform 10–80% of the run
//     (of Records at the capacity at the start). A change scales the
//     index's admission rates ([WithCapacityChange]), not its slots or
//     latency: on an index bound by those it changes nothing, on the
//     server as in the ideal (35 of the 210 of seeds 1–800 that draw one).
//   - Outages: with probability 0.2, every 3–15 s, lasting 0.2–1.5 s (at
//     most a quarter of the period), answered codes.Unavailable.
//   - Random 429s: with probability 0.25, a share uniform in 0–5% of the
//     requests.
//   - Records: log-uniform in 10k–1M, then brought within [10k, 1M] to
//     an ideal time of 2–45 s for a client sending the largest batches
//     that reach the capacity. [Index.IdealTime] (with [FamilyTimeout]),
//     the least of that and two other clients', can be shorter: 6 of
//     seeds 1–800 are under 2 s (58, 151, 495, 528, 668, 675).
//
// The latency and slots are drawn again (up to 10,000 times) until the
// index serves at least 300 records/s at the start and, at every capacity
// factor of the run, at most 100k records/s and 80 MB/s of requests
// ([Index.Throughput] with FamilyTimeout); so an index without a vector
// rate is bounded by its slots and latency or by Pinecone's limits.
func DrawIndex(seed uint64) Index {
	r := rand.New(rand.NewPCG(seed, familySalt))
	ix := Index{Seed: seed, Namespace: familyNamespace, Dimension: int(math.Round(logUniform(r, 8, 4096)))}
	ix.PineconeLimits = drawLimits(r)
	ix.OutageEvery, ix.OutageLength = drawOutage(r)
	if r.Float64() < 0.25 {
		ix.RandomRateLimited = 0.05 * r.Float64()
	}
	changes := drawChanges(r)
	factors := []float64{1}
	for _, ch := range changes {
		factors = append(factors, ch.factor)
	}
	burstSeconds := 0.0
	if r.Float64() < 0.8 {
		top := min(familyMaxRate, familyMaxBytes/float64(ix.RequestBytes(1))) / slices.Max(factors)
		ix.VectorRate = logUniform(r, min(familyMinRate, top), top)
		burstSeconds = logUniform(r, 0.05, 2)
	}
	drawService(r, &ix, factors)
	fitRun(r, &ix, changes, burstSeconds)
	return ix
}

// drawnChange is a capacity change whose time is a share of the run.
type drawnChange struct {
	factor, share float64
}

func drawLimits(r *rand.Rand) float64 {
	switch r.IntN(3) {
	case 0:
		return 1
	case 1:
		return logUniform(r, 2, 10)
	default:
		return 0
	}
}

func drawOutage(r *rand.Rand) (every, length time.Duration) {
	if r.Float64() >= 0.2 {
		return 0, 0
	}
	e := 3 + 12*r.Float64()
	l := min(0.2+1.3*r.Float64(), e/4)
	return seconds(e), seconds(l)
}

func drawChanges(r *rand.Rand) []drawnChange {
	if r.Float64() >= 0.25 {
		return nil
	}
	n := 1
	if r.IntN(3) == 0 {
		n = 2
	}
	out := make([]drawnChange, n)
	for i := range out {
		out[i] = drawnChange{factor: logUniform(r, 0.25, 4), share: 0.1 + 0.7*r.Float64()}
	}
	slices.SortFunc(out, func(a, b drawnChange) int { return cmp.Compare(a.share, b.share) })
	return out
}

// drawService draws the latency, jitter, slowdown and slots of ix until it
// is within the family's rates at every factor.
func drawService(r *rand.Rand, ix *Index, factors []float64) {
	for range familyServiceTries {
		ix.Latency = seconds(logUniform(r, 1e-3, 0.3)).Round(time.Microsecond)
		ix.PerRecord, ix.PerMiB, ix.Jitter = 0, 0, 0
		ix.Slots, ix.SlowAbove, ix.SlowFactor = 0, 0, 0
		if r.Float64() < 0.5 {
			ix.PerRecord = seconds(logUniform(r, 1e-6, 300e-6)).Round(10 * time.Nanosecond)
		}
		if r.Float64() < 0.3 {
			ix.PerMiB = seconds(logUniform(r, 5e-3, 0.2)).Round(time.Microsecond)
		}
		if r.Float64() < 0.7 {
			ix.Jitter = r.Float64()
		}
		if r.Float64() < 0.25 {
			ix.SlowAbove = int(logUniform(r, 10, 900))
			ix.SlowFactor = logUniform(r, 2, 20)
		}
		if r.Float64() < 0.7 {
			ix.Slots = int(logUniform(r, 1, 257))
		}
		if serviceable(*ix, factors) {
			return
		}
	}
	panic("upserttest: DrawIndex: no serviceable index drawn") // never seen over the tested seeds
}

// serviceable reports whether ix serves at least familyMinRate at the
// start and at most the family's rates at every factor.
func serviceable(ix Index, factors []float64) bool {
	m := ix.model(FamilyTimeout)
	for i, f := range factors {
		p := m.plan(f)
		c, n := p.perSecond, p.batch
		if n == 0 || (i == 0 && c < familyMinRate) {
			return false
		}
		if c > familyMaxRate || c*float64(ix.RequestBytes(n))/float64(n) > familyMaxBytes {
			return false
		}
	}
	return true
}

// fitRun draws the records of the run, places the capacity changes in it
// and bounds the burst, bringing the ideal time within the family's.
func fitRun(r *rand.Rand, ix *Index, changes []drawnChange, burstSeconds float64) {
	start, _ := ix.Throughput(1, FamilyTimeout)
	want := logUniform(r, familyMinRecords, familyMaxRecords)
	for range 50 {
		ix.Records = int(math.Round(min(max(want, familyMinRecords), familyMaxRecords)))
		steady := float64(ix.Records) / start
		ix.Changes = nil
		for _, ch := range changes {
			ix.Changes = append(ix.Changes, CapacityChange{At: seconds(ch.share * steady).Round(time.Millisecond), Factor: ch.factor})
		}
		if ix.VectorRate > 0 {
			ix.VectorBurst = max(1, int(math.Round(min(ix.VectorRate*burstSeconds, float64(ix.Records)/4))))
		}
		ideal := ix.model(FamilyTimeout).clientTime(ix.Records, idealClient{}).Seconds()
		switch {
		case ideal > familyMaxIdeal && ix.Records > familyMinRecords:
			want = float64(ix.Records) * (familyMaxIdeal - 1) / ideal
		case ideal < familyMinIdeal && ix.Records < familyMaxRecords:
			want = float64(ix.Records) * (familyMinIdeal + 0.2) / ideal
		default:
			return
		}
	}
}

// logUniform draws from lo to hi, uniformly in logarithm.
func logUniform(r *rand.Rand, lo, hi float64) float64 {
	return math.Exp(math.Log(lo) + r.Float64()*(math.Log(hi)-math.Log(lo)))
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
