package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/ndjson"
)

// deadLetters is the dead-letter file, created when the first letter comes.
// It also counts the failed records, since with a streaming run
// Result.Failed keeps only the first ones. It is safe for concurrent use.
type deadLetters struct {
	path string
	mask func(string) string // masks the API key in error messages

	mu      sync.Mutex
	dl      *ndjson.DeadLetters
	err     error // creating the file failed
	byClass map[upsert.Class]int
	landed  int // failed records that may have landed
}

// file returns the file, creating it on first use; nil if that failed.
func (d *deadLetters) file() *ndjson.DeadLetters {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dl == nil && d.err == nil {
		d.dl, d.err = ndjson.CreateDeadLetters(d.path)
	}
	return d.dl
}

// Failure writes the dead letter of a record that did not land; it is the
// upsert.Observer.Failure hook.
func (d *deadLetters) Failure(f upsert.Failure) {
	if f.Err != nil {
		if msg := d.mask(f.Err.Error()); msg != f.Err.Error() {
			f.Err = errors.New(msg)
		}
	}
	d.mu.Lock()
	if d.byClass == nil {
		d.byClass = make(map[upsert.Class]int)
	}
	d.byClass[f.Class]++
	if f.MayHaveLanded {
		d.landed++
	}
	d.mu.Unlock()
	if dl := d.file(); dl != nil {
		dl.Write(f)
	}
}

// failed returns the failed records by class, and how many may have landed.
func (d *deadLetters) failed() (byClass map[upsert.Class]int, mayHaveLanded int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.byClass), d.landed
}

// Bad writes the dead letter of an input line that is not a record.
func (d *deadLetters) Bad(line int, raw []byte, err error) {
	if dl := d.file(); dl != nil {
		dl.WriteBad(line, raw, err)
	}
}

// Close closes the file, if it was created, and returns how many letters
// it holds and the first error met creating or writing it.
func (d *deadLetters) Close() (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return 0, d.err
	}
	if d.dl == nil {
		return 0, nil
	}
	return d.dl.Count(), d.dl.Close()
}

// report is what a run did, for the final report on stdout.
type report struct {
	read, bad int // records read and bad lines
	res       upsert.Result
	elapsed   time.Duration // the whole run's

	failedByClass map[upsert.Class]int
	mayHaveLanded int // failed records that may have landed

	embedded bool // the target is the embedded index, which holds stored
	stored   int

	deadLetterPath string
	deadLetters    int
	deadLetterErr  error
}

// write writes the report as an aligned table, then what the embedded index
// holds and where the dead letters are.
func (r report) write(w io.Writer) {
	s := r.res.Stats
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{name}, args...)...)
	}
	row("records read", "%d", r.read)
	row("bad lines", "%d", r.bad)
	row("upserted", "%d", r.res.Upserted)
	row("failed", "%d%s", s.Failed, byClass(s.Failed, r.failedByClass))
	row("duplicates", "%d", r.res.Duplicates)
	row("requests", "%d", s.Requests)
	row("retries", "%d%s", s.Retries, byClass(s.Retries, s.RetriesByClass))
	row("splits", "%d", s.Splits)
	row("errors by code", "%s", byCode(s.ErrorsByCode))
	row("latency p50/p95/p99", "%v / %v / %v", round(s.Latency.P50), round(s.Latency.P95), round(s.Latency.P99))
	row("batch size mean", "%.1f", s.BatchSizes.Mean)
	row("elapsed", "%v (upserting %v)", round(r.elapsed), round(s.Elapsed))
	throughput := 0.0
	if s.Elapsed > 0 {
		throughput = float64(r.res.Upserted) / s.Elapsed.Seconds()
	}
	row("throughput", "%s rec/s", si(throughput))
	tw.Flush()

	switch {
	case !r.embedded:
	case r.stored == r.res.Upserted:
		fmt.Fprintf(w, "embedded index: holds %d records, as many as upserted\n", r.stored)
	case r.storedAsExpected():
		fmt.Fprintf(w, "embedded index: holds %d records, %d more than upserted: failed records that may have landed did\n", r.stored, r.stored-r.res.Upserted)
	default:
		fmt.Fprintf(w, "embedded index: holds %d records but %d were upserted: MISMATCH\n", r.stored, r.res.Upserted)
	}
	switch {
	case r.deadLetterErr != nil:
		fmt.Fprintf(w, "dead letters: %d, but writing %s failed: %v\n", r.deadLetters, r.deadLetterPath, r.deadLetterErr)
	case r.deadLetters > 0:
		fmt.Fprintf(w, "dead letters: %d in %s\n", r.deadLetters, r.deadLetterPath)
	}
}

// storedAsExpected reports whether the embedded index holds every record
// upserted, and no more than the failed records that may have landed
// explain; true for a real index, which is not checked.
func (r report) storedAsExpected() bool {
	return !r.embedded || (r.stored >= r.res.Upserted && r.stored-r.res.Upserted <= r.mayHaveLanded)
}

// byClass formats counts by class, in class order, as " (rate-limited 3,
// server 1)"; "" when total is 0.
func byClass(total int, m map[upsert.Class]int) string {
	if total == 0 {
		return ""
	}
	var parts []string
	for _, c := range upsert.Classes() {
		if m[c] > 0 {
			parts = append(parts, fmt.Sprintf("%v %d", c, m[c]))
		}
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// byCode formats counts by error code, sorted by code: "Unavailable 2,
// ResourceExhausted 5", or "none".
func byCode(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", code, m[code]))
	}
	return strings.Join(parts, ", ")
}

// round keeps about three significant digits of d.
func round(d time.Duration) time.Duration {
	for unit := time.Duration(1); unit < time.Hour; unit *= 10 {
		if d < 1000*unit {
			return d.Round(unit)
		}
	}
	return d.Round(time.Second)
}
