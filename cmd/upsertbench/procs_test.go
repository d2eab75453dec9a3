package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert/internal/redistest"
)

// TestMain lets the process benchmark run this test binary as its index
// and writer processes.
func TestMain(m *testing.M) {
	if runChild(os.Args[1:]) {
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestProcs runs two writer processes joined through Redis against an
// index process at a small scale (30,000 records: long enough that both
// writers have started before either ends, on a loaded machine), one of
// them stopping early, and checks that every record is accounted for and
// that the writers saw each other.
func TestProcs(t *testing.T) {
	cfg, err := parseFlags([]string{"-procs", "2", "-scale", "0.05", "-redis"})
	require.NoError(t, err)
	assert.Equal(t, []int{2}, cfg.procs)
	assert.True(t, cfg.redis)
	srv := redistest.Run(t)
	r, err := runProcs(context.Background(), procsProfile(), scenarios()[2], 2, cfg, srv, nil)
	require.NoError(t, err)
	assert.Equal(t, 30000, r.records)
	assert.Zero(t, r.lost, "records neither stored nor reported")
	// A record the stopping writer reports canceled may still have landed
	// (its request was in flight): landed and reported may overlap.
	assert.GreaterOrEqual(t, r.landed+r.reported, r.records, "the writer that stops reports what it did not write")
	assert.Less(t, r.landed, r.records, "the writer that stops leaves records unwritten")
	assert.Positive(t, r.requests)
	assert.Positive(t, r.elapsed)
	assert.Equal(t, 2, r.sharedWriters, "the writers met in their lane")
	assert.Positive(t, r.redisExchanges)
}

func TestParseProcs(t *testing.T) {
	got, err := parseProcs("2, 4,8,16")
	require.NoError(t, err)
	assert.Equal(t, []int{2, 4, 8, 16}, got)
	got, err = parseProcs("")
	require.NoError(t, err)
	assert.Nil(t, got)
	for _, bad := range []string{"0", "x", "2,,4", "-1"} {
		_, err := parseProcs(bad)
		assert.Error(t, err, bad)
	}
}

func TestTakeUp(t *testing.T) {
	base := time.Unix(100, 0)
	at := func(ms int, count int64) sample {
		return sample{At: base.Add(time.Duration(ms) * time.Millisecond).UnixNano(), Count: count}
	}
	// 10 records per 100 ms (100/s) until 1 s, then 20 per 100 ms.
	var samples []sample
	count := int64(0)
	for ms := 0; ms <= 3000; ms += 100 {
		samples = append(samples, at(ms, count))
		if ms < 1000 {
			count += 10
		} else {
			count += 20
		}
	}
	stop := base.Add(500 * time.Millisecond)
	assert.Equal(t, 1000*time.Millisecond, takeUp(samples, stop, 200), "the first full window at 200/s starts at 1 s and ends at 1.5 s")
	assert.Equal(t, 500*time.Millisecond, takeUp(samples, stop, 100), "already there: one window")
	assert.Equal(t, time.Duration(-1), takeUp(samples, stop, 300), "never")
}

// TestProcsRedisDies kills the writers' Redis halfway through a small run:
// every record lands, and Redis is back for the next run.
func TestProcsRedisDies(t *testing.T) {
	cfg, err := parseFlags([]string{"-procs", "2", "-scale", "0.02", "-redis"})
	require.NoError(t, err)
	srv := redistest.Run(t)
	sc := scenarios()[3]
	require.True(t, sc.killRedis)
	r, err := runProcs(context.Background(), procsProfile(), sc, 2, cfg, srv, nil)
	require.NoError(t, err)
	assert.Zero(t, r.lost)
	assert.Zero(t, r.reported, "Redis is no part of correctness: nothing fails")
	assert.Equal(t, r.records, r.landed)
	assert.Positive(t, r.secondHalf)
	rdb := srv.Client(nil)
	defer rdb.Close()
	assert.NoError(t, rdb.Ping(context.Background()).Err(), "restarted after the run")
}

func TestAcceptedAfter(t *testing.T) {
	base := time.Unix(100, 0)
	var samples []sample
	for ms := 0; ms <= 2000; ms += 100 {
		count := int64(min(ms, 1500)) // 1000 records/s until 1.5 s, then none
		samples = append(samples, sample{At: base.Add(time.Duration(ms) * time.Millisecond).UnixNano(), Count: count})
	}
	assert.InDelta(t, 1000, acceptedAfter(samples, base.Add(500*time.Millisecond)), 1e-9, "to the last sample that counted more")
	assert.Zero(t, acceptedAfter(samples, base.Add(3*time.Second)))
}

// A writer that ran to the end and landed nothing makes the max/min of the
// process benchmark infinite, printed "∞" as in the in-process table
// (writeClients): the slowest writer counts even at 0 records a second,
// and is not replaced by the next one.
func TestProcsSpreadOfAStarvedWriterIsNotOne(t *testing.T) {
	p := procsProfile()
	start := time.Unix(1000, 0)
	end := start.Add(2 * time.Second).UnixNano()
	outs := []writerOutcome{{EndNanos: end, Reported: 1000}, {EndNanos: end}}
	rep := indexReport{Requests: 10, Landed: []int{0, 1000}, Lost: []int{0, 0}}
	r := summarizeProcs(p, scenarios()[0], 2, 1000, p.idealTime(2000), start, outs, rep)
	assert.True(t, math.IsInf(r.spread, 1), "writer 1 landed nothing and writer 2 everything, but max/min is %.2f", r.spread)
	var row bytes.Buffer
	r.elapsed = 2 * time.Second
	writeProcRow(&row, r)
	assert.Contains(t, row.String(), "| ∞ |")
}

// With -procs, -scenarios is a usage error when it names redis-dies without
// -redis (that scenario runs only with it) or names no scenario at all, so
// that a selection never runs nothing and exits 0; benchProcs refuses it
// too when given such a config directly.
func TestProcsRedisDiesWithoutRedisIsAnError(t *testing.T) {
	_, err := parseFlags([]string{"-procs", "2", "-scenarios", "redis-dies"})
	assert.ErrorContains(t, err, "-redis")
	_, err = parseFlags([]string{"-procs", "2", "-scenarios", "together,redis-dies"})
	assert.ErrorContains(t, err, "-redis", "redis-dies named, and it would not run")
	_, err = parseFlags([]string{"-procs", "2", "-scenarios", ","})
	assert.ErrorContains(t, err, "no scenario to run")
	_, err = parseFlags([]string{"-procs", "2", "-scenarios", "nope"})
	assert.ErrorContains(t, err, `"nope"`)
	for _, ok := range [][]string{{"-procs", "2"}, {"-procs", "2", "-scenarios", "together"}, {"-procs", "2", "-redis", "-scenarios", "redis-dies"}} {
		_, err = parseFlags(ok)
		assert.NoError(t, err, "%q", ok)
	}

	var out bytes.Buffer
	err = benchProcs(context.Background(), config{procs: []int{2}, scale: 1, scenarios: "redis-dies"}, &out, nil)
	assert.ErrorContains(t, err, "-redis")
	assert.Empty(t, out.String(), "refused before the header")
}

// -procs selects the process benchmark, and main runs it before looking at
// -family, -seeds or -seed: with either, the family asked for would
// silently not run, so the mix is refused, as -plot refuses a run.
func TestProcsWithTheFamilyIsAUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"-procs", "2", "-family", "3"},
		{"-procs", "2", "-seed", "7"},
		{"-procs", "2", "-seeds", "1-3"},
	} {
		cfg, err := parseFlags(args)
		if err == nil {
			assert.False(t, cfg.procs != nil && cfg.family != nil,
				"%q parses, and main runs the process benchmark only: the family is ignored", args)
		}
		assert.ErrorContains(t, err, "-procs", "%q", args)
	}
}
