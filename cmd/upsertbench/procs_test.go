package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert/internal/redistest"
)

// hangWriterEnv, set in the environment of a process benchmark run by
// TestAHungWriterIsKilledAndReported, makes each writer process (this test
// binary run again as "-child-write") hang after the go: it prints
// "ready", reads the go, and then neither answers nor ends, not even when
// its stdin closes, as a writer stuck in its run (a deadlock, a call that
// ignores its context) would.
const hangWriterEnv = "UPSERTBENCH_TEST_HANG_WRITER"

func init() {
	if os.Getenv(hangWriterEnv) == "" || len(os.Args) < 2 || os.Args[1] != childPrefix+"write" {
		return
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // the go
	time.Sleep(time.Hour)                             // hung (a sleep, so the runtime sees no deadlock)
	os.Exit(1)
}

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

// A writer process that neither prints its outcome nor ends does not hang
// the process benchmark: once the run's deadline and childGrace have
// passed, the writer is killed and runProcs returns an error that names
// it. Here the deadline is 1 s, and the parent is given 5 s more.
func TestAHungWriterIsKilledAndReported(t *testing.T) {
	t.Setenv(hangWriterEnv, "1")
	// Under -race a child sleeps 1 s as it exits (the race detector's
	// atexit_sleep_ms), which is no part of what is measured here.
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cfg, err := parseFlags([]string{"-procs", "1", "-scale", "0.001", "-deadline", "1s"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type outcome struct {
		r   procResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := runProcs(ctx, procsProfile(), scenarios()[0], 1, cfg, nil, nil)
		done <- outcome{r, err}
	}()
	limit := cfg.deadline + 5*time.Second
	select {
	case o := <-done:
		assert.ErrorContains(t, o.err, "writer 1: no outcome", "a writer that never reported its outcome is reported, not taken as a result")
	case <-time.After(limit):
		t.Errorf("runProcs still waiting for a hung writer %v after the start of a run with a deadline of %v", limit, cfg.deadline)
		cancel() // exec.CommandContext kills the children: let runProcs return
		<-done
	}
}

// -scenarios takes names with spaces around them, as -profiles does, and
// runs each scenario it names once.
func TestScenarioNamesAreTrimmed(t *testing.T) {
	cfg, err := parseFlags([]string{"-procs", "2", "-scenarios", "together, staggered "})
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		picked bool
	}{
		{name: "together", picked: true},
		{name: "staggered", picked: true},
		{name: "one-stops"},
	} {
		assert.Equal(t, tc.picked, picked(cfg.scenarios, tc.name), tc.name)
	}
}

// stop ends a child that does not end when its stdin closes (here a hung
// writer): it kills it childGrace later, rather than wait forever.
func TestStopKillsAChildThatDoesNotEnd(t *testing.T) {
	t.Setenv(hangWriterEnv, "1")
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	c, err := startChild(context.Background(), "write")
	require.NoError(t, err)
	line, err := c.readLine()
	require.NoError(t, err)
	require.Equal(t, "ready", line)
	fmt.Fprintf(c.stdin, "go %d\n", time.Now().UnixNano())
	stopped := make(chan struct{})
	go func() {
		c.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		assert.False(t, c.cmd.ProcessState.Exited(), "killed, not ended")
	case <-time.After(childGrace + 2*time.Second):
		t.Errorf("stop still waiting for a hung child %v after closing its stdin", childGrace+2*time.Second)
		c.kill()
		<-stopped
	}
}

// A writer whose start (-start-after) falls after the deadline does not
// wait for it: its run ends at the deadline as every writer's does, so
// that readOutcomes may take a writer silent past the deadline and
// childGrace for hung.
func TestAWriterThatStartsAfterTheDeadlineReportsAtTheDeadline(t *testing.T) {
	srv, host, err := startIndexChild(context.Background())
	require.NoError(t, err)
	defer srv.stop()
	plan := writerPlan{host: host, dir: t.TempDir(), n: 1, per: 10, deadline: 200 * time.Millisecond,
		sc: scenario{startAt: func(int, int, time.Duration) time.Duration { return time.Hour }, stopAt: never}}
	writers, err := plan.start(context.Background())
	require.NoError(t, err)
	defer stopChildren(writers)
	require.NoError(t, awaitReady(writers))
	start := time.Now()
	fmt.Fprintf(writers[0].stdin, "go %d\n", start.UnixNano())
	outs, err := readOutcomes(writers, start.Add(plan.deadline+childGrace))
	require.NoError(t, err, "the writer waited for its start, past the deadline")
	assert.True(t, outs[0].Deadline, "stopped at the deadline")
	assert.Equal(t, plan.per, outs[0].Reported, "every record reported failed, none sent")
}
