package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert/upserttest"
)

// TestFamily runs -family 2 at a tiny scale (some 2000 records an index)
// and checks that the output parses and that the summary agrees with the
// rows.
func TestFamily(t *testing.T) {
	cfg, err := parseFlags([]string{"-family", "2", "-scale", "0.01"})
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2}, cfg.family)
	require.Equal(t, []string{"upsert", "article"}, []string{cfg.strategies[0].name, cfg.strategies[1].name})

	var out bytes.Buffer
	require.NoError(t, benchFamily(context.Background(), cfg, &out, nil))
	text := out.String()
	rows := familyRows(t, text)
	require.Len(t, rows, 2, "a row per index:\n%s", text)
	for i, row := range rows {
		assert.Equal(t, fmt.Sprint(i+1), row["seed"])
		assert.Equal(t, "0", row["upsert lost"], "the library loses nothing")
		assert.Equal(t, fmt.Sprint(newFamilyIndex(uint64(i+1), 0.01, 1, 0).records), row["records"])
	}

	var lostTotal []string
	for _, name := range []string{"upsert", "article"} {
		var effs, shares, above []float64
		lost := 0
		for i, row := range rows {
			effs = append(effs, number(t, row[name+" eff"]))
			shares = append(shares, number(t, row[name+" 429"]))
			random := 100 * newFamilyIndex(uint64(i+1), 0.01, 1, 0).ix.RandomRateLimited
			above = append(above, max(0, number(t, row[name+" 429"])-random))
			lost += int(number(t, row[name+" lost"]))
		}
		slices.Sort(effs)
		slices.Sort(shares)
		slices.Sort(above)
		want := fmt.Sprintf("| %s | %.3f | %.3f | %.3f | %.2f%% | %.2f%% | ", name,
			quantile(effs, 0.5), quantile(effs, 0.1), effs[0], quantile(shares, 0.5), quantile(shares, 0.9))
		require.Contains(t, text, want, "the summary of %s", name)
		rest := strings.Split(strings.SplitN(text[strings.Index(text, want)+len(want):], "\n", 2)[0], " | ")
		require.Len(t, rest, 3, "the 429s above random and the records lost")
		// The rows' 429 cells are rounded to hundredths of a percent.
		assert.InDelta(t, quantile(above, 0.5), number(t, rest[0]), 0.011, "median 429 above random")
		assert.InDelta(t, quantile(above, 0.9), number(t, rest[1]), 0.011, "p90 429 above random")
		assert.Equal(t, fmt.Sprintf("%d |", lost), rest[2])
		lostTotal = append(lostTotal, fmt.Sprintf("%s %d", name, lost))
	}

	var ratios []float64
	below, edge := 0, 0 // edge: within the cells' rounding of the margin, either way
	for _, row := range rows {
		ratios = append(ratios, number(t, row["ratio"]))
		switch d := number(t, row["upsert eff"]) - number(t, row["article eff"]) + ratioMargin; {
		case math.Abs(d) <= 0.001:
			edge++
		case d < 0:
			below++
		}
	}
	minSeed := rows[0]["seed"]
	if ratios[1] < ratios[0] {
		minSeed = rows[1]["seed"]
	}
	slices.Sort(ratios)
	assert.Contains(t, text, fmt.Sprintf("Ratio upsert ÷ article over 2 indexes: median %.3f, min %.3f (seed %s).", quantile(ratios, 0.5), ratios[0], minSeed))
	m := regexp.MustCompile(`Indexes with upsert < article − 0\.02: (\d+)`).FindStringSubmatch(text)
	require.NotNil(t, m, "the count of indexes behind the article")
	n, _ := strconv.Atoi(m[1])
	assert.True(t, n >= below && n <= below+edge, "%d behind the article, want %d (and up to %d more at the margin)", n, below, edge)
	assert.Contains(t, text, "Records lost in total: "+strings.Join(lostTotal, ", ")+".")
}

// familyRows returns the rows of the table of indexes in text, by column.
func familyRows(t *testing.T, text string) []map[string]string {
	t.Helper()
	var head []string
	var rows []map[string]string
	for line := range strings.SplitSeq(text, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		switch {
		case strings.HasPrefix(line, "| seed | index |"):
			head = cells
		case head != nil && regexp.MustCompile(`^\| \d+ \|`).MatchString(line):
			require.Len(t, cells, len(head), "row %q", line)
			row := make(map[string]string)
			for i, h := range head {
				row[h] = cells[i]
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// number reads a cell such as "0.912" or "1.20%".
func number(t *testing.T, cell string) float64 {
	t.Helper()
	x, err := strconv.ParseFloat(strings.TrimSuffix(cell, "%"), 64)
	require.NoError(t, err, "cell %q", cell)
	return x
}

func TestFamilyFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-seeds", "3-5,9", "-strategies", "upsert"})
	require.NoError(t, err)
	assert.Equal(t, []uint64{3, 4, 5, 9}, cfg.family)
	assert.Equal(t, "upsert", names(cfg.strategies, strategy.key), "-strategies still selects")
	cfg, err = parseFlags([]string{"-seed", "7", "-v", "-family-out", "x.jsonl"})
	require.NoError(t, err)
	assert.Equal(t, []uint64{7}, cfg.family)
	assert.True(t, cfg.verbose)
	assert.Equal(t, "x.jsonl", cfg.familyOut)
	cfg, err = parseFlags([]string{"-family", "3", "-strategies", "upsert,separate,naive"})
	require.NoError(t, err)
	assert.Equal(t, "upsert,naive", names(cfg.strategies, strategy.key), "separate needs several clients")
	cfg, err = parseFlags(nil)
	require.NoError(t, err)
	assert.Nil(t, cfg.family, "the profiles by default")
	cfg, err = parseFlags([]string{"-family", "5", "-max-ideal", "10s"})
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, cfg.maxIdeal)
	for seed := uint64(1); seed <= 5; seed++ {
		assert.LessOrEqual(t, newFamilyIndex(seed, 1, 1, cfg.maxIdeal).ideal, 10*time.Second, "-max-ideal shortens the run")
	}

	cfg, err = parseFlags([]string{"-seed", "1", "-rate-scale", "0.1"})
	require.NoError(t, err)
	assert.InDelta(t, upserttest.DrawIndex(1).VectorRate/10, newFamilyIndex(1, 1, cfg.rateScale, 0).ix.VectorRate, 1e-9, "-rate-scale moves the vector rate")

	for _, bad := range [][]string{{"-family", "0"}, {"-family", "2", "-seed", "3"}, {"-seeds", "5-3"}, {"-seeds", "x"}, {"-seeds", ","}, {"-seed", "1", "-rate-scale", "0"}} {
		_, err := parseFlags(bad)
		assert.Error(t, err, "%q", bad)
	}
	assert.Equal(t, "1-3,7,9-10", formatSeeds([]uint64{1, 2, 3, 7, 9, 10}))
}

func TestFamilyIndexIsItsDrawnIndex(t *testing.T) {
	fi := newFamilyIndex(1, 0.5, 1, 0)
	ix := upserttest.DrawIndex(1)
	require.NotEmpty(t, ix.Changes)
	assert.Equal(t, (ix.Records+1)/2, fi.records)
	assert.Equal(t, ix.Scaled(0.5).Changes, fi.ix.Changes, "-scale scales the run, its capacity changes with it")
	assert.Equal(t, namespace, fi.ix.Namespace, "the ideal counts the benchmark's namespace")
	assert.Equal(t, fi.ix.IdealTime(fi.records, familyTimeout), fi.ideal)
	assert.Equal(t, max(4*fi.ideal, fi.ideal+stopAfter), fi.deadline)
	assert.Equal(t, fi.ideal, fi.p.idealTime(fi.records), "the efficiency uses the drawn index's ideal")
	assert.Len(t, fi.p.serverOptions(), len(ix.Options()), "no Serverless added to the drawn options")
	for _, dim := range []int{8, 282, 1536, 4096} {
		rec := makeRecords(0, 1, dim)
		assert.Equal(t, upserttest.Index{Dimension: dim}.RecordBytes(), sdkRecordBytes(t, rec[0]), "dimension %d", dim)
	}
}

// TestSummarizeStrategy checks the summary's 429 share above each index's
// random one: what no client avoids is not counted against a strategy.
func TestSummarizeStrategy(t *testing.T) {
	index := func(random float64, requests, refused int) *familyIndex {
		fi := &familyIndex{results: []result{{strategy: "upsert", requests: requests, rateLimited: refused, efficiency: 0.9}}}
		fi.ix.RandomRateLimited = random
		return fi
	}
	for _, tt := range []struct {
		name              string
		done              []*familyIndex
		median, p90       float64 // of the 429 share
		aboveMed, aboveP9 float64 // of the share above random
	}{
		{"no random 429s: the same", []*familyIndex{index(0, 100, 2), index(0, 100, 4)}, 0.02, 0.04, 0.02, 0.04},
		{"the random share taken off", []*familyIndex{index(0.03, 100, 5), index(0.05, 100, 6)}, 0.05, 0.06, 0.01, 0.02},
		{"fewer than random: none above", []*familyIndex{index(0.04, 100, 3), index(0, 100, 1)}, 0.01, 0.03, 0, 0.01},
	} {
		s := summarizeStrategy(tt.done, "upsert")
		assert.InDelta(t, tt.median, s.medianRateLimited, 1e-9, tt.name)
		assert.InDelta(t, tt.p90, s.p90RateLimit, 1e-9, tt.name)
		assert.InDelta(t, tt.aboveMed, s.medianAbove, 1e-9, tt.name)
		assert.InDelta(t, tt.aboveP9, s.p90Above, 1e-9, tt.name)
	}
}

// The family's efficiency is "ideal of the records landed ÷ wall time to
// the last record settled", but run takes the wall time when the strategy
// returns, and measure counts as landed the writes that settle() lets the
// server finish afterwards. A write whose client gave up (a timed-out last
// attempt that the article drops once its retries run out, the requests in
// flight of a run stopped at its deadline) lands after the clock stopped,
// and its records count as landed in no time. Here a strategy whose one
// request times out after 250 ms on an index that writes in 500 ms gets an
// efficiency of about 2.
func TestRunMeasuresTheTimeToTheLastRecordLanded(t *testing.T) {
	ix := upserttest.Index{Dimension: 8, Namespace: namespace, Latency: 500 * time.Millisecond}
	p := profile{name: "late", records: 100, clients: 1, timeout: familyTimeout, dimension: ix.Dimension, index: &ix}
	gaveUp := strategy{name: "gives-up", newRun: func() writeFunc {
		return func(ctx context.Context, idx *pinecone.IndexConnection, records []*pinecone.Vector, _ time.Duration) ([]string, error) {
			_ = upsertOnce(ctx, idx, records, 250*time.Millisecond) // times out; the write lands at 500 ms
			return nil, nil
		}
	}}
	r, err := run(context.Background(), p, gaveUp, 1, 10*time.Second, nil)
	require.NoError(t, err)
	require.Equal(t, 100, r.landed, "the write landed after its client gave up")
	assert.GreaterOrEqual(t, r.elapsed, ix.Latency, "the records landed 500 ms after the start, not when the strategy returned")
	assert.LessOrEqual(t, r.efficiency, 1.05, "no strategy beats the ideal of what it landed (elapsed %v, ideal %v)",
		r.elapsed, p.idealTime(r.landed))
}

// parseSeeds takes the largest uint64 as a seed, alone or at the end of a
// range, and stops there rather than wrapping round to 0; a list of more
// than maxSeeds seeds is an error, as is -family beyond it. The first parse
// runs in a child process (this test binary again) that gives up after
// half a second, so that a parse that loops cannot take the machine down.
func TestParseSeedsTakesTheLargestSeed(t *testing.T) {
	const env = "UPSERTBENCH_REVIEW_PARSESEEDS"
	if os.Getenv(env) != "" {
		done := make(chan []uint64, 1)
		go func() {
			seeds, _ := parseSeeds("18446744073709551615")
			done <- seeds
		}()
		select {
		case seeds := <-done:
			if len(seeds) == 1 && seeds[0] == math.MaxUint64 {
				os.Exit(0)
			}
			os.Exit(4)
		case <-time.After(500 * time.Millisecond):
			os.Exit(3) // still looping
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestParseSeedsTakesTheLargestSeed$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"=1")
	out, err := cmd.CombinedOutput()
	var code int
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	require.Zero(t, code, "exit 3: parseSeeds still looping after 500 ms; exit 4: wrong seeds\n%s", out)

	seeds, err := parseSeeds("18446744073709551610-18446744073709551615")
	require.NoError(t, err)
	assert.Equal(t, []uint64{math.MaxUint64 - 5, math.MaxUint64 - 4, math.MaxUint64 - 3, math.MaxUint64 - 2, math.MaxUint64 - 1, math.MaxUint64}, seeds)
	seeds, err = parseSeeds(fmt.Sprintf("1-%d", maxSeeds))
	require.NoError(t, err)
	assert.Len(t, seeds, maxSeeds)
	for _, bad := range []string{fmt.Sprintf("1-%d", maxSeeds+1), fmt.Sprintf("0-%d", uint64(math.MaxUint64)), fmt.Sprintf("1-%d,0", maxSeeds)} {
		_, err = parseSeeds(bad)
		assert.ErrorContains(t, err, "more than", "%s", bad)
	}
	_, err = parseFlags([]string{"-family", fmt.Sprint(maxSeeds + 1)})
	assert.Error(t, err)
}

// A stopped run is measured at the stop, as the family's header ("ideal of
// the landed records ÷ time to the stop") and the profiles' table ("actual
// = ... or to the stop at the deadline") define it: its landed records are
// those the server held as the clients returned, and its elapsed the time
// to then. A write still in flight at the stop lands after it and counts as
// neither landed nor lost: lost is still taken once the server has answered
// every request. Here a run stopped at 300 ms has a write that lands at
// 1.5 s.
func TestStoppedRunIsMeasuredToTheStop(t *testing.T) {
	ix := upserttest.Index{Dimension: 8, Namespace: namespace, Latency: 1500 * time.Millisecond}
	p := profile{name: "stopped", records: 100, clients: 1, timeout: familyTimeout, dimension: ix.Dimension, index: &ix}
	blocks := strategy{name: "blocks", newRun: func() writeFunc {
		return func(ctx context.Context, idx *pinecone.IndexConnection, records []*pinecone.Vector, _ time.Duration) ([]string, error) {
			_ = upsertOnce(ctx, idx, records, 0) // in flight when the run is stopped
			return nil, nil
		}
	}}
	const stop = 300 * time.Millisecond
	r, err := run(context.Background(), p, blocks, 1, stop, nil)
	require.NoError(t, err)
	require.True(t, r.stopped)
	assert.Less(t, r.elapsed, stop+400*time.Millisecond, "a run stopped at %v is measured to %v", stop, r.elapsed)
	assert.Zero(t, r.landed, "the write landed after the stop")
	assert.Zero(t, r.lost, "the write landed, after the stop")
	assert.Zero(t, r.efficiency)
}

// -max-ideal shortens the runs to an ideal of at most that long (at least
// 2 s, as Index.Shortened takes it): given as 0 or less it is refused, not
// taken as no limit at all, which would leave runs of minutes unshortened.
func TestMaxIdealMustBePositive(t *testing.T) {
	for _, bad := range []string{"-5s", "0s"} {
		cfg, err := parseFlags([]string{"-seed", "1", "-max-ideal", bad})
		if assert.ErrorContains(t, err, "-max-ideal "+bad+": need a positive duration", "-max-ideal %s is accepted", bad) {
			continue
		}
		fi := newFamilyIndex(1, 1, 1, cfg.maxIdeal)
		assert.LessOrEqual(t, fi.ideal, 2*time.Second, "-max-ideal %s given, and the run is not shortened (ideal %v)", bad, fi.ideal)
	}
	cfg, err := parseFlags([]string{"-seed", "1"})
	require.NoError(t, err)
	assert.Zero(t, cfg.maxIdeal, "not given: no limit")
}

// -seeds naming a seed twice, alone or in overlapping ranges, is refused
// with the seed named: the index would run twice and count twice in the
// summary.
func TestASeedNamedTwiceIsRefused(t *testing.T) {
	for _, tc := range []struct {
		list, seed string
	}{
		{list: "1,1", seed: "seed 1 "},
		{list: "1-10,5-15", seed: "seed 5 "},
		{list: "3,1-5", seed: "seed 3 "},
	} {
		_, err := parseFlags([]string{"-seeds", tc.list})
		assert.ErrorContains(t, err, tc.seed+"more than once", tc.list)
	}
}
