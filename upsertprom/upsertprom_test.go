package upsertprom_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upsertprom"
	"github.com/upsertlib/upsert/upserttest"
)

func records(n, dim int) []*pinecone.Vector {
	vs := make([]*pinecone.Vector, n)
	for i := range vs {
		vals := make([]float32, dim)
		for j := range vals {
			vals[j] = float32(i*dim+j) / 7
		}
		vs[i] = &pinecone.Vector{Id: fmt.Sprintf("v%d", i), Values: &vals}
	}
	return vs
}

// tally is a second observer of the same run: what the events said, to
// compare the metrics with.
type tally struct {
	mu          sync.Mutex
	requests    int
	records     int
	waitSeconds float64
}

func (tl *tally) observer() upsert.Observer {
	return upsert.Observer{
		RequestDone: func(e upsert.RequestEvent) {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			tl.requests++
			tl.records += e.Records
		},
		Retry: func(e upsert.RetryEvent) {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			tl.waitSeconds += e.Wait.Seconds()
		},
	}
}

// histogram returns the observation count and sum of histogram name with
// the given namespace label, from reg.
func histogram(t *testing.T, reg prometheus.Gatherer, name, namespace string) (count uint64, sum float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "namespace" && lp.GetValue() == namespace {
					h := m.GetHistogram()
					return h.GetSampleCount(), h.GetSampleSum()
				}
			}
		}
	}
	t.Fatalf("no %s{namespace=%q}", name, namespace)
	return 0, 0
}

func TestCountersMatchTheRunStats(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithFaults(upserttest.RateLimitBurst(2, 3)))
	defer srv.Close()
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test"})
	if err != nil {
		t.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()

	reg := prometheus.NewRegistry()
	c, err := upsertprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	var tl tally
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recs := records(1000, 8)
	res, err := upsert.All(ctx, recs, upsert.WithIndex(idx), upsert.WithObserver(c.Observer()),
		upsert.WithObserver(tl.observer()), upsert.WithBackoff(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatalf("All: %v", err)
	}
	st := res.Stats
	if res.Upserted != len(recs) {
		t.Fatalf("upserted %d of %d", res.Upserted, len(recs))
	}
	if got := srv.Stats().Codes[codes.ResourceExhausted]; got != 3 {
		t.Fatalf("the server answered %d 429s, want 3 (the fault script)", got)
	}
	if st.ErrorsByCode["ResourceExhausted"] != 3 || st.Retries != 3 || st.RetriesByClass[upsert.ClassRateLimited] != 3 || st.Splits != 0 {
		t.Fatalf("unexpected run: errors by code %v, retries %d %v, splits %d", st.ErrorsByCode, st.Retries, st.RetriesByClass, st.Splits)
	}

	// upsert_requests_total: one series for the successes, one for the 429s.
	if n := testutil.CollectAndCount(c, "upsert_requests_total"); n != 2 {
		t.Errorf("upsert_requests_total has %d series, want 2 (ok, rate-limited)", n)
	}
	ok := testutil.ToFloat64(c.RequestsForTest("ns", "ok", "OK"))
	limited := testutil.ToFloat64(c.RequestsForTest("ns", "rate-limited", "ResourceExhausted"))
	if int(ok+limited) != st.Requests || int(ok+limited) != srv.Stats().Requests {
		t.Errorf("requests: ok %v + rate-limited %v, want Stats.Requests %d (server saw %d)", ok, limited, st.Requests, srv.Stats().Requests)
	}
	if int(limited) != st.ErrorsByCode["ResourceExhausted"] {
		t.Errorf("rate-limited requests %v, want %d", limited, st.ErrorsByCode["ResourceExhausted"])
	}

	// upsert_request_duration_seconds: one observation per request.
	if n := testutil.CollectAndCount(c, "upsert_request_duration_seconds"); n != 1 {
		t.Errorf("upsert_request_duration_seconds has %d series, want 1", n)
	}
	count, sum := histogram(t, reg, "upsert_request_duration_seconds", "ns")
	if int(count) != st.Requests {
		t.Errorf("duration histogram has %d observations, want Stats.Requests %d", count, st.Requests)
	}
	if mean := sum / float64(count); mean <= 0 || mean > st.Latency.Max.Seconds()*1.05 {
		t.Errorf("mean latency %vs out of (0, %v]", mean, st.Latency.Max)
	}

	// upsert_records_sent_total: every record once, plus those of the 429s.
	sent := testutil.ToFloat64(c.RecordsSentForTest("ns"))
	if int(sent) != tl.records || int(sent) < len(recs) {
		t.Errorf("records sent %v, want %d (the events), at least %d", sent, tl.records, len(recs))
	}
	if want := st.BatchSizes.Mean * float64(st.Requests); sent < want-0.5 || sent > want+0.5 {
		t.Errorf("records sent %v, want mean batch size × requests = %v", sent, want)
	}

	// upsert_retries_total: the three 429s were retried after a backoff;
	// every class and kind has its series, at zero but that one.
	if n, want := testutil.CollectAndCount(c, "upsert_retries_total"), 2*len(upsert.Classes()); n != want {
		t.Errorf("upsert_retries_total has %d series, want %d (every class, both kinds)", n, want)
	}
	if got := testutil.ToFloat64(c.RetriesForTest("ns", "rate-limited", "backoff")); int(got) != st.Retries {
		t.Errorf("backoff retries %v, want Stats.Retries %d", got, st.Retries)
	}

	// upsert_retry_wait_seconds_total: the backoffs, as the events said.
	if got := testutil.ToFloat64(c.RetryWaitForTest("ns")); got < tl.waitSeconds-1e-9 || got > tl.waitSeconds+1e-9 {
		t.Errorf("retry wait %vs, want %vs", got, tl.waitSeconds)
	}

	// upsert_records_failed_total: nothing failed; every class has its
	// series, at zero.
	if got := failedByClass(t, reg, "ns"); !assert.Equal(t, zeroFailures(), got) || st.Failed != 0 {
		t.Errorf("upsert_records_failed_total %v, Stats.Failed %d; want zeros", got, st.Failed)
	}
}

// TestFailuresAndSplits drives the observer by hand with the events a run
// sends, for the metrics the run above does not reach.
func TestFailuresAndSplits(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, err := upsertprom.New(reg, upsertprom.WithNamespace("ingest"), upsertprom.WithBuckets([]float64{0.1, 1}))
	if err != nil {
		t.Fatal(err)
	}
	o := c.Observer()
	timeout := &upsert.Error{Class: upsert.ClassTimeout, GRPCCode: codes.DeadlineExceeded}
	invalid := &upsert.Error{Class: upsert.ClassInvalid, StatusCode: 400}
	o.RequestDone(upsert.RequestEvent{Namespace: "a", Records: 10, Latency: 50 * time.Millisecond, Err: timeout})
	o.Retry(upsert.RetryEvent{Namespace: "a", Records: 10, Split: true, Err: timeout})
	o.RequestDone(upsert.RequestEvent{Namespace: "a", Records: 5, Latency: 2 * time.Second, Err: invalid})
	o.RequestDone(upsert.RequestEvent{Namespace: "a", Records: 5, Latency: 500 * time.Millisecond})
	o.Retry(upsert.RetryEvent{Namespace: "b", Records: 3, Wait: 1500 * time.Millisecond, Err: &upsert.Error{Class: upsert.ClassServer, GRPCCode: codes.Unavailable}})
	o.Failure(upsert.Failure{ID: "x", Namespace: "a", Class: upsert.ClassInvalid, Err: invalid})
	o.Failure(upsert.Failure{ID: "y", Namespace: "a", Class: upsert.ClassInvalid, Err: invalid})
	o.Failure(upsert.Failure{ID: "z", Class: upsert.ClassInvalid, Err: invalid})

	// The series made at zero at each namespace's first event are left
	// out (TestANamespacesCountersStartAtZero checks them).
	want := `
# HELP ingest_records_failed_total Records that did not land, by Pinecone namespace and class of their final failure.
# TYPE ingest_records_failed_total counter
ingest_records_failed_total{class="invalid",namespace="__default__"} 1
ingest_records_failed_total{class="invalid",namespace="a"} 2
# HELP ingest_records_sent_total Records carried by upsert requests, counted again for every retry, by Pinecone namespace.
# TYPE ingest_records_sent_total counter
ingest_records_sent_total{namespace="a"} 20
# HELP ingest_records_upserted_total Records the index confirmed, each once, by Pinecone namespace.
# TYPE ingest_records_upserted_total counter
ingest_records_upserted_total{namespace="a"} 5
# HELP ingest_request_duration_seconds Round trip of upsert requests, successful or not, in seconds, by Pinecone namespace.
# TYPE ingest_request_duration_seconds histogram
ingest_request_duration_seconds_bucket{namespace="a",le="0.1"} 1
ingest_request_duration_seconds_bucket{namespace="a",le="1"} 2
ingest_request_duration_seconds_bucket{namespace="a",le="+Inf"} 3
ingest_request_duration_seconds_sum{namespace="a"} 2.55
ingest_request_duration_seconds_count{namespace="a"} 3
# HELP ingest_requests_total Upsert requests sent, retries included, by Pinecone namespace and outcome: class "ok" and code "OK" on success, else the failure's class and code (HTTP status or gRPC code name).
# TYPE ingest_requests_total counter
ingest_requests_total{class="invalid",code="400",namespace="a"} 1
ingest_requests_total{class="ok",code="OK",namespace="a"} 1
ingest_requests_total{class="timeout",code="DeadlineExceeded",namespace="a"} 1
# HELP ingest_retries_total Failed batches about to be sent again, by Pinecone namespace, class of the failure and kind: "backoff" (resent whole after a wait) or "split" (split in halves).
# TYPE ingest_retries_total counter
ingest_retries_total{class="server",kind="backoff",namespace="b"} 1
ingest_retries_total{class="timeout",kind="split",namespace="a"} 1
# HELP ingest_retry_wait_seconds_total Backoff chosen before whole-batch retries, in seconds, by Pinecone namespace (a wait cut short when another batch lands counts whole).
# TYPE ingest_retry_wait_seconds_total counter
ingest_retry_wait_seconds_total{namespace="b"} 1.5
`
	assert.Equal(t, lines(want), nonZero(t, reg))
}

// lines returns the non-empty lines of text, sorted.
func lines(text string) []string {
	out := slices.DeleteFunc(strings.Split(text, "\n"), func(l string) bool { return l == "" })
	slices.Sort(out)
	return out
}

// nonZero renders what reg gathers in the text format, one sample a line,
// sorted, without the counters at zero and their families' HELP and TYPE
// when no sample is left.
func nonZero(t *testing.T, reg prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var out []string
	num := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	for _, mf := range mfs {
		name, samples := mf.GetName(), []string{}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			with := func(extra ...string) string {
				return "{" + strings.Join(append(slices.Clone(labels), extra...), ",") + "}"
			}
			if h := m.GetHistogram(); h != nil {
				for _, b := range h.GetBucket() {
					samples = append(samples, fmt.Sprintf("%s_bucket%s %d", name, with(fmt.Sprintf("le=%q", num(b.GetUpperBound()))), b.GetCumulativeCount()))
				}
				samples = append(samples, fmt.Sprintf("%s_bucket%s %d", name, with(`le="+Inf"`), h.GetSampleCount()),
					fmt.Sprintf("%s_sum%s %s", name, with(), num(h.GetSampleSum())),
					fmt.Sprintf("%s_count%s %d", name, with(), h.GetSampleCount()))
			} else if v := m.GetCounter().GetValue(); v != 0 {
				samples = append(samples, fmt.Sprintf("%s%s %s", name, with(), num(v)))
			}
		}
		if len(samples) > 0 {
			out = append(out, fmt.Sprintf("# HELP %s %s", name, mf.GetHelp()),
				fmt.Sprintf("# TYPE %s %s", name, strings.ToLower(mf.GetType().String())))
			out = append(out, samples...)
		}
	}
	slices.Sort(out)
	return out
}

func TestNewReportsRegistrationErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := upsertprom.New(reg); err != nil {
		t.Fatal(err)
	}
	_, err := upsertprom.New(reg)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Errorf("second New with the same namespace: got %v, want an AlreadyRegisteredError", err)
	}
	if _, err := upsertprom.New(reg, upsertprom.WithNamespace("other")); err != nil {
		t.Errorf("New with another namespace: %v", err)
	}
	if _, err := upsertprom.New(reg, upsertprom.WithNamespace("not-a-prefix")); err == nil {
		t.Error("New with an invalid namespace succeeded")
	}
	if _, err := upsertprom.New(reg, upsertprom.WithNamespace("b"), upsertprom.WithBuckets([]float64{1, 1})); err == nil {
		t.Error("New with buckets not increasing succeeded")
	}
	if got := testutil.CollectAndCount(reg); got != 0 {
		t.Errorf("the registry has %d series before any event, want 0", got)
	}

	// A nil registerer registers nothing; the Collector can be registered
	// later as one prometheus.Collector.
	c, err := upsertprom.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := prometheus.NewRegistry().Register(c); err != nil {
		t.Errorf("registering the Collector: %v", err)
	}
}

// seriesOf returns the value of each series of counter name in reg, by the
// value of its label "namespace".
func seriesOf(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "namespace" {
					out[lp.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// The package documentation says the namespace label is "__default__"
// (Pinecone's name) for the default namespace, and the core takes "" and
// "__default__" as one namespace. A run through WithIndex on the default
// namespace (go-pinecone v5 names it "__default__") and a run through
// WithUpsertFunc (namespace "") write to the same namespace: one series,
// labelled "__default__". Not "": Prometheus takes an empty label for an
// absent one, which a target label "namespace" (Kubernetes') then fills.
func TestDefaultNamespaceIsLabelledDefaultWhateverTheTransport(t *testing.T) {
	srv := upserttest.NewServer()
	defer srv.Close()
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host()}) // the default namespace
	require.NoError(t, err)
	defer idx.Close()

	reg := prometheus.NewRegistry()
	c, err := upsertprom.New(reg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := upsert.All(ctx, records(10, 4), upsert.WithIndex(idx), upsert.WithObserver(c.Observer()))
	require.NoError(t, err)
	require.Equal(t, 10, res.Upserted)
	send := func(context.Context, string, []*pinecone.Vector) error { return nil }
	res, err = upsert.All(ctx, records(10, 4), upsert.WithUpsertFunc(send), upsert.WithObserver(c.Observer()))
	require.NoError(t, err)
	require.Equal(t, 10, res.Upserted)

	assert.Equal(t, map[string]float64{"__default__": 20}, seriesOf(t, reg, "upsert_records_sent_total"),
		"the default namespace is one series, labelled \"__default__\" as the package documentation says")
}

// The Prometheus adapter must say how many records landed: the run's
// Stats.Upserted, which upsertotel exports as upsert.records.upserted.
// upsert_records_sent_total counts retried records again, and
// upsert_requests_total does not carry records, so no query gives it.
func TestRecordsUpsertedAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, err := upsertprom.New(reg)
	require.NoError(t, err)
	var n atomic.Int64
	send := func(ctx context.Context, ns string, b []*pinecone.Vector) error {
		if n.Add(1)%3 == 1 {
			return status.Error(codes.Unavailable, "try again")
		}
		return nil
	}
	res, err := upsert.All(context.Background(), records(100, 4), upsert.WithUpsertFunc(send), upsert.WithBatchSize(10),
		upsert.WithBackoff(time.Millisecond, time.Millisecond), upsert.WithObserver(c.Observer()))
	require.NoError(t, err)
	require.Equal(t, 100, res.Upserted)
	require.Positive(t, res.Stats.Retries)

	assert.Equal(t, map[string]float64{upsertprom.DefaultPineconeNamespace: 100}, seriesOf(t, reg, "upsert_records_upserted_total"),
		"records upserted, as Stats.Upserted (records sent: %v)", seriesOf(t, reg, "upsert_records_sent_total"))
}

// The failures counter is labelled with the namespace each record was
// routed to (upsert.Failure.Namespace), as the other metrics are: a run
// whose records fail in two namespaces makes one series per namespace,
// whatever the transport names the default one.
func TestFailuresAreLabelledWithTheirNamespace(t *testing.T) {
	refuse := func(context.Context, string, []*pinecone.Vector) error {
		return status.Error(codes.InvalidArgument, "refused")
	}
	tests := []struct {
		name string
		nsOf func(*pinecone.Vector) string
		want map[string]float64
	}{
		{"routed", func(v *pinecone.Vector) string { return "tenant-" + v.Id[len(v.Id)-1:] },
			map[string]float64{"tenant-0": 1, "tenant-1": 1, "tenant-2": 1, "tenant-3": 1, "tenant-4": 1,
				"tenant-5": 1, "tenant-6": 1, "tenant-7": 1, "tenant-8": 1, "tenant-9": 1}},
		{"default namespace", func(*pinecone.Vector) string { return "__default__" }, map[string]float64{"__default__": 10}},
		{"default namespace, named \"\"", func(*pinecone.Vector) string { return "" }, map[string]float64{"__default__": 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			c, err := upsertprom.New(reg)
			require.NoError(t, err)
			res, err := upsert.All(context.Background(), records(10, 4), upsert.WithUpsertFunc(refuse),
				upsert.WithNamespaceOf(tt.nsOf), upsert.WithObserver(c.Observer()))
			require.Error(t, err, "every record is refused")
			require.Len(t, res.Failed, 10)
			assert.Equal(t, tt.want, seriesOf(t, reg, "upsert_records_failed_total"))
		})
	}
}

// A nil option does nothing, as the core's options.
func TestANilOptionDoesNothing(t *testing.T) {
	_, err := upsertprom.New(prometheus.NewRegistry(), nil)
	require.NoError(t, err)
}
