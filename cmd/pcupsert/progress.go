package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/upsertlib/upsert"
)

// How often progress is shown: the bar is redrawn at most ten times a
// second, a line is printed every few seconds.
const (
	barInterval  = 100 * time.Millisecond
	lineInterval = 3 * time.Second
)

// console is stderr, shared by the progress bar and the other messages: a
// message erases the bar, is written, and the bar is drawn again below it.
// It is safe for concurrent use. Hand-written: schollz/progressbar's
// Bprintln holds a line in a buffer until the bar next renders, which is
// only when it advances (a stalled run's errors would not show); Clear and
// RenderBlank are used here to write at once.
type console struct {
	mu  sync.Mutex
	w   io.Writer
	bar *progressbar.ProgressBar // while one is shown
}

func newConsole(w io.Writer) *console { return &console{w: w} }

// Write writes a message, which should end with a newline.
func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The bar is only drawn: what matters is the message's write.
	if c.bar != nil {
		_ = c.bar.Clear()
	}
	n, err := c.w.Write(p)
	if c.bar != nil {
		_ = c.bar.RenderBlank()
	}
	return n, err
}

// draw updates the bar, under the console's lock.
func (c *console) draw(bar *progressbar.ProgressBar, f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bar = bar
	f()
}

// endBar leaves the bar as drawn and moves below it.
func (c *console) endBar() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bar != nil {
		_, _ = io.WriteString(c.w, "\n")
		c.bar = nil
	}
}

// minMaskedKey is the shortest API key masked in outputs: a shorter one,
// surely a test value, would mask ordinary text ("k" in "12.3k rec/s").
const minMaskedKey = 8

// masker returns a function that replaces secret in a string, or leaves
// strings alone when secret is shorter than minMaskedKey.
func masker(secret string) func(string) string {
	if len(secret) < minMaskedKey {
		return func(s string) string { return s }
	}
	return strings.NewReplacer(secret, "[API key]").Replace
}

// maskingWriter masks the API key in what it writes, as a last line of
// defence: nothing pcupsert writes should contain it.
type maskingWriter struct {
	w    io.Writer
	mask func(string) string
}

func (m *maskingWriter) Write(p []byte) (int, error) {
	if s := m.mask(string(p)); s != string(p) {
		_, err := io.WriteString(m.w, s)
		return len(p), err
	}
	return m.w.Write(p)
}

// progress shows upsert.Progress on the console: a bar (schollz/progressbar)
// on a terminal, lines otherwise.
type progress struct {
	con *console
	bar bool
	// input returns how many records were read and the share of the
	// input read (-1 when its size is unknown), to estimate the total.
	input func() (read int, consumed float64)

	pb       *progressbar.ProgressBar // made at the first report
	lastLine string                   // the last line shown, without a bar
}

// newProgress returns the progress display that mode asks for (auto: a bar
// when stderr is a terminal, lines otherwise), or nil for off.
func newProgress(mode string, terminal bool, con *console, input func() (int, float64)) *progress {
	switch mode {
	case "off":
		return nil
	case "auto":
		return &progress{con: con, bar: terminal, input: input}
	default:
		return &progress{con: con, bar: mode == "bar", input: input}
	}
}

// interval is how often the library should call show.
func (p *progress) interval() time.Duration {
	if p.bar {
		return barInterval
	}
	return lineInterval
}

// show displays pr; it is the function given to upsert.WithProgress.
func (p *progress) show(pr upsert.Progress) {
	st := newStatus(pr, p.input)
	if !p.bar {
		// The final report repeats the last one when nothing moved since.
		if line := st.line(); line != p.lastLine {
			fmt.Fprintf(p.con, "pcupsert: %s\n", line)
			p.lastLine = line
		}
		return
	}
	p.con.draw(p.pb, func() {
		if p.pb == nil {
			p.pb = newBar(p.con.w, st.total)
			p.con.bar = p.pb
		}
		if st.total >= 0 {
			p.pb.ChangeMax64(int64(max(st.total, 1)))
		}
		desc := st.counts()
		if st.skipped > 0 {
			desc = fmt.Sprintf("(and %d skipped) %s", st.skipped, desc)
		}
		p.pb.Describe(desc)
		_ = p.pb.Set64(int64(st.done))
	})
	if pr.Final {
		p.con.endBar()
	}
}

// newBar returns a bar of total records, or a spinner when total < 0.
func newBar(w io.Writer, total int) *progressbar.ProgressBar {
	return progressbar.NewOptions64(int64(total),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(0), // the library paces the reports
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("rec"),
		progressbar.OptionSetPredictTime(total >= 0),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionSpinnerType(14),
	)
}

// status is what a progress report shows.
type status struct {
	done, total int // this run's records; total is -1 when unknown
	skipped     int // the records a checkpoint skips, in neither
	rate        float64
	eta         time.Duration
	final       bool
	retries     int
	rateLimited int
	failed      int
}

// newStatus reads pr, estimating the total from the share of the input
// read: the records read so far divided by that share. The input is read
// as records are sent, so the estimate firms up as the run goes, and is
// exact once the input was read to its end. The records a checkpoint
// skips (pr.Stats.Skipped) are the earlier runs': they are left out of
// the total as they are of pr.Done, so that a resumed run ends at 100%,
// and its ETA is that of the records it sends.
func newStatus(pr upsert.Progress, input func() (int, float64)) status {
	st := status{
		done: pr.Done, total: -1, skipped: pr.Stats.Skipped, rate: pr.Rate, final: pr.Final,
		retries: pr.Stats.Retries, rateLimited: pr.Stats.ErrorsByClass[upsert.ClassRateLimited], failed: pr.Stats.Failed,
	}
	if input != nil {
		if read, consumed := input(); consumed > 0 {
			st.total = max(pr.Done, int(float64(read)/consumed+0.5)-st.skipped)
		}
	}
	if st.total >= 0 && st.rate > 0 && !st.final {
		st.eta = time.Duration(float64(st.total-st.done) / st.rate * float64(time.Second))
	}
	return st
}

// line formats st as
//
//	45% 450000/1000000 (and 20000 skipped) 12.3k rec/s ETA 44s retries 12 429s 3
//
// leaving out the percentage and total when unknown, the skipped records
// when there are none, the ETA when unknown or final, and the failures
// when there are none.
func (st status) line() string {
	var b strings.Builder
	if st.total > 0 {
		fmt.Fprintf(&b, "%d%% %d/%d", int(100*min(1, float64(st.done)/float64(st.total))), st.done, st.total)
	} else {
		fmt.Fprintf(&b, "%d done", st.done)
	}
	if st.skipped > 0 {
		fmt.Fprintf(&b, " (and %d skipped)", st.skipped)
	}
	fmt.Fprintf(&b, " %s rec/s", si(st.rate))
	if st.eta > 0 && !st.final {
		fmt.Fprintf(&b, " ETA %v", max(time.Second, st.eta.Round(time.Second)))
	}
	b.WriteString(" " + st.counts())
	return b.String()
}

// counts formats the retries and failures: "retries 12 429s 3 failed 1".
func (st status) counts() string {
	s := fmt.Sprintf("retries %d 429s %d", st.retries, st.rateLimited)
	if st.failed > 0 {
		s += fmt.Sprintf(" failed %d", st.failed)
	}
	return s
}

// si formats x with about three significant digits and a k or M suffix:
// 950, 12.3k, 1.50M. Hand-written: go-humanize's SIWithDigits has fixed
// decimals and a space ("12.3 k"); a dependency is not worth 15 lines.
func si(x float64) string {
	unit := ""
	for _, u := range []string{"k", "M", "G"} {
		if x < 999.5 {
			break
		}
		x, unit = x/1000, u
	}
	switch {
	case unit == "" || x >= 99.95:
		return fmt.Sprintf("%.0f%s", x, unit)
	case x >= 9.995:
		return fmt.Sprintf("%.1f%s", x, unit)
	default:
		return fmt.Sprintf("%.2f%s", x, unit)
	}
}
