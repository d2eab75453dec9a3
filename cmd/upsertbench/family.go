package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/upsertlib/upsert/upserttest"
)

// This file holds the family benchmark (-family, -seeds, -seed): the
// strategies on indexes drawn by upserttest.DrawIndex, one after the
// other, each on a fresh server.

// familyTimeout is the request timeout of every strategy on the family:
// the one the family is drawn for.
const familyTimeout = upserttest.FamilyTimeout

// The stop of a family run: at max(stopFactor × ideal, ideal + stopAfter).
const (
	stopFactor = 4
	stopAfter  = 10 * time.Second
)

// familyDefaultStrategies run on the family unless -strategies says
// otherwise.
var familyDefaultStrategies = []string{"upsert", "article"}

// familyIndex is one index of a family benchmark and its runs.
type familyIndex struct {
	ix       upserttest.Index
	p        profile
	records  int
	ideal    time.Duration // of records
	deadline time.Duration
	// start and batch are the capacity at the start and its batch size.
	start   float64
	batch   int
	results []result // in the order of the strategies
}

// newFamilyIndex draws the index of seed, its vector rate moved by
// rateScale, and prepares its run at scale, shortened to an ideal time of
// maxIdeal if it is positive.
func newFamilyIndex(seed uint64, scale, rateScale float64, maxIdeal time.Duration) *familyIndex {
	ix := upserttest.DrawIndex(seed).RateScaled(rateScale).Scaled(scale)
	if maxIdeal > 0 {
		ix = ix.Shortened(maxIdeal)
	}
	ix.Namespace = namespace // the ideal counts the namespace in the request bytes
	p := profile{
		name:      fmt.Sprintf("seed %d", seed),
		server:    ix.String(),
		records:   ix.Records,
		clients:   1,
		timeout:   familyTimeout,
		dimension: ix.Dimension,
		index:     &ix,
	}
	fi := &familyIndex{ix: ix, p: p, records: ix.Records}
	fi.ideal = ix.IdealTime(fi.records, familyTimeout)
	fi.deadline = max(stopFactor*fi.ideal, fi.ideal+stopAfter)
	fi.start, fi.batch = ix.Throughput(1, familyTimeout)
	return fi
}

// result returns the run of the strategy named name, if it ran.
func (fi *familyIndex) result(name string) (result, bool) {
	for _, r := range fi.results {
		if r.strategy == name {
			return r, true
		}
	}
	return result{}, false
}

// ratio is upsert's efficiency over the article's on this index, if both
// ran and the article's is positive.
func (fi *familyIndex) ratio() (float64, bool) {
	u, ok1 := fi.result("upsert")
	a, ok2 := fi.result("article")
	if !ok1 || !ok2 || a.efficiency <= 0 {
		return 0, false
	}
	return u.efficiency / a.efficiency, true
}

// benchFamily runs the strategies of cfg on the indexes of cfg.family and
// writes the report to w as it goes: a row per index, then the summary.
func benchFamily(ctx context.Context, cfg config, w io.Writer, progress io.Writer) (err error) {
	out, err := openFamilyOut(cfg.familyOut)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.close(); err == nil {
			err = cerr
		}
	}()
	writeFamilyHeader(w, cfg)
	writeFamilyTableHead(w, cfg.strategies)
	var done []*familyIndex
	for _, seed := range cfg.family {
		fi := newFamilyIndex(seed, cfg.scale, cfg.rateScale, cfg.maxIdeal)
		if progress != nil {
			fmt.Fprintf(progress, "seed %d: %v; %d records, ideal %v, stop at %v\n", seed, fi.ix, fi.records, fi.ideal.Round(time.Millisecond), fi.deadline.Round(time.Second))
		}
		for _, s := range cfg.strategies {
			r, err := run(ctx, fi.p, s, 1, fi.deadline, progress) // fi.p is the scaled run
			if err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err // interrupted: the row would be meaningless
			}
			fi.results = append(fi.results, r)
			if err := out.write(fi, r, cfg.scale); err != nil {
				return err
			}
		}
		writeFamilyRow(w, fi, cfg.strategies)
		done = append(done, fi)
	}
	writeFamilySummary(w, done, cfg.strategies)
	writeFamilyIndexes(w, done)
	return nil
}

// writeFamilyHeader writes the conditions of the family benchmark.
func writeFamilyHeader(w io.Writer, cfg config) {
	fmt.Fprintf(w, "# upsertbench -family\n\n")
	shortened := ""
	if cfg.maxIdeal > 0 {
		shortened = fmt.Sprintf(", runs shortened to an ideal of at most %v (Index.Shortened)", cfg.maxIdeal)
	}
	if cfg.rateScale != 1 {
		shortened += fmt.Sprintf(", vector rates ×%g (Index.RateScaled)", cfg.rateScale)
	}
	fmt.Fprintf(w, "%s, %s, GOMAXPROCS %d, scale %g%s, %d indexes (seeds %s), strategies %s.\n\n",
		time.Now().Format(time.RFC3339), runtime.Version(), runtime.GOMAXPROCS(0), cfg.scale, shortened,
		len(cfg.family), formatSeeds(cfg.family), names(cfg.strategies, strategy.key))
	if rev := buildRevision(); rev != "" {
		fmt.Fprintf(w, "Built from %s.\n\n", rev)
	}
	fmt.Fprintf(w, `Each index is upserttest.DrawIndex(seed) on a fresh server; every strategy uses a request timeout
of %v. Ideal = Index.IdealTime of the records (a client that knew the index: see its doc); efficiency =
ideal of the records landed ÷ wall time to the last record settled. A run still going at
max(%d × ideal, ideal + %v) is stopped there and measured by what landed (ideal of the landed records
÷ time to the stop). 429 share = requests the server answered 429 ÷ requests it received. Lost =
neither stored nor reported failed (only upsert reports failures). Ratio = upsert ÷ article
efficiency. Quantiles are nearest-rank. Index: records/s and batch at the start (C@n), dims, then what
the index has: v = vector rate, lat = base latency, σ = jitter, slots, slow = slowdown above a size,
cap = capacity changes, out = outages, r429 = random 429s, lim = Pinecone limits (×1 serverless, none).

`, familyTimeout, stopFactor, stopAfter)
}

// writeFamilyTableHead writes the head of the table of indexes.
func writeFamilyTableHead(w io.Writer, strategies []strategy) {
	head := []string{"seed", "index", "records", "ideal"}
	align := []string{"---:", "---", "---:", "---:"}
	for _, s := range strategies {
		head = append(head, s.name+" eff", s.name+" 429", s.name+" lost", s.name+" elapsed")
		align = append(align, "---:", "---:", "---:", "---:")
	}
	head = append(head, "ratio")
	align = append(align, "---:")
	fmt.Fprintf(w, "| %s |\n|%s|\n", strings.Join(head, " | "), strings.Join(align, "|"))
}

// writeFamilyRow writes the row of one index.
func writeFamilyRow(w io.Writer, fi *familyIndex, strategies []strategy) {
	cells := []string{fmt.Sprint(fi.ix.Seed), shortDescription(fi), fmt.Sprint(fi.records), formatDuration(fi.ideal)}
	for _, s := range strategies {
		r, _ := fi.result(s.name)
		elapsed := formatDuration(r.elapsed)
		if r.stopped {
			elapsed += " (stopped)"
		}
		cells = append(cells, fmt.Sprintf("%.3f", r.efficiency), fmt.Sprintf("%.2f%%", 100*r.rateLimitedShare()), fmt.Sprint(r.lost), elapsed)
	}
	ratio := "–"
	if x, ok := fi.ratio(); ok {
		ratio = fmt.Sprintf("%.3f", x)
	}
	cells = append(cells, ratio)
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

// shortDescription describes an index in a table cell: its capacity at
// the start and what it has.
func shortDescription(fi *familyIndex) string {
	ix := fi.ix
	parts := []string{fmt.Sprintf("C %s@%d", compact(fi.start), fi.batch), fmt.Sprintf("%dd", ix.Dimension)}
	if ix.VectorRate > 0 {
		parts = append(parts, "v "+compact(ix.VectorRate))
	}
	parts = append(parts, "lat "+formatDuration(ix.Latency))
	if ix.Jitter > 0 {
		parts = append(parts, fmt.Sprintf("σ %.2f", ix.Jitter))
	}
	if ix.Slots > 0 {
		parts = append(parts, fmt.Sprintf("slots %d", ix.Slots))
	}
	if ix.SlowAbove > 0 {
		parts = append(parts, fmt.Sprintf("slow ×%.0f>%d", ix.SlowFactor, ix.SlowAbove))
	}
	for _, ch := range ix.Changes {
		parts = append(parts, fmt.Sprintf("cap ×%.2f@%.1fs", ch.Factor, ch.At.Seconds()))
	}
	if ix.OutageEvery > 0 {
		parts = append(parts, fmt.Sprintf("out %.1f/%.0fs", ix.OutageLength.Seconds(), ix.OutageEvery.Seconds()))
	}
	if ix.RandomRateLimited > 0 {
		parts = append(parts, fmt.Sprintf("r429 %.1f%%", 100*ix.RandomRateLimited))
	}
	if ix.PineconeLimits > 0 {
		parts = append(parts, fmt.Sprintf("lim ×%.1f", ix.PineconeLimits))
	}
	return strings.Join(parts, " ")
}

// compact writes a rate such as 5111 as "5.1k".
func compact(x float64) string {
	switch {
	case x >= 1e6:
		return strconv.FormatFloat(x/1e6, 'f', 1, 64) + "M"
	case x >= 1e3:
		return strconv.FormatFloat(x/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(x, 'f', 0, 64)
}

// writeFamilyIndexes lists the full description of every index.
func writeFamilyIndexes(w io.Writer, done []*familyIndex) {
	fmt.Fprintf(w, "\nIndexes:\n\n")
	for _, fi := range done {
		fmt.Fprintf(w, "- seed %d: %v\n", fi.ix.Seed, fi.ix)
	}
}

// maxSeeds is the most seeds -family, -seeds or -seed may name.
const maxSeeds = 1_000_000

// parseSeeds reads a list of seeds such as "1-10,15,20-22", of at most
// maxSeeds seeds, none named twice; a range may end at the largest
// uint64.
func parseSeeds(list string) ([]uint64, error) {
	var out []uint64
	for part := range strings.SplitSeq(list, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad seed %q", part)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 64); err != nil || b < a {
				return nil, fmt.Errorf("bad range %q", part)
			}
		}
		if b-a >= uint64(maxSeeds-len(out)) {
			return nil, fmt.Errorf("%q: more than %d seeds", list, maxSeeds)
		}
		for s := a; ; s++ {
			out = append(out, s)
			if s == b {
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no seeds in %q", list)
	}
	if s, ok := repeatedSeed(out); ok {
		return nil, fmt.Errorf("%q names seed %d more than once: each index runs once", list, s)
	}
	return out, nil
}

// repeatedSeed returns the least seed that seeds holds more than once, if
// any.
func repeatedSeed(seeds []uint64) (uint64, bool) {
	sorted := slices.Sorted(slices.Values(seeds))
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return sorted[i], true
		}
	}
	return 0, false
}

// formatSeeds writes seeds as parseSeeds reads them, runs as ranges.
func formatSeeds(seeds []uint64) string {
	var parts []string
	for i := 0; i < len(seeds); {
		j := i
		for j+1 < len(seeds) && seeds[j+1] == seeds[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", seeds[i], seeds[j]))
		} else {
			parts = append(parts, fmt.Sprint(seeds[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// seedRange returns the seeds 1 to n.
func seedRange(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

// familyStrategies returns the strategies of the family: those named with
// -strategies if it was given, else familyDefaultStrategies; never the
// strategies that run only with several clients.
func familyStrategies(all []strategy, given bool) []strategy {
	return slices.DeleteFunc(slices.Clone(all), func(s strategy) bool {
		return s.severalOnly || (!given && !slices.Contains(familyDefaultStrategies, s.name))
	})
}
