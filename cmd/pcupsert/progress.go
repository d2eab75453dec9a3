package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/upsertlib/upsert"
)

// How often progress is shown: the bar is redrawn at most ten times a
// second, a line is printed every few seconds.
const (
	barInterval  = 100 * time.Millisecond
	lineInterval = 3 * time.Second
	barWidth     = 30
)

// isTerminal reports whether f is a terminal (a character device).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	fi, err := file.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// console is stderr, shared by the progress bar and the other messages: a
// message erases the bar, is written, and the bar is drawn again below it.
// It is safe for concurrent use.
type console struct {
	mu  sync.Mutex
	w   io.Writer
	bar string // as last drawn; "" when no bar is shown
}

func newConsole(w io.Writer) *console { return &console{w: w} }

// Write writes a message, which should end with a newline.
func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bar != "" {
		io.WriteString(c.w, "\r\x1b[K")
	}
	n, err := c.w.Write(p)
	if c.bar != "" {
		io.WriteString(c.w, c.bar)
	}
	return n, err
}

// drawBar replaces the bar on the last line with s.
func (c *console) drawBar(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	io.WriteString(c.w, "\r"+s+"\x1b[K")
	c.bar = s
}

// endBar leaves the bar as drawn and moves below it.
func (c *console) endBar() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bar != "" {
		io.WriteString(c.w, "\n")
		c.bar = ""
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

// progress shows upsert.Progress on the console, as a bar or as lines.
type progress struct {
	con *console
	bar bool
}

// newProgress returns the progress display that mode asks for (auto: a bar
// when stderr is a terminal, lines otherwise), or nil for off.
func newProgress(mode string, terminal bool, con *console) *progress {
	switch mode {
	case "off":
		return nil
	case "auto":
		return &progress{con: con, bar: terminal}
	default:
		return &progress{con: con, bar: mode == "bar"}
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
	if !p.bar {
		fmt.Fprintf(p.con, "pcupsert: %s\n", progressText(pr))
		return
	}
	p.con.drawBar(progressText(pr))
	if pr.Final {
		p.con.endBar()
	}
}

// progressText formats pr as
//
//	[=====>     ] 45% 450000/1000000 12.3k rec/s ETA 44s retries 12 429s 3
//
// leaving out the bar and percentage when the total is unknown, the ETA
// when unknown or final, and the failures when there are none.
func progressText(pr upsert.Progress) string {
	var b strings.Builder
	if pr.Total > 0 {
		frac := min(1, float64(pr.Done)/float64(pr.Total))
		full := int(frac * barWidth)
		head := ""
		if full < barWidth {
			head = ">"
		}
		fmt.Fprintf(&b, "[%s%s%s] %d%% %d/%d", strings.Repeat("=", full), head,
			strings.Repeat(" ", max(0, barWidth-full-len(head))), int(100*frac), pr.Done, pr.Total)
	} else {
		fmt.Fprintf(&b, "%d done", pr.Done)
	}
	fmt.Fprintf(&b, " %s rec/s", si(pr.Rate))
	if pr.ETA > 0 && !pr.Final {
		fmt.Fprintf(&b, " ETA %v", max(time.Second, pr.ETA.Round(time.Second)))
	}
	fmt.Fprintf(&b, " retries %d 429s %d", pr.Stats.Retries, pr.Stats.ErrorsByClass[upsert.ClassRateLimited])
	if pr.Stats.Failed > 0 {
		fmt.Fprintf(&b, " failed %d", pr.Stats.Failed)
	}
	return b.String()
}

// si formats x with about three significant digits and a k or M suffix:
// 950, 12.3k, 1.50M.
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
