package upsert_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upserttest"
)

// scripted answers request Seq 3 to 6 with 429, Seq 10 with 503, and
// delays Seq 12 past the client's timeout (the write lands).
func scripted(r upserttest.Request) upserttest.Fault {
	switch {
	case r.Seq >= 3 && r.Seq <= 6:
		return upserttest.Fault{Code: codes.ResourceExhausted}
	case r.Seq == 10:
		return upserttest.Fault{Code: codes.Unavailable}
	case r.Seq == 12:
		return upserttest.Fault{Delay: 500 * time.Millisecond}
	}
	return upserttest.Fault{}
}

func TestStatsCountExactlyWhatHappened(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithFaults(scripted))
	defer srv.Close()
	recs := e2eRecords(2000)
	var mu sync.Mutex
	var progress []upsert.Progress
	res, err := upsert.All(context.Background(), recs, upsert.WithIndex(connect(t, srv)),
		upsert.WithBatchSize(100), upsert.WithConcurrency(1), // one request at a time: Seq is the order of sending
		upsert.WithRequestTimeout(200*time.Millisecond), upsert.WithBackoff(time.Millisecond, 5*time.Millisecond),
		upsert.WithProgress(time.Nanosecond, func(p upsert.Progress) {
			mu.Lock()
			progress = append(progress, p)
			mu.Unlock()
		}))
	require.NoError(t, err)
	s := res.Stats
	assert.Equal(t, 2000, res.Upserted)
	assert.Equal(t, map[upsert.Class]int{upsert.ClassRateLimited: 4, upsert.ClassServer: 1, upsert.ClassTimeout: 1}, s.ErrorsByClass)
	assert.Equal(t, map[string]int{"ResourceExhausted": 4, "Unavailable": 1, "DeadlineExceeded": 1}, s.ErrorsByCode)
	assert.Equal(t, map[upsert.Class]int{upsert.ClassRateLimited: 4, upsert.ClassServer: 1}, s.RetriesByClass)
	assert.Equal(t, 5, s.Retries)
	assert.Equal(t, 1, s.Splits, "the timed-out batch was split")
	// 20 batches needing 5 retries in all (which batch caught which 429
	// depends on timing: another batch may go while one backs off); the
	// halves of a split are not retries.
	batches, retries := 0, 0
	for k, n := range s.RetriesPerBatch {
		batches += n
		retries += k * n
	}
	assert.Equal(t, 20, batches)
	assert.Equal(t, 5, retries)
	assert.Equal(t, 20+5+2, s.Requests, "first attempts, retries, and the two halves")
	st := srv.Stats()
	assert.Equal(t, s.Requests, st.Requests, "the server saw as many requests")
	assert.InDelta(t, (25*100+2*50)/27.0, s.BatchSizes.Mean, 1e-9, "records sent per request")
	assert.Equal(t, 50, s.BatchSizes.Min)
	assert.Equal(t, 100, s.BatchSizes.Max)
	assert.Positive(t, s.Latency.P50)
	assert.GreaterOrEqual(t, s.Latency.P99, s.Latency.P50)
	assert.GreaterOrEqual(t, s.Latency.Max, 200*time.Millisecond, "the request that timed out")
	assert.Equal(t, 1, s.Limiter.Concurrency)

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, progress)
	last := progress[len(progress)-1]
	assert.True(t, last.Final)
	assert.Equal(t, 2000, last.Done)
	assert.Equal(t, 2000, last.Total)
	for i := 1; i < len(progress); i++ {
		assert.GreaterOrEqual(t, progress[i].Done, progress[i-1].Done, "progress never goes back")
	}
}

func TestLogLinesCarryTheArticlesFields(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithFaults(upserttest.Chain(scripted, upserttest.RejectIDs("rec-01999"))))
	defer srv.Close()
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := newLockedJSONLogger(&buf, &mu)
	_, err := upsert.All(context.Background(), e2eRecords(2000), upsert.WithIndex(connect(t, srv)),
		upsert.WithBatchSize(100), upsert.WithConcurrency(1), upsert.WithLogger(logger),
		upsert.WithRequestTimeout(200*time.Millisecond), upsert.WithBackoff(time.Millisecond, 5*time.Millisecond))
	require.ErrorIs(t, err, upsert.ErrInvalid)

	mu.Lock()
	defer mu.Unlock()
	lines := map[string][]map[string]any{}
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		lines[m["msg"].(string)] = append(lines[m["msg"].(string)], m)
	}
	for _, msg := range []string{"retrying batch", "splitting batch", "giving up on batch"} {
		require.NotEmpty(t, lines[msg], "a %q line", msg)
		for _, m := range lines[msg] {
			for _, field := range []string{"namespace", "batch_size", "worker", "attempt", "class", "code", "error"} {
				assert.Contains(t, m, field, "%q lines carry %s", msg, field)
			}
			assert.Equal(t, e2eNamespace, m["namespace"])
		}
	}
	retry := lines["retrying batch"][0]
	assert.Equal(t, "rate-limited", retry["class"])
	assert.Equal(t, "ResourceExhausted", retry["code"])
	assert.Contains(t, retry, "backoff")
	final := lines["giving up on batch"][0]
	assert.Equal(t, "invalid", final["class"])
	assert.Equal(t, float64(1), final["batch_size"], "only the bad record is given up")
	assert.Equal(t, "rec-01999", final["id"], "a batch of one names its record")
	summary := lines["upsert finished"]
	require.Len(t, summary, 1)
	assert.Equal(t, float64(1999), summary[0]["upserted"])
	assert.Equal(t, float64(1), summary[0]["failed"])
}

func TestAllIsSafeToCallConcurrentlyWithSharedOptions(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithFaults(upserttest.RateLimitBurst(5, 10)))
	defer srv.Close()
	idx := connect(t, srv)
	lim := upsert.NewLimiter()
	opts := []upsert.Option{upsert.WithIndex(idx), upsert.WithLimiter(lim), upsert.WithBackoff(time.Millisecond, 10*time.Millisecond)}
	var wg sync.WaitGroup
	results := make([]upsert.Result, 4)
	for g := range 4 {
		recs := e2eRecords(1000)
		for _, r := range recs {
			r.Id = string(rune('a'+g)) + r.Id
		}
		wg.Go(func() {
			res, err := upsert.All(context.Background(), recs, opts...)
			assert.NoError(t, err)
			results[g] = res
		})
	}
	wg.Wait()
	for _, res := range results {
		assert.Equal(t, 1000, res.Upserted)
	}
	assert.Equal(t, 4000, srv.Count(e2eNamespace))
}

func TestADeadIndexGetsATrickleNotAStorm(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
		return upserttest.Fault{Code: codes.Unavailable}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	recs := e2eRecords(2000)
	res, err := upsert.All(ctx, recs, upsert.WithIndex(connect(t, srv)), upsert.WithBatchSize(100),
		upsert.WithConcurrency(4), upsert.WithMaxRetries(upsert.ClassServer, 100),
		upsert.WithBackoff(time.Millisecond, 10*time.Millisecond))
	require.Error(t, err)
	// Without the breaker and the retry budget, 20 batches retried 100
	// times with 10 ms backoffs would send thousands of requests in 1.5 s.
	assert.Less(t, srv.Stats().Requests, 120, "the breaker pauses, and probes every 100 ms")
	assert.Len(t, res.Failed, 2000, "and nothing is dropped: every record is reported")
	for _, f := range res.Failed {
		require.Contains(t, []upsert.Class{upsert.ClassServer, upsert.ClassCanceled}, f.Class)
	}
}

func newLockedJSONLogger(buf *bytes.Buffer, mu *sync.Mutex) *slog.Logger {
	return slog.New(slog.NewJSONHandler(&lockedWriter{buf: buf, mu: mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type lockedWriter struct {
	buf *bytes.Buffer
	mu  *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// ctxKey marks contexts in the tests of the tracing hooks.
type ctxKey string

// hookLog records what the tracing hooks and the events saw.
type hookLog struct {
	mu       sync.Mutex
	events   []string // in order: run, request, done, retry, split, end
	runs     []upsert.RunEvent
	starts   []upsert.RequestEvent
	dones    []upsert.RequestEvent
	retries  []upsert.RetryEvent
	runDones []upsert.RunEvent
	sent     []context.Context // the contexts the requests were sent with
}

func (h *hookLog) add(event string, f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, event)
	f()
}

// observer marks the run's context with "run" and each request's with
// "request" = its number.
func (h *hookLog) observer() upsert.Observer {
	requests := 0
	return upsert.Observer{
		StartRun: func(ctx context.Context, e upsert.RunEvent) context.Context {
			h.add("run", func() { h.runs = append(h.runs, e) })
			return context.WithValue(ctx, ctxKey("run"), e.Operation)
		},
		StartRequest: func(ctx context.Context, e upsert.RequestEvent) context.Context {
			var n int
			h.add("request", func() {
				h.starts = append(h.starts, e)
				requests++
				n = requests
			})
			return context.WithValue(ctx, ctxKey("request"), n)
		},
		RequestDone: func(e upsert.RequestEvent) { h.add("done", func() { h.dones = append(h.dones, e) }) },
		Retry: func(e upsert.RetryEvent) {
			h.add(map[bool]string{true: "split", false: "retry"}[e.Split], func() { h.retries = append(h.retries, e) })
		},
		RunDone: func(e upsert.RunEvent) { h.add("end", func() { h.runDones = append(h.runDones, e) }) },
	}
}

// send is an UpsertFunc that records its context and answers by script: a
// 429 to the first request, a timeout to the second, OK to the others.
func (h *hookLog) send(ctx context.Context, _ string, _ []*pinecone.Vector) error {
	h.mu.Lock()
	h.sent = append(h.sent, ctx)
	n := len(h.sent)
	h.mu.Unlock()
	switch n {
	case 1:
		return status.Error(codes.ResourceExhausted, "slow down")
	case 2:
		return context.DeadlineExceeded
	}
	return nil
}

func TestTracingHooksCarryTheCallersContextThroughTheRun(t *testing.T) {
	var h hookLog
	ctx := context.WithValue(context.Background(), ctxKey("caller"), "service span")
	recs := e2eRecords(4)
	res, err := upsert.All(ctx, recs, upsert.WithUpsertFunc(h.send), upsert.WithObserver(h.observer()),
		upsert.WithBatchSize(4), upsert.WithConcurrency(1), upsert.WithBackoff(time.Millisecond, time.Millisecond))
	require.NoError(t, err)

	h.mu.Lock()
	defer h.mu.Unlock()
	assert.Equal(t, []string{
		"run",
		"request", "done", "retry", // 429: resent whole
		"request", "done", "split", // timeout: split in halves
		"request", "done", "request", "done",
		"end",
	}, h.events)

	require.Len(t, h.runs, 1)
	assert.Equal(t, "All", h.runs[0].Operation)
	assert.Equal(t, "service span", h.runs[0].Context.Value(ctxKey("caller")), "StartRun gets the caller's context")

	require.Len(t, h.starts, 4)
	for i, e := range h.starts {
		assert.Equal(t, "service span", e.Context.Value(ctxKey("caller")), "request %d descends from the caller's context", i)
		assert.Equal(t, "All", e.Context.Value(ctxKey("run")), "and from the run's")
		assert.Nil(t, e.Context.Value(ctxKey("request")), "not from another request's")
		assert.Nil(t, e.Err)
		assert.Zero(t, e.Latency)
	}
	assert.Equal(t, []int{1, 2, 3, 3}, []int{h.starts[0].Attempt, h.starts[1].Attempt, h.starts[2].Attempt, h.starts[3].Attempt},
		"the halves of a split continue the count")
	assert.Equal(t, []int{4, 4, 2, 2}, []int{h.starts[0].Records, h.starts[1].Records, h.starts[2].Records, h.starts[3].Records})

	require.Len(t, h.sent, 4)
	require.Len(t, h.dones, 4)
	for i := range 4 {
		assert.Equal(t, i+1, h.sent[i].Value(ctxKey("request")), "request %d is sent with StartRequest's context", i)
		_, hasDeadline := h.sent[i].Deadline()
		assert.True(t, hasDeadline, "under the per-request timeout")
		assert.Equal(t, i+1, h.dones[i].Context.Value(ctxKey("request")), "RequestDone carries it")
	}
	assert.ErrorIs(t, h.dones[0].Err, upsert.ErrRateLimited)
	assert.ErrorIs(t, h.dones[1].Err, upsert.ErrTimeout)

	require.Len(t, h.retries, 2)
	for _, e := range h.retries {
		assert.Equal(t, "All", e.Context.Value(ctxKey("run")), "retry events carry the run's context")
	}

	require.Len(t, h.runDones, 1)
	end := h.runDones[0]
	assert.Equal(t, "All", end.Context.Value(ctxKey("run")))
	assert.NoError(t, end.Context.Err(), "the run's context as StartRun returned it, not ended by the run")
	assert.Equal(t, res.Stats, end.Stats, "RunDone gets the final figures")
	assert.NoError(t, end.Err)
	assert.Equal(t, res.Stats.Limiter.Concurrency, end.LimiterState().Concurrency)
}

func TestAWritersRequestsDescendFromNewWritersContext(t *testing.T) {
	var h hookLog
	ctx := context.WithValue(context.Background(), ctxKey("caller"), "writer")
	w, err := upsert.NewWriter(ctx, upsert.WithUpsertFunc(h.send), upsert.WithObserver(h.observer()),
		upsert.WithBatchSize(1), upsert.WithBackoff(time.Millisecond, time.Millisecond))
	require.NoError(t, err)
	addCtx := context.WithValue(context.Background(), ctxKey("caller"), "add")
	for _, v := range e2eRecords(3) {
		require.NoError(t, w.Add(addCtx, v))
	}
	_, err = w.Close(context.Background())
	require.NoError(t, err)

	h.mu.Lock()
	defer h.mu.Unlock()
	require.Len(t, h.runs, 1)
	assert.Equal(t, "Writer", h.runs[0].Operation)
	require.NotEmpty(t, h.sent)
	for _, c := range h.sent {
		assert.Equal(t, "writer", c.Value(ctxKey("caller")))
	}
	assert.Len(t, h.runDones, 1, "the run ends at Close")
}

// failingCheckpoint cannot be read.
type failingCheckpoint struct{}

func (failingCheckpoint) Load(context.Context) (int64, error) { return 0, errors.New("disk on fire") }
func (failingCheckpoint) Save(context.Context, int64) error   { return nil }

func TestRunDoneEndsARunThatCouldNotStart(t *testing.T) {
	var h hookLog
	_, err := upsert.Stream(context.Background(), slices.Values(e2eRecords(3)), upsert.WithUpsertFunc(h.send),
		upsert.WithObserver(h.observer()), upsert.WithCheckpoint(failingCheckpoint{}))
	require.Error(t, err)
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.Equal(t, []string{"run", "end"}, h.events)
	assert.Equal(t, "Stream", h.runs[0].Operation)
	assert.ErrorContains(t, h.runDones[0].Err, "disk on fire")
}

// RunEvent.Host tells one index's runs from another's: two indexes may
// hold namespaces of one name.
func TestRunEventsNameTheIndexHost(t *testing.T) {
	srv := upserttest.NewServer()
	defer srv.Close()
	var h hookLog
	_, err := upsert.All(context.Background(), e2eRecords(3), upsert.WithIndex(connect(t, srv)), upsert.WithObserver(h.observer()))
	require.NoError(t, err)
	_, err = upsert.All(context.Background(), e2eRecords(3), upsert.WithUpsertFunc(h.send), upsert.WithObserver(h.observer()),
		upsert.WithBackoff(time.Millisecond, time.Millisecond))
	require.NoError(t, err)
	h.mu.Lock()
	defer h.mu.Unlock()
	want := strings.TrimPrefix(srv.Host(), "http://")
	assert.Equal(t, []string{want, ""}, []string{h.runs[0].Host, h.runs[1].Host}, "StartRun")
	assert.Equal(t, []string{want, ""}, []string{h.runDones[0].Host, h.runDones[1].Host}, "RunDone")
}

// panickingCheckpoint is a caller's Checkpoint whose Load panics (a bug in
// the caller's store client).
type panickingCheckpoint struct{}

func (panickingCheckpoint) Load(context.Context) (int64, error) { panic("checkpoint store bug") }
func (panickingCheckpoint) Save(context.Context, int64) error   { return nil }

// A panic of the caller's Checkpoint is its method's error: a Load that
// panics ends the run (RunDone comes, so upsertotel's span ends and the
// Limiter is let go), and the call returns an error wrapping the panic.
func TestAPanickingCheckpointIsItsError(t *testing.T) {
	var mu sync.Mutex
	var started, done int
	obs := upsert.Observer{
		StartRun: func(ctx context.Context, _ upsert.RunEvent) context.Context {
			mu.Lock()
			started++
			mu.Unlock()
			return ctx
		},
		RunDone: func(upsert.RunEvent) { mu.Lock(); done++; mu.Unlock() },
	}
	_, err := upsert.Stream(context.Background(), slices.Values(e2eRecords(3)),
		upsert.WithUpsertFunc(func(context.Context, string, []*pinecone.Vector) error { return nil }),
		upsert.WithCheckpoint(panickingCheckpoint{}), upsert.WithObserver(obs))
	var pe *upsert.PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "checkpoint store bug", pe.Value)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, started, "the run started")
	require.Equal(t, 1, done, "a run that started ends, once, also when the caller's checkpoint panics")
}

// A panic of WithProgress's function is recovered as the ack function's
// is: on a worker goroutine it would kill the process. The run stops, the
// records not settled fail with a *PanicError (a checkpoint resends them),
// the function is not called again, and RunDone comes; a panic of the
// final call is the call's error.
func TestAPanickingProgressFunctionStopsTheRun(t *testing.T) {
	for _, tt := range []struct {
		name  string
		final bool // the final call panics, not the first
	}{{"during the run", false}, {"at its end", true}} {
		t.Run(tt.name, func(t *testing.T) {
			var done, calls int
			var sends atomic.Int64
			send := func(ctx context.Context, _ string, _ []*pinecone.Vector) error {
				if sends.Add(1) > 1 && !tt.final {
					<-ctx.Done() // the first batch's progress call stops the run
				}
				return ctx.Err()
			}
			obs := upsert.Observer{RunDone: func(upsert.RunEvent) { done++ }}
			res, err := upsert.All(context.Background(), e2eRecords(100),
				upsert.WithUpsertFunc(send), upsert.WithBatchSize(10), upsert.WithConcurrency(1),
				upsert.WithProgress(time.Nanosecond, func(p upsert.Progress) {
					calls++
					if p.Final == tt.final {
						panic("progress bar bug")
					}
				}),
				upsert.WithObserver(obs))
			var pe *upsert.PanicError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, "progress bar bug", pe.Value)
			assert.Equal(t, 1, done, "RunDone comes")
			assert.Equal(t, 100, res.Upserted+len(res.Failed), "every record accounted for")
			if tt.final {
				assert.Equal(t, 100, res.Upserted)
				return
			}
			assert.Equal(t, 1, calls, "not called again")
			require.NotEmpty(t, res.Failed)
			require.ErrorAs(t, res.Failed[0].Err, &pe)
			assert.True(t, res.Failed[0].Resend, "a checkpoint resends them")
		})
	}
}

// A run's log lines name the default namespace alike, "" as events do: the
// summary line logged the connection's name for it (go-pinecone v5's
// "__default__"), so a log query by namespace missed the batches or it.
func TestLogLinesNameTheDefaultNamespaceOneWay(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		if r.Seq == 1 {
			return upserttest.Fault{Code: 14} // Unavailable: a "retrying batch" line
		}
		return upserttest.Fault{}
	}))
	defer srv.Close()
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test-key"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host()}, upsert.PushbackDialOption()) // the default namespace
	require.NoError(t, err)
	defer idx.Close()
	var buf bytes.Buffer
	var mu sync.Mutex
	_, err = upsert.All(context.Background(), e2eRecords(20), upsert.WithIndex(idx), upsert.WithConcurrency(1),
		upsert.WithLogger(newLockedJSONLogger(&buf, &mu)), upsert.WithBackoff(time.Millisecond, time.Millisecond))
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	names := map[string]string{} // msg -> namespace
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		if ns, ok := m["namespace"].(string); ok {
			names[m["msg"].(string)] = ns
		}
	}
	require.Contains(t, names, "retrying batch")
	require.Contains(t, names, "upsert finished")
	require.Equal(t, names["retrying batch"], names["upsert finished"],
		"the summary and the batch lines of one run name its namespace alike")
}

// levelCounts is a slog.Handler that counts records by level and message.
type levelCounts struct {
	mu    sync.Mutex
	byMsg map[string]int
	warn  int // records at Warn or above
}

func (h *levelCounts) Enabled(context.Context, slog.Level) bool { return true }
func (h *levelCounts) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.byMsg[r.Level.String()+" "+r.Message]++
	if r.Level >= slog.LevelWarn {
		h.warn++
	}
	return nil
}
func (h *levelCounts) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *levelCounts) WithGroup(string) slog.Handler      { return h }

// An index that is down logs a line per failed request and one when the
// breaker gives up on it, not one per batch failed unsent: the lines grow
// with the requests, not with the input (20,000 records logged some 200
// ERROR lines for 10 requests).
func TestAnIndexDownLogsLinesPerRequestNotPerBatch(t *testing.T) {
	h := &levelCounts{byMsg: map[string]int{}}
	down := func(context.Context, string, []*pinecone.Vector) error {
		return status.Error(codes.Unavailable, "connection refused")
	}
	res, err := upsert.All(context.Background(), e2eRecords(20000), upsert.WithUpsertFunc(down),
		upsert.WithLogger(slog.New(h)))
	require.ErrorIs(t, err, upsert.ErrServer)
	require.Equal(t, 20000, res.Stats.Failed)
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.LessOrEqual(t, h.warn, res.Stats.Requests+1, "lines: %v", h.byMsg)
	assert.Equal(t, 1, h.byMsg["ERROR index down; the namespace's batches fail unsent"], "one line says the breaker gave up")
}

// A retry is counted and told once the limiter admits the resend: a run
// that stops while the batch waits for its rate (here WithMaxRate's second
// of pacing after a 1 ms backoff) resends nothing and reports no retry.
func TestARetryThatWaitsForItsRateWhenTheRunStopsIsNotCounted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sends atomic.Int64
	send := func(context.Context, string, []*pinecone.Vector) error {
		if sends.Add(1) == 1 {
			time.AfterFunc(30*time.Millisecond, cancel) // during the wait for the cap
			return status.Error(codes.Unavailable, "blip")
		}
		return nil
	}
	var told atomic.Int64
	res, err := upsert.All(ctx, e2eRecords(100), upsert.WithUpsertFunc(send),
		upsert.WithBatchSize(100), upsert.WithMaxRate(100), upsert.WithBackoff(time.Millisecond, time.Millisecond),
		upsert.WithObserver(upsert.Observer{Retry: func(upsert.RetryEvent) { told.Add(1) }}))
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, int64(1), sends.Load(), "not resent")
	assert.Equal(t, 1, res.Stats.Requests)
	assert.Zero(t, res.Stats.Retries, "Stats.Retries counts resends")
	assert.Equal(t, []int{1}, res.Stats.RetriesPerBatch, "one batch, no retry")
	assert.Zero(t, told.Load(), "Observer.Retry is told of resends only")
}

// A caller the index refuses (403) logs a line per request that was
// refused, not one per batch the stop fails unsent.
func TestADeniedCallerLogsALinePerRefusedRequest(t *testing.T) {
	h := &levelCounts{byMsg: map[string]int{}}
	denied := func(context.Context, string, []*pinecone.Vector) error {
		time.Sleep(time.Millisecond) // the other workers' batches queue meanwhile
		return status.Error(codes.PermissionDenied, "forbidden")
	}
	res, err := upsert.All(context.Background(), e2eRecords(5000), upsert.WithUpsertFunc(denied),
		upsert.WithBatchSize(50), upsert.WithLogger(slog.New(h)))
	require.ErrorIs(t, err, upsert.ErrDenied)
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.LessOrEqual(t, h.byMsg["ERROR index refused the caller; stopping"], res.Stats.Requests, "lines: %v", h.byMsg)
}

// A request still in flight when another's answer stops the run (a 401,
// a spent quota) is cut off: the index answered it nothing. Stats and
// RequestDone (hence upsertprom and upsertotel) count it as canceled, as
// one cut off by the caller's context, not as a second 401 the index
// never sent; its records fail with the stop's error all the same, left
// to the resumed run. One the index answers after the stop counts as that
// answer.
func TestARequestCutOffByAStopCountsAsCanceledNotAsTheStopsAnswer(t *testing.T) {
	unauthorized := &upsert.Error{Class: upsert.ClassDenied, StatusCode: 401, Err: errors.New("Unauthorized")}
	quota := &upsert.Error{Class: upsert.ClassQuotaExceeded, StatusCode: 429, Err: errors.New("You've reached your write unit limit for the current month")}
	unavailable := &upsert.Error{Class: upsert.ClassServer, StatusCode: 503, Err: errors.New("Service Unavailable")}
	tests := []struct {
		name      string
		stop      *upsert.Error
		late      error // the second request's answer once the run stopped; nil: its context's error
		wantCodes map[string]int
		wantClass map[upsert.Class]int
	}{
		{"a 401", unauthorized, nil,
			map[string]int{"401": 1, "canceled": 1}, map[upsert.Class]int{upsert.ClassDenied: 1, upsert.ClassCanceled: 1}},
		{"a spent quota", quota, nil,
			map[string]int{"429": 1, "canceled": 1}, map[upsert.Class]int{upsert.ClassQuotaExceeded: 1, upsert.ClassCanceled: 1}},
		{"an answer after the stop", unauthorized, unavailable,
			map[string]int{"401": 1, "503": 1}, map[upsert.Class]int{upsert.ClassDenied: 1, upsert.ClassServer: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secondSent := make(chan struct{})
			var calls atomic.Int64
			send := func(ctx context.Context, _ string, _ []*pinecone.Vector) error {
				if calls.Add(1) == 1 {
					select { // answered once the second request is in flight
					case <-secondSent:
					case <-time.After(5 * time.Second):
						t.Error("the second request never went out")
					}
					return tt.stop
				}
				close(secondSent)
				<-ctx.Done() // in flight until the run stops
				if tt.late != nil {
					return tt.late
				}
				return ctx.Err()
			}
			var mu sync.Mutex
			told := map[string]int{}
			h := &levelCounts{byMsg: map[string]int{}}
			res, err := upsert.All(context.Background(), e2eRecords(2), upsert.WithUpsertFunc(send),
				upsert.WithBatchSize(1), upsert.WithConcurrency(2), upsert.WithLogger(slog.New(h)),
				upsert.WithObserver(upsert.Observer{RequestDone: func(e upsert.RequestEvent) {
					mu.Lock()
					defer mu.Unlock()
					if e.Err != nil {
						told[e.Err.Code()]++
					}
				}}))
			require.ErrorIs(t, err, tt.stop.Class.Err())
			require.Equal(t, 2, res.Stats.Requests)
			assert.Equal(t, tt.wantCodes, res.Stats.ErrorsByCode)
			assert.Equal(t, tt.wantClass, res.Stats.ErrorsByClass)
			mu.Lock()
			assert.Equal(t, tt.wantCodes, told, "RequestDone tells what Stats count")
			mu.Unlock()
			h.mu.Lock()
			assert.Equal(t, 1, h.byMsg["ERROR index refused the caller; stopping"], "a line for the refusal, none for the request it cut off: %v", h.byMsg)
			h.mu.Unlock()
			require.Len(t, res.Failed, 2)
			for _, f := range res.Failed {
				assert.Equal(t, tt.stop.Class, f.Class, "record %d fails with the stop's error", f.Index)
				assert.True(t, f.Resend, "record %d is left to the resumed run", f.Index)
			}
		})
	}
}
