package main

import (
	"bufio"
	"fmt"
	"html"
	"io"
)

// The drawing of -plot: efficiency from 0 to plotMaxEff across, the share
// of indexes at or below it up, targets of issue 19 marked.
const (
	plotWidth, plotHeight       = 760, 460
	plotLeft, plotRight         = 60, 250 // margins; the legend sits in the right one
	plotTop, plotBottom         = 40, 50
	plotMaxEff                  = 1.2 // efficiencies above are drawn at it
	plotTargetP10, plotTarget50 = 0.90, 0.95
)

// plotColors are told apart in print and by most colour-blind readers
// (Okabe and Ito's palette).
var plotColors = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"}

// plotX and plotY map an efficiency and a share to the drawing.
func plotX(eff float64) float64 {
	return plotLeft + min(max(eff, 0), plotMaxEff)/plotMaxEff*(plotWidth-plotLeft-plotRight)
}

func plotY(share float64) float64 {
	return plotTop + (1-share)*(plotHeight-plotTop-plotBottom)
}

// writePlot writes curves as an SVG of step-wise cumulative distributions,
// with each curve's median and p10 in the legend (by nearest rank, as
// the family benchmark prints them).
func writePlot(w io.Writer, curves []plotCurve) error {
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", plotWidth, plotHeight)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotWidth, plotHeight)
	fmt.Fprintf(b, `<text x="%d" y="20" font-size="14">Efficiency (ideal ÷ wall time), one index a step: further right is better</text>`+"\n", plotLeft)
	writePlotAxes(b)
	for i, c := range curves {
		color := plotColors[i%len(plotColors)]
		writePlotCurve(b, c, color)
		y := plotTop + 10 + 34*i
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", plotWidth-plotRight+15, y, plotWidth-plotRight+35, y, color)
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", plotWidth-plotRight+40, y+4, html.EscapeString(c.name))
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="#555">n %d, median %.3f, p10 %.3f</text>`+"\n", plotWidth-plotRight+40, y+18,
			len(c.effs), quantile(c.effs, 0.5), quantile(c.effs, 0.1))
	}
	fmt.Fprintln(b, `</svg>`)
	return b.Flush()
}

// writePlotAxes draws the grid, the axes' labels and the targets: a
// curve that meets them passes right of both crosses.
func writePlotAxes(b *bufio.Writer) {
	for i := 0; i <= 12; i += 2 {
		x := plotX(float64(i) / 10)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, plotTop, x, plotHeight-plotBottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%.1f</text>`+"\n", x, plotHeight-plotBottom+16, float64(i)/10)
	}
	for i := 0; i <= 10; i += 2 {
		y := plotY(float64(i) / 10)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", plotLeft, y, plotWidth-plotRight, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%d%%</text>`+"\n", plotLeft-6, y+4, 10*i)
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">efficiency (above %.1f drawn at %.1f)</text>`+"\n",
		plotX(plotMaxEff/2), plotHeight-12, plotMaxEff, plotMaxEff)
	fmt.Fprintf(b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">share of indexes at or below</text>`+"\n", plotY(0.5))
	for _, t := range []struct {
		eff, share float64
		name       string
	}{{plotTargetP10, 0.1, "p10 target"}, {plotTarget50, 0.5, "median target"}} {
		x, y := plotX(t.eff), plotY(t.share)
		fmt.Fprintf(b, `<path d="M%.1f %.1fl8 8m0 -8l-8 8" stroke="#000" stroke-width="1.5"/>`+"\n", x-4, y-4)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" paint-order="stroke" stroke="white" stroke-width="4">%s</text>`+"\n", x+8, y+14, t.name)
	}
}

// writePlotCurve draws one sorted curve as steps: up by 1/n at each
// efficiency.
func writePlotCurve(b *bufio.Writer, c plotCurve, color string) {
	n := float64(len(c.effs))
	fmt.Fprintf(b, `<path fill="none" stroke="%s" stroke-width="1.8" d="M%.1f %.1f`, color, plotX(0), plotY(0))
	for i, e := range c.effs {
		fmt.Fprintf(b, " H%.1f V%.1f", plotX(e), plotY(float64(i+1)/n))
	}
	fmt.Fprintf(b, ` H%.1f"/>`+"\n", plotX(plotMaxEff))
}
