package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// This file holds -plot: the efficiencies of -family-out files drawn as
// cumulative distributions, one curve per file and strategy, in SVG.

// plotSource is one JSON lines file of -plot and the label of its curves.
type plotSource struct{ label, path string }

// parsePlotSources reads -plot's comma-separated label=path pairs; a path
// alone is labelled by its file name without the extension.
func parsePlotSources(s string) ([]plotSource, error) {
	var out []plotSource
	for part := range strings.SplitSeq(s, ",") {
		label, path, ok := strings.Cut(part, "=")
		if !ok {
			path = part
			label = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		}
		if path == "" || label == "" {
			return nil, fmt.Errorf("%q: want label=file.jsonl or file.jsonl", part)
		}
		out = append(out, plotSource{label: label, path: path})
	}
	return out, nil
}

// plotCurve is one strategy's efficiencies in one file, sorted: one per
// seed, the mean of the seed's runs (a simulation runs each seed on
// several random streams).
type plotCurve struct {
	name string
	effs []float64
}

// readPlotCurves reads src's lines into a curve per strategy, in the
// order the strategies first appear. Only the fields seed, strategy and
// efficiency are read, so that any tool may write such lines.
func readPlotCurves(src plotSource) ([]plotCurve, error) {
	f, err := os.Open(src.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type key struct {
		strategy string
		seed     uint64
	}
	sums, counts := map[key]float64{}, map[key]int{}
	var order []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		var l struct {
			Seed       uint64   `json:"seed"`
			Strategy   string   `json:"strategy"`
			Efficiency *float64 `json:"efficiency"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Strategy == "" || l.Efficiency == nil {
			return nil, fmt.Errorf("%s:%d: want a JSON object with seed, strategy and efficiency", src.path, line)
		}
		if !slices.Contains(order, l.Strategy) {
			order = append(order, l.Strategy)
		}
		k := key{l.Strategy, l.Seed}
		sums[k] += *l.Efficiency
		counts[k]++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", src.path, err)
	}
	curves := make([]plotCurve, len(order))
	for i, s := range order {
		curves[i].name = src.label + " " + s
	}
	for k, sum := range sums {
		i := slices.Index(order, k.strategy)
		curves[i].effs = append(curves[i].effs, sum/float64(counts[k]))
	}
	for i := range curves {
		slices.Sort(curves[i].effs)
	}
	return curves, nil
}

// benchPlot reads cfg.plot's files and writes their curves to w as SVG.
func benchPlot(_ context.Context, cfg config, w io.Writer, _ io.Writer) error {
	var curves []plotCurve
	for _, src := range cfg.plot {
		c, err := readPlotCurves(src)
		if err != nil {
			return err
		}
		curves = append(curves, c...)
	}
	if len(curves) == 0 {
		return errors.New("-plot: no lines in the files given")
	}
	return writePlot(w, curves)
}
