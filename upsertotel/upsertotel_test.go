package upsertotel_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upsertotel"
	"github.com/upsertlib/upsert/upserttest"
)

const namespace = "docs"

// telemetry is an upsertotel.Telemetry recording to the SDK's in-memory
// exporters.
type telemetry struct {
	*upsertotel.Telemetry
	tp     *sdktrace.TracerProvider
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
}

func newTelemetry(t *testing.T, opts ...upsertotel.Option) *telemetry {
	t.Helper()
	tel := &telemetry{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tel.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	var err error
	tel.Telemetry, err = upsertotel.New(append([]upsertotel.Option{
		upsertotel.WithTracerProvider(tel.tp), upsertotel.WithMeterProvider(mp),
	}, opts...)...)
	require.NoError(t, err)
	return tel
}

// metrics collects the metrics, by name.
func (tel *telemetry) metrics(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tel.reader.Collect(context.Background(), &rm))
	out := make(map[string]metricdata.Aggregation)
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, upsertotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sums adds up the points of a counter by the value of key ("" for all).
func sums(t *testing.T, data metricdata.Aggregation, key attribute.Key) map[string]int {
	t.Helper()
	sum, ok := data.(metricdata.Sum[int64])
	require.True(t, ok, "a counter: %T", data)
	out := make(map[string]int)
	for _, p := range sum.DataPoints {
		v, _ := p.Attributes.Value(key)
		out[v.String()] += int(p.Value)
	}
	return out
}

// spanRecorder is a gRPC interceptor that keeps the span of each call's
// context, as otelgrpc would start its own span from it.
type spanRecorder struct {
	mu    sync.Mutex
	spans []trace.SpanContext
}

func (r *spanRecorder) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !strings.HasSuffix(method, "/Upsert") {
		// The run also asks DescribeIndexStats, from the run's context.
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	r.mu.Lock()
	r.spans = append(r.spans, trace.SpanContextFromContext(ctx))
	r.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func connect(t *testing.T, srv *upserttest.Server, opts ...grpc.DialOption) *pinecone.IndexConnection {
	t.Helper()
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: namespace}, append(opts, upsert.PushbackDialOption())...)
	require.NoError(t, err)
	t.Cleanup(func() { idx.Close() })
	return idx
}

func records(n, dim int) []*pinecone.Vector {
	vs := make([]*pinecone.Vector, n)
	for i := range vs {
		vals := make([]float32, dim)
		for j := range vals {
			vals[j] = float32(i*dim+j+1) / 7
		}
		vs[i] = &pinecone.Vector{Id: fmt.Sprintf("v%d", i), Values: &vals}
	}
	return vs
}

// retryThenSplit answers the first request 429 and lets the second outlast
// the client's timeout (its records land), so that a batch is retried and
// then split.
func retryThenSplit(r upserttest.Request) upserttest.Fault {
	switch r.Seq {
	case 1:
		return upserttest.Fault{Code: codes.ResourceExhausted}
	case 2:
		return upserttest.Fault{Delay: 300 * time.Millisecond}
	}
	return upserttest.Fault{}
}

// acceptAll is an UpsertFunc that accepts every batch.
func acceptAll(context.Context, string, []*pinecone.Vector) error { return nil }

// limiterPoints is how many data points the limiter's concurrency gauge
// holds now: one per running call observed.
func limiterPoints(t *testing.T, tel *telemetry) int {
	t.Helper()
	g, ok := tel.metrics(t)["upsert.limiter.concurrency"].(metricdata.Gauge[int64])
	if !ok {
		return 0
	}
	return len(g.DataPoints)
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestSpansNestUnderTheCallerAndCountWhatStatsCount(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithDimension(4), upserttest.WithFaults(retryThenSplit))
	defer srv.Close()
	var grpcSpans spanRecorder
	idx := connect(t, srv, grpc.WithUnaryInterceptor(grpcSpans.intercept))
	tel := newTelemetry(t, upsertotel.WithServerAddress(srv.Host()))

	ctx, service := tel.tp.Tracer("service").Start(context.Background(), "ingest")
	recs := records(9, 4)
	*recs[8].Values = (*recs[8].Values)[:3] // the wrong dimension: fails before sending
	res, err := upsert.All(ctx, recs, upsert.WithIndex(idx), upsert.WithObserver(tel.Observer()),
		upsert.WithBatchSize(8), upsert.WithConcurrency(1),
		upsert.WithRequestTimeout(100*time.Millisecond), upsert.WithBackoff(time.Millisecond, time.Millisecond))
	service.End()
	require.ErrorIs(t, err, upsert.ErrInvalid)
	s := res.Stats
	require.Equal(t, 8, s.Upserted)
	require.Equal(t, 1, s.Retries)
	require.Equal(t, 1, s.Splits)
	require.Equal(t, 4, s.Requests, "the first, its retry, and two halves")

	var run tracetest.SpanStub
	var requests []tracetest.SpanStub
	for _, sp := range tel.spans.GetSpans() {
		switch sp.Name {
		case "upsert.All":
			run = sp
		case "upsert " + namespace:
			requests = append(requests, sp)
		}
	}
	require.True(t, run.SpanContext.IsValid(), "a run span")
	assert.Equal(t, service.SpanContext().SpanID(), run.Parent.SpanID(), "the run nests under the caller's span")
	assert.Equal(t, trace.SpanKindInternal, run.SpanKind)
	ra := attrs(run.Attributes)
	for key, want := range map[attribute.Key]int{
		"upsert.run.records": 9, "upsert.run.upserted": s.Upserted, "upsert.run.failed": s.Failed,
		"upsert.run.requests": s.Requests, "upsert.run.retries": s.Retries, "upsert.run.splits": s.Splits,
	} {
		assert.Equal(t, int64(want), ra[key].AsInt64(), key)
	}
	assert.Equal(t, otelcodes.Error, run.Status.Code, "the run returned an error")
	var events []string
	for _, ev := range run.Events {
		events = append(events, ev.Name+" "+attrs(ev.Attributes)["error.type"].AsString())
	}
	assert.Equal(t, []string{"upsert.retry rate-limited", "upsert.split timeout"}, events)

	require.Len(t, requests, s.Requests, "a span per request")
	var attempts []int64
	for i, sp := range requests {
		assert.Equal(t, run.SpanContext.SpanID(), sp.Parent.SpanID(), "request %d nests under the run", i)
		assert.Equal(t, trace.SpanKindClient, sp.SpanKind)
		a := attrs(sp.Attributes)
		assert.Equal(t, "pinecone", a["db.system.name"].AsString())
		assert.Equal(t, "upsert", a["db.operation.name"].AsString())
		assert.Equal(t, namespace, a["db.namespace"].AsString())
		assert.Equal(t, "127.0.0.1", a["server.address"].AsString())
		assert.Positive(t, a["server.port"].AsInt64())
		assert.Positive(t, a["upsert.request.bytes"].AsInt64())
		attempts = append(attempts, a["upsert.attempt"].AsInt64())
	}
	assert.Equal(t, []int64{1, 2, 3, 3}, attempts)
	first := attrs(requests[0].Attributes)
	assert.Equal(t, int64(8), first["upsert.request.records"].AsInt64())
	assert.Equal(t, "rate-limited", first["error.type"].AsString())
	assert.Equal(t, "RESOURCE_EXHAUSTED", first["rpc.response.status_code"].AsString())
	assert.Equal(t, "RESOURCE_EXHAUSTED", first["db.response.status_code"].AsString())
	assert.Equal(t, otelcodes.Error, requests[0].Status.Code)
	assert.Equal(t, "timeout", attrs(requests[1].Attributes)["error.type"].AsString())
	assert.Equal(t, otelcodes.Unset, requests[2].Status.Code)

	grpcSpans.mu.Lock()
	require.Len(t, grpcSpans.spans, s.Requests)
	for i, sc := range grpcSpans.spans {
		assert.Equal(t, requests[i].SpanContext.SpanID(), sc.SpanID(), "gRPC call %d is made with its request span's context", i)
	}
	grpcSpans.mu.Unlock()

	m := tel.metrics(t)
	hist, ok := m["db.client.operation.duration"].(metricdata.Histogram[float64])
	require.True(t, ok)
	byClass := map[string]int{}
	for _, p := range hist.DataPoints {
		v, _ := p.Attributes.Value("error.type")
		byClass[v.AsString()] += int(p.Count)
		sys, _ := p.Attributes.Value("db.system.name")
		assert.Equal(t, "pinecone", sys.AsString())
	}
	want := map[string]int{"": s.Requests - len(s.ErrorsByClass)}
	for c, n := range s.ErrorsByClass {
		want[c.String()] = n
	}
	assert.Equal(t, want, byClass, "requests by outcome, as Stats counts them")
	assert.Equal(t, map[string]int{namespace: s.Upserted}, sums(t, m["upsert.records.upserted"], "db.namespace"))
	assert.Equal(t, map[string]int{"invalid": s.Failed}, sums(t, m["upsert.records.failed"], "error.type"))
	assert.Equal(t, map[string]int{namespace: s.Failed}, sums(t, m["upsert.records.failed"], "db.namespace"), "failures name their namespace")
	retries := map[string]int{}
	for c, n := range s.RetriesByClass {
		retries[c.String()+" "+upsertotel.RetryKindBackoff] = n
	}
	retries["timeout "+upsertotel.RetryKindSplit] = s.Splits
	got := map[string]int{}
	for _, p := range m["upsert.retries"].(metricdata.Sum[int64]).DataPoints {
		class, _ := p.Attributes.Value("error.type")
		kind, _ := p.Attributes.Value("upsert.retry.kind")
		got[class.AsString()+" "+kind.AsString()] += int(p.Value)
	}
	assert.Equal(t, retries, got, "retries by class and kind, as Stats counts them")
	for _, name := range []string{"upsert.records.upserted", "upsert.retries"} {
		for _, p := range m[name].(metricdata.Sum[int64]).DataPoints {
			addr, _ := p.Attributes.Value("server.address")
			assert.Equal(t, "127.0.0.1", addr.AsString(), "%s tells the index apart", name)
		}
	}
}

func TestLimiterGaugesFollowAWriterWhichHasNoRunSpan(t *testing.T) {
	srv := upserttest.NewServer()
	defer srv.Close()
	tel := newTelemetry(t)
	lim := upsert.NewLimiter()
	ctx, service := tel.tp.Tracer("service").Start(context.Background(), "consumer")
	w, err := upsert.NewWriter(ctx, upsert.WithIndex(connect(t, srv)), upsert.WithLimiter(lim), upsert.WithObserver(tel.Observer()))
	require.NoError(t, err)
	for _, v := range records(300, 4) {
		require.NoError(t, w.Add(context.Background(), v))
	}
	require.NoError(t, w.Flush(context.Background()))

	st := lim.State(namespace)
	m := tel.metrics(t)
	for name, want := range map[string]int64{"upsert.limiter.concurrency": int64(st.Concurrency), "upsert.limiter.batch_size": int64(st.BatchSize)} {
		g, ok := m[name].(metricdata.Gauge[int64])
		require.True(t, ok, name)
		require.Len(t, g.DataPoints, 1, name)
		assert.Equal(t, want, g.DataPoints[0].Value, name)
		ns, _ := g.DataPoints[0].Attributes.Value("db.namespace")
		assert.Equal(t, namespace, ns.AsString())
	}
	if _, ok := m["upsert.limiter.rate"]; ok {
		assert.Empty(t, m["upsert.limiter.rate"].(metricdata.Gauge[float64]).DataPoints, "no rate before the first 429")
	}

	_, err = w.Close(context.Background())
	require.NoError(t, err)
	service.End()
	spans := tel.spans.GetSpans()
	require.NotEmpty(t, spans)
	requests := 0
	for _, sp := range spans {
		assert.NotContains(t, sp.Name, "upsert.Writer", "a Writer has no run span")
		if sp.Name == "upsert "+namespace {
			requests++
			assert.Equal(t, service.SpanContext().SpanID(), sp.Parent.SpanID(), "its requests descend from NewWriter's context")
		}
	}
	assert.Positive(t, requests)
	if g, ok := tel.metrics(t)["upsert.limiter.concurrency"].(metricdata.Gauge[int64]); ok {
		assert.Empty(t, g.DataPoints, "a closed Writer is no longer observed")
	}
}

// Two Telemetry values observing one run (one per TracerProvider, say, or
// a library's own next to the service's) each end the spans they started,
// once, and stop observing the run when it ends.
func TestTwoTelemetriesOnOneRunEachEndTheirOwnSpans(t *testing.T) {
	a, b := newTelemetry(t), newTelemetry(t)
	res, err := upsert.All(context.Background(), records(4, 4), upsert.WithUpsertFunc(acceptAll),
		upsert.WithBatchSize(2), upsert.WithConcurrency(1),
		upsert.WithObserver(a.Observer()), upsert.WithObserver(b.Observer()))
	require.NoError(t, err)
	require.Equal(t, 2, res.Stats.Requests)

	for name, tel := range map[string]*telemetry{"first": a, "second": b} {
		var runs, requests int
		for _, sp := range tel.spans.GetSpans() { // only ended spans are exported
			switch sp.Name {
			case "upsert.All":
				runs++
			case "upsert":
				requests++
			}
		}
		assert.Equal(t, 1, runs, "%s Telemetry: its run span ended once", name)
		assert.Equal(t, res.Stats.Requests, requests, "%s Telemetry: each of its request spans ended once", name)
		assert.Zero(t, limiterPoints(t, tel), "%s Telemetry: a run that ended is no longer observed", name)
	}
}

// Two Telemetry values on one MeterProvider each add a run they both
// observe to its instruments, so the run counts twice (each is told every
// event); the one of them given a noop MeterProvider, as Observer says,
// leaves the counts the run's own.
func TestTwoTelemetriesOnOneMeterProviderCountARunOnceWhenOneHasNoMeters(t *testing.T) {
	for name, tc := range map[string]struct {
		noop  bool
		times int
	}{"both measure": {false, 2}, "one has a noop MeterProvider": {true, 1}} {
		t.Run(name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			first, err := upsertotel.New(upsertotel.WithMeterProvider(mp))
			require.NoError(t, err)
			var second *upsertotel.Telemetry
			if tc.noop {
				second, err = upsertotel.New(upsertotel.WithMeterProvider(noop.NewMeterProvider()))
			} else {
				second, err = upsertotel.New(upsertotel.WithMeterProvider(mp))
			}
			require.NoError(t, err)
			res, err := upsert.All(context.Background(), records(10, 4), upsert.WithUpsertFunc(acceptAll), upsert.WithBatchSize(5),
				upsert.WithObserver(first.Observer()), upsert.WithObserver(second.Observer()))
			require.NoError(t, err)

			var rm metricdata.ResourceMetrics
			require.NoError(t, reader.Collect(context.Background(), &rm))
			upserted, requests := 0, 0
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					switch d := m.Data.(type) {
					case metricdata.Sum[int64]:
						if m.Name == "upsert.records.upserted" {
							for _, p := range d.DataPoints {
								upserted += int(p.Value)
							}
						}
					case metricdata.Histogram[float64]:
						for _, p := range d.DataPoints {
							requests += int(p.Count)
						}
					}
				}
			}
			assert.Equal(t, tc.times*res.Stats.Upserted, upserted, "upsert.records.upserted")
			assert.Equal(t, tc.times*res.Stats.Requests, requests, "db.client.operation.duration's count")
		})
	}
}

// A Writer whose context ends stops by itself, closed or not: the
// Telemetry stops reporting its limiter, and lets go of its run, without
// waiting for a Close that may never come.
func TestAWriterStoppedByItsContextIsNoLongerObserved(t *testing.T) {
	tel := newTelemetry(t)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := upsert.NewWriter(ctx, upsert.WithUpsertFunc(acceptAll), upsert.WithObserver(tel.Observer()))
	require.NoError(t, err)
	for _, v := range records(10, 4) {
		require.NoError(t, w.Add(context.Background(), v))
	}
	require.NoError(t, w.Flush(context.Background()))
	require.Equal(t, 1, limiterPoints(t, tel), "a running Writer is observed")

	cancel()
	require.Eventually(t, func() bool { return w.Add(context.Background(), records(1, 4)[0]) != nil },
		time.Second, time.Millisecond, "the Writer stopped")
	assert.Eventually(t, func() bool { return limiterPoints(t, tel) == 0 }, time.Second, 5*time.Millisecond,
		"a Writer whose context ended, never closed, is no longer observed")

	_, _ = w.Close(context.Background()) // a late Close ends nothing twice
	assert.Zero(t, limiterPoints(t, tel), "a Writer closed after its context ended is no longer observed")
}

func TestIntegratedRecordsCarryTheHTTPStatus(t *testing.T) {
	tel := newTelemetry(t)
	calls := 0
	send := func(ctx context.Context, ns string, batch []*pinecone.IntegratedRecord) error {
		calls++
		if calls == 1 {
			return &pinecone.PineconeError{Code: 429, Msg: errors.New("slow down")}
		}
		return nil
	}
	recs := []*pinecone.IntegratedRecord{{"_id": "a", "text": "hello"}, {"_id": "b", "text": "world"}}
	res, err := upsert.Records(context.Background(), func(yield func(*pinecone.IntegratedRecord) bool) {
		for _, r := range recs {
			if !yield(r) {
				return
			}
		}
	}, upsert.WithRecordsFunc(send), upsert.WithObserver(tel.Observer()), upsert.WithBackoff(time.Millisecond, time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, 2, res.Upserted)

	var names []string
	var failed tracetest.SpanStub
	for _, sp := range tel.spans.GetSpans() {
		names = append(names, sp.Name)
		if sp.Status.Code == otelcodes.Error {
			failed = sp
		}
	}
	assert.ElementsMatch(t, []string{"upsert_records", "upsert_records", "upsert.Records"}, names)
	a := attrs(failed.Attributes)
	assert.Equal(t, int64(429), a["http.response.status_code"].AsInt64())
	assert.Equal(t, "429", a["db.response.status_code"].AsString())
	assert.Equal(t, "upsert_records", a["db.operation.name"].AsString())
}

func TestNewRefusesAHostItCannotRead(t *testing.T) {
	_, err := upsertotel.New(upsertotel.WithServerAddress("https://"))
	assert.ErrorContains(t, err, "WithServerAddress")
}

// gaugePoints returns the points of the limiter's concurrency gauge now:
// their values, and each one's attributes.
func gaugePoints(t *testing.T, tel *telemetry) ([]int, []map[attribute.Key]attribute.Value) {
	t.Helper()
	g, ok := tel.metrics(t)["upsert.limiter.concurrency"].(metricdata.Gauge[int64])
	require.True(t, ok)
	var values []int
	var as []map[attribute.Key]attribute.Value
	for _, p := range g.DataPoints {
		values = append(values, int(p.Value))
		as = append(as, attrs(p.Attributes.ToSlice()))
	}
	return values, as
}

// startWriter starts a Writer with opts and the observer of tel, and lets
// its run start: a request of 10 records, flushed. It is closed at the
// end of the test.
func startWriter(t *testing.T, tel *telemetry, opts ...upsert.Option) *upsert.Writer {
	t.Helper()
	w, err := upsert.NewWriter(context.Background(), append(opts, upsert.WithObserver(tel.Observer()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = w.Close(context.Background()) })
	for _, v := range records(10, 4) {
		require.NoError(t, w.Add(context.Background(), v))
	}
	require.NoError(t, w.Flush(context.Background()))
	return w
}

// One process writing the same namespace of two indexes (a migration, a
// blue/green pair) runs two calls at once, each with the limiter state of
// its own index: the gauges report both, told apart by server.address and
// server.port, the host of each run's index. A Telemetry given
// WithServerAddress still tells them apart: a run's own host wins.
func TestLimiterGaugesTellTwoIndexesOfOneNamespaceApart(t *testing.T) {
	tel := newTelemetry(t, upsertotel.WithServerAddress("https://configured.example"))
	concurrencies := []int{2, 7} // pinned: LimiterState reports them as they are
	ports := map[int64]int{}     // the concurrency of each index, by port
	for _, conc := range concurrencies {
		srv := upserttest.NewServer(upserttest.WithDimension(4))
		t.Cleanup(srv.Close)
		startWriter(t, tel, upsert.WithIndex(connect(t, srv)), upsert.WithConcurrency(conc))
		_, port, err := net.SplitHostPort(srv.Addr())
		require.NoError(t, err)
		p, err := strconv.ParseInt(port, 10, 64)
		require.NoError(t, err)
		ports[p] = conc
	}

	values, points := gaugePoints(t, tel)
	require.Len(t, points, 2, "two running calls on two indexes, namespace %q each: one point per index, got %v", namespace, values)
	got := map[int64]int{}
	for i, a := range points {
		assert.Equal(t, namespace, a["db.namespace"].AsString())
		assert.Equal(t, "127.0.0.1", a["server.address"].AsString(), "the index's host, not WithServerAddress's")
		got[a["server.port"].AsInt64()] = values[i]
	}
	assert.Equal(t, ports, got, "each index's state, under its own port")
}

// Calls with separate Limiters on one index and namespace (WithLimiter of
// a new Limiter each, or calls through WithUpsertFunc, which each start
// their own) would report points with the same attributes: the gauges
// report the earliest started call's, as long as it runs, then the next.
func TestLimiterGaugesOfCallsOnOneNamespaceReportTheEarliestCall(t *testing.T) {
	tel := newTelemetry(t, upsertotel.WithServerAddress("https://configured.example"))
	first := startWriter(t, tel, upsert.WithUpsertFunc(acceptAll), upsert.WithConcurrency(2))
	startWriter(t, tel, upsert.WithUpsertFunc(acceptAll), upsert.WithConcurrency(7))
	for range 5 { // the runs are kept in a map: any order would show
		values, points := gaugePoints(t, tel)
		require.Equal(t, []int{2}, values, "the earliest call's state, and only it")
		assert.Equal(t, "configured.example", points[0]["server.address"].AsString(), "a run without a host has WithServerAddress's")
		assert.Equal(t, int64(443), points[0]["server.port"].AsInt64())
	}

	_, err := first.Close(context.Background())
	require.NoError(t, err)
	values, _ := gaugePoints(t, tel)
	assert.Equal(t, []int{7}, values, "once the earliest ended, the next one's")
}

// A run through WithIndex carries its index's host in server.address and
// server.port, on its spans and its requests' durations, with or without
// WithServerAddress; a run through WithUpsertFunc, which names no index,
// has WithServerAddress's.
func TestServerAttributesAreTheRunsIndexHost(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithDimension(4))
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Addr())
	require.NoError(t, err)
	tel := newTelemetry(t, upsertotel.WithServerAddress("https://configured.example:8443"))
	_, err = upsert.All(context.Background(), records(4, 4), upsert.WithIndex(connect(t, srv)), upsert.WithObserver(tel.Observer()))
	require.NoError(t, err)
	_, err = upsert.All(context.Background(), records(4, 4), upsert.WithUpsertFunc(acceptAll), upsert.WithObserver(tel.Observer()))
	require.NoError(t, err)

	servers := map[string]int{}
	for _, sp := range tel.spans.GetSpans() {
		a := attrs(sp.Attributes)
		servers[sp.Name+" "+a["server.address"].AsString()+":"+strconv.FormatInt(a["server.port"].AsInt64(), 10)]++
	}
	assert.Equal(t, map[string]int{
		"upsert.All 127.0.0.1:" + port: 1, "upsert " + namespace + " 127.0.0.1:" + port: 1,
		"upsert.All configured.example:8443": 1, "upsert configured.example:8443": 1,
	}, servers)
	hist, ok := tel.metrics(t)["db.client.operation.duration"].(metricdata.Histogram[float64])
	require.True(t, ok)
	var addrs []string
	for _, p := range hist.DataPoints {
		v, _ := p.Attributes.Value("server.address")
		addrs = append(addrs, v.AsString())
	}
	slices.Sort(addrs)
	assert.Equal(t, []string{"127.0.0.1", "configured.example"}, addrs)
}

// A record whose namespace is not valid UTF-8 is refused before sending,
// and its Failure carries that namespace. OTLP is protobuf: a string that
// is not valid UTF-8 fails the marshalling of the whole export, every
// metric of the MeterProvider with it, and a cumulative counter keeps the
// point for the life of the process. Every attribute and span name
// carries such a namespace with U+FFFD for the invalid bytes.
func TestANamespaceThatIsNotUTF8IsSpeltValidEverywhere(t *testing.T) {
	tel := newTelemetry(t)
	_, err := upsert.All(context.Background(), records(3, 4), upsert.WithUpsertFunc(acceptAll),
		upsert.WithNamespaceOf(func(v *pinecone.Vector) string {
			if v.Id == "v1" {
				return "tenant-\xff" // refused before sending
			}
			return "tenant"
		}),
		upsert.WithObserver(tel.Observer()))
	require.ErrorIs(t, err, upsert.ErrInvalid)
	assert.Equal(t, map[string]int{"tenant-\uFFFD": 1}, sums(t, tel.metrics(t)["upsert.records.failed"], "db.namespace"))

	// No request carries such a namespace today; were one to, its span,
	// its retry and its metrics would be spelt valid all the same.
	o := tel.Observer()
	ctx := o.StartRun(context.Background(), upsert.RunEvent{Operation: "All", Namespace: "run-\xfe"})
	e := upsert.RequestEvent{Namespace: "req-\xfd", Records: 1, Attempt: 1}
	e.Context = o.StartRequest(ctx, e)
	o.RequestDone(e)
	o.Retry(upsert.RetryEvent{Context: ctx, Namespace: "retry-\xfc", Records: 1, Attempt: 1, Err: &upsert.Error{Class: upsert.ClassServer}})
	o.RunDone(upsert.RunEvent{Context: ctx})

	for name, data := range tel.metrics(t) {
		for _, kv := range pointAttrs(data) {
			assert.True(t, utf8.ValidString(kv.Value.String()), "%s: attribute %s=%q", name, kv.Key, kv.Value.String())
		}
	}
	for _, sp := range tel.spans.GetSpans() {
		assert.True(t, utf8.ValidString(sp.Name), "span name %q", sp.Name)
		kvs := slices.Clone(sp.Attributes)
		for _, ev := range sp.Events {
			kvs = append(kvs, ev.Attributes...)
		}
		for _, kv := range kvs {
			assert.True(t, utf8.ValidString(kv.Value.String()), "span %s: attribute %s=%q", sp.Name, kv.Key, kv.Value.String())
		}
	}
}

// pointAttrs returns the attributes of every point of a counter, a
// histogram or a gauge.
func pointAttrs(data metricdata.Aggregation) []attribute.KeyValue {
	var sets []attribute.Set
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	}
	var kvs []attribute.KeyValue
	for _, s := range sets {
		kvs = append(kvs, s.ToSlice()...)
	}
	return kvs
}

// A nil provider is an option's error, as the core's options turn a nil
// argument into ErrBadOption, not a panic in New; a nil option does
// nothing.
func TestANilProviderIsAnErrorOfNew(t *testing.T) {
	_, err := upsertotel.New(upsertotel.WithTracerProvider(nil))
	assert.ErrorContains(t, err, "WithTracerProvider: nil TracerProvider")
	_, err = upsertotel.New(upsertotel.WithMeterProvider(nil))
	assert.ErrorContains(t, err, "WithMeterProvider: nil MeterProvider")
	_, err = upsertotel.New(upsertotel.WithTracerProvider((*sdktrace.TracerProvider)(nil)))
	assert.ErrorContains(t, err, "nil TracerProvider", "a typed nil too")
	_, err = upsertotel.New(upsertotel.WithMeterProvider((*sdkmetric.MeterProvider)(nil)))
	assert.ErrorContains(t, err, "nil MeterProvider", "a typed nil too")
	tel, err := upsertotel.New(nil)
	require.NoError(t, err)
	assert.NotNil(t, tel)
}
