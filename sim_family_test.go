package upsert

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert/upserttest"
)

// drawSimIndex is upserttest's drawn index of seed, for the simulation.
func drawSimIndex(seed uint64) simIndex {
	ix := upserttest.DrawIndex(seed)
	timeout := upserttest.FamilyTimeout
	shiftIndex(&ix, &timeout, os.Getenv("UPSERT_SIM_SHIFT"))
	return simIndex{
		records: ix.Records, recordBytes: ix.RecordBytes(), vecRate: ix.VectorRate, vecBurst: ix.VectorBurst,
		reqRate: 100 * ix.PineconeLimits, byteRate: 50e6 * ix.PineconeLimits, slots: ix.Slots,
		base: ix.Latency, perRecord: ix.PerRecord, perMB: ix.PerMiB * 1e6 / (1 << 20),
		sigma: ix.Jitter, slowAbove: ix.SlowAbove, slowFactor: ix.SlowFactor, changes: ix.Changes,
		outageEvery: ix.OutageEvery, outageFor: ix.OutageLength, flaky: ix.RandomRateLimited, timeout: timeout,
		idealFn: func(n int) time.Duration { return ix.IdealTime(n, timeout) },
	}
}

// shiftIndex moves a drawn index off the family's ranges, for a check
// that the distribution holds on indexes the limiter was not judged on
// (UPSERT_SIM_SHIFT, comma-separated): records=F runs F times as many
// records (the burst kept within a quarter of the run); tail raises the
// jitter of a jittered index to σ 1–1.5; flaky adds five points to the
// share of random 429s of an index that has them; capacity=F multiplies
// the vector bucket's rate and burst by F; latency=F the fixed part of a
// request's latency; slots=F the write slots of an index that has a limit;
// timeout=D writes with requests that time out after D (30s is the
// library's default).
func shiftIndex(ix *upserttest.Index, timeout *time.Duration, shifts string) {
	for _, kv := range strings.Split(shifts, ",") {
		name, val, _ := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(val, 64)
		factor := err == nil && f > 0 // a factor that moves a range; others are ignored
		switch {
		case name == "records" && factor:
			ix.Records = max(1000, int(float64(ix.Records)*f))
			ix.VectorBurst = min(ix.VectorBurst, max(1, ix.Records/4))
		case name == "tail" && ix.Jitter > 0:
			ix.Jitter = 1 + ix.Jitter/2
		case name == "flaky" && ix.RandomRateLimited > 0:
			ix.RandomRateLimited += 0.05
		case name == "capacity" && factor:
			*ix = ix.RateScaled(f)
		case name == "latency" && factor: // the fixed part of a request's latency
			ix.Latency = time.Duration(float64(ix.Latency) * f)
		case name == "slots" && factor && ix.Slots > 0:
			ix.Slots = max(1, int(float64(ix.Slots)*f))
		case name == "timeout":
			if d, err := time.ParseDuration(val); err == nil {
				*timeout = d
			}
		}
	}
}

// meanLatency is the mean write latency of a request of n records.
func (ix simIndex) meanLatency(n int) float64 {
	d := float64(ix.base+time.Duration(n)*ix.perRecord) + float64(ix.perMB)*float64(n*ix.recordBytes)/1e6
	if ix.slowAbove > 0 && n > ix.slowAbove {
		d *= ix.slowFactor
	}
	return d / 1e9
}

// capacity is the most records a second the index takes, with its rates
// multiplied by scale (without its vector rate when noVec: what it takes
// while its vector bucket still holds a burst), and the batch size that
// gets it.
func (ix simIndex) capacity(scale float64, noVec ...bool) (float64, int) {
	best, at := 0.0, 1
	maxN := min(MaxBatchSize, 2_000_000/ix.recordBytes)
	tail := math.Exp(2.33*ix.sigma - ix.sigma*ix.sigma/2)
	for n := 1; n <= maxN; n++ {
		lat := ix.meanLatency(n)
		if lat*tail > ix.timeout.Seconds() {
			continue
		}
		c := 64 * float64(n) / lat
		if ix.slots > 0 {
			c = min(c, float64(ix.slots*n)/lat)
		}
		if ix.vecRate > 0 && len(noVec) == 0 {
			c = min(c, ix.vecRate*scale)
		}
		if ix.byteRate > 0 {
			c = min(c, ix.byteRate*scale/float64(ix.recordBytes))
		}
		if ix.reqRate > 0 {
			c = min(c, ix.reqRate*scale*float64(n))
		}
		if c > best {
			best, at = c, n
		}
	}
	return best, at
}

// ideal is the time a client that knew the index would take to write n
// records: one round trip, then what the index takes, faster while its
// vector bucket holds a burst, none during outages (upserttest's, for a
// drawn index).
func (ix simIndex) ideal(n int) time.Duration {
	if ix.idealFn != nil {
		return ix.idealFn(n)
	}
	c1, at := ix.capacity(1)
	fast, _ := ix.capacity(1, true)
	burst := float64(ix.vecBurst)
	if ix.vecRate <= 0 || fast <= ix.vecRate {
		burst = 0
	}
	left := float64(n)
	const step = 10 * time.Millisecond
	t := time.Duration(ix.meanLatency(at) * 1e9)
	for el := time.Duration(0); left > 0; el += step {
		c := c1
		if burst > 0 {
			// Faster while the bucket holds a burst, but by no more
			// than the burst.
			extra := min(burst, (fast-c)*step.Seconds())
			burst -= extra
			left -= extra
		}
		if ix.outageEvery > 0 && el%ix.outageEvery >= ix.outageEvery-ix.outageFor {
			c = 0
		}
		left -= c * step.Seconds()
		t += step
		if t > time.Hour {
			break
		}
	}
	return t
}

func (ix simIndex) String() string {
	var b strings.Builder
	c, n := ix.capacity(1)
	fmt.Fprintf(&b, "%d rec × %dB, C=%.0f/s at n=%d", ix.records, ix.recordBytes, c, n)
	if ix.vecRate > 0 {
		fmt.Fprintf(&b, ", vec %.0f/s burst %d", ix.vecRate, ix.vecBurst)
	}
	if ix.reqRate > 0 {
		fmt.Fprintf(&b, ", pinecone ×%.1f", ix.reqRate/100)
	}
	if ix.slots > 0 {
		fmt.Fprintf(&b, ", %d slots", ix.slots)
	}
	fmt.Fprintf(&b, ", lat %v+%v/rec+%v/MB σ=%.2f", ix.base.Round(time.Millisecond/10), ix.perRecord.Round(time.Microsecond), ix.perMB.Round(time.Millisecond), ix.sigma)
	if ix.slowAbove > 0 {
		fmt.Fprintf(&b, ", ×%.1f above %d", ix.slowFactor, ix.slowAbove)
	}
	for _, ch := range ix.changes {
		fmt.Fprintf(&b, ", ×%.2f at %v", ch.Factor, ch.At.Round(time.Second))
	}
	if ix.outageEvery > 0 {
		fmt.Fprintf(&b, ", out %v every %v", ix.outageFor.Round(time.Millisecond*100), ix.outageEvery.Round(time.Second))
	}
	if ix.flaky > 0 {
		fmt.Fprintf(&b, ", flaky %.1f%%", 100*ix.flaky)
	}
	return b.String()
}

// simOutcome is one index's figures.
type simOutcome struct {
	seed       uint64
	ix         simIndex
	res        simResult
	ideal      time.Duration
	efficiency float64
	refused    float64
	article    float64 // the article's efficiency
}

// simNamed are hand-made indexes, run by UPSERT_SIM_SEED=-1, -2, ...:
// upsertbench's fast and tight profiles, fast with 3% of random 429s, an
// index of 8 slots with them, and upsertbench's slow, outage, tiny and
// timeouts profiles.
var simNamed = []simIndex{
	{records: 600_000, recordBytes: 104, vecRate: 20000, vecBurst: 5000, reqRate: 100, byteRate: 50e6, base: 2 * time.Millisecond, perRecord: 20 * time.Microsecond, timeout: 2 * time.Second},
	{records: 90_000, recordBytes: 104, vecRate: 3000, vecBurst: 750, reqRate: 100, byteRate: 50e6, base: 2 * time.Millisecond, perRecord: 20 * time.Microsecond, timeout: 2 * time.Second},
	{records: 600_000, recordBytes: 104, vecRate: 20000, vecBurst: 5000, reqRate: 100, byteRate: 50e6, base: 2 * time.Millisecond, perRecord: 20 * time.Microsecond, timeout: 2 * time.Second, flaky: 0.03},
	{records: 600_000, recordBytes: 104, reqRate: 100, byteRate: 50e6, slots: 8, base: 20 * time.Millisecond, perRecord: 50 * time.Microsecond, timeout: 2 * time.Second, flaky: 0.03},
	{records: 1_500_000, recordBytes: 104, reqRate: 100, byteRate: 50e6, slots: 64, base: 50 * time.Millisecond, perRecord: 500 * time.Microsecond, timeout: 30 * time.Second},
	{records: 450_000, recordBytes: 104, vecRate: 20000, vecBurst: 5000, reqRate: 100, byteRate: 50e6, base: 2 * time.Millisecond, perRecord: 20 * time.Microsecond, timeout: 30 * time.Second, outageEvery: 4 * time.Second, outageFor: time.Second},
	{records: 15_000, recordBytes: 104, vecRate: 500, vecBurst: 125, reqRate: 100, byteRate: 50e6, base: 5 * time.Millisecond, perRecord: 50 * time.Microsecond, timeout: 30 * time.Second},
	{records: 600_000, recordBytes: 104, vecRate: 20000, vecBurst: 5000, reqRate: 100, byteRate: 50e6, base: 20 * time.Millisecond, perRecord: 100 * time.Microsecond, slowAbove: 300, slowFactor: 20, timeout: 2 * time.Second},
}

func simulate(seed uint64, t *tuning) simOutcome {
	ix := drawSimIndex(seed)
	if int64(seed) < 0 {
		ix = simNamed[-int64(seed)-1]
	}
	res := runSim(ix, seed, t)
	o := simOutcome{seed: seed, ix: ix, res: res, ideal: ix.ideal(ix.records)}
	if res.landed > 0 && res.elapsed > 0 {
		o.efficiency = ix.ideal(res.landed).Seconds() / res.elapsed.Seconds()
	}
	if res.requests > 0 {
		o.refused = float64(res.refusd) / float64(res.requests)
	}
	if a := runArticle(ix, seed); a.landed > 0 && a.elapsed > 0 {
		o.article = ix.ideal(a.landed).Seconds() / a.elapsed.Seconds()
	}
	return o
}

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// TestSimFamily runs the simulated family: UPSERT_SIM=N indexes (seeds 1
// to N), or UPSERT_SIM_SEED=s for one, printing each and the distribution.
func TestSimFamily(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("UPSERT_SIM"))
	oneSigned, _ := strconv.ParseInt(os.Getenv("UPSERT_SIM_SEED"), 10, 64)
	one := uint64(oneSigned)
	if n == 0 && one == 0 {
		t.Skip("UPSERT_SIM=N or UPSERT_SIM_SEED=s runs the simulated family")
	}
	seeds := []uint64{one}
	if one == 0 {
		seeds = seeds[:0]
		for s := 1; s <= n; s++ {
			seeds = append(seeds, uint64(s))
		}
	}
	if len(seeds) == 1 && os.Getenv("UPSERT_SIM_TRACE") != "" {
		simTrace = t.Logf
		if d, err := time.ParseDuration(os.Getenv("UPSERT_SIM_TRACE")); err == nil && d > 0 {
			simTraceEvery = d
		}
		defer func() { simTrace, simTraceEvery = nil, 500*time.Millisecond }()
	}
	tn := simTuning(t)
	var eff, ref, above, art, ratio []float64
	var outs []simOutcome
	for _, s := range seeds {
		o := simulate(s, &tn)
		outs = append(outs, o)
		eff = append(eff, o.efficiency)
		ref = append(ref, o.refused)
		above = append(above, max(0, o.refused-o.ix.flaky)) // what no client avoids taken off
		art = append(art, o.article)
		ratio = append(ratio, o.efficiency-o.article)
		if f := os.Getenv("UPSERT_SIM_JSONL"); f != "" {
			appendJSONL(t, f, o)
		}
		if len(seeds) == 1 || os.Getenv("UPSERT_SIM_V") != "" {
			t.Logf("seed %d: eff %.3f (article %.3f), 429 %.2f%%, %v (ideal %v), landed %d failed %d, %d requests, %d timeouts: %v",
				s, o.efficiency, o.article, 100*o.refused, o.res.elapsed.Round(time.Millisecond), o.ideal.Round(time.Millisecond),
				o.res.landed, o.res.failed, o.res.requests, o.res.timeouts, o.ix)
		}
	}
	slices.SortFunc(outs, func(a, b simOutcome) int { return cmpFloat(a.efficiency, b.efficiency) })
	for _, o := range outs[:min(10, len(outs))] {
		t.Logf("worst: seed %d eff %.3f (article %.3f) 429 %.2f%% failed %d: %v", o.seed, o.efficiency, o.article, 100*o.refused, o.res.failed, o.ix)
	}
	behind := 0
	for _, d := range ratio {
		if d < -0.02 {
			behind++
		}
	}
	t.Logf("efficiency median %.3f p10 %.3f min %.3f; 429 median %.2f%% p90 %.2f%% (above random %.2f%%, %.2f%%); article median %.3f p10 %.3f; behind the article by > 0.02 on %d",
		quantile(eff, 0.5), quantile(eff, 0.1), quantile(eff, 0), 100*quantile(ref, 0.5), 100*quantile(ref, 0.9),
		100*quantile(above, 0.5), 100*quantile(above, 0.9),
		quantile(art, 0.5), quantile(art, 0.1), behind)
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// simLine is one line of UPSERT_SIM_JSONL, in the field names of
// upsertbench's -family-out where they mean the same (upsertbench -plot
// reads either): one for the library's run of an index, one for the
// article's on the same index.
type simLine struct {
	Seed        uint64   `json:"seed"`
	Stream      uint64   `json:"stream"` // UPSERT_SIM_STREAM
	Strategy    string   `json:"strategy"`
	Efficiency  float64  `json:"efficiency"`
	Refused     *float64 `json:"rate_limited_share,omitempty"` // the library's line only (the article's is not counted)
	Ideal       float64  `json:"ideal_seconds"`
	Description string   `json:"description"`
}

// appendJSONL appends o's two lines to the file at path.
func appendJSONL(t *testing.T, path string, o simOutcome) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer f.Close() // when an Encode fails; otherwise the Close below, checked
	enc := json.NewEncoder(f)
	line := simLine{Seed: o.seed, Stream: simStream, Strategy: "upsert", Efficiency: o.efficiency, Refused: &o.refused,
		Ideal: o.ideal.Seconds(), Description: o.ix.String()}
	require.NoError(t, enc.Encode(line))
	line.Strategy, line.Efficiency, line.Refused = "article", o.article, nil
	require.NoError(t, enc.Encode(line))
	require.NoError(t, f.Close())
}

// simTuning is defaultTuning with the fields UPSERT_SIM_TUNE names
// ("recovery=1.5s,probeGain=0.2") set, for sweeps.
func simTuning(t *testing.T) tuning {
	tn := defaultTuning
	v := reflect.ValueOf(&tn).Elem()
	for _, kv := range strings.Split(os.Getenv("UPSERT_SIM_TUNE"), ",") {
		name, val, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		f := v.FieldByName(name)
		if f.IsValid() {
			f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem() // unexported
		}
		switch {
		case !f.IsValid():
			t.Fatalf("no tuning field %s", name)
		case f.Type() == reflect.TypeOf(time.Duration(0)):
			d, err := time.ParseDuration(val)
			if err != nil {
				t.Fatal(err)
			}
			f.SetInt(int64(d))
		case f.Kind() == reflect.Float64:
			x, err := strconv.ParseFloat(val, 64)
			if err != nil {
				t.Fatal(err)
			}
			f.SetFloat(x)
		case f.Kind() == reflect.Int:
			x, err := strconv.Atoi(val)
			if err != nil {
				t.Fatal(err)
			}
			f.SetInt(int64(x))
		}
	}
	return tn
}

// TestLimiterOnSimulatedIndexes runs the limiter against simulated indexes
// in virtual time: named ones it must take close to their capacity, and
// the first drawn indexes of the family, where no record may be lost or
// fail.
func TestLimiterOnSimulatedIndexes(t *testing.T) {
	for i, tt := range []struct {
		name     string
		eff      float64
		refusals float64 // the most of its requests it may see refused
	}{
		{"fast (20k/s)", 0.95, 0.06},
		// A cut a tenth deep refills the index's small bucket little
		// before the probe overdraws it again.
		{"tight (3k/s)", 0.95, 0.09},
		// No collapse; 3% refused at random on top of the probe's (4–8%
		// over sixteen streams of the simulation).
		{"fast, 3% of requests refused at random", 0.7, 0.08},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := simulate(uint64(-int64(i+1)), &defaultTuning)
			assert.Equal(t, o.ix.records, o.res.landed)
			assert.GreaterOrEqual(t, o.efficiency, tt.eff, "of the ideal time")
			assert.Less(t, o.refused, tt.refusals, "share of requests refused")
			assert.Greater(t, o.efficiency, o.article, "the article's algorithm")
		})
	}
	n := 60
	if testing.Short() {
		n = 20
	}
	// And indexes of one write slot with outages, where answers to
	// requests queued before an outage came during it, between the
	// failures of those sent then: the breaker stayed closed, and those
	// failures spent the retries of their batches.
	seeds := []uint64{227, 318, 410, 476, 685}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		seeds = append(seeds, seed)
	}
	for _, seed := range seeds {
		o := simulate(seed, &defaultTuning)
		assert.Equal(t, o.ix.records, o.res.landed+o.res.failed, "seed %d: every record settles", seed)
		assert.Zero(t, o.res.failed, "seed %d: no record fails on an index that only slows down", seed)
	}
}
