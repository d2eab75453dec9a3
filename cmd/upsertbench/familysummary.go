package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// This file holds the summary of the family benchmark.

// ratioMargin is how far below the article's efficiency the library may
// be on an index before the summary lists it.
const ratioMargin = 0.02

// strategySummary is the distribution of one strategy's figures over the
// indexes of a family benchmark.
type strategySummary struct {
	name                            string
	medianEff, p10Eff, minEff       float64
	medianRateLimited, p90RateLimit float64
	// medianAbove and p90Above are of the 429 share above the index's
	// random one (upserttest.Index.RandomRateLimited), which no client
	// avoids: what a strategy's own sending costs.
	medianAbove, p90Above float64
	lost                  int
}

// summarize returns the summary of the strategy named name over done.
func summarizeStrategy(done []*familyIndex, name string) strategySummary {
	s := strategySummary{name: name}
	var effs, shares, above []float64
	for _, fi := range done {
		if r, ok := fi.result(name); ok {
			effs = append(effs, r.efficiency)
			shares = append(shares, r.rateLimitedShare())
			above = append(above, max(0, r.rateLimitedShare()-fi.ix.RandomRateLimited))
			s.lost += r.lost
		}
	}
	slices.Sort(effs)
	slices.Sort(shares)
	slices.Sort(above)
	s.medianAbove, s.p90Above = quantile(above, 0.5), quantile(above, 0.9)
	s.medianEff, s.p10Eff = quantile(effs, 0.5), quantile(effs, 0.1)
	if len(effs) > 0 {
		s.minEff = effs[0]
	}
	s.medianRateLimited, s.p90RateLimit = quantile(shares, 0.5), quantile(shares, 0.9)
	return s
}

// ratioSummary is the distribution of upsert ÷ article over the indexes.
type ratioSummary struct {
	n            int
	median, min  float64
	minSeed      uint64
	belowArticle []uint64 // seeds where upsert < article − ratioMargin
	compared     bool
}

func summarizeRatios(done []*familyIndex) ratioSummary {
	var rs ratioSummary
	var ratios []float64
	for _, fi := range done {
		x, ok := fi.ratio()
		if !ok {
			continue
		}
		ratios = append(ratios, x)
		if len(ratios) == 1 || x < rs.min {
			rs.min, rs.minSeed = x, fi.ix.Seed
		}
		u, _ := fi.result("upsert")
		a, _ := fi.result("article")
		if u.efficiency < a.efficiency-ratioMargin {
			rs.belowArticle = append(rs.belowArticle, fi.ix.Seed)
		}
	}
	slices.Sort(ratios)
	rs.n, rs.compared = len(ratios), len(ratios) > 0
	rs.median = quantile(ratios, 0.5)
	return rs
}

// writeFamilySummary writes the summary of the family benchmark.
func writeFamilySummary(w io.Writer, done []*familyIndex, strategies []strategy) {
	fmt.Fprintf(w, "\n## Summary (%d indexes)\n\n", len(done))
	fmt.Fprintf(w, "| strategy | median eff | p10 eff | min eff | median 429 | p90 429 | median 429 above random | p90 429 above random | lost |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var lost []string
	for _, st := range strategies {
		s := summarizeStrategy(done, st.name)
		lost = append(lost, fmt.Sprintf("%s %d", s.name, s.lost))
		fmt.Fprintf(w, "| %s | %.3f | %.3f | %.3f | %.2f%% | %.2f%% | %.2f%% | %.2f%% | %d |\n", s.name, s.medianEff, s.p10Eff, s.minEff,
			100*s.medianRateLimited, 100*s.p90RateLimit, 100*s.medianAbove, 100*s.p90Above, s.lost)
	}
	fmt.Fprintln(w)
	if rs := summarizeRatios(done); rs.compared {
		below := "none"
		if len(rs.belowArticle) > 0 {
			seeds := make([]string, len(rs.belowArticle))
			for i, seed := range rs.belowArticle {
				seeds[i] = fmt.Sprint(seed)
			}
			below = "seeds " + strings.Join(seeds, ", ")
			if len(seeds) == 1 {
				below = "seed " + seeds[0]
			}
		}
		fmt.Fprintf(w, "Ratio upsert ÷ article over %d indexes: median %.3f, min %.3f (seed %d).\n", rs.n, rs.median, rs.min, rs.minSeed)
		fmt.Fprintf(w, "Indexes with upsert < article − %.2f: %d (%s).\n", ratioMargin, len(rs.belowArticle), below)
	}
	// A strategy that reports nothing loses every record it did not land,
	// those of a stopped run included.
	fmt.Fprintf(w, "Records lost in total: %s.\n", strings.Join(lost, ", "))
}
