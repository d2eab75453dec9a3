// Command pcupsert upserts records from an NDJSON or Parquet file into a
// Pinecone index, without losing any: every record lands, or goes to a
// dead-letter file that can be fed back in to replay it.
//
// Usage:
//
//	pcupsert [flags] [file]
//
// Records are read from file, or from stdin when file is "-" or absent, one
// JSON object per line with fields id, values, sparse_values (or
// sparseValues, as the REST API spells it) and metadata (see package
// github.com/upsertlib/upsert/ndjson), or from a Parquet file in the
// layout of Pinecone's bulk import. With PINECONE_API_KEY set and
// --host or --index given, pcupsert writes to that index; otherwise to an
// embedded loopback index (package upserttest), where --fault and --rate
// show how the library deals with rate limits and errors.
//
// Run pcupsert --help for the flags. The exit status is 0 when every record
// of the run landed, 1 when a record failed (or, with --checkpoint, was
// left to the next run) or may be stale, a line was bad, the input could
// not be read to its end (the dead-letter file holds what to replay), or
// the run was interrupted or gave up (--max-failure-seconds), and 2
// for usage errors, an input file that does not exist or is gzip-compressed,
// a --checkpoint or --dead-letter that another pcupsert holds, an input
// that another pcupsert writes its dead letters to, a --checkpoint that
// belongs to another input or was settled in another namespace or index,
// or a --dead-letter of another namespace's letters to append to, included.
// For scripts, --json writes the final report as one JSON object,
// --max-failure-seconds gives up on an index that accepts nothing, and
// --dry-run checks the input without sending anything.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/upsertlib/upsert"
)

// Exit statuses.
const (
	exitOK     = 0 // every record landed
	exitFailed = 1 // a record failed or was left to resume, or may be stale, a line was bad, or the run could not be done
	exitUsage  = 2 // the command line is wrong, or names an input file that does not exist
)

// defaultDeadLetter is the dead-letter file's default path.
const defaultDeadLetter = "pcupsert-failed.ndjson"

func main() {
	os.Exit(run(signalContext(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// stopSignals are the signals that stop a run gracefully: it stops
// reading, ends its requests, writes its dead letters, saves its
// checkpoint and reports. SIGHUP is one, unless the process started with
// it ignored (nohup): closing the terminal or the ssh session that started
// a long run must not kill it before it saved what it did, and a run
// started to outlive it goes on.
func stopSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) { // Notify would undo nohup
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// signalContext returns a context that ends at the first of stopSignals.
// Their handling ends with it: a second one kills the process at once,
// as their default action does. A write to a stdout or stderr whose
// reader is gone fails from then on rather than killing the process
// (brokenConsoleFails): the signal that stops a run often ends that
// reader too (tee in the pipeline, the ssh session), and the run's first
// message after it would otherwise kill it before its dead letters.
func signalContext() context.Context {
	brokenConsoleFails()
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals()...)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills at once
	}()
	return ctx
}

// options are what the command line asks for.
type options struct {
	input       string // a path, or "" or "-" for stdin
	host        string
	index       string
	namespace   string
	deadLetter  string
	checkpoint  string
	batchSize   int
	concurrency int
	timeout     time.Duration
	progress    string
	logLevel    string
	fault       string
	rate        float64
	maxRate     float64 // records a second; 0: as fast as the index accepts
	dimension   int
	format      string // "" (by extension), ndjson or parquet
	json        bool
	dryRun      bool
	maxFailure  float64 // seconds; 0: never give up
}

// The range of --max-failure-seconds, besides 0: from a millisecond to a
// billion seconds (about 31 years), well within a time.Duration (the
// watchdog's ticker needs a positive one; a value past 292 years would
// overflow).
const (
	minFailureSeconds = 0.001
	maxFailureSeconds = 1e9
)

// usageError is a wrong command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// newFlagSet returns the flag set of the command, filling o.
func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("pcupsert", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints errors and help itself
	fs.Usage = func() {}
	fs.StringVar(&o.host, "host", "", "the index `URL`, such as https://NAME-PROJECT.svc.REGION.pinecone.io\n(needs PINECONE_API_KEY; https://, or http:// for a loopback host alone, such as Pinecone\nLocal: elsewhere the key would cross the network unencrypted; default: the embedded loopback index)")
	fs.StringVar(&o.index, "index", "", "the index `NAME`, whose host is looked up with the API key\n(instead of --host)")
	fs.StringVar(&o.namespace, "namespace", "", "the `NAMESPACE` to write into (default \"\": the SDK's default namespace, \"__default__\")")
	fs.StringVar(&o.checkpoint, "checkpoint", "", "keep how far the input has landed in the file at `PATH`, and skip that much of it\nwhen run again with the same input: an interrupted load resumes where it stopped\n(the file names the input by its first 64 KiB, a Parquet file by its footer and the start\nof each column too, and the index and namespace: another input or target is refused;\nPATH.lock is locked while the run lasts: a second pcupsert on PATH is refused)")
	fs.StringVar(&o.deadLetter, "dead-letter", defaultDeadLetter, "the dead-letter file at `PATH`: records that failed and lines that could not\nbe read, for replay as input; written (mode 0600) only if something fails (the file\nitself is locked while the run lasts: a second pcupsert writing to PATH, or reading it\nas its input, is refused, as is a run reading a file another one writes letters to)")
	fs.IntVar(&o.batchSize, "batch-size", 0, fmt.Sprintf("`N` records per request, 1 to %d (default 0: adaptive, from 100 up)", upsert.MaxBatchSize))
	fs.IntVar(&o.concurrency, "concurrency", 0, "`N` requests in flight at most, 1 to 256 (default 0: adaptive, from 4 up)")
	fs.Float64Var(&o.maxRate, "max-rate", 0, "send at most `N` records a second, retries included, as for an index that also\nserves queries (default 0: as fast as the index accepts)")
	fs.DurationVar(&o.timeout, "timeout", upsert.DefaultRequestTimeout, "the `DURATION` each request may take; a slower one is retried, split in halves")
	fs.StringVar(&o.progress, "progress", "auto", "how to show progress on stderr, the `MODE`: auto, bar, lines or off\n(auto: a bar on a terminal, a line every few seconds otherwise)")
	fs.StringVar(&o.logLevel, "log-level", "off", "log retries, splits and failures on stderr from `LEVEL`: off, error, warn, info or debug")
	fs.StringVar(&o.fault, "fault", "", "embedded index only: faults to inject, a comma-separated `LIST` of\n"+faultHelp)
	fs.Float64Var(&o.rate, "rate", 0, "embedded index only: the vectors per second `N` it admits, answering 429 above\n(default 0: unlimited)")
	fs.IntVar(&o.dimension, "dimension", 0, "the index's dimension `N`: the embedded index's, as a real index has one from its creation\n(default 0: that of the first valid record), and what --dry-run checks records against\n(default 0: not checked); replaying dead letters, give your index's")
	fs.StringVar(&o.format, "format", "", "the input's `FORMAT`: ndjson, or parquet (Pinecone's import layout: columns id, values,\nsparse_values, metadata as a JSON object in a string or as a struct of its fields)\n(default: parquet for a .parquet file, else ndjson)")
	fs.BoolVar(&o.json, "json", false, "write the final report on stdout as one JSON object (the same figures), for scripts")
	fs.BoolVar(&o.dryRun, "dry-run", false, "read and check the input, say what would be sent (records, batches, namespaces,\nbad lines and invalid records, each named on stderr), and send nothing: no index is opened,\nbut the command line is checked as a run's; with --checkpoint, what the run resumed from it\nwould skip and send (the checkpoint is read, not written or locked). Records are the most a run\nsends (every valid one), batches the fewest (of --batch-size, or 1000); duplicates, records that\na later one of their id replaces in their batch, unsent, are counted in those batches: a run's\n(adaptive ones start at 100) may hold fewer")
	fs.Float64Var(&o.maxFailure, "max-failure-seconds", 0, "give up when records wait and requests have failed, none landing, for `N` seconds:\nwhat was not sent goes to the dead-letter file, read or not (with --checkpoint, what was read\nand did not land is left to the next run, and the rest is not read), and the exit status is 1\n(default 0: never)")
	return fs
}

// parseArgs reads the command line. It returns flag.ErrHelp for --help and
// a *usageError for a wrong command line.
func parseArgs(args []string) (options, error) {
	var o options
	fs := newFlagSet(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, &usageError{err.Error()}
	}
	switch fs.NArg() {
	case 0:
	case 1:
		o.input = fs.Arg(0)
	default:
		return o, usagef("want at most one input file, got %d: %s", fs.NArg(), strings.Join(fs.Args(), " "))
	}
	switch {
	case o.host != "" && o.index != "":
		return o, usagef("give --host or --index, not both")
	case o.batchSize < 0 || o.batchSize > upsert.MaxBatchSize:
		return o, usagef("--batch-size %d: want 1 to %d, or 0 for adaptive", o.batchSize, upsert.MaxBatchSize)
	case o.concurrency < 0 || o.concurrency > 256:
		return o, usagef("--concurrency %d: want 1 to 256, or 0 for adaptive", o.concurrency)
	case o.timeout <= 0:
		return o, usagef("--timeout %v: want a positive duration", o.timeout)
	case !slices.Contains([]string{"auto", "bar", "lines", "off"}, o.progress):
		return o, usagef("--progress %q: want auto, bar, lines or off", o.progress)
	case !(o.rate >= 0) || math.IsInf(o.rate, 0):
		return o, usagef("--rate %v: want a number of vectors a second, or 0 for no limit", o.rate)
	case o.maxRate < 0 || math.IsNaN(o.maxRate) || math.IsInf(o.maxRate, 0):
		return o, usagef("--max-rate %v: want a number of records a second, or 0 for no cap", o.maxRate)
	case o.deadLetter == "":
		return o, usagef("--dead-letter: want a path")
	case o.dimension < 0 || o.dimension > upsert.MaxDimension:
		return o, usagef("--dimension %d: want 1 to %d, or 0 for that of the first valid record", o.dimension, upsert.MaxDimension)
	case o.format != "" && o.format != formatNDJSON && o.format != formatParquet:
		return o, usagef("--format %q: want ndjson or parquet", o.format)
	case o.maxFailure != 0 && !(o.maxFailure >= minFailureSeconds && o.maxFailure <= maxFailureSeconds):
		return o, usagef("--max-failure-seconds %v: want 0 (never give up), or from %g to %g seconds", o.maxFailure, minFailureSeconds, maxFailureSeconds)
	}
	if err := upsert.ValidNamespace(o.namespace); err != nil {
		return o, usagef("--namespace: %v", err) // else every record would fail
	}
	if _, ok := logLevel(o.logLevel); !ok {
		return o, usagef("--log-level %q: want off, error, warn, info or debug", o.logLevel)
	}
	if _, err := parseFaults(o.fault, o.timeout); err != nil {
		return o, usagef("--fault: %v", err)
	}
	return o, nil
}

// printUsage writes the help text to w. The flags are listed by hand
// because flag.PrintDefaults names them with one dash; pflag or cobra would
// replace the flag package for the sake of that dash.
func printUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: pcupsert [flags] [file]

pcupsert upserts records into a Pinecone index. It reads them from file, or
from stdin when file is "-" or absent: one JSON object per line (values,
sparse_values and metadata are optional; sparseValues, as Pinecone's REST
API spells it, is read as sparse_values):

  {"id":"a","values":[0.1,0.2],"sparse_values":{"indices":[1,5],"values":[0.5,0.25]},"metadata":{"genre":"x"}}

or a Parquet file in the layout of Pinecone's bulk import (see --format).

With PINECONE_API_KEY set and --host or --index given, it writes to that
index. Otherwise it writes to an embedded loopback index, to try things out
(see --fault and --rate), and checks at the end that it holds every record.

Rate limits, timeouts and server errors are retried; records that still
fail, and lines that cannot be read, go to the dead-letter file, as do
records that landed but may be stale (an earlier write of their id, left
without an answer, may still replace them). Feed it back in as input (with
another --dead-letter) to replay them. With --checkpoint, records whose
failure says nothing against them (the run was interrupted, the index was
down or refused the key) are not dead letters: they are left to the next
run with the same --checkpoint, which sends them again and appends to the
dead-letter file. Without it, they are dead letters like the others.

Ctrl-C, SIGTERM or SIGHUP (the terminal or ssh session closed) stops the
run: it writes its dead letters, saves its checkpoint and reports ("ended
early: interrupted"). A second one kills pcupsert at once, without them.

Exit status: 0 when every record of the run landed (for --dry-run: when
every line it checks, after those a --checkpoint settled, is a valid
record), 1 when a record failed or was left to the
next run, may be stale, a line was bad, the input could not be read to its
end, or the run was interrupted or gave up (--max-failure-seconds), 2 for
usage errors (an input file that does not exist or is
gzip-compressed, a --checkpoint or --dead-letter in use by another
pcupsert, an input another pcupsert writes its dead letters to, a
--checkpoint saved for another input or in another namespace or index, a
--dead-letter holding another namespace's letters to append to included).
A run resumed with --checkpoint reports the dead letters of the runs it
resumes ("earlier dead letters"), and its status is that of its own records.

Flags:
`)
	var o options
	newFlagSet(&o).VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  --%s", f.Name)
		if name != "" {
			fmt.Fprintf(w, " %s", name)
		}
		fmt.Fprintf(w, "\n    \t%s", strings.ReplaceAll(usage, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && !strings.Contains(usage, "(default") {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// plural formats n into format, which takes n and a plural "s", or returns
// "" when n is 0.
func plural(n int, format string) string {
	switch n {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf(format, n, "")
	default:
		return fmt.Sprintf(format, n, "s")
	}
}

// quantity formats n with noun, singular for 1 and plural otherwise:
// "1 record", "3 records", "2 batches".
func quantity(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "ch") || strings.HasSuffix(noun, "s") {
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// logLevel maps a --log-level value to a slog level; off is above every
// level.
func logLevel(s string) (slog.Level, bool) {
	switch s {
	case "off":
		return slog.LevelError + 100, true
	case "error":
		return slog.LevelError, true
	case "warn":
		return slog.LevelWarn, true
	case "info":
		return slog.LevelInfo, true
	case "debug":
		return slog.LevelDebug, true
	}
	return 0, false
}

// run is the command: it returns the exit status. It reads the API key from
// the environment (PINECONE_API_KEY) and never writes it anywhere: every
// output goes through a filter that masks it, in case an error quotes it.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	start := time.Now()
	key := os.Getenv("PINECONE_API_KEY")
	mask := masker(key)
	e := &env{
		stdin:    stdin,
		stdout:   &maskingWriter{w: stdout, mask: mask},
		con:      newConsole(&maskingWriter{w: stderr, mask: mask}),
		key:      key,
		mask:     mask,
		terminal: isTerminal(stderr),
	}
	// Usage errors quote the arguments, where a key may have been passed
	// by mistake: they are masked too.
	o, err := parseArgs(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(e.stdout)
		return exitOK
	case err != nil:
		fmt.Fprintf(e.con, "pcupsert: %v\nRun 'pcupsert --help' for usage.\n", err)
		return exitUsage
	}

	status, err := upsertInput(ctx, o, e, start)
	var ue *usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(e.con, "pcupsert: %v\nRun 'pcupsert --help' for usage.\n", err)
		return exitUsage
	case err != nil:
		fmt.Fprintf(e.con, "pcupsert: %v\n", err)
		return exitFailed
	}
	return status
}

// env is where a run reads and writes, and the API key.
type env struct {
	stdin    io.Reader
	stdout   io.Writer // the API key masked
	con      *console  // stderr, the API key masked
	key      string
	mask     func(string) string // masks the API key
	terminal bool                // stderr is a terminal
}

// upsertInput does the work of run once the flags are read: it reads the
// input, upserts it, reports and returns the exit status. An error means
// that the run did not start and nothing was sent: the input, the
// checkpoint or the index could not be opened, or they do not fit (a
// *usageError when the command line must change). Once records were
// sent, the report says what became of them, whatever happened.
func upsertInput(ctx context.Context, o options, e *env, start time.Time) (int, error) {
	if err := checkPaths(o); err != nil {
		return 0, err
	}
	if err := checkTarget(o, e.key); err != nil { // a dry run's too: it refuses what a run refuses
		return 0, err
	}
	inp, err := openInput(o, e.stdin, e.con)
	if err != nil {
		return 0, err
	}
	in := &input{src: inp.src, unit: "line"}
	defer func() {
		// The reading goroutine ends with the run: see stopReading.
		in.stopReading(false)
		inp.close()
		in.stopReading(!inp.stdin)
	}()
	if formatOf(o) == formatParquet {
		in.unit = "row"
	}
	if err := checkDeadLetterWritable(o.deadLetter); err != nil { // a dry run's too
		return 0, usagef("--dead-letter %s: cannot be written there: %v", o.deadLetter, err)
	}
	if o.dryRun {
		return dryRunInput(ctx, o, e, in, inp, everyNotice(e.con))
	}
	notice := noticeReporter(e.con, o.deadLetter)
	deadLock, err := lockDeadLetter(o.deadLetter, e.con)
	if err != nil {
		return 0, err
	}
	defer deadLock.release() // after the dead letters are closed
	var ckpt *checkpointFile
	if o.checkpoint != "" {
		if ckpt, err = openCheckpoint(ctx, o.checkpoint, inp.name, inp.head, e.con); err != nil {
			return 0, err
		}
		defer ckpt.close() // after the run's last save
		in.skip, in.skipBadThrough = int(ckpt.loaded), ckpt.loadedReported
		ckpt.reported = in.reportedThrough
	}

	tgt, err := openTarget(ctx, o, e.key, e.con)
	if err != nil {
		return 0, err
	}
	defer tgt.Close()
	if ckpt != nil {
		if err := ckpt.checkTarget(tgt.settledAt(), inp.name, e.con); err != nil {
			return 0, err
		}
	}
	if tgt.srv != nil && ckpt != nil {
		fmt.Fprintf(e.con, "pcupsert: warning: --checkpoint with the embedded loopback index, which is gone when pcupsert exits: "+
			"a run resumed from %s skips records that its new embedded index never got (--checkpoint is for --host or --index)\n", o.checkpoint)
	}
	return upsertToTarget(ctx, o, e, in, inp.name, tgt, ckpt, notice, start)
}

// upsertToTarget is upsertInput once the input, the checkpoint (nil
// without --checkpoint) and the target are open: it upserts in's records
// to tgt, reports and returns the exit status.
func upsertToTarget(ctx context.Context, o options, e *env, in *input, name string, tgt *target, ckpt *checkpointFile, notice func(string), start time.Time) (int, error) {
	dead, err := newDeadLetters(o, e, in, notice)
	if err != nil {
		return 0, err
	}
	causes := &causes{mask: e.mask}
	var durable *durableCheckpoint
	if ckpt != nil {
		durable = &durableCheckpoint{ckpt, dead, saveReporter(e.con, o.checkpoint)}
	}
	opts := append(runOptions(o, e, in), targetOptions(tgt, durable, dead, causes)...)
	opts = append(opts, upsert.WithObserver(upsert.Observer{Stale: func(st upsert.Stale) { dead.Stale(st, staleMessage(in, st)) }}))
	if dead.exposed != nil {
		opts = append(opts, upsert.WithAcks(dead.exposed.ack))
	}
	runCtx, opts, stop := watchFailures(ctx, o, in, opts)
	defer stop()
	opts = append(opts, haltOnRefusal(runCtx, in))
	if tgt.srv != nil {
		in.ids = make(map[string]struct{}) // for the check of what it holds
	}

	// Records are read as they are sent: memory stays bounded whatever
	// the input's size, and reading pauses while the index cannot keep up.
	res, err := upsert.Stream(runCtx, in.records(runCtx), opts...)
	if err := refused(err, o, name, in, dead); err != nil {
		return 0, err
	}
	if durable != nil {
		durable.finish(in.ended, in.refuse == nil) // dead letters of another namespace: not this run's target
	}
	s := summarize(o, tgt, name, in, res, start)
	// A run stopped by a refusal is not given up on, though the watchdog
	// fired while it ended: the refusal said why it ended.
	s.GaveUp = ctx.Err() == nil && runCtx.Err() != nil && !in.wasHalted()
	s.Interrupted = ctx.Err() != nil
	s.Stopped = in.stopped && !s.GaveUp && !s.Interrupted
	tellHowItEnded(e.con, o, name, in, res, s)
	if s.GaveUp && !dead.resumable {
		if !drain(ctx, in, dead, tgt.idx.Namespace(), context.Cause(runCtx)) {
			s.Interrupted = true
			fmt.Fprintf(e.con, "pcupsert: interrupted while writing the rest of %s to the dead-letter file, at %s %d; the rest of it was not read\n", name, in.unit, in.pos)
		}
		s.BadLines = in.bad // the drain's too
	}
	if in.err != nil {
		// The records read before the error were sent, and are reported.
		s.InputError = e.mask(fmt.Sprintf("reading %s: %v", name, in.err))
		fmt.Fprintf(e.con, "pcupsert: %s; the rest of %s was not read, and is not in the dead-letter file\n", s.InputError, name)
	}
	writeStale(e.con, res, dead.exposed.landedLetters(), o.deadLetter)
	finishSummary(&s, in, dead, causes, tgt, res)
	return writeReport(e, o.json, s.write, s.writeJSON, "summary", s.ExitStatus), nil
}

// haltOnRefusal stops reading in at the index's refusal of the run (a
// denied key, a spent quota): the next record need not be waited for;
// unless the watchdog gave up first (runCtx done), whose drain reads the
// rest.
func haltOnRefusal(runCtx context.Context, in *input) upsert.Option {
	in.halted = make(chan struct{})
	return upsert.WithObserver(upsert.Observer{RequestDone: func(ev upsert.RequestEvent) {
		if ev.Err != nil && (ev.Err.Class == upsert.ClassDenied || ev.Err.Class == upsert.ClassQuotaExceeded) && runCtx.Err() == nil {
			in.halt()
		}
	}})
}

// refused returns the error of a run that sent nothing because it could
// not start (err is Stream's): an option the library refused, a gzip
// input, a checkpoint past the end of an input read to its end (the
// input is not the one it was saved for), or a dead-letter file of
// another namespace that it would have appended to (in.refusal); all are
// *usageErrors. It returns nil for any other run, which is reported: one
// interrupted, or whose input could not be read, while it skipped what
// its checkpoint settled, included.
func refused(err error, o options, name string, in *input, dead *deadLetters) error {
	switch {
	case in.refusal != nil:
		err = in.refusal
	case errors.Is(err, upsert.ErrBadOption):
		err = &usageError{err.Error()}
	case errors.Is(in.err, errGzipInput):
		err = usagef("%s: %v", name, in.err)
	case errors.Is(err, upsert.ErrCheckpointPastEnd) && in.ended:
		err = notTheInput(o.checkpoint, name, fmt.Sprintf("it says %s of %s are settled, and %s has %s",
			quantity(in.skip, "record"), name, name, quantity(in.read, "record")))
	default:
		return nil
	}
	if _, derr := dead.Close(); derr != nil { // nothing was sent: no letters to lose, but those of bad lines
		err = errors.Join(err, fmt.Errorf("writing dead letters to %s: %w", o.deadLetter, derr))
	}
	return err
}

// staleMessage is the error of the dead letter of st, a record that may be
// stale: its letter makes a replay of the file upsert it again. The letter
// is written as the library reports the record (Observer.Stale), before a
// checkpoint passes it.
func staleMessage(in *input, st upsert.Stale) string {
	return fmt.Sprintf("%s: landed while the request carrying %s %d, an earlier record of its id, had ended without an answer: "+
		"the index may still apply that request and keep the earlier record; upsert this one again once the index is quiet",
		in.where(st.Index, st.ID), in.unit, in.position(st.Earlier))
}

// writeStale says on con that records may be stale, whose dead letters
// were written as the library reported them, and that exposed records of
// the ids an earlier run's letters expose (exposedIDs) landed and have
// letters too.
func writeStale(con io.Writer, res upsert.Result, exposed int, path string) {
	if n := res.Stats.MayBeStale; n > 0 {
		fmt.Fprintf(con, "pcupsert: %s that landed may be stale: a request carrying an earlier record of their id ended without an answer, "+
			"and the index may still apply it; replay %s once the index is quiet to upsert them again\n", plural(n, "%d record%s"), path)
	}
	if exposed > 0 {
		fmt.Fprintf(con, "pcupsert: letters of an earlier run in %s, of records that may have landed or were sent again, name the ids of records that landed: the letters of %s "+
			"follow them, so that replaying %s once the index is quiet ends on the last record of each id\n", path, quantity(exposed, "record"), path)
	}
}

// newDeadLetters returns the dead letters of the run, and has bad lines of
// in written to them; each bad line and invalid record is also a notice.
// Its error is that of reading the letters of the file that a run with a
// checkpoint appends to (exposeEarlierLetters).
func newDeadLetters(o options, e *env, in *input, notice func(string)) (*deadLetters, error) {
	dead := &deadLetters{path: o.deadLetter, mask: e.mask, resumable: o.checkpoint != ""}
	if err := exposeEarlierLetters(o, e, in, dead); err != nil {
		return nil, err
	}
	dead.invalid = func(f upsert.Failure, rule error) string {
		msg := fmt.Sprintf("%s: %v", in.where(f.Index, f.ID), rule)
		notice(msg)
		return msg
	}
	in.onBad = func(b *badEntry) {
		dead.Bad(b.pos, b.raw, b.err)
		if b.replayed {
			notice(fmt.Sprintf("%v (a bad line replayed from a dead letter, kept as it was)", b.err))
		} else {
			notice(b.err.Error())
		}
	}
	return dead, nil
}

// exposeEarlierLetters sets up dead, for a run with a checkpoint, to
// append to the letters of the runs it resumes, whose records (or bad
// lines) its checkpoint skips, and to letter its records of the ids it
// exposes (exposedIDs, exposure). A file holding letters of records that
// may have landed is appended to by a run whose checkpoint settled nothing
// as well (no checkpoint file, even): an earlier run may have written them
// while the first record of the input waited, left to resume, and
// replacing the file would lose them, though the earlier run's request
// without an answer may still be applied after this run's records of
// those ids. A file whose letters name another namespace is not appended
// to (appendedLetters). Its error is that of reading the file.
func exposeEarlierLetters(o options, e *env, in *input, dead *deadLetters) error {
	earlier, appends, err := appendedLetters(o, in)
	if err != nil || !appends {
		return err
	}
	resumes := in.skip > 0 || in.skipBadThrough > 0
	if !resumes && in.refuse == nil {
		fmt.Fprintf(e.con, "pcupsert: %s holds letters of an earlier run whose records may have landed, and the checkpoint %s settled nothing: "+
			"appending to it rather than replacing it, so that replaying it still upserts those records again\n", o.deadLetter, o.checkpoint)
	}
	dead.append, dead.earlier = true, countLines(o.deadLetter)
	dead.exposed = newExposure(earlier.ids, int64(in.skip), o.namespace, dead.writeExposed, func(st upsert.Stale) string {
		return exposedMessage(in, st, o.deadLetter)
	})
	if dead.exposed != nil {
		in.take = dead.exposed.take
	}
	return nil
}

// appendedLetters reads the letters of the dead-letter file that a run
// with a checkpoint (or the dry run of one) appends to, and reports
// whether it appends: when it resumes (its checkpoint skips records or bad
// lines), or when the file holds letters of records that may have landed
// (see exposeEarlierLetters). When their letters name another namespace
// (mixedNamespaces), it sets in.refuse: the run is refused, nothing sent
// or written, once it would send a record or write a letter (input.mayWrite),
// and not when it does neither (a finished load run again, which appends
// nothing). The file is only read.
func appendedLetters(o options, in *input) (earlierLetters, bool, error) {
	if o.checkpoint == "" {
		return earlierLetters{}, false, nil
	}
	earlier, err := exposedIDs(o.deadLetter, int64(in.skip), o.namespace)
	if err != nil {
		return earlier, false, fmt.Errorf("reading the letters of the dead-letter file %s: %w", o.deadLetter, err)
	}
	if in.skip == 0 && in.skipBadThrough == 0 && !earlier.late {
		return earlier, false, nil
	}
	in.refuse = mixedNamespaces(o, earlier.others)
	return earlier, true, nil
}

// mixedNamespaces returns the *usageError of a run that would append its
// letters to the dead-letter file when others, the namespaces its letters
// name, are not the run's: a replay sends every letter to the one
// --namespace it is given, and would write the records of one namespace
// into the other.
func mixedNamespaces(o options, others map[string]bool) error {
	if len(others) == 0 {
		return nil
	}
	var names []string
	for _, ns := range slices.Sorted(maps.Keys(others)) {
		names = append(names, fmt.Sprintf("%q", ns))
	}
	return usagef("--dead-letter %s holds letters of namespace %s, and this run writes to namespace %q: "+
		"appending its letters would mix namespaces in one file, and a replay sends every letter to the one --namespace it is given; "+
		"nothing was sent; give another --dead-letter, or replay %s (with the --namespace of its letters) and remove it first",
		o.deadLetter, strings.Join(names, ", "), namespaceName(o.namespace), o.deadLetter)
}

// targetOptions are the options that send the run to tgt and record its
// outcome: failures to dead, request outcomes to causes, and, with a
// checkpoint (nil without), the checkpoint.
func targetOptions(tgt *target, ckpt *durableCheckpoint, dead *deadLetters, causes *causes) []upsert.Option {
	opts := []upsert.Option{
		upsert.WithIndex(tgt.idx),
		upsert.WithObserver(upsert.Observer{Failure: dead.Failure, RequestDone: causes.requestDone}),
	}
	if ckpt != nil {
		opts = append(opts, upsert.WithCheckpoint(ckpt))
	}
	return opts
}

// watchFailures applies --max-failure-seconds: it returns the context of
// the run, which a watchdog ends when no record lands for that long, opts
// with the watchdog's observer, and the function that stops the watch.
// Without the flag it returns ctx and opts as they are.
func watchFailures(ctx context.Context, o options, in *input, opts []upsert.Option) (context.Context, []upsert.Option, func()) {
	if o.maxFailure > 0 {
		w := &watchdog{limit: time.Duration(o.maxFailure * float64(time.Second))}
		runCtx, stop := w.watch(ctx)
		in.onRead = w.read
		return runCtx, append(opts, upsert.WithObserver(w.observer())), stop
	}
	return ctx, opts, func() {}
}

// runOptions are the options of the run that the flags give.
func runOptions(o options, e *env, in *input) []upsert.Option {
	opts := []upsert.Option{upsert.WithRequestTimeout(o.timeout)}
	if o.batchSize > 0 {
		opts = append(opts, upsert.WithBatchSize(o.batchSize))
	}
	if o.concurrency > 0 {
		opts = append(opts, upsert.WithConcurrency(o.concurrency))
	}
	if o.maxRate > 0 {
		opts = append(opts, upsert.WithMaxRate(o.maxRate))
	}
	if lvl, _ := logLevel(o.logLevel); o.logLevel != "off" {
		opts = append(opts, upsert.WithLogger(slog.New(slog.NewTextHandler(e.con, &slog.HandlerOptions{Level: lvl}))))
	}
	if p := newProgress(o.progress, e.terminal, e.con, in.progress); p != nil {
		opts = append(opts, upsert.WithProgress(p.interval(), p.show))
	}
	return opts
}

// summarize gathers the figures of the final report.
func summarize(o options, tgt *target, name string, in *input, res upsert.Result, start time.Time) summary {
	st := res.Stats
	s := summary{
		Input: name, Format: formatOf(o), Host: tgt.host, Namespace: tgt.idx.Namespace(),
		RecordsRead: in.read, BadLines: in.bad, Skipped: st.Skipped,
		Upserted: res.Upserted, Failed: st.Failed, MayBeStale: st.MayBeStale, Duplicates: res.Duplicates,
		Requests: st.Requests, Retries: st.Retries, RetriesByClass: classNames(st.RetriesByClass),
		Splits: st.Splits, ErrorsByCode: st.ErrorsByCode,
		LatencySeconds:   latency{P50: st.Latency.P50.Seconds(), P95: st.Latency.P95.Seconds(), P99: st.Latency.P99.Seconds()},
		BatchSizeMean:    st.BatchSizes.Mean,
		ElapsedSeconds:   time.Since(start).Seconds(),
		UpsertingSeconds: st.Elapsed.Seconds(),
	}
	if st.Elapsed > 0 {
		s.RecordsPerSecond = float64(res.Upserted) / st.Elapsed.Seconds()
	}
	return s
}

// tellHowItEnded says on con what was read, and why the run ended early
// if it did.
func tellHowItEnded(con io.Writer, o options, name string, in *input, res upsert.Result, s summary) {
	fmt.Fprintf(con, "pcupsert: read %s from %s%s\n", quantity(in.read, "record"), name, plural(in.bad, " (%d bad line%s)"))
	switch {
	case res.Stats.Skipped > 0:
		fmt.Fprintf(con, "pcupsert: skipped the first %s of %s, which the checkpoint says a previous run settled%s\n",
			quantity(res.Stats.Skipped, "record"), name, plural(in.skippedBad, ", and %d bad line%s it reported"))
	case in.skippedBad > 0:
		fmt.Fprintf(con, "pcupsert: skipped %s of %s, which the checkpoint says a previous run reported\n", quantity(in.skippedBad, "bad line"), name)
	}
	unsent := "records read but not landed go to the dead-letter file"
	if o.checkpoint != "" {
		unsent = "records read but not landed are left to the next run with the same --checkpoint"
	}
	switch {
	case s.Interrupted && in.read < in.skip:
		fmt.Fprintf(con, "pcupsert: interrupted at %s %d of %s, while skipping the %s that the checkpoint says a previous run settled; "+
			"nothing was sent, and the checkpoint %s is kept for the next run\n", in.unit, in.pos, name, quantity(in.skip, "record"), o.checkpoint)
	case s.Interrupted:
		fmt.Fprintf(con, "pcupsert: interrupted at %s %d of %s; %s\n", in.unit, in.pos, name, unsent)
	case s.GaveUp:
		if o.checkpoint == "" {
			unsent = "what was not sent, read or not, goes to the dead-letter file"
		}
		fmt.Fprintf(con, "pcupsert: gave up at %s %d of %s: no record landed for %gs; %s\n", in.unit, in.pos, name, o.maxFailure, unsent)
	case s.Stopped:
		// A failure that no retry can fix (a denied key) stops the run:
		// reading on would only fail the rest the same way.
		fmt.Fprintf(con, "pcupsert: the run stopped at %s %d of %s; the rest of it was not read, and is not in the dead-letter file\n",
			in.unit, in.pos, name)
	}
}

// drain writes the records the run did not read to the dead-letter file,
// after it gave up, so that replaying the file sends everything that was
// not sent; their letters name namespace, the run's, as those of the
// records it read do. It returns false if ctx ended first (the user
// interrupted the drain of a slow input).
func drain(ctx context.Context, in *input, dead *deadLetters, namespace string, cause error) bool {
	e := &upsert.Error{Class: upsert.ClassCanceled, Err: cause}
	for {
		v, ok := in.next(ctx)
		if !ok {
			return in.ended || in.err != nil
		}
		dead.NotSent(upsert.Failure{Index: in.read - 1, ID: v.Id, Namespace: namespace, Record: v, Class: upsert.ClassCanceled, Err: e})
	}
}

// finishSummary adds what the dead letters, the causes and the embedded
// index say, and the exit status.
func finishSummary(s *summary, in *input, dead *deadLetters, causes *causes, tgt *target, res upsert.Result) {
	byClass, toResume, landed, rejected := func() (map[upsert.Class]int, map[upsert.Class]int, int, map[string]int) {
		dead.mu.Lock()
		defer dead.mu.Unlock()
		s.NotSent = dead.notSent
		return maps.Clone(dead.byClass), maps.Clone(dead.toResume), dead.landed, maps.Clone(dead.rejected)
	}()
	s.FailedByClass, s.MayHaveLanded = classNames(byClass), landed
	s.MayBeStale += dead.exposed.landedLetters() // lettered as the library's are
	s.LeftToResumeByClass = classNames(toResume)
	for _, n := range toResume {
		s.LeftToResume += n
	}
	s.Causes = causes.top(tgt.host, rejected)
	if tgt.srv != nil {
		stored := tgt.srv.Count(tgt.idx.Namespace())
		// Records replaced in their batch by a later one of their id
		// (duplicates) were not sent; the other repeats were.
		repeated := max(0, in.repeated-res.Duplicates)
		s.Embedded = &embedded{Stored: stored, AsExpected: storedAsExpected(stored, res.Upserted, landed, repeated)}
	}
	n, err := dead.Close()
	s.DeadLetters = deadLetterSummary{Path: dead.path, Count: n, Earlier: dead.earlier}
	if err != nil {
		s.DeadLetters.Error = err.Error()
	}
	s.ExitStatus = exitOK
	if s.Failed > 0 || s.BadLines > 0 || s.NotSent > 0 || s.MayBeStale > 0 || s.InputError != "" || s.Interrupted || s.GaveUp ||
		err != nil || (s.Embedded != nil && !s.Embedded.AsExpected) {
		s.ExitStatus = exitFailed
	}
}

// dryRunInput is upsertInput for --dry-run: nothing is opened but the
// input, and nothing is written but the report. With --checkpoint, the
// checkpoint is read, and checked against the input and the target (but
// the host of --index, not looked up), as a run resumed
// from it would, but neither locked nor written (readCheckpointOnly): the
// dry run checks and counts what that run would, the input after what the
// checkpoint settled. The dead-letter file is read as that run reads it
// (appendedLetters), and the dry run is refused where the run would be.
func dryRunInput(ctx context.Context, o options, e *env, in *input, inp *openedInput, notice func(string)) (int, error) {
	name := inp.name
	var cp upsert.Checkpoint
	if o.checkpoint != "" {
		saved, err := readCheckpointOnly(ctx, o.checkpoint, name, inp.head, plannedTarget(o), e.con)
		if err != nil {
			return 0, err
		}
		in.skip, in.skipBadThrough = int(saved.settled), saved.reported
		cp = frozenCheckpoint(saved.settled)
		if _, _, err := appendedLetters(o, in); err != nil { // refused as the run would be (in.refuse)
			return 0, err
		}
	}
	in.onBad = func(b *badEntry) { notice(b.err.Error()) }
	onInvalid := func(f upsert.Failure) {
		var why any = f.Err
		if rule := rejectedRule(f); rule != nil {
			why = rule
		}
		notice(fmt.Sprintf("%s: %v", in.where(f.Index, f.ID), why))
	}
	rep, err := dryRun(ctx, o, in, cp, onInvalid)
	switch {
	case in.refusal != nil:
		return 0, in.refusal
	case errors.Is(err, errGzipInput):
		return 0, usagef("%s: %v", name, err)
	case errors.Is(err, upsert.ErrCheckpointPastEnd) && in.ended:
		return 0, notTheInput(o.checkpoint, name, fmt.Sprintf("it says %s of %s are settled, and %s has %s",
			quantity(in.skip, "record"), name, name, quantity(in.read, "record")))
	case err != nil:
		return 0, fmt.Errorf("reading %s: %w", name, err)
	}
	rep.Input, rep.Format = name, formatOf(o)
	if rep.BadLines > 0 || rep.Invalid > 0 {
		rep.ExitStatus = exitFailed
	}
	return writeReport(e, o.json, rep.write, rep.writeJSON, "report", rep.ExitStatus), nil
}
