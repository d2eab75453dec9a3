package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upsertredis"
	"github.com/upsertlib/upsert/upserttest"
)

// childPrefix starts the hidden subcommands by which the process benchmark
// runs this program again as the index or a writer.
const childPrefix = "-child-"

// runChild runs the hidden subcommand in args, if any, and reports whether
// there was one. A child talks to its parent by lines on stdin and stdout,
// and ends when its stdin closes.
func runChild(args []string) bool {
	if len(args) == 0 || !strings.HasPrefix(args[0], childPrefix) {
		return false
	}
	var err error
	switch role := strings.TrimPrefix(args[0], childPrefix); role {
	case "serve":
		err = serveChild()
	case "write":
		err = writeChild(args[1:])
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "upsertbench child:", err)
		os.Exit(1)
	}
	return true
}

// sampleEvery is how often the index process counts the records it holds.
const sampleEvery = 100 * time.Millisecond

// sample is the index's record count at a moment (Unix ns).
type sample struct{ At, Count int64 }

// indexReport is what the index process answers to "report".
type indexReport struct {
	Requests, RateLimited int
	// Landed and Lost are per writer: records stored, and records neither
	// stored nor reported failed.
	Landed, Lost []int
	Samples      []sample
}

// serveChild serves the process benchmark's index: it prints its host,
// then answers "report <per writer> <writers> <dir>" with an indexReport
// until its stdin closes.
func serveChild() error {
	srv := upserttest.NewServer(procsProfile().serverOptions()...)
	defer srv.Close()
	var (
		mu      sync.Mutex
		samples []sample
	)
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case now := <-tick.C:
				n := srv.Count(namespace)
				mu.Lock()
				samples = append(samples, sample{now.UnixNano(), int64(n)})
				mu.Unlock()
			case <-done:
				return
			}
		}
	}()
	fmt.Println(srv.Host())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var per, n int
		var dir string
		if _, err := fmt.Sscanf(in.Text(), "report %d %d %s", &per, &n, &dir); err != nil {
			return fmt.Errorf("command %q: %w", in.Text(), err)
		}
		settle(srv)
		stats := srv.Stats()
		rep := indexReport{Requests: stats.Requests, RateLimited: stats.Codes[codes.ResourceExhausted]}
		for i := range n {
			landed, lost, err := holds(srv, i*per, per, filepath.Join(dir, fmt.Sprintf("failed-%d", i)))
			if err != nil {
				return err
			}
			rep.Landed, rep.Lost = append(rep.Landed, landed), append(rep.Lost, lost)
		}
		mu.Lock()
		rep.Samples = samples
		err := json.NewEncoder(os.Stdout).Encode(rep)
		mu.Unlock()
		if err != nil {
			return err
		}
	}
	return in.Err()
}

// holds counts the records of the range (as makeRecords names them) that
// srv stored, and those neither stored nor listed in the file failed.
func holds(srv *upserttest.Server, first, n int, failed string) (landed, lost int, err error) {
	b, err := os.ReadFile(failed)
	if err != nil {
		return 0, 0, err
	}
	reported := make(map[string]bool)
	for id := range strings.FieldsSeq(string(b)) {
		reported[id] = true
	}
	for i := range n {
		id := fmt.Sprintf("r%07d", first+i+1)
		if _, ok := srv.Vector(namespace, id); ok {
			landed++
		} else if !reported[id] {
			lost++
		}
	}
	return landed, lost, nil
}

// writerOutcome is what a writer process prints when it is done.
type writerOutcome struct {
	EndNanos int64 // when it was done (Unix ns)
	Reported int   // records reported failed
	Deadline bool  // stopped at the deadline
	// With -redis: the most writers the lane counted, and the store's
	// round trips.
	SharedWriters                 int
	RedisExchanges, RedisFailures int64
}

// writeChild is a writer process: it prepares its records, prints "ready",
// waits for "go <start, Unix ns>", writes from start + -start-after until
// it is done or start + -deadline, and prints its writerOutcome.
func writeChild(args []string) error {
	f, err := parseWriterFlags(args)
	if err != nil {
		return err
	}
	records := makeRecords(f.first, f.n, dimension)
	idx, err := dialIndex(f.host)
	if err != nil {
		return err
	}
	defer idx.Close()

	fmt.Println("ready")
	start, err := awaitGo()
	if err != nil {
		return err
	}
	// The run ends at the deadline even if it starts after it, so that
	// the parent has every outcome by then (see readOutcomes).
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(f.deadline))
	defer cancel()
	sleepUntil(ctx, start.Add(f.startAfter))
	runCtx := ctx
	if f.stopAfter > 0 {
		var stop context.CancelFunc
		runCtx, stop = context.WithDeadline(ctx, start.Add(f.stopAfter))
		defer stop()
	}

	var out writerOutcome
	opts, leave := writerOptions(f, idx, &out)
	res, err := upsert.All(runCtx, records, opts...)
	out.EndNanos = time.Now().UnixNano()
	leave()
	if errors.Is(err, upsert.ErrBadOption) {
		return err
	}
	out.Reported = len(res.Failed)
	out.Deadline = ctx.Err() != nil
	if err := writeFailedIDs(f.failed, res.Failed); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(&out)
}

// sleepUntil returns at the time t, or sooner if ctx is done.
func sleepUntil(ctx context.Context, t time.Time) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// writerFlags are the flags of a writer process, which runProcs gives.
type writerFlags struct {
	host, failed, redisSocket, prefix string
	first, n                          int
	startAfter, stopAfter, deadline   time.Duration
}

// parseWriterFlags reads the flags of a writer process.
func parseWriterFlags(args []string) (writerFlags, error) {
	var f writerFlags
	fs := flag.NewFlagSet("write", flag.ContinueOnError)
	fs.StringVar(&f.host, "host", "", "index host")
	fs.IntVar(&f.first, "first", 0, "first record")
	fs.IntVar(&f.n, "n", 0, "records")
	fs.StringVar(&f.failed, "failed", "", "file for the ids reported failed")
	fs.DurationVar(&f.startAfter, "start-after", 0, "start this long after the common start")
	fs.DurationVar(&f.stopAfter, "stop-after", 0, "stop this long after the common start (0: never)")
	fs.DurationVar(&f.deadline, "deadline", defaultDeadline, "stop the run this long after the common start")
	fs.StringVar(&f.redisSocket, "redis", "", "Redis unix socket: join the lane with upsertredis")
	fs.StringVar(&f.prefix, "prefix", upsertredis.DefaultPrefix, "upsertredis key prefix")
	err := fs.Parse(args)
	return f, err
}

// dialIndex connects to the benchmark's index at host, in its namespace.
func dialIndex(host string) (*pinecone.IndexConnection, error) {
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "bench"})
	if err != nil {
		return nil, err
	}
	return pc.Index(pinecone.NewIndexConnParams{Host: host, Namespace: namespace})
}

// awaitGo reads the parent's "go <start, Unix ns>" from stdin and returns
// the common start.
func awaitGo() (time.Time, error) {
	in := bufio.NewScanner(os.Stdin)
	var startNanos int64
	if !in.Scan() {
		if err := in.Err(); err != nil {
			return time.Time{}, fmt.Errorf("reading the go: %w", err)
		}
		return time.Time{}, errors.New("no go")
	}
	if _, err := fmt.Sscanf(in.Text(), "go %d", &startNanos); err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, startNanos), nil
}

// writerOptions are the options of a writer's run on idx, and the function
// to call once it is done: with -redis it joins the lane (see joinLane),
// and with UPSERTBENCH_TRACE set it traces.
func writerOptions(f writerFlags, idx *pinecone.IndexConnection, out *writerOutcome) (opts []upsert.Option, leave func()) {
	opts = []upsert.Option{upsert.WithIndex(idx)}
	leave = func() {}
	if f.redisSocket != "" {
		var more []upsert.Option
		more, leave = joinLane(f.redisSocket, f.prefix, out)
		opts = append(opts, more...)
	}
	if os.Getenv(traceEnv) != "" {
		opts = append(opts, traceOption(f.first), traceRefusals(f.first))
	}
	return opts, leave
}

// writeFailedIDs writes the ids of failed to the file path, one a line,
// for the index process to tell them from the records lost.
func writeFailedIDs(path string, failed []upsert.Failure) error {
	var ids strings.Builder
	for _, f := range failed {
		ids.WriteString(f.ID + "\n")
	}
	return os.WriteFile(path, []byte(ids.String()), 0o600)
}

// joinLane returns the options that share the writer's Limiter through
// upsertredis (a Store on the Redis at socket), and the function that
// fills out's Redis figures once the run is done.
func joinLane(socket, prefix string, out *writerOutcome) ([]upsert.Option, func()) {
	// go-redis logs every failed dial while redis-dies has Redis down;
	// the Store's own fallback line (and its counts) say it once.
	redis.SetLogger(quietRedis{})
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: socket})
	store := upsertredis.New(rdb, upsertredis.WithPrefix(prefix))
	return []upsert.Option{store.Option()}, func() {
		rdb.Close()
		stats := store.Stats()
		out.SharedWriters = int(stats.MostWriters)
		out.RedisExchanges, out.RedisFailures = stats.Exchanges, stats.Failures
	}
}

// quietRedis drops go-redis's own log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// traceEnv, when set, makes each writer print its progress and Limiter
// state to stderr four times a second (counts and rates only), to see how
// the writers' shares move.
const traceEnv = "UPSERTBENCH_TRACE"

// traceOption prints the writer's limiter every 250 ms on stderr, on the
// clock every writer's trace shares.
func traceOption(first int) upsert.Option {
	return upsert.WithProgress(250*time.Millisecond, func(p upsert.Progress) {
		l := p.Stats.Limiter
		fmt.Fprintf(os.Stderr, "trace writer=%d t=%.2f upserted=%d rate=%.0f conc=%d batch=%d 429s=%d fallbacks=%d\n",
			first, traceClock(time.Now()), p.Stats.Upserted, l.Rate, l.Concurrency, l.BatchSize,
			p.Stats.ErrorsByClass[upsert.ClassRateLimited], p.Stats.SharedFallbacks)
	})
}

// traceRefusals prints each 429 a writer gets, with when its request was
// sent and answered, on the clock every writer's trace shares.
func traceRefusals(first int) upsert.Option {
	return upsert.WithObserver(upsert.Observer{RequestDone: func(e upsert.RequestEvent) {
		if e.Err == nil || e.Err.Class != upsert.ClassRateLimited {
			return
		}
		now := time.Now()
		fmt.Fprintf(os.Stderr, "refused writer=%d sent=%.3f t=%.3f records=%d\n",
			first, traceClock(now.Add(-e.Latency)), traceClock(now), e.Records)
	}})
}

// traceClock is t in seconds on a clock the writers of one run share (the
// wall clock modulo 1000 s).
func traceClock(t time.Time) float64 {
	return float64(t.UnixMilli()%1_000_000) / 1000
}
