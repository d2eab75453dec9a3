package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePlotSources(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []plotSource
		err  bool
	}{
		{in: "served=a.jsonl", want: []plotSource{{"served", "a.jsonl"}}},
		{in: "dir/runs.jsonl,sim=s.jsonl", want: []plotSource{{"runs", "dir/runs.jsonl"}, {"sim", "s.jsonl"}}},
		{in: "label=", err: true},
		{in: "=a.jsonl", err: true},
		{in: "", err: true},
	} {
		got, err := parsePlotSources(tc.in)
		if tc.err {
			assert.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestPlotRunsNothingElse(t *testing.T) {
	_, err := parseFlags([]string{"-plot", "a.jsonl", "-family", "3"})
	assert.ErrorContains(t, err, "give it alone")
}

func writeLines(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "runs.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	return path
}

func TestReadPlotCurvesAveragesASeedsRuns(t *testing.T) {
	path := writeLines(t,
		`{"seed":1,"strategy":"upsert","efficiency":0.9,"stream":0}`,
		`{"seed":1,"strategy":"article","efficiency":0.4}`,
		`{"seed":1,"strategy":"upsert","efficiency":0.7,"stream":1}`,
		`{"seed":2,"strategy":"upsert","efficiency":1.0}`,
		`{"seed":2,"strategy":"article","efficiency":0.2}`,
	)
	curves, err := readPlotCurves(plotSource{"sim", path})
	require.NoError(t, err)
	require.Len(t, curves, 2)
	assert.Equal(t, "sim upsert", curves[0].name, "in the order first seen")
	assert.InDeltaSlice(t, []float64{0.8, 1.0}, curves[0].effs, 1e-12, "a seed's runs averaged, sorted")
	assert.Equal(t, "sim article", curves[1].name)
	assert.InDeltaSlice(t, []float64{0.2, 0.4}, curves[1].effs, 1e-12)
}

func TestReadPlotCurvesNamesABadLine(t *testing.T) {
	path := writeLines(t, `{"seed":1,"strategy":"upsert","efficiency":0.9}`, `{"seed":2,"strategy":"upsert"}`)
	_, err := readPlotCurves(plotSource{"x", path})
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+":2:", "the file and line")
}

func TestBenchPlotWritesOneStepPerIndex(t *testing.T) {
	path := writeLines(t,
		`{"seed":1,"strategy":"upsert","efficiency":0.95}`,
		`{"seed":2,"strategy":"upsert","efficiency":1.7}`,
		`{"seed":3,"strategy":"upsert","efficiency":0.5}`,
	)
	cfg, err := parseFlags([]string{"-plot", "served=" + path})
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, benchPlot(context.Background(), cfg, &out, nil))

	var doc struct {
		Paths []struct {
			D      string `xml:"d,attr"`
			Stroke string `xml:"stroke,attr"`
			Fill   string `xml:"fill,attr"`
		} `xml:"path"`
		Texts []string `xml:"text"`
	}
	require.NoError(t, xml.Unmarshal(out.Bytes(), &doc), "well-formed SVG")
	var curves []string
	for _, p := range doc.Paths {
		if p.Fill == "none" {
			curves = append(curves, p.D)
		}
	}
	require.Len(t, curves, 1, "one curve")
	assert.Equal(t, 3, strings.Count(curves[0], " V"), "one step up per index")
	assert.Contains(t, curves[0], fmt.Sprintf(" H%.1f V", plotX(plotMaxEff)), "an efficiency above the axis drawn at its end")
	assert.Contains(t, doc.Texts, "served upsert")
	assert.Contains(t, doc.Texts, "n 3, median 0.950, p10 0.500")
}

// -plot draws files and runs nothing: the flags that select runs
// (-profiles, -strategies) or shape them (-scale, -deadline) are refused
// with it rather than ignored.
func TestPlotRefusesTheFlagsOfARun(t *testing.T) {
	for _, args := range [][]string{
		{"-plot", "runs.jsonl", "-profiles", "fast"},
		{"-plot", "runs.jsonl", "-strategies", "upsert"},
		{"-plot", "runs.jsonl", "-scale", "0.1"},
		{"-plot", "runs.jsonl", "-deadline", "5s"},
	} {
		_, err := parseFlags(args)
		assert.ErrorContains(t, err, args[2]+" applies only to a benchmark that runs", "%q: -plot runs nothing, the flag of a run would be ignored", args)
	}
}
