// Command upsertbench measures how close ways of writing vectors into a
// Pinecone index come to what the index accepts, side by side: the upsert
// library with its defaults, the algorithm of the engineering article it
// started from, and a naive loop. Where several clients share a namespace
// (each with its own connection, started together), the library's clients
// share a Limiter, as writers of one process do by default; it also runs
// with a Limiter per client ("separate"), as writers in separate processes
// have.
//
// Each run writes into a fresh simulated index (package upserttest, a
// loopback Pinecone gRPC data plane with a capacity model) through the real
// Pinecone SDK, and the program prints a Markdown table with, per profile
// and strategy, the efficiency (ideal time over actual time), the share of
// requests answered 429, the requests sent, the client-side p50 and p99
// request latency, the records lost and the elapsed time.
//
// Usage:
//
//	go run ./cmd/upsertbench [-profiles fast,slow,...] [-strategies upsert,separate,article,naive] [-scale 1.0] [-deadline 60s] [-v]
//	go run ./cmd/upsertbench -procs 2,4,8,16 [-redis] [-scenarios together,staggered,one-stops,redis-dies] [-scale 1.0] [-deadline 60s] [-v]
//	go run ./cmd/upsertbench (-family 20 | -seeds 1-10,15 | -seed 7) [-family-out runs.jsonl] [-strategies upsert,article] [-scale 1.0] [-max-ideal 15s] [-rate-scale 0.1] [-v]
//	go run ./cmd/upsertbench -plot served=runs.jsonl[,label=other.jsonl] > family.svg
//
// -family runs the library and the article's algorithm on indexes drawn
// by upserttest.DrawIndex (one per seed, each on a fresh server, with a
// request timeout of 2 s), and prints a row per index and the distribution
// of the efficiencies, 429 shares and the ratio of the two; a run still
// going at max(4 × ideal, ideal + 10 s) is stopped and measured by what
// landed; -deadline, which does not apply to it, is refused with it. -scale
// scales each run with upserttest.Index.Scaled (its capacity changes with
// it), -max-ideal shortens the longer runs with Index.Shortened. -procs,
// the family and -plot do not mix, and a flag of one of them is refused
// without it.
//
// -plot draws -family-out files (or any JSON lines with seed, strategy and
// efficiency) as SVG to standard output: the cumulative distribution of the
// efficiency, one curve per file and strategy, a seed's runs averaged. It
// runs nothing, and refuses the flags of a run (-profiles, -strategies,
// -scale, -deadline).
//
// The default profiles are the ones of the issue the benchmark answers, and
// a few more; others (extraProfiles) run only when named with -profiles.
//
// A run still going at the deadline is stopped and measured by what landed.
// Unless -deadline is given, the deadline is 60 s × -scale, and at least
// 10 s, so that -scale 0.1 takes about a minute and a half.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// maxScale bounds -scale: a thousand times the family's largest run is a
// billion records, past what one machine holds, and far below where the
// record counts would overflow an int.
const maxScale = 1000

// The deadline of a run at scale 1, and the least one at smaller scales.
const (
	defaultDeadline = 60 * time.Second
	minDeadline     = 10 * time.Second
)

// config is what the flags ask for.
type config struct {
	profiles   []profile
	strategies []strategy
	scale      float64
	deadline   time.Duration
	verbose    bool
	// procs, when set, runs the process benchmark (procs.go) with these
	// numbers of writers instead; redis joins them through upsertredis.
	procs     []int
	redis     bool
	scenarios string // with procs: comma-separated scenario names, "" for all
	// family, when set, runs the family benchmark (family.go) on these
	// seeds instead; familyOut names its JSON lines file.
	family    []uint64
	familyOut string
	maxIdeal  time.Duration
	rateScale float64 // multiplies each index's vector rate and burst (Index.RateScaled)
	// plot, when set, draws these -family-out files instead (familyplot.go).
	plot []plotSource
}

func main() {
	if runChild(os.Args[1:]) {
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "upsertbench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var progress io.Writer
	if cfg.verbose {
		progress = os.Stderr
	}
	run := bench
	switch {
	case cfg.procs != nil:
		run = benchProcs
	case cfg.family != nil:
		run = benchFamily
	case cfg.plot != nil:
		run = benchPlot
	}
	if err := run(ctx, cfg, os.Stdout, progress); err != nil {
		fmt.Fprintln(os.Stderr, "upsertbench:", err)
		os.Exit(1)
	}
}

// parseFlags reads the command line.
func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("upsertbench", flag.ContinueOnError)
	profileNames := fs.String("profiles", names(profiles(), profile.key), "comma-separated `profiles` to run;\nalso, only when named: "+names(extraProfiles(), profile.key))
	strategyNames := fs.String("strategies", names(strategies(), strategy.key), "comma-separated `strategies` to run")
	scale := fs.Float64("scale", 1.0, "multiplies the record counts, for quick runs (at most 1000)")
	deadline := fs.Duration("deadline", defaultDeadline, "stop a run that has not finished after this long;\nunless given, scaled with -scale (at least "+minDeadline.String()+");\nnot with the family benchmark, which stops a run at max("+fmt.Sprint(stopFactor)+" × ideal, ideal + "+stopAfter.String()+")")
	verbose := fs.Bool("v", false, "report progress to stderr")
	procs := fs.String("procs", "", "comma-separated `numbers` of writers to run as separate processes\n(the process benchmark, instead of -profiles and -strategies)")
	withRedis := fs.Bool("redis", false, "with -procs: writers join their lane through upsertredis\n(on a redis-server the benchmark starts)")
	scenarioNames := fs.String("scenarios", "", "with -procs: comma-separated `scenarios` to run (together, staggered,\none-stops, redis-dies); all unless given")
	family := fs.Int("family", 0, "run the family benchmark on the `n` indexes of seeds 1 to n\n(upserttest.DrawIndex; instead of -profiles; strategies upsert,article unless -strategies)")
	seeds := fs.String("seeds", "", "run the family benchmark on these `seeds` (such as 1-10,15)")
	seed := fs.Uint64("seed", 0, "run the family benchmark on this `seed` alone (with -v: with progress)")
	familyOut := fs.String("family-out", "", "with the family benchmark: write one JSON object per index and strategy to `file`")
	rateScale := fs.Float64("rate-scale", 1, "with the family benchmark: multiply each index's vector rate and burst by `f`\n(upserttest.Index.RateScaled: indexes off the family's range of 300 to 100,000 records a second)")
	maxIdeal := fs.Duration("max-ideal", 0, "with the family benchmark: shorten each run to an ideal time of at most this `long`\n(the same indexes, capacity changes at the same shares of the run; at least 2s)")
	plot := fs.String("plot", "", "draw these comma-separated `label=file.jsonl` (of -family-out) as SVG to standard output\n(instead of running anything)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if !(*scale > 0) || *scale > maxScale {
		return config{}, fmt.Errorf("-scale %v: need a positive finite factor, at most %v", *scale, maxScale)
	}
	if *deadline <= 0 {
		return config{}, fmt.Errorf("-deadline must be positive, not %v", *deadline)
	}
	cfg := config{scale: *scale, deadline: *deadline, verbose: *verbose, redis: *withRedis, scenarios: *scenarioNames}
	if !isSet(fs, "deadline") {
		cfg.deadline = max(minDeadline, time.Duration(float64(*deadline)**scale).Round(time.Second))
	}
	var err error
	if cfg.procs, err = parseProcs(*procs); err != nil {
		return config{}, fmt.Errorf("-procs: %w", err)
	}
	if cfg.procs != nil {
		if err := checkScenarios(cfg.scenarios, cfg.redis); err != nil {
			return config{}, err
		}
	}
	if cfg.profiles, err = pick(slices.Concat(profiles(), extraProfiles()), profile.key, *profileNames); err != nil {
		return config{}, fmt.Errorf("-profiles: %w", err)
	}
	if cfg.strategies, err = pick(strategies(), strategy.key, *strategyNames); err != nil {
		return config{}, fmt.Errorf("-strategies: %w", err)
	}
	if cfg.family, err = familySeeds(*family, *seeds, *seed, fs); err != nil {
		return config{}, err
	}
	if err := checkModes(fs, cfg); err != nil {
		return config{}, err
	}
	switch {
	case isSet(fs, "plot"):
		if cfg.plot, err = parsePlotSources(*plot); err != nil {
			return config{}, fmt.Errorf("-plot: %w", err)
		}
	case cfg.family != nil:
		cfg.strategies = familyStrategies(cfg.strategies, isSet(fs, "strategies"))
		cfg.familyOut, cfg.maxIdeal, cfg.rateScale = *familyOut, *maxIdeal, *rateScale
		if !(cfg.rateScale > 0) || math.IsInf(cfg.rateScale, 0) {
			return config{}, fmt.Errorf("-rate-scale %v: need a positive finite factor", cfg.rateScale)
		}
		if isSet(fs, "max-ideal") && cfg.maxIdeal <= 0 {
			return config{}, fmt.Errorf("-max-ideal %v: need a positive duration (a run is shortened to an ideal of at least 2s)", cfg.maxIdeal)
		}
	}
	return cfg, runsSomething(cfg, *strategyNames, *profileNames)
}

// runsSomething refuses a family or profile benchmark in which no strategy
// runs: the separate strategy needs several clients in one namespace.
func runsSomething(cfg config, strategyNames, profileNames string) error {
	switch {
	case cfg.plot != nil || cfg.procs != nil:
	case cfg.family != nil && len(cfg.strategies) == 0:
		return fmt.Errorf("-strategies %s: runs only where several clients share a namespace, and each index of the family has one: nothing to run", strategyNames)
	case cfg.family == nil && !slices.ContainsFunc(cfg.profiles, func(p profile) bool {
		return slices.ContainsFunc(cfg.strategies, func(s strategy) bool { return s.runsOn(p) })
	}):
		return fmt.Errorf("-strategies %s: runs only where several clients share a namespace, and no profile of -profiles %s has several: nothing to run", strategyNames, profileNames)
	}
	return nil
}

// checkModes reports an error unless the flags select one benchmark (the
// profiles, -procs, the family or -plot) and give only flags it uses: a
// flag of another would be ignored, and something else run than asked.
func checkModes(fs *flag.FlagSet, cfg config) error {
	procs, family, plot := cfg.procs != nil, cfg.family != nil, isSet(fs, "plot")
	switch {
	case plot && (procs || family):
		return errors.New("-plot draws files and runs nothing: give it alone")
	case procs && family:
		return errors.New("-procs runs the process benchmark, not the family: give -procs or one of -family, -seeds and -seed")
	case family && isSet(fs, "deadline"):
		return fmt.Errorf("-deadline: the family benchmark stops each run at max(%d × ideal, ideal + %v) instead", stopFactor, stopAfter)
	}
	for _, m := range []struct {
		on    bool
		mode  string
		flags []string
	}{
		{family, "the family benchmark (-family, -seeds or -seed)", []string{"family-out", "max-ideal", "rate-scale"}},
		{procs, "the process benchmark (-procs)", []string{"scenarios", "redis"}},
		{!procs && !family, "the profile benchmark (neither -procs nor the family)", []string{"profiles"}},
		{!procs, "the profile and family benchmarks (not -procs)", []string{"strategies"}},
		{!plot, "a benchmark that runs (-plot draws files and runs nothing)", []string{"profiles", "strategies", "scale", "deadline"}},
	} {
		for _, name := range m.flags {
			if isSet(fs, name) && !m.on {
				return fmt.Errorf("-%s applies only to %s", name, m.mode)
			}
		}
	}
	return nil
}

// familySeeds returns the seeds of -family, -seeds or -seed, whichever
// was given (at most one), or nil for none.
func familySeeds(n int, list string, seed uint64, fs *flag.FlagSet) ([]uint64, error) {
	given := 0
	for _, name := range []string{"family", "seeds", "seed"} {
		if isSet(fs, name) {
			given++
		}
	}
	switch {
	case given > 1:
		return nil, errors.New("give one of -family, -seeds and -seed")
	case isSet(fs, "family") && (n < 1 || n > maxSeeds):
		return nil, fmt.Errorf("-family must be from 1 to %d, not %d", maxSeeds, n)
	case isSet(fs, "family"):
		return seedRange(n), nil
	case isSet(fs, "seeds"):
		return parseSeeds(list)
	case isSet(fs, "seed"):
		return []uint64{seed}, nil
	}
	return nil, nil
}

// isSet reports whether the flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func (p profile) key() string  { return p.name }
func (s strategy) key() string { return s.name }

// runsOn reports whether s runs on the profile p.
func (s strategy) runsOn(p profile) bool { return !s.severalOnly || p.clients > 1 }

// names joins the names of all with commas.
func names[T any](all []T, name func(T) string) string {
	out := make([]string, len(all))
	for i, x := range all {
		out[i] = name(x)
	}
	return strings.Join(out, ",")
}

// pick returns the elements of all named in the comma-separated list, in
// the order of all.
func pick[T any](all []T, name func(T) string, list string) ([]T, error) {
	want := make(map[string]bool)
	for n := range strings.SplitSeq(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	var out []T
	for _, x := range all {
		if want[name(x)] {
			out = append(out, x)
			delete(want, name(x))
		}
	}
	for n := range want {
		return nil, fmt.Errorf("unknown name %q (known: %s)", n, names(all, name))
	}
	if len(out) == 0 {
		return nil, errors.New("none given")
	}
	return out, nil
}

// bench runs every profile and strategy of cfg, one after the other, and
// writes the report to w as it goes; progress, if not nil, gets progress
// lines.
func bench(ctx context.Context, cfg config, w io.Writer, progress io.Writer) error {
	writeHeader(w, cfg)
	writeTableHead(w)
	var shared []result
	for _, p := range cfg.profiles {
		for _, s := range cfg.strategies {
			if !s.runsOn(p) {
				continue
			}
			r, err := run(ctx, p, s, cfg.scale, cfg.deadline, progress)
			if err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err // interrupted: the row would be meaningless
			}
			writeRow(w, r)
			if len(r.clients) > 1 {
				shared = append(shared, r)
			}
		}
	}
	writeClients(w, shared)
	return nil
}

// writeHeader writes the conditions of the benchmark.
func writeHeader(w io.Writer, cfg config) {
	fmt.Fprintf(w, "# upsertbench\n\n")
	fmt.Fprintf(w, "%s, %s, GOMAXPROCS %d, scale %g, deadline %v per run.\n\n",
		time.Now().Format(time.RFC3339), runtime.Version(), runtime.GOMAXPROCS(0), cfg.scale, cfg.deadline)
	if rev := buildRevision(); rev != "" {
		fmt.Fprintf(w, "Built from %s.\n\n", rev)
	}
	fmt.Fprintf(w, "Every server is upserttest.Serverless() (100 requests/s, 50 MB/s per namespace, MB read as 10^6 bytes) plus:\n\n")
	fmt.Fprintf(w, "| profile | server | records | client timeout | C (vectors/s) | B (vectors) | C and B |\n")
	fmt.Fprintf(w, "|---|---|---:|---|---:|---:|---|\n")
	for _, p := range cfg.profiles {
		records := fmt.Sprint(p.recordsPerClient(cfg.scale))
		if p.clients > 1 {
			records = fmt.Sprintf("%d × %s", p.clients, records)
		}
		timeout := "strategy's own"
		if p.timeout > 0 {
			timeout = p.timeout.String()
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.0f | %d | %s |\n", p.name, p.server, records, timeout, p.capacity, p.burst, p.why)
	}
	fmt.Fprintf(w, `
Efficiency = ideal / actual, ideal = max(0, landed − B) / C, actual = wall time to the last record
settled, or to the stop at the deadline (landed = records unless some were lost or the run was stopped).
slow uses B = 0: its request bucket's burst (100 requests × 1000) only turns into throughput once the
64 slots (116 req/s) have run ahead of the 100 req/s for ~6 s, so with it the ideal would be out of
reach at small scales; without it, up to ~1.07 is possible at scale 1. In outage the vector bucket
refills during each outage, so up to ~1.08 (16250/15000) is possible, and a run shorter than 3 s sees
no outage at all. 429 share and requests are counted by the server; latencies on the client (gRPC
interceptor, every attempt). Lost = neither stored nor reported failed; only upsert reports failures.
A stopped run's lost is marked "(stopped)"; for the strategies that report nothing it is "stopped" alone
(every record they did not send would count).

Strategies: upsert = upsert.All with defaults (+ WithRequestTimeout where the profile has a client timeout);
article = batches of 100, pool of 4 workers (−1 per 429, min 1), timeout 30 s, 8 retries on 429, 4 on
timeout/5xx, full-jitter backoff 250 ms·2^n ≤ 30 s, split on timeout; naive = sequential batches of 100,
each retried at once up to 3 times.

`)
}

// buildRevision describes the commit the program was built from, or
// returns "" when the build did not record it (-buildvcs=false).
func buildRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " with uncommitted changes"
			}
		}
	}
	if rev == "" {
		return ""
	}
	return "commit " + rev[:min(12, len(rev))] + modified
}

// writeTableHead writes the header of the results table.
func writeTableHead(w io.Writer) {
	fmt.Fprintf(w, "| profile | strategy | efficiency | 429 share | requests | p50 | p99 | lost | elapsed | landed | reported failed |\n")
	fmt.Fprintf(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
}

// writeRow writes one row of the results table.
func writeRow(w io.Writer, r result) {
	lost := lostCell(r.lost, r.stopped, r.reports)
	reported := "–"
	if r.reports {
		reported = fmt.Sprint(r.reported)
	}
	fmt.Fprintf(w, "| %s | %s | %.1f%% | %.2f%% | %d | %s | %s | %s | %s | %d/%d | %s |\n",
		r.profile, r.strategy, 100*r.efficiency, 100*r.rateLimitedShare(), r.requests,
		formatDuration(r.calls.p50), formatDuration(r.calls.p99), lost,
		formatDuration(r.elapsed), r.landed, r.records, reported)
}

// lostCell is the "lost" cell of a run of a strategy that reports its
// failures or not: the count, marked " (stopped)" for a stopped run. A
// strategy that reports nothing counts as lost every record not stored,
// which in a stopped run are mostly records it never sent: its cell is
// "stopped" alone.
func lostCell(lost int, stopped, reports bool) string {
	switch {
	case stopped && !reports:
		return "stopped"
	case stopped:
		return fmt.Sprintf("%d (stopped)", lost)
	}
	return fmt.Sprint(lost)
}

// writeClients writes the per-client figures of the runs with several
// clients, and the ratio of the fastest client's throughput to the slowest.
func writeClients(w io.Writer, runs []result) {
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nPer client (requests, 429 share and latencies as each client saw them):\n\n")
	fmt.Fprintf(w, "| profile | strategy | client | landed | elapsed | records/s | share of total | requests | 429 share | p50 | p99 |\n")
	fmt.Fprintf(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range runs {
		var total, lo, hi float64
		for i, c := range r.clients {
			t := c.throughput()
			total += t
			if i == 0 || t < lo {
				lo = t
			}
			hi = max(hi, t)
		}
		for i, c := range r.clients {
			share := 0.0
			if total > 0 {
				share = c.throughput() / total
			}
			rateLimited := 0.0
			if c.calls.requests > 0 {
				rateLimited = float64(c.calls.rateLimited) / float64(c.calls.requests)
			}
			elapsed := formatDuration(c.elapsed)
			if c.stopped {
				elapsed += " (stopped)"
			}
			fmt.Fprintf(w, "| %s | %s | %d | %d/%d | %s | %.0f | %.1f%% | %d | %.2f%% | %s | %s |\n",
				r.profile, r.strategy, i+1, c.landed, c.records, elapsed, c.throughput(), 100*share,
				c.calls.requests, 100*rateLimited, formatDuration(c.calls.p50), formatDuration(c.calls.p99))
		}
		ratio := "∞"
		if lo > 0 {
			ratio = fmt.Sprintf("%.2f", hi/lo)
		}
		fmt.Fprintf(w, "| %s | %s | max/min | | | %s | | | | | |\n", r.profile, r.strategy, ratio)
	}
}

// formatDuration rounds d for a table: to 0.1 ms below a second, to 10 ms
// above.
func formatDuration(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return d.Round(10 * time.Millisecond).String()
}
