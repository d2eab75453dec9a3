package main

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/upsertlib/upsert/upserttest"
)

// TestRun runs the tight profile at a very small scale (1800 records, about
// a second per strategy) with every strategy, and checks that each produces
// a row and that the library loses nothing.
func TestRun(t *testing.T) {
	cfg, err := parseFlags([]string{"-profiles", "tight", "-scale", "0.02", "-deadline", "20s"})
	require.NoError(t, err)
	require.Len(t, cfg.profiles, 1)
	require.Len(t, cfg.strategies, 4)

	for _, s := range cfg.strategies {
		t.Run(s.name, func(t *testing.T) {
			r, err := run(context.Background(), cfg.profiles[0], s, cfg.scale, cfg.deadline, nil)
			require.NoError(t, err)
			assert.Equal(t, 1800, r.records)
			assert.False(t, r.stopped, "stopped at the deadline")
			assert.Positive(t, r.requests)
			assert.Positive(t, r.calls.requests, "the interceptor saw no calls")
			assert.Positive(t, r.calls.p50)
			if s.reports {
				assert.Zero(t, r.lost, "upsert lost records")
			} else {
				assert.Equal(t, r.records-r.landed, r.lost, "records not stored")
			}

			var out bytes.Buffer
			writeRow(&out, r)
			assert.True(t, strings.HasPrefix(out.String(), "| tight | "+s.name+" | "), "row: %s", out.String())
		})
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(nil)
	require.NoError(t, err)
	assert.Len(t, cfg.profiles, 10)
	assert.Len(t, cfg.strategies, 4)
	assert.Equal(t, 1.0, cfg.scale)
	assert.Equal(t, 60*time.Second, cfg.deadline)

	cfg, err = parseFlags([]string{"-scale", "0.5"})
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, cfg.deadline, "default deadline scaled")
	cfg, err = parseFlags([]string{"-scale", "0.01"})
	require.NoError(t, err)
	assert.Equal(t, minDeadline, cfg.deadline)
	cfg, err = parseFlags([]string{"-scale", "0.5", "-deadline", "5s"})
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, cfg.deadline, "explicit deadline")

	_, err = parseFlags([]string{"-profiles", "fast,nope"})
	assert.ErrorContains(t, err, `"nope"`)
	cfg, err = parseFlags([]string{"-profiles", "tight,bigburst"})
	require.NoError(t, err)
	assert.Equal(t, []string{"tight", "bigburst"}, []string{cfg.profiles[0].name, cfg.profiles[1].name}, "extra profiles run when named")
	seen := map[string]bool{}
	for _, p := range slices.Concat(profiles(), extraProfiles()) {
		assert.False(t, seen[p.name], "%s is the name of one profile only", p.name)
		seen[p.name] = true
	}
	_, err = parseFlags([]string{"-scale", "0"})
	assert.Error(t, err)
}

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	assert.Equal(t, 50*time.Millisecond, quantile(d, 0.5))
	assert.Equal(t, 99*time.Millisecond, quantile(d, 0.99))
	assert.Zero(t, quantile([]time.Duration(nil), 0.5))
}

func TestWideCapacityIsTheByteLimitInRecords(t *testing.T) {
	assert.Equal(t, 6160, sdkRecordBytes(t, makeRecords(0, 1, 1536)[0]), "bytes a record adds to a request")
	assert.InDelta(t, 50e6/6160, wideCapacity, 1e-9, "upserttest.Serverless() reads 50 MB as 50,000,000 bytes")
}

// sdkRecordBytes returns the bytes rec adds to an UpsertRequest, the SDK's
// message type.
func sdkRecordBytes(t *testing.T, rec *pinecone.Vector) int {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName("UpsertRequest")
	require.NoError(t, err, "the SDK registers UpsertRequest")
	req := mt.New()
	vectors := req.Mutable(req.Descriptor().Fields().ByName("vectors")).List()
	v := vectors.NewElement().Message()
	fields := v.Descriptor().Fields()
	v.Set(fields.ByName("id"), protoreflect.ValueOfString(rec.Id))
	values := v.Mutable(fields.ByName("values")).List()
	for _, x := range *rec.Values {
		values.Append(protoreflect.ValueOfFloat32(x))
	}
	vectors.Append(protoreflect.ValueOfMessage(v))
	return proto.Size(req.Interface())
}

// runsNothing reports whether args parse and select no run at all, and
// the benchmark they select then returns nil (exit 0) having run nothing.
func runsNothing(t *testing.T, args ...string) bool {
	t.Helper()
	cfg, err := parseFlags(args)
	if err != nil {
		return false // refused: fine
	}
	runs := 0
	if cfg.family != nil {
		runs = len(cfg.family) * len(cfg.strategies)
	} else {
		for _, p := range cfg.profiles {
			for _, s := range cfg.strategies {
				if s.runsOn(p) {
					runs++
				}
			}
		}
	}
	if runs > 0 {
		return false
	}
	run := bench
	if cfg.family != nil {
		run = benchFamily
	}
	var out bytes.Buffer
	return run(context.Background(), cfg, &out, io.Discard) == nil
}

// -strategies separate (a strategy that runs only with several clients)
// with the family, or with single-client profiles, selects no run at all:
// it is a usage error, as -scenarios redis-dies without -redis is, rather
// than empty tables and exit 0.
func TestStrategiesThatRunNowhereAreAUsageError(t *testing.T) {
	assert.False(t, runsNothing(t, "-seed", "1", "-strategies", "separate"),
		"-seed 1 -strategies separate: the family drops separate, and runs no strategy, exit 0")
	assert.False(t, runsNothing(t, "-profiles", "fast,tight", "-strategies", "separate"),
		"-profiles fast,tight -strategies separate: no profile has several clients, nothing runs, exit 0")

	_, err := parseFlags([]string{"-seed", "1", "-strategies", "separate"})
	assert.ErrorContains(t, err, "several clients")
	_, err = parseFlags([]string{"-profiles", "fast,tight", "-strategies", "separate"})
	assert.ErrorContains(t, err, "several clients")
	for _, ok := range [][]string{{"-profiles", "fast,shared", "-strategies", "separate"}, {"-profiles", "fast", "-strategies", "upsert,separate"}, {"-seed", "1", "-strategies", "upsert,separate"}} {
		_, err = parseFlags(ok)
		assert.NoError(t, err, "%q runs something", ok)
	}
}

// The flags documented "with the family benchmark" or "with -procs" are
// refused without it: accepted, they would be ignored (-family-out writes
// no file, -max-ideal and -rate-scale change nothing, -scenarios and
// -redis select nothing) and the profile benchmark (minutes) run instead.
func TestModeFlagsWithoutTheirModeAreAUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"-family-out", "runs.jsonl"},
		{"-max-ideal", "10s"},
		{"-rate-scale", "0.1"},
		{"-scenarios", "together"},
		{"-redis"},
	} {
		cfg, err := parseFlags(args)
		if err == nil {
			assert.False(t, cfg.family == nil && cfg.procs == nil,
				"%q is accepted, ignored, and runs the profile benchmark", args)
		}
		assert.ErrorContains(t, err, args[0]+" applies only to", "%q", args)
	}
	_, err := parseFlags([]string{"-procs", "2", "-family-out", "runs.jsonl"})
	assert.ErrorContains(t, err, "-family-out applies only to the family")
	_, err = parseFlags([]string{"-seed", "1", "-redis"})
	assert.ErrorContains(t, err, "-redis applies only to the process benchmark")
	_, err = parseFlags([]string{"-procs", "2", "-profiles", "fast"})
	assert.ErrorContains(t, err, "-profiles applies only to the profile benchmark")
	_, err = parseFlags([]string{"-seed", "1", "-profiles", "fast"})
	assert.ErrorContains(t, err, "-profiles applies only to the profile benchmark")
	_, err = parseFlags([]string{"-procs", "2", "-strategies", "upsert"})
	assert.ErrorContains(t, err, "-strategies applies only to the profile and family benchmarks")
}

// -deadline does not apply to the family (a run stops at max(4 × ideal,
// ideal + 10 s)): given with it, it is refused rather than ignored.
func TestDeadlineWithTheFamilyIsAUsageError(t *testing.T) {
	_, err := parseFlags([]string{"-seed", "1", "-deadline", "5s"})
	assert.ErrorContains(t, err, "-deadline")
	cfg, err := parseFlags([]string{"-procs", "2", "-deadline", "5s"})
	require.NoError(t, err, "the process benchmark has a deadline")
	assert.Equal(t, 5*time.Second, cfg.deadline)
}

// -scale is a positive finite factor, as -rate-scale is and as
// upserttest.Index.Scaled requires: +Inf is a usage error, not a panic of
// the family's first index (or, with the profiles, runs of one record),
// and so is a factor whose record counts would overflow.
func TestScaleMustBeAFiniteFactor(t *testing.T) {
	for _, args := range [][]string{{"-seed", "1", "-scale", "+Inf"}, {"-scale", "+Inf"}, {"-scale", "-Inf"}, {"-scale", "NaN"}, {"-scale", "0"}, {"-scale", "1e300"}} {
		cfg, err := parseFlags(args)
		if !assert.ErrorContains(t, err, "need a positive finite factor", "%q is accepted", args) && cfg.family != nil {
			assert.NotPanics(t, func() { newFamilyIndex(cfg.family[0], cfg.scale, cfg.rateScale, cfg.maxIdeal) },
				"%q: the family's first index panics instead of a usage error", args)
		}
	}
}

// The lost cell of a stopped run still counts the records lost, marked
// "(stopped)", for the strategies that report their failures (the
// library's check that it loses nothing); for those that report nothing,
// whose every record not sent counts as lost, it is "stopped" alone. The
// process benchmark's writers all run the library.
func TestAStoppedRowStillShowsTheRecordsLost(t *testing.T) {
	for _, tc := range []struct {
		name     string
		r        result
		wantLost string
	}{
		{name: "reports, stopped", r: result{strategy: "upsert", reports: true, lost: 3, stopped: true}, wantLost: "3 (stopped)"},
		{name: "reports, done", r: result{strategy: "upsert", reports: true, lost: 0}, wantLost: "0"},
		{name: "reports nothing, stopped", r: result{strategy: "naive", lost: 40, stopped: true}, wantLost: "stopped"},
		{name: "reports nothing, done", r: result{strategy: "naive", lost: 2}, wantLost: "2"},
	} {
		r := tc.r
		r.profile, r.records, r.landed, r.reported, r.elapsed = "tight", 100, 60, 37, time.Second
		var out bytes.Buffer
		writeRow(&out, r)
		cells := strings.Split(strings.Trim(strings.TrimSpace(out.String()), "|"), "|")
		require.Len(t, cells, 11, "%s: row %q", tc.name, out.String())
		assert.Equal(t, tc.wantLost, strings.TrimSpace(cells[7]), "%s: the lost cell", tc.name)
	}

	var row bytes.Buffer
	writeProcRow(&row, procResult{writers: 2, scenario: "together", strategy: "separate", lost: 3, stopped: true, elapsed: time.Second, spread: 1})
	assert.Contains(t, row.String(), "| 3 (stopped) |", "the process benchmark's row")
}

// A run's clock runs on after its clients return only for writes that land
// records missing then: a timed-out request the strategy split and resent
// (the article's rule, and the library's) is still written by the server,
// again, long after, and adds nothing. Here 100 records time out in one request of 1 s (×20 above
// 50 records), land in two halves of 50 ms each, and the strategy returns
// at about 0.3 s with all of them stored; the run is measured to the
// duplicate write at 1 s.
func TestALateDuplicateOfRecordsAlreadyLandedDoesNotStretchTheRun(t *testing.T) {
	ix := upserttest.Index{Dimension: 8, Namespace: namespace, Latency: 50 * time.Millisecond, SlowAbove: 50, SlowFactor: 20}
	p := profile{name: "split", records: 100, clients: 1, timeout: familyTimeout, dimension: ix.Dimension, index: &ix}
	var returned time.Duration
	splits := strategy{name: "splits", newRun: func() writeFunc {
		return func(ctx context.Context, idx *pinecone.IndexConnection, records []*pinecone.Vector, _ time.Duration) ([]string, error) {
			begin := time.Now()
			_ = upsertOnce(ctx, idx, records, 150*time.Millisecond) // times out; written at 1 s all the same
			for _, half := range [][]*pinecone.Vector{records[:50], records[50:]} {
				if err := upsertOnce(ctx, idx, half, familyTimeout); err != nil {
					return nil, err
				}
			}
			returned = time.Since(begin)
			return nil, nil
		}
	}}
	r, err := run(context.Background(), p, splits, 1, 10*time.Second, nil)
	require.NoError(t, err)
	require.Equal(t, 100, r.landed)
	require.Less(t, returned, 600*time.Millisecond, "every record landed by then")
	assert.Less(t, r.elapsed, 700*time.Millisecond,
		"every record had landed when the strategy returned at %v, but the run is measured to %v (efficiency %.3f)",
		returned, r.elapsed, r.efficiency)
}
