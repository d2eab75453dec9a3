package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	grpcstatus "google.golang.org/grpc/status"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/ndjson"
)

// deadLetters is the dead-letter file, created when the first letter comes.
// It also counts the failed records, since with a streaming run
// Result.Failed keeps only the first ones. It is safe for concurrent use.
type deadLetters struct {
	path   string
	append bool                // keep what the file holds: earlier runs' letters
	mask   func(string) string // masks the API key in error messages
	// earlier is how many letters the file held when a run that appends
	// to it started: those of the runs it resumes, or of earlier runs
	// whose records may have landed (exposeEarlierLetters).
	earlier int
	// resumable: with a checkpoint, failures that say nothing against
	// their record (upsert.Failure.Resend: the run stopped, the index was
	// down) are not letters, since the checkpoint stops before them and the
	// next run sends them again.
	resumable bool
	// invalid is told of each record rejected before it was sent, with
	// the rule it breaks, and returns the message naming the record by
	// its place in the input.
	invalid func(f upsert.Failure, rule error) string
	// exposed, when not nil, holds the letters of the records of the ids
	// the file's letters expose (exposedIDs) until their acks, to write
	// them in input order (see exposure).
	exposed *exposure

	// wmu is held shared while a letter is written, and exclusively
	// while the file is closed.
	wmu      sync.RWMutex
	mu       sync.Mutex
	dl       *ndjson.DeadLetters
	err      error // creating the file failed
	byClass  map[upsert.Class]int
	landed   int                  // failed records that may have landed
	toResume map[upsert.Class]int // failed records left to the next run, by class
	notSent  int                  // records never read by the run, written after it gave up
	rejected map[string]int
}

// file returns the file, creating it on first use; nil if that failed.
func (d *deadLetters) file() *ndjson.DeadLetters {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dl == nil && d.err == nil {
		open := ndjson.CreateDeadLetters
		if d.append {
			open = ndjson.AppendDeadLetters
		}
		d.dl, d.err = open(d.path)
	}
	return d.dl
}

// Failure writes the dead letter of a record that did not land; it is the
// upsert.Observer.Failure hook. A record left to resume (leftToResume) is
// counted, not written.
func (d *deadLetters) Failure(f upsert.Failure) {
	d.count(f)
	if d.leftToResume(f) {
		return
	}
	if rule := rejectedRule(f); rule != nil && d.invalid != nil {
		d.mu.Lock()
		if d.rejected == nil {
			d.rejected = make(map[string]int)
		}
		d.rejected[rule.Error()]++
		d.mu.Unlock()
		f.Err = &upsert.Error{Class: upsert.ClassInvalid, Err: errors.New(d.invalid(f, rule))}
	} else if f.Class == upsert.ClassInvalid && d.invalid != nil {
		// Refused by the index: named by its line too, with the index's words.
		why := fmt.Errorf("the index refused it: %s", indexMessage(f.Err))
		f.Err = &upsert.Error{Class: upsert.ClassInvalid, Err: errors.New(d.invalid(f, why))}
	}
	if f.Err != nil {
		if msg := d.mask(f.Err.Error()); msg != f.Err.Error() {
			f.Err = errors.New(msg)
		}
	}
	if d.exposed.hold(f.Index, f.ID, exposedLetter{failure: &f}) {
		return
	}
	d.wmu.RLock()
	defer d.wmu.RUnlock()
	if dl := d.file(); dl != nil {
		dl.Write(f)
	}
}

// rejectedRule returns the rule that a record rejected before sending
// broke, without the library's "record N (id …)", which names it by its
// position among the records rather than in the input; nil for any other
// failure.
func rejectedRule(f upsert.Failure) error {
	var ue *upsert.Error
	if f.Attempts > 0 || f.Class != upsert.ClassInvalid || !errors.As(f.Err, &ue) {
		return nil
	}
	if rule := errors.Unwrap(ue.Err); rule != nil {
		return rule
	}
	return ue.Err
}

// indexMessage returns what the index said of a failure: the gRPC status's
// message when there is one, else the error's text.
func indexMessage(err error) string {
	var ue *upsert.Error
	if errors.As(err, &ue) && ue.Err != nil {
		err = ue.Err
	}
	if st, ok := grpcstatus.FromError(err); ok && st.Message() != "" {
		return st.Message()
	}
	return err.Error()
}

// leftToResume reports whether f's record is left to the next run rather
// than a dead letter: with a checkpoint, which stops before a failure with
// Resend set, the next run sends it again, and a replay of its letter
// would send it twice. Without a checkpoint nothing resends it: it is a
// dead letter.
func (d *deadLetters) leftToResume(f upsert.Failure) bool {
	return d.resumable && f.Resend
}

func (d *deadLetters) count(f upsert.Failure) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byClass == nil {
		d.byClass = make(map[upsert.Class]int)
	}
	d.byClass[f.Class]++
	if f.MayHaveLanded {
		d.landed++
	}
	if d.leftToResume(f) {
		if d.toResume == nil {
			d.toResume = make(map[upsert.Class]int)
		}
		d.toResume[f.Class]++
	}
}

// NotSent writes the dead letter of a record the run never read, after it
// gave up.
func (d *deadLetters) NotSent(f upsert.Failure) {
	d.mu.Lock()
	d.notSent++
	d.mu.Unlock()
	d.wmu.RLock()
	defer d.wmu.RUnlock()
	if dl := d.file(); dl != nil {
		dl.Write(f)
	}
}

// Stale writes the dead letter of a record that landed but may be stale,
// with msg as its error, so that replaying the file upserts it again.
func (d *deadLetters) Stale(s upsert.Stale, msg string) {
	if d.exposed.hold(s.Index, s.ID, exposedLetter{stale: s, msg: msg}) {
		return
	}
	d.wmu.RLock()
	defer d.wmu.RUnlock()
	if dl := d.file(); dl != nil {
		dl.WriteStale(s, msg)
	}
}

// writeExposed writes a letter that exposed held until its record's ack.
func (d *deadLetters) writeExposed(l exposedLetter) {
	d.wmu.RLock()
	defer d.wmu.RUnlock()
	dl := d.file()
	switch {
	case dl == nil:
	case l.failure != nil:
		dl.Write(*l.failure)
	default:
		dl.WriteStale(l.stale, l.msg)
	}
}

// Bad writes the dead letter of an input line that is not a record.
func (d *deadLetters) Bad(line int, raw []byte, err error) {
	d.wmu.RLock()
	defer d.wmu.RUnlock()
	if dl := d.file(); dl != nil {
		dl.WriteBad(line, raw, err)
	}
}

// Close closes the file, if it was created, and returns how many letters
// it holds and the first error met creating or writing it.
func (d *deadLetters) Close() (int, error) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
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

// sync makes the letters written so far durable (ndjson.DeadLetters.Sync,
// safe alongside the writes).
func (d *deadLetters) sync() error {
	d.mu.Lock()
	dl, err := d.dl, d.err
	d.mu.Unlock()
	if dl == nil || err != nil {
		return err
	}
	return dl.Sync()
}

// durableCheckpoint is the run's checkpoint, which makes the dead letters
// durable before it saves: the checkpoint passes records that failed for
// good, which a resumed run skips, so their letters must be on disk first
// (buffered, a kill lost them: TestAKilledRunResumedFromItsCheckpointLosesNothing).
// A save that fails is told to failed.
type durableCheckpoint struct {
	*checkpointFile
	dead   *deadLetters
	failed func(error)
}

// Save saves n, or as far as the letters held for acks are written
// (exposure.savable): durableCheckpoint.finish saves the rest.
func (c durableCheckpoint) Save(_ context.Context, n int64) error {
	return c.saveDurably(c.dead.exposed.savable(n), false)
}

// saveDurably saves n (force: even if the file holds it). The line up to
// which bad lines are reported is read before the dead letters are made
// durable: the letters of those lines were written before it moved, and
// are on disk with the checkpoint.
func (c durableCheckpoint) saveDurably(n int64, force bool) error {
	reported := c.reportedNow()
	err := c.dead.sync()
	if err != nil {
		err = fmt.Errorf("writing the dead-letter file %s before saving the checkpoint: %w", c.dead.path, rootCause(err))
	} else {
		err = c.save(n, reported, force)
	}
	if err != nil {
		c.failed(err)
	}
	return err
}

// finish saves the checkpoint once the run is over if bad lines were
// reported since its last save: the library saves only when the count of
// settled records moves, which it does not in a run that had nothing left
// to send (a rerun of a finished load, whose trailing bad line an earlier
// pcupsert did not mark as reported), and such a line would be reported
// again by every run after. So it does, the count unchanged, when the
// checkpoint, an earlier pcupsert's, does not name the target the run
// checked yet (targetOwed; ended: the input was read to its end), unless
// the run has evidence against that target (trusted false: the dead-letter
// file's letters name another namespace). It also
// saves the count that Save held back for acks (exposure.savable), every
// record acknowledged now: the library's last save may have been one of
// those. A refused run does not finish: it writes nothing.
func (c durableCheckpoint) finish(ended, trusted bool) {
	c.mu.Lock()
	n, saved := c.saved, c.savedReported
	c.mu.Unlock()
	owed := c.dead.exposed.owed()
	target := trusted && c.targetOwed(ended)
	if owed > n || c.reportedNow() > saved || target {
		_ = c.saveDurably(max(n, owed), target) // a failure is told by c.failed
	}
}

// maxCauseChars bounds an error message in the report.
const maxCauseChars = 200

// causesShown is how many messages the report gives per class.
const causesShown = 3

// causes counts the error messages of failed requests, by class, for the
// report: the counts by code say how often, the messages say why. It
// counts requests, not records: a request the index refused is split and
// sent again until the refused record is alone, so one record the index
// refuses is the cause of several failed requests.
type causes struct {
	mask func(string) string
	mu   sync.Mutex
	n    map[upsert.Class]map[string]int
}

// requestDone is the upsert.Observer.RequestDone hook.
func (c *causes) requestDone(e upsert.RequestEvent) {
	if e.Err == nil {
		return
	}
	msg := e.Err.Class.String()
	if e.Err.Err != nil {
		msg = indexMessage(e.Err.Err)
	}
	// Masked before it is cut: a key cut in two is not the key the mask
	// looks for.
	msg = c.mask(msg)
	if len(msg) > maxCauseChars {
		n := maxCauseChars
		for n > 0 && !utf8.RuneStart(msg[n]) {
			n--
		}
		msg = msg[:n] + "…"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[upsert.Class]map[string]int)
	}
	if c.n[e.Err.Class] == nil {
		c.n[e.Err.Class] = make(map[string]int)
	}
	c.n[e.Err.Class][msg]++
}

// The units of a cause's count.
const (
	unitRequest = "request" // failed requests, whose records may have landed after a retry or split
	unitRecord  = "record"  // records rejected before they were sent
)

// cause is an error message and how many times it came, in the report.
type cause struct {
	Class string `json:"class"`
	// Count is how many times the message came, in Unit: failed requests
	// (unitRequest) for the index's answers, records (unitRecord) for the
	// rules broken before sending.
	Count   int    `json:"count"`
	Unit    string `json:"unit"`
	Message string `json:"message"`
	// Host is the index that answered it; "" for records rejected before
	// they were sent.
	Host string `json:"host"`
}

// top returns the most frequent messages of each class, in class order,
// those of requests that host answered, then those of records rejected
// before sending.
func (c *causes) top(host string, rejected map[string]int) []cause {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := []cause{} // [] in the JSON report, not null, when nothing failed
	add := func(class upsert.Class, msgs map[string]int, unit, host string) {
		keys := slices.SortedFunc(maps.Keys(msgs), func(a, b string) int {
			return cmp.Or(msgs[b]-msgs[a], strings.Compare(a, b))
		})
		for _, m := range keys[:min(len(keys), causesShown)] {
			out = append(out, cause{Class: class.String(), Count: msgs[m], Unit: unit, Message: m, Host: host})
		}
	}
	for _, cl := range upsert.Classes() {
		add(cl, c.n[cl], unitRequest, host)
	}
	add(upsert.ClassInvalid, rejected, unitRecord, "")
	return out
}

// summary is the final report: the human one is written from it, and
// --json writes it as is.
type summary struct {
	Input     string `json:"input"`
	Format    string `json:"format"`
	Host      string `json:"host"`
	Namespace string `json:"namespace"`

	RecordsRead int `json:"records_read"`
	BadLines    int `json:"bad_lines"`
	// Skipped are the records at the start of the input that the
	// checkpoint says an earlier run settled (counted in RecordsRead).
	Skipped  int `json:"skipped"`
	Upserted int `json:"upserted"`
	// Failed counts every record that did not land, those left to resume
	// included: Failed - LeftToResume are the dead letters of records.
	Failed        int            `json:"failed"`
	FailedByClass map[string]int `json:"failed_by_class"`
	MayHaveLanded int            `json:"may_have_landed"`
	// MayBeStale counts records that landed while a request carrying an
	// earlier record of their id had ended without an answer: the index
	// may keep that earlier record. Their dead letters upsert them again.
	MayBeStale int `json:"may_be_stale"`
	// LeftToResume counts the failed records that a run with --checkpoint
	// leaves to the next one, which sends them again: their failure says
	// nothing against them (upsert.Failure.Resend), and they are not dead
	// letters. LeftToResumeByClass splits them by class.
	LeftToResume        int            `json:"left_to_resume"`
	LeftToResumeByClass map[string]int `json:"left_to_resume_by_class"`
	NotSent             int            `json:"not_sent"`
	Duplicates          int            `json:"duplicates"`
	Requests            int            `json:"requests"`
	Retries             int            `json:"retries"`
	RetriesByClass      map[string]int `json:"retries_by_class"`
	Splits              int            `json:"splits"`
	ErrorsByCode        map[string]int `json:"errors_by_code"`
	Causes              []cause        `json:"causes"`

	LatencySeconds   latency `json:"latency_seconds"`
	BatchSizeMean    float64 `json:"batch_size_mean"`
	ElapsedSeconds   float64 `json:"elapsed_seconds"`
	UpsertingSeconds float64 `json:"upserting_seconds"`
	RecordsPerSecond float64 `json:"records_per_second"`

	// Embedded is what the embedded index holds; nil for a real index.
	Embedded *embedded `json:"embedded_index,omitempty"`

	DeadLetters deadLetterSummary `json:"dead_letters"`
	// InputError is the read error that ended the input before its end;
	// what followed it was not read, and is not in the dead-letter file.
	InputError string `json:"input_error,omitempty"`
	// Interrupted: the run was stopped by a signal; GaveUp: by
	// --max-failure-seconds; Stopped: by a failure no retry can fix (a
	// denied key), with the rest of the input not read.
	Interrupted bool `json:"interrupted"`
	GaveUp      bool `json:"gave_up"`
	Stopped     bool `json:"stopped"`
	ExitStatus  int  `json:"exit_status"`
}

type latency struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

type embedded struct {
	Stored     int  `json:"stored"`
	AsExpected bool `json:"as_expected"`
}

type deadLetterSummary struct {
	Path string `json:"path"`
	// Count is how many letters the run wrote.
	Count int `json:"count"`
	// Earlier is how many letters the file held before a run with
	// --checkpoint appended to it: those of earlier runs (the runs it
	// resumes, or ones whose records may have landed, when it resumed
	// nothing), whose failures their reports (and exit statuses) told of.
	Earlier int    `json:"earlier"`
	Error   string `json:"error,omitempty"`
}

// classNames turns counts by class into counts by class name.
func classNames(m map[upsert.Class]int) map[string]int {
	out := make(map[string]int, len(m))
	for c, n := range m {
		out[c.String()] = n
	}
	return out
}

// storedAsExpected reports whether the embedded index holds every record
// upserted, and no more than the failed records that may have landed
// explain. The index holds an id once, however many times it was
// upserted: repeated, the records sent whose id an earlier record sent had,
// may have landed onto it, and account for as many fewer.
func storedAsExpected(stored, upserted, mayHaveLanded, repeated int) bool {
	return stored >= upserted-repeated && stored-upserted <= mayHaveLanded
}

// writeJSON writes s as one JSON object on a line.
func (s *summary) writeJSON(w io.Writer) error { return encodeJSON(w, s) }

// encodeJSON writes v as one line of JSON, with <, > and & as they are.
func encodeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// writeReport writes a report on e's stdout, as JSON when asJSON, and
// returns status; a report that could not be written fails the run (a
// script must not take a missing report for success).
func writeReport(e *env, asJSON bool, text, inJSON func(io.Writer) error, what string, status int) int {
	write := text
	if asJSON {
		write = inJSON
	}
	if err := write(e.stdout); err != nil {
		fmt.Fprintf(e.con, "pcupsert: writing the %s: %v\n", what, err)
		return exitFailed
	}
	return status
}

// write writes s as an aligned table, then what the embedded index holds
// and where the dead letters are.
func (s *summary) write(out io.Writer) error {
	w := &stickyWriter{w: out}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{name}, args...)...)
	}
	row("records read", "%d", s.RecordsRead)
	if s.Skipped > 0 {
		row("skipped", "%d (settled by an earlier run: --checkpoint)", s.Skipped)
	}
	row("bad lines", "%d", s.BadLines)
	row("upserted", "%d", s.Upserted)
	row("failed", "%d%s", s.Failed, byClass(s.FailedByClass))
	if s.LeftToResume > 0 {
		row("left to resume", "%d of the failed%s: not dead letters; the next run with the same --checkpoint sends them again",
			s.LeftToResume, byClass(s.LeftToResumeByClass))
	}
	if s.NotSent > 0 {
		row("not sent", "%d (read after giving up, into the dead-letter file)", s.NotSent)
	}
	if s.MayBeStale > 0 {
		row("may be stale", "%d (landed, but an earlier write of their id left without an answer may still replace them; in the dead-letter file: replay it once the index is quiet)", s.MayBeStale)
	}
	row("duplicates", "%d", s.Duplicates)
	row("requests", "%d", s.Requests)
	row("retries", "%d%s", s.Retries, byClass(s.RetriesByClass))
	row("splits", "%d", s.Splits)
	row("errors by code", "%s", byCode(s.ErrorsByCode))
	if len(s.Causes) > 0 {
		row("causes", "%s", causesHeading(s.Host, s.Causes))
		for _, c := range s.Causes {
			where := ""
			if c.Host == "" {
				where = "before sending: "
			}
			row(fmt.Sprintf("  %s ×%s", c.Class, quantity(c.Count, c.Unit)), "%s%s", where, c.Message)
		}
	}
	row("latency p50/p95/p99", "%v / %v / %v", round(seconds(s.LatencySeconds.P50)), round(seconds(s.LatencySeconds.P95)), round(seconds(s.LatencySeconds.P99)))
	row("batch size mean", "%.1f", s.BatchSizeMean)
	row("elapsed", "%v (upserting %v)", round(seconds(s.ElapsedSeconds)), round(seconds(s.UpsertingSeconds)))
	row("throughput", "%s rec/s", si(s.RecordsPerSecond))
	_ = tw.Flush() // its error is w's

	s.writeEmbedded(w)
	s.DeadLetters.write(w)
	if s.InputError != "" {
		fmt.Fprintf(w, "input: %s; the rest of it was not read\n", s.InputError)
	}
	s.writeEnd(w)
	return w.err
}

// writeEmbedded writes what the embedded index holds, if the run wrote to
// it, against what was upserted.
func (s *summary) writeEmbedded(w io.Writer) {
	e := s.Embedded
	switch {
	case e == nil:
	case e.Stored == s.Upserted:
		fmt.Fprintf(w, "embedded index: holds %s, as many as upserted\n", quantity(e.Stored, "record"))
	case e.AsExpected && e.Stored > s.Upserted:
		fmt.Fprintf(w, "embedded index: holds %s, %d more than upserted: failed records that may have landed did\n", quantity(e.Stored, "record"), e.Stored-s.Upserted)
	case e.AsExpected:
		fmt.Fprintf(w, "embedded index: holds %s, %d fewer than upserted: records of an id upserted again replaced the earlier ones\n", quantity(e.Stored, "record"), s.Upserted-e.Stored)
	default:
		fmt.Fprintf(w, "embedded index: holds %s but %d were upserted: MISMATCH\n", quantity(e.Stored, "record"), s.Upserted)
	}
}

// writeEnd says why the run ended before its input did, if it did, as
// the JSON report's interrupted, gave_up and stopped do: "ended early:
// gave up (...); then interrupted (...)" for a run interrupted while it
// wrote the rest of its input to the dead-letter file after giving up.
func (s *summary) writeEnd(w io.Writer) {
	var why []string
	if s.GaveUp {
		why = append(why, "gave up (--max-failure-seconds: no record landed for that long)")
	}
	if s.Interrupted {
		why = append(why, "interrupted (a signal: Ctrl-C, SIGTERM or SIGHUP)")
	}
	if s.Stopped {
		why = append(why, "stopped (a failure no retry can fix, such as a denied key; the rest of the input was not read)")
	}
	if len(why) > 0 {
		fmt.Fprintf(w, "ended early: %s\n", strings.Join(why, "; then "))
	}
}

// write says where the dead letters are, this run's and those of the
// earlier runs it appended to, if there are any.
func (d deadLetterSummary) write(w io.Writer) {
	switch {
	case d.Error != "":
		fmt.Fprintf(w, "dead letters: %d, but writing %s failed: %s\n", d.Count, d.Path, d.Error)
	case d.Count > 0:
		fmt.Fprintf(w, "dead letters: %d in %s\n", d.Count, d.Path)
	}
	if d.Earlier > 0 {
		fmt.Fprintf(w, "earlier dead letters: %d in %s, written by earlier runs, kept and appended to (--checkpoint)\n", d.Earlier, d.Path)
	}
}

// causesHeading is the heading of the causes in the report: the host that
// answered, and what the counts count, requests or records.
func causesHeading(host string, cs []cause) string {
	if !slices.ContainsFunc(cs, func(c cause) bool { return c.Unit == unitRequest }) {
		return "records rejected before sending"
	}
	return "from " + host + " (requests are counted: one is split and sent again, so one record can fail several)"
}

// stickyWriter keeps the first error of the writes through it, so that a
// report written line by line is checked once, at its end.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// byClass formats counts by class name, in class order, as " (rate-limited
// 3, server 1)"; "" when there are none.
func byClass(m map[string]int) string {
	var parts []string
	for _, c := range upsert.Classes() {
		if n := m[c.String()]; n > 0 {
			parts = append(parts, fmt.Sprintf("%v %d", c, n))
		}
	}
	if len(parts) == 0 {
		return ""
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

// round keeps about three significant digits of d (time.Duration.Round
// rounds to a unit, not to significant digits).
func round(d time.Duration) time.Duration {
	for unit := time.Duration(1); unit < time.Hour; unit *= 10 {
		if d < 1000*unit {
			return d.Round(unit)
		}
	}
	return d.Round(time.Second)
}
