// Command pcupsert upserts records from an NDJSON file into a Pinecone
// index, without losing any: every record lands, or goes to a dead-letter
// file that can be fed back in to replay it.
//
// Usage:
//
//	pcupsert [flags] [file]
//
// Records are read from file, or from stdin when file is "-" or absent, one
// JSON object per line with the field names of Pinecone's REST API (see
// package github.com/upsertlib/upsert/ndjson). With PINECONE_API_KEY set and
// --host or --index given, pcupsert writes to that index; otherwise to an
// embedded loopback index (package upserttest), where --fault and --rate
// show how the library deals with rate limits and errors.
//
// Run pcupsert --help for the flags. The exit status is 0 when every record
// landed, 1 when a record failed or a line was bad, and 2 for usage errors.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
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
	exitFailed = 1 // a record failed, a line was bad, or the run could not be done
	exitUsage  = 2 // the command line is wrong
)

// defaultDeadLetter is the dead-letter file's default path.
const defaultDeadLetter = "pcupsert-failed.ndjson"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills at once
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
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
}

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
	fs.StringVar(&o.host, "host", "", "the index `URL`, such as https://NAME-PROJECT.svc.REGION.pinecone.io\n(needs PINECONE_API_KEY; default: the embedded loopback index)")
	fs.StringVar(&o.index, "index", "", "the index `NAME`, whose host is looked up with the API key\n(instead of --host)")
	fs.StringVar(&o.namespace, "namespace", "", "the `NAMESPACE` to write into (default \"\": the SDK's default namespace, \"__default__\")")
	fs.StringVar(&o.checkpoint, "checkpoint", "", "keep how far the input has landed in the file at `PATH`, and skip that much of it\nwhen run again with the same input: an interrupted load resumes where it stopped")
	fs.StringVar(&o.deadLetter, "dead-letter", defaultDeadLetter, "the dead-letter file at `PATH`: records that failed and lines that could not\nbe read, for replay as input; created (mode 0600) only if something fails")
	fs.IntVar(&o.batchSize, "batch-size", 0, fmt.Sprintf("`N` records per request, 1 to %d (default 0: adaptive, from 100 up)", upsert.MaxBatchSize))
	fs.IntVar(&o.concurrency, "concurrency", 0, "`N` requests in flight at most, 1 to 256 (default 0: adaptive, from 4 up)")
	fs.DurationVar(&o.timeout, "timeout", upsert.DefaultRequestTimeout, "the `DURATION` each request may take; a slower one is retried, split in halves")
	fs.StringVar(&o.progress, "progress", "auto", "how to show progress on stderr, the `MODE`: auto, bar, lines or off\n(auto: a bar on a terminal, a line every few seconds otherwise)")
	fs.StringVar(&o.logLevel, "log-level", "off", "log retries, splits and failures on stderr from `LEVEL`: off, error, warn, info or debug")
	fs.StringVar(&o.fault, "fault", "", "embedded index only: faults to inject, a comma-separated `LIST` of\n"+faultHelp)
	fs.Float64Var(&o.rate, "rate", 0, "embedded index only: the vectors per second `N` it admits, answering 429 above\n(default 0: unlimited)")
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
	case o.rate < 0:
		return o, usagef("--rate %v: want 0 or more", o.rate)
	case o.deadLetter == "":
		return o, usagef("--dead-letter: want a path")
	}
	if _, ok := logLevel(o.logLevel); !ok {
		return o, usagef("--log-level %q: want off, error, warn, info or debug", o.logLevel)
	}
	if _, err := parseFaults(o.fault, o.timeout); err != nil {
		return o, usagef("--fault: %v", err)
	}
	return o, nil
}

// printUsage writes the help text to w.
func printUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: pcupsert [flags] [file]

pcupsert upserts records into a Pinecone index. It reads them from file, or
from stdin when file is "-" or absent: one JSON object per line, with the
field names of Pinecone's REST API (values, sparse_values and metadata are
optional):

  {"id":"a","values":[0.1,0.2],"sparse_values":{"indices":[1,5],"values":[0.5,0.25]},"metadata":{"genre":"x"}}

With PINECONE_API_KEY set and --host or --index given, it writes to that
index. Otherwise it writes to an embedded loopback index, to try things out
(see --fault and --rate), and checks at the end that it holds every record.

Rate limits, timeouts and server errors are retried; records that still
fail, and lines that cannot be read, go to the dead-letter file. Feed it back
in as input (with another --dead-letter) to replay them.

Exit status: 0 when every record landed, 1 when a record failed or a line
was bad, 2 for usage errors.

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
		if f.DefValue != "" && f.DefValue != "0" && !strings.Contains(usage, "(default") {
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
	o, err := parseArgs(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(stdout)
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "pcupsert: %v\nRun 'pcupsert --help' for usage.\n", err)
		return exitUsage
	}

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
// that nothing was upserted.
func upsertInput(ctx context.Context, o options, e *env, start time.Time) (int, error) {
	in, name, closeIn, err := openInput(o, e.stdin, e.con)
	if err != nil {
		return 0, err
	}
	defer closeIn()

	tgt, err := openTarget(ctx, o, e.key, e.con)
	if err != nil {
		return 0, err
	}
	defer tgt.Close()

	dead := &deadLetters{path: o.deadLetter, mask: e.mask}
	showBad := badLineReporter(e.con, o.deadLetter)
	src := newInput(in, func(line int, raw []byte, err error) {
		dead.Bad(line, raw, err)
		showBad(err)
	})
	opts := []upsert.Option{
		upsert.WithIndex(tgt.idx),
		upsert.WithObserver(upsert.Observer{Failure: dead.Failure}),
		upsert.WithRequestTimeout(o.timeout),
	}
	if o.batchSize > 0 {
		opts = append(opts, upsert.WithBatchSize(o.batchSize))
	}
	if o.concurrency > 0 {
		opts = append(opts, upsert.WithConcurrency(o.concurrency))
	}
	if lvl, _ := logLevel(o.logLevel); o.logLevel != "off" {
		opts = append(opts, upsert.WithLogger(slog.New(slog.NewTextHandler(e.con, &slog.HandlerOptions{Level: lvl}))))
	}
	if p := newProgress(o.progress, e.terminal, e.con); p != nil {
		opts = append(opts, upsert.WithProgress(p.interval(), p.show))
	}
	if o.checkpoint != "" {
		opts = append(opts, upsert.WithCheckpoint(upsert.FileCheckpoint(o.checkpoint)))
	}

	// Records are read as they are sent: memory stays bounded whatever
	// the input's size, and reading pauses while the index cannot keep up.
	res, err := upsert.Stream(ctx, src.records(ctx), opts...)
	if src.err != nil {
		dead.Close()
		return 0, fmt.Errorf("reading %s: %w", name, src.err)
	}
	fmt.Fprintf(e.con, "pcupsert: read %d records from %s%s\n", src.read, name, plural(src.bad, " (%d bad line%s)"))
	if res.Stats.Skipped > 0 {
		fmt.Fprintf(e.con, "pcupsert: skipped the first %d records of %s, which the checkpoint says a previous run settled\n", res.Stats.Skipped, name)
	}
	if errors.Is(err, upsert.ErrBadOption) {
		dead.Close()
		return 0, &usageError{err.Error()}
	}
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(e.con, "pcupsert: interrupted at line %d of %s; records read but not landed go to the dead-letter file%s\n",
			src.r.Line(), name, map[bool]string{true: ", and --checkpoint resumes after what landed", false: ""}[o.checkpoint != ""])
	case src.stopped:
		// A failure that no retry can fix (a denied key) stops the run:
		// reading on would only fail the rest the same way.
		fmt.Fprintf(e.con, "pcupsert: the run stopped at line %d of %s; the rest of it was not read, and is not in the dead-letter file\n",
			src.r.Line(), name)
	}

	rep := report{read: src.read, bad: src.bad, res: res, elapsed: time.Since(start), deadLetterPath: o.deadLetter}
	rep.failedByClass, rep.mayHaveLanded = dead.failed()
	if tgt.srv != nil {
		rep.embedded, rep.stored = true, tgt.srv.Count(tgt.idx.Namespace())
	}
	rep.deadLetters, rep.deadLetterErr = dead.Close()
	rep.write(e.stdout)

	if res.Stats.Failed > 0 || src.bad > 0 || ctx.Err() != nil || rep.deadLetterErr != nil || !rep.storedAsExpected() {
		return exitFailed, nil
	}
	return exitOK, nil
}
