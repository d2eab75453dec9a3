package upsertprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upsertprom"
)

// labelNames returns the label names of every series of metric name in
// reg.
func labelNames(t *testing.T, reg prometheus.Gatherer, name string) map[string]bool {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				out[lp.GetName()] = true
			}
		}
	}
	return out
}

// Kubernetes service discovery gives every target a label "namespace"
// (the pod's), which a scrape with honor_labels: false turns the metric's
// own into "exported_namespace": WithNamespaceLabel names the label that
// carries the Pinecone namespace, on every metric.
func TestWithNamespaceLabel(t *testing.T) {
	metrics := []string{"requests_total", "request_duration_seconds", "records_upserted_total",
		"records_sent_total", "retries_total", "records_failed_total", "retry_wait_seconds_total"}
	tests := []struct {
		name   string
		opts   []upsertprom.Option
		prefix string
		label  string
	}{
		{"default", nil, "upsert_", "namespace"},
		{"the default named", []upsertprom.Option{upsertprom.WithNamespaceLabel(upsertprom.DefaultNamespaceLabel)}, "upsert_", "namespace"},
		{"renamed", []upsertprom.Option{upsertprom.WithNamespaceLabel("pinecone_namespace")}, "upsert_", "pinecone_namespace"},
		{"renamed, another prefix", []upsertprom.Option{upsertprom.WithNamespaceLabel("pc_ns"), upsertprom.WithNamespace("ingest")}, "ingest_", "pc_ns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			c, err := upsertprom.New(reg, tt.opts...)
			require.NoError(t, err)
			o := c.Observer()
			rateLimited := &upsert.Error{Class: upsert.ClassRateLimited, GRPCCode: codes.ResourceExhausted}
			o.RequestDone(upsert.RequestEvent{Namespace: "docs", Records: 2, Latency: time.Millisecond})
			o.RequestDone(upsert.RequestEvent{Namespace: "docs", Records: 2, Latency: time.Millisecond, Err: rateLimited})
			o.Retry(upsert.RetryEvent{Namespace: "docs", Records: 2, Wait: time.Millisecond, Err: rateLimited})
			o.Failure(upsert.Failure{ID: "x", Namespace: "docs", Class: upsert.ClassInvalid})
			for _, name := range metrics {
				name = tt.prefix + name
				labels := labelNames(t, reg, name)
				require.NotEmpty(t, labels, "%s has no series", name)
				assert.True(t, labels[tt.label], "%s has no label %q: %v", name, tt.label, labels)
				if tt.label != "namespace" {
					assert.False(t, labels["namespace"], "%s still has a label \"namespace\", which Kubernetes' target label clashes with", name)
				}
			}
		})
	}
}

func TestWithNamespaceLabelRejectsWhatPrometheusWouldNot(t *testing.T) {
	for _, name := range []string{"", "1ns", "pinecone-namespace", "pinecone.namespace", "ns ", "__ns", "__name__",
		"class", "code", "kind", "le", "espa\u00f1a"} {
		t.Run(name, func(t *testing.T) {
			_, err := upsertprom.New(nil, upsertprom.WithNamespaceLabel(name))
			assert.Error(t, err)
		})
	}
	for _, name := range []string{"ns", "_ns", "pinecone_namespace", "NS2", "tenant"} {
		t.Run(name, func(t *testing.T) {
			_, err := upsertprom.New(nil, upsertprom.WithNamespaceLabel(name))
			assert.NoError(t, err)
		})
	}
}

// failedByClass returns the value of each series of
// upsert_records_failed_total whose namespace label is ns, by class.
func failedByClass(t *testing.T, reg prometheus.Gatherer, ns string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "upsert_records_failed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["namespace"] == ns {
				out[labels["class"]] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// zeroFailures is upsert_records_failed_total of a namespace that nothing
// failed in: every class, at zero.
func zeroFailures() map[string]float64 {
	out := map[string]float64{}
	for _, c := range upsert.Classes() {
		out[c.String()] = 0
	}
	return out
}

// increase(upsert_records_failed_total[10m]) > 0 sees a failure only if the
// series existed before it: a namespace's counters start at zero, for every
// class, at its first event, whichever it is.
func TestANamespacesCountersStartAtZero(t *testing.T) {
	invalid := &upsert.Error{Class: upsert.ClassInvalid, StatusCode: 400}
	server := &upsert.Error{Class: upsert.ClassServer, GRPCCode: codes.Unavailable}
	tests := []struct {
		name   string
		first  func(upsert.Observer)
		failed map[string]float64 // of namespace "docs", by class
	}{
		{"a request that landed", func(o upsert.Observer) {
			o.RequestDone(upsert.RequestEvent{Namespace: "docs", Records: 3, Latency: time.Millisecond})
		}, zeroFailures()},
		{"a request that failed", func(o upsert.Observer) {
			o.RequestDone(upsert.RequestEvent{Namespace: "docs", Records: 3, Latency: time.Millisecond, Err: server})
		}, zeroFailures()},
		{"a retry", func(o upsert.Observer) {
			o.Retry(upsert.RetryEvent{Namespace: "docs", Records: 3, Wait: time.Millisecond, Err: server})
		}, zeroFailures()},
		{"a record refused before sending", func(o upsert.Observer) {
			o.Failure(upsert.Failure{ID: "x", Namespace: "docs", Class: upsert.ClassInvalid, Err: invalid})
		}, func() map[string]float64 { m := zeroFailures(); m["invalid"] = 1; return m }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			c, err := upsertprom.New(reg)
			require.NoError(t, err)
			tt.first(c.Observer())
			assert.Equal(t, tt.failed, failedByClass(t, reg, "docs"))
			assert.Equal(t, 2*len(upsert.Classes()), countOf(t, reg, "upsert_retries_total", "docs"),
				"upsert_retries_total: every class, both kinds")
			for _, name := range []string{"upsert_records_sent_total", "upsert_records_upserted_total", "upsert_retry_wait_seconds_total"} {
				assert.Equal(t, 1, countOf(t, reg, name, "docs"), name)
			}
			_, ok := valueOf(t, reg, "upsert_requests_total", map[string]string{"namespace": "docs", "class": "ok", "code": "OK"})
			assert.True(t, ok, "upsert_requests_total{class=\"ok\"} exists")
		})
	}
}

// The series made at zero keep within the cap on labelled namespaces: the
// first WithMaxNamespaces, then OtherNamespace once.
func TestZeroSeriesKeepWithinTheCap(t *testing.T) {
	tests := []struct {
		name   string
		max    int
		labels []string
	}{
		{"two labelled, the rest as one", 2, []string{"t0", "t1", upsertprom.OtherNamespace}},
		{"none labelled", 0, []string{upsertprom.OtherNamespace}},
		{"all labelled", 10, []string{"t0", "t1", "t2", "t3", "t4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			c, err := upsertprom.New(reg, upsertprom.WithMaxNamespaces(tt.max))
			require.NoError(t, err)
			o := c.Observer()
			for _, ns := range []string{"t0", "t1", "t2", "t3", "t4"} {
				o.RequestDone(upsert.RequestEvent{Namespace: ns, Records: 1, Latency: time.Millisecond})
			}
			want := map[string]float64{}
			for _, l := range tt.labels {
				assert.Equal(t, zeroFailures(), failedByClass(t, reg, l), l)
				want[l] = 0
			}
			assert.Equal(t, want, seriesOf(t, reg, "upsert_records_failed_total"), "no series beyond the cap")
		})
	}
}

// A run that nothing failed in still has its namespace's failure series,
// at zero, so that the first failure of a later run shows as an increase.
func TestAFailureAfterARunWithoutIsAnIncrease(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c, err := upsertprom.New(reg)
	require.NoError(t, err)
	ok := func(context.Context, string, []*pinecone.Vector) error { return nil }
	_, err = upsert.All(context.Background(), records(10, 4), upsert.WithUpsertFunc(ok), upsert.WithObserver(c.Observer()))
	require.NoError(t, err)
	assert.Equal(t, zeroFailures(), failedByClass(t, reg, upsertprom.DefaultPineconeNamespace))
}

// countOf returns how many series of name have the namespace label ns.
func countOf(t *testing.T, reg prometheus.Gatherer, name, ns string) int {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "namespace" && lp.GetValue() == ns {
					n++
				}
			}
		}
	}
	return n
}

// valueOf returns the value of the counter series of name with exactly
// labels, and whether there is one.
func valueOf(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// A record whose namespace is not valid UTF-8 is refused before sending,
// and its Failure carries that namespace. Prometheus takes only UTF-8
// label values (WithLabelValues panics on others, and the panic would
// reach the caller of All): the record is counted under its namespace
// with U+FFFD for the invalid bytes, and the run goes on.
func TestANamespaceThatIsNotUTF8IsLabelledWithReplacementCharacters(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c, err := upsertprom.New(reg)
	require.NoError(t, err)
	var res upsert.Result
	require.NotPanics(t, func() {
		res, err = upsert.All(context.Background(), records(3, 4),
			upsert.WithUpsertFunc(func(context.Context, string, []*pinecone.Vector) error { return nil }),
			upsert.WithNamespaceOf(func(v *pinecone.Vector) string {
				if v.Id == "v1" {
					return "tenant-\xff" // not UTF-8: refused before sending
				}
				return "tenant"
			}),
			upsert.WithObserver(c.Observer()))
	})
	require.ErrorIs(t, err, upsert.ErrInvalid)
	require.Equal(t, 2, res.Upserted, "the other records land")
	require.Equal(t, 1, res.Stats.Failed)
	assert.Equal(t, 1.0, failedByClass(t, reg, "tenant-\uFFFD")["invalid"], "the refused record is counted under its namespace")
}
