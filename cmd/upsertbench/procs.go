package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/upsertlib/upsert/internal/redistest"
)

// The process benchmark (-procs) runs each writer as a separate OS process,
// as separate pods or machines would, against one upserttest index served
// by another process: every writer runs the library with its defaults, and
// so has a Limiter of its own. The index is the fast profile's (20k
// vectors/s, burst 5000, Serverless's per-namespace limits), as in the
// shared and crowd profiles, and the writers split procsRecords between
// them.

// A scenario is how the writers of a process run start and stop.
type scenario struct {
	name, about string
	// startAt is when writer i of n starts, after the first; stopAt when
	// it stops before it is done (0: it runs to the end). ideal is the
	// ideal time of all the records.
	startAt, stopAt func(i, n int, ideal time.Duration) time.Duration
	// killRedis: the writers' Redis is killed at ideal/2 (and restarted
	// after the run); only with -redis.
	killRedis bool
}

func never(int, int, time.Duration) time.Duration { return 0 }

// scenarios returns the scenarios run for each number of writers.
func scenarios() []scenario {
	return []scenario{{
		name: "together", about: "all writers start together",
		startAt: never, stopAt: never,
	}, {
		name: "staggered", about: "writer i starts i × ideal/(2n) after the first",
		startAt: func(i, n int, ideal time.Duration) time.Duration {
			return time.Duration(i) * ideal / time.Duration(2*n)
		},
		stopAt: never,
	}, {
		name: "one-stops", about: "writer 1 stops at ideal/2; take-up: from then until the index accepts ≥ 0.9 C over 500 ms",
		startAt: never,
		stopAt: func(i, n int, ideal time.Duration) time.Duration {
			if i == 0 {
				return ideal / 2
			}
			return 0
		},
	}, {
		name: "redis-dies", about: "with -redis only: Redis is killed at ideal/2; after: what the index accepted from then to the end, over C",
		startAt: never, stopAt: never, killRedis: true,
	}}
}

// procsProfile is the index of the process benchmark.
func procsProfile() profile {
	i := slices.IndexFunc(profiles(), func(p profile) bool { return p.name == "fast" })
	return profiles()[i]
}

// procsRecords is the number of records of all the writers of a run at
// scale 1: as many as the shared and crowd profiles'.
const procsRecords = 600_000

// procResult is the outcome of one process run.
type procResult struct {
	writers            int
	scenario, strategy string
	records, landed    int
	reported, lost     int
	requests, limited  int
	elapsed            time.Duration
	efficiency         float64
	spread             float64       // max/min of the running writers' throughputs; +Inf if one landed nothing
	takeUp             time.Duration // one-stops: see scenarios; -1 when never
	stopped            bool
	cpu                time.Duration // user and system time of the index and writer processes
	sharedWriters      int           // with Redis: the most writers a writer saw in its lane
	redisExchanges     int64
	redisFailures      int64
	secondHalf         float64 // what the index accepted from ideal/2 to the end, over C (the kill's time, for every scenario)
}

// benchProcs runs every number of writers of cfg.procs in every scenario,
// and writes the table to w.
func benchProcs(ctx context.Context, cfg config, w io.Writer, progress io.Writer) error {
	strategy := "separate"
	var rsrv *redistest.Server
	if cfg.redis {
		var err error
		if rsrv, err = redistest.Start(); err != nil {
			return err
		}
		defer rsrv.Close()
		strategy = "separate+redis"
	}
	if err := checkScenarios(cfg.scenarios, cfg.redis); err != nil {
		return err
	}
	p := procsProfile()
	fmt.Fprintf(w, "# upsertbench -procs\n\n%s, %s, scale %g, deadline %v per run.\n\n", time.Now().Format(time.RFC3339), runtime.Version(), cfg.scale, cfg.deadline)
	if rev := buildRevision(); rev != "" {
		fmt.Fprintf(w, "Built from %s.\n\n", rev)
	}
	fmt.Fprintf(w, "Each writer is a separate process running upsert.All with defaults (a Limiter of its own); the index, served by another process, is upserttest.Serverless() with %s (C = %.0f vectors/s, B = %d); %d records split evenly between the writers. Efficiency, 429 share and lost as in the profiles' table; max/min of the throughputs of the writers that run to the end, each over its own run.\n", p.server, p.capacity, p.burst, int(procsRecords*cfg.scale))
	if cfg.redis {
		fmt.Fprintf(w, "separate+redis: each writer's Limiter shares its lane through upsertredis.Store.Option (a redis-server on a unix socket).\n")
	}
	for _, sc := range scenarios() {
		fmt.Fprintf(w, "%s: %s.\n", sc.name, sc.about)
	}
	fmt.Fprintf(w, "cores: the CPU time of the index and writer processes over the elapsed time (the machine has %d).\n", runtime.NumCPU())
	fmt.Fprintf(w, "redis: exchanges per writer per second, those that failed, and the most writers a writer saw in its lane.\n")
	fmt.Fprintf(w, "second half: what the index accepted from ideal/2 (redis-dies: the kill) to the end, over C.\n")
	fmt.Fprintf(w, "\n| writers | scenario | strategy | efficiency | 429 share | requests | max/min | take-up | lost | reported failed | elapsed | second half | cores | redis |\n")
	fmt.Fprintf(w, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, n := range cfg.procs {
		for _, sc := range scenarios() {
			if (sc.killRedis && rsrv == nil) || !picked(cfg.scenarios, sc.name) {
				continue
			}
			r, err := runProcs(ctx, p, sc, n, cfg, rsrv, progress)
			if err != nil {
				return fmt.Errorf("%d writers, %s: %w", n, sc.name, err)
			}
			r.strategy = strategy
			writeProcRow(w, r)
		}
	}
	return nil
}

// checkScenarios reports an error unless list (of -scenarios) names known
// scenarios that run (redis-dies only with redis), or is "" for all.
func checkScenarios(list string, redis bool) error {
	if list == "" {
		return nil
	}
	runs := false
	for _, name := range scenarioNames(list) {
		i := slices.IndexFunc(scenarios(), func(sc scenario) bool { return sc.name == name })
		switch {
		case name == "":
		case i < 0:
			return fmt.Errorf("-scenarios: no scenario %q", name)
		case scenarios()[i].killRedis && !redis:
			return fmt.Errorf("-scenarios: %s runs only with -redis", name)
		default:
			runs = true
		}
	}
	if !runs {
		return fmt.Errorf("-scenarios %q: no scenario to run", list)
	}
	return nil
}

// picked reports whether list (comma-separated, "" for all) names the
// scenario name.
func picked(list, name string) bool {
	return list == "" || slices.Contains(scenarioNames(list), name)
}

// scenarioNames splits list (of -scenarios) at its commas, each name
// trimmed of spaces, as -profiles is: "together, staggered" names two.
func scenarioNames(list string) []string {
	out := strings.Split(list, ",")
	for i, n := range out {
		out[i] = strings.TrimSpace(n)
	}
	return out
}

// writeProcRow writes r as a row of the process benchmark's table.
func writeProcRow(w io.Writer, r procResult) {
	takeUp := "–"
	if r.takeUp > 0 {
		takeUp = r.takeUp.Round(100 * time.Millisecond).String()
	} else if r.takeUp < 0 {
		takeUp = "never"
	}
	lost := lostCell(r.lost, r.stopped, true) // every writer runs upsert, which reports
	spread := "∞"
	if !math.IsInf(r.spread, 1) {
		spread = fmt.Sprintf("%.2f", r.spread)
	}
	redis := "–"
	if r.redisExchanges > 0 || r.redisFailures > 0 {
		redis = fmt.Sprintf("%.1f/s, %d failed, saw %d", float64(r.redisExchanges)/float64(r.writers)/r.elapsed.Seconds(), r.redisFailures, r.sharedWriters)
		if r.scenario == "redis-dies" {
			redis += fmt.Sprintf(", after %.1f%%", 100*r.secondHalf)
		}
	}
	fmt.Fprintf(w, "| %d | %s | %s | %.1f%% | %.2f%% | %d | %s | %s | %s | %d | %s | %.1f%% | %.2f | %s |\n",
		r.writers, r.scenario, r.strategy, 100*r.efficiency, 100*fraction(r.limited, r.requests), r.requests,
		spread, takeUp, lost, r.reported, formatDuration(r.elapsed), 100*r.secondHalf, r.cpu.Seconds()/r.elapsed.Seconds(), redis)
}

// fraction is part over whole, 0 when whole is 0.
func fraction(part, whole int) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

// runProcs runs one scenario with n writer processes and measures it; the
// writers share through rsrv when it is not nil.
func runProcs(ctx context.Context, p profile, sc scenario, n int, cfg config, rsrv *redistest.Server, progress io.Writer) (procResult, error) {
	dir, err := os.MkdirTemp("", "upsertbench")
	if err != nil {
		return procResult{}, err
	}
	defer os.RemoveAll(dir)
	srv, host, err := startIndexChild(ctx)
	if err != nil {
		return procResult{}, err
	}
	defer srv.stop()

	total := int(procsRecords * cfg.scale)
	per := total / n
	ideal := p.idealTime(per * n)
	plan := writerPlan{host: host, dir: dir, sc: sc, n: n, per: per, ideal: ideal, deadline: cfg.deadline, rsrv: rsrv}
	writers, err := plan.start(ctx)
	if err != nil {
		return procResult{}, err
	}
	defer stopChildren(writers)
	if err := awaitReady(writers); err != nil {
		return procResult{}, err
	}
	start := time.Now().Add(100 * time.Millisecond)
	if progress != nil {
		fmt.Fprintf(progress, "procs: %d writers, %s: %d records each\n", n, sc.name, per)
	}
	for _, wr := range writers {
		fmt.Fprintf(wr.stdin, "go %d\n", start.UnixNano())
	}
	if sc.killRedis && rsrv != nil {
		defer killRedisAt(rsrv, start.Add(ideal/2))()
	}
	outs, err := readOutcomes(writers, start.Add(cfg.deadline+childGrace))
	if err != nil {
		return procResult{}, err
	}
	rep, err := srv.report(per, n, dir)
	if err != nil {
		return procResult{}, fmt.Errorf("index process: %w", err)
	}
	r := summarizeProcs(p, sc, n, per, ideal, start, outs, rep)
	for _, c := range append(writers, srv) {
		r.cpu += c.stop()
	}
	return r, nil
}

// startIndexChild starts the index process and returns it with the host it
// serves on.
func startIndexChild(ctx context.Context) (srv *child, host string, err error) {
	if srv, err = startChild(ctx, "serve"); err != nil {
		return nil, "", err
	}
	if host, err = srv.readLineBy(time.Now().Add(childStartWithin)); err != nil {
		srv.stop()
		return nil, "", fmt.Errorf("index process: %w", err)
	}
	return srv, host, nil
}

// writerPlan is what the writer processes of one run are told: writer i
// writes the per records from i*per, against the index at host, and lists
// the ids reported failed in dir.
type writerPlan struct {
	host, dir string
	sc        scenario
	n, per    int
	ideal     time.Duration     // the ideal time of the n*per records
	deadline  time.Duration     // -deadline
	rsrv      *redistest.Server // the writers share through it when it is not nil
}

// args are the flags of writer i (see writeChild).
func (wp writerPlan) args(i int) []string {
	args := []string{"-host", wp.host, "-first", strconv.Itoa(i * wp.per), "-n", strconv.Itoa(wp.per),
		"-failed", filepath.Join(wp.dir, fmt.Sprintf("failed-%d", i)),
		"-start-after", wp.sc.startAt(i, wp.n, wp.ideal).String(), "-stop-after", wp.sc.stopAt(i, wp.n, wp.ideal).String(),
		"-deadline", wp.deadline.String()}
	if wp.rsrv != nil {
		args = append(args, "-redis", wp.rsrv.Socket(), "-prefix", fmt.Sprintf("upsertbench:%d:%s:", wp.n, wp.sc.name))
	}
	return args
}

// start starts the n writer processes. If one fails to start, it stops
// those it started and returns the error.
func (wp writerPlan) start(ctx context.Context) ([]*child, error) {
	writers := make([]*child, wp.n)
	for i := range writers {
		var err error
		if writers[i], err = startChild(ctx, "write", wp.args(i)...); err != nil {
			stopChildren(writers[:i])
			return nil, err
		}
	}
	return writers, nil
}

// stopChildren stops children, the last started first, as deferred stops
// would.
func stopChildren(children []*child) {
	for _, c := range slices.Backward(children) {
		c.stop()
	}
}

// awaitReady waits for each writer's "ready", printed once its records are
// made and its index connection open.
func awaitReady(writers []*child) error {
	by := time.Now().Add(childStartWithin)
	for i, wr := range writers {
		if line, err := wr.readLineBy(by); err != nil || line != "ready" {
			return fmt.Errorf("writer %d: %q, %v", i+1, line, err)
		}
	}
	return nil
}

// readOutcomes reads each writer's writerOutcome, in the order of writers.
// A writer's run ends at the deadline (writeChild), so by is the deadline
// and a grace: a writer that has not printed its outcome by then is hung,
// and is killed and reported by the error.
func readOutcomes(writers []*child, by time.Time) ([]writerOutcome, error) {
	outs := make([]writerOutcome, len(writers))
	for i, wr := range writers {
		line, err := wr.readLineBy(by)
		if errors.Is(err, errNoLine) {
			return nil, fmt.Errorf("writer %d: no outcome %v after the deadline: killed", i+1, childGrace)
		}
		if err == nil {
			err = json.Unmarshal([]byte(line), &outs[i])
		}
		if err != nil {
			return nil, fmt.Errorf("writer %d: %w", i+1, err)
		}
	}
	return outs, nil
}

// killRedisAt kills rsrv at the time at, and returns the function that
// restarts it if it was killed, for the next run.
func killRedisAt(rsrv *redistest.Server, at time.Time) (restore func()) {
	killed := make(chan struct{})
	kill := time.AfterFunc(time.Until(at), func() {
		rsrv.Kill()
		close(killed)
	})
	return func() {
		if !kill.Stop() {
			<-killed
			_ = rsrv.Restart() // its error shows in the next run
		}
	}
}

// summarizeProcs turns the writers' and the index's reports into a row.
func summarizeProcs(p profile, sc scenario, n, per int, ideal time.Duration, start time.Time, outs []writerOutcome, rep indexReport) procResult {
	r := procResult{writers: n, scenario: sc.name, records: per * n, requests: rep.Requests, limited: rep.RateLimited, spread: 1}
	var lo, hi float64
	measured := 0 // writers whose throughput lo and hi take in
	for i, o := range outs {
		r.landed += rep.Landed[i]
		r.lost += rep.Lost[i]
		r.reported += o.Reported
		r.stopped = r.stopped || o.Deadline
		end := time.Duration(o.EndNanos - start.UnixNano())
		r.elapsed = max(r.elapsed, end)
		r.sharedWriters = max(r.sharedWriters, o.SharedWriters)
		r.redisExchanges += o.RedisExchanges
		r.redisFailures += o.RedisFailures
		if sc.stopAt(i, n, ideal) > 0 {
			continue // the writer that stops is no measure of a share
		}
		ran := end - sc.startAt(i, n, ideal)
		if ran <= 0 {
			continue
		}
		t := float64(rep.Landed[i]) / ran.Seconds()
		if measured == 0 || t < lo {
			lo = t
		}
		hi = max(hi, t)
		measured++
	}
	switch {
	case lo > 0:
		r.spread = hi / lo
	case measured > 0:
		r.spread = math.Inf(1) // a writer landed nothing, as in writeClients
	}
	r.efficiency = efficiency(p, r.landed, r.elapsed)
	r.secondHalf = acceptedAfter(rep.Samples, start.Add(ideal/2)) / p.capacity
	for i := range n {
		if at := sc.stopAt(i, n, ideal); at > 0 {
			r.takeUp = takeUp(rep.Samples, start.Add(at), 0.9*p.capacity)
		}
	}
	return r
}

// acceptedAfter is the rate the index accepted, in records per second,
// from from to the last sample that counted more records.
func acceptedAfter(samples []sample, from time.Time) float64 {
	var first, last *sample
	for i := range samples {
		s := &samples[i]
		if s.At < from.UnixNano() {
			continue
		}
		if first == nil {
			first = s
		}
		if s.Count > first.Count && (last == nil || s.Count > last.Count) {
			last = s
		}
	}
	if first == nil || last == nil {
		return 0
	}
	return float64(last.Count-first.Count) / time.Duration(last.At-first.At).Seconds()
}

// takeUpWindow is the span over which the index's accepted rate is
// measured for the take-up time.
const takeUpWindow = 500 * time.Millisecond

// takeUp returns how long after stop the index first accepted at least
// rate records per second over a takeUpWindow that starts at or after
// stop, measured to the end of that window; -1 if it never did. samples
// are the index's record counts, every sampleEvery.
func takeUp(samples []sample, stop time.Time, rate float64) time.Duration {
	for i, a := range samples {
		if a.At < stop.UnixNano() {
			continue
		}
		for _, b := range samples[i+1:] {
			span := time.Duration(b.At - a.At)
			if span < takeUpWindow {
				continue
			}
			if float64(b.Count-a.Count)/span.Seconds() >= rate {
				return time.Duration(b.At - stop.UnixNano())
			}
			break
		}
	}
	return -1
}

// child is a process of the benchmark: this program run again with a
// hidden subcommand (see runChild).
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
}

// startChild starts this executable again as a child of role with args,
// its stdin and stdout piped to the parent, its stderr shared.
func startChild(ctx context.Context, role string, args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{childPrefix + role}, args...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &child{cmd: cmd, stdin: stdin, stdout: bufio.NewReaderSize(stdout, 1<<20)}, nil
}

// readLine returns the child's next line of stdout, without its newline.
func (c *child) readLine() (string, error) {
	line, err := c.stdout.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

// childGrace is how long a child has to answer once it should be done: a
// writer to print its outcome after the deadline, any child to end after
// its stdin closes. One that takes longer is taken for hung and killed.
const childGrace = 3 * time.Second

// childStartWithin bounds the waits for a child's first line (the index's
// host, a writer's "ready") and for the index's report: each is a few
// milliseconds to seconds of work, so a child silent for a minute is hung.
const childStartWithin = time.Minute

// errNoLine is readLineBy's error for a child that printed no line in
// time.
var errNoLine = errors.New("no line in time: the child was killed")

// readLineBy is readLine, but if the child has printed no full line by
// the time by, it kills the child and returns errNoLine. A line read is
// returned even if the kill raced with it.
func (c *child) readLineBy(by time.Time) (string, error) {
	kill := time.AfterFunc(time.Until(by), c.kill)
	line, err := c.readLine()
	if !kill.Stop() && err != nil {
		return "", errNoLine
	}
	return line, err
}

// kill ends the child at once, whatever it is doing; its stdout then ends
// too.
func (c *child) kill() { _ = c.cmd.Process.Kill() }

// stop closes the child's stdin, which ends it, waits for it, and returns
// the CPU time it used. A child still running childGrace later is killed.
// It may be called more than once.
func (c *child) stop() time.Duration {
	if c.cmd.ProcessState == nil {
		c.stdin.Close()
		kill := time.AfterFunc(childGrace, c.kill)
		_ = c.cmd.Wait()
		kill.Stop()
	}
	return c.cmd.ProcessState.UserTime() + c.cmd.ProcessState.SystemTime()
}

// report asks the index process what it holds of the n writers' ranges.
func (c *child) report(per, n int, dir string) (indexReport, error) {
	fmt.Fprintf(c.stdin, "report %d %d %s\n", per, n, dir)
	line, err := c.readLineBy(time.Now().Add(childStartWithin))
	if err != nil {
		return indexReport{}, err
	}
	var rep indexReport
	err = json.Unmarshal([]byte(line), &rep)
	return rep, err
}

// parseProcs reads -procs: comma-separated positive numbers, or "" for
// none.
func parseProcs(list string) ([]int, error) {
	if list == "" {
		return nil, nil
	}
	var out []int
	for f := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a number of writers", f)
		}
		out = append(out, n)
	}
	return out, nil
}
