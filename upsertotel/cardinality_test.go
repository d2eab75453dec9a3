package upsertotel_test

import (
	"context"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upsertotel"
)

// runTenants runs All over n records, each in its own namespace
// "tenant-ID", observed by tel.
func runTenants(t *testing.T, tel *telemetry, n int) {
	t.Helper()
	_, err := upsert.All(context.Background(), records(n, 4), upsert.WithUpsertFunc(acceptAll),
		upsert.WithNamespaceOf(func(v *pinecone.Vector) string { return "tenant-" + v.Id }),
		upsert.WithObserver(tel.Observer()))
	require.NoError(t, err)
}

// Namespaces are the user's data: one per tenant is Pinecone's pattern
// for multitenancy. The SDK caps each instrument at 2000 attribute sets by
// default and folds the rest into one otel.metric.overflow point, their
// namespace lost: the metrics name the first DefaultMaxNamespaces
// namespaces in db.namespace, as upsertprom labels them, and the rest
// OtherNamespace, so that every record is counted under a namespace or
// under OtherNamespace. Spans are not bounded.
func TestTheNamespaceAttributeOfMetricsIsBounded(t *testing.T) {
	const tenants = 2100
	tel := newTelemetry(t)
	runTenants(t, tel, tenants)

	byNamespace := sums(t, tel.metrics(t)["upsert.records.upserted"], "db.namespace")
	assert.Zero(t, byNamespace[""], "no point without db.namespace (otel.metric.overflow has none)")
	assert.Len(t, byNamespace, upsertotel.DefaultMaxNamespaces+1, "the first namespaces, and OtherNamespace")
	assert.Equal(t, tenants-upsertotel.DefaultMaxNamespaces, byNamespace[upsertotel.OtherNamespace])
	for ns, n := range byNamespace {
		if ns != upsertotel.OtherNamespace {
			assert.Equal(t, 1, n, "%s: each of the first namespaces seen has its own", ns)
		}
	}
	requests := map[string]bool{}
	for _, sp := range tel.spans.GetSpans() {
		if v, ok := attrs(sp.Attributes)["db.namespace"]; ok && sp.Name != "upsert.All" {
			requests[v.AsString()] = true
		}
	}
	assert.Len(t, requests, tenants, "each request's span names its namespace")
}

func TestWithMaxNamespaces(t *testing.T) {
	tests := []struct {
		name       string
		max        int
		namespaces int // db.namespace values of upsert.records.upserted after 20 namespaces
	}{
		{"five named, the rest as one", 5, 6},
		{"none named", 0, 1},
		{"more than seen", 50, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel := newTelemetry(t, upsertotel.WithMaxNamespaces(tt.max))
			runTenants(t, tel, 20)
			m := tel.metrics(t)
			assert.Len(t, sums(t, m["upsert.records.upserted"], "db.namespace"), tt.namespaces)
			hist, ok := m["db.client.operation.duration"].(metricdata.Histogram[float64])
			require.True(t, ok)
			assert.Len(t, hist.DataPoints, tt.namespaces, "the duration's points: one per db.namespace")
		})
	}
	_, err := upsertotel.New(upsertotel.WithMaxNamespaces(-1))
	assert.ErrorContains(t, err, "WithMaxNamespaces")
}

// The default namespace has no db.namespace, whatever the cap, and takes
// no place in it: under WithMaxNamespaces(1), the first of two other
// namespaces seen (which depends on the order of the requests) is named,
// the second is OtherNamespace.
func TestTheDefaultNamespaceTakesNoPlaceInTheCap(t *testing.T) {
	tel := newTelemetry(t, upsertotel.WithMaxNamespaces(1))
	_, err := upsert.All(context.Background(), records(3, 4), upsert.WithUpsertFunc(acceptAll),
		upsert.WithNamespaceOf(func(v *pinecone.Vector) string {
			return map[string]string{"v0": "", "v1": "a", "v2": "b"}[v.Id]
		}),
		upsert.WithObserver(tel.Observer()))
	require.NoError(t, err)
	byNamespace := sums(t, tel.metrics(t)["upsert.records.upserted"], "db.namespace")
	assert.Len(t, byNamespace, 3, "the default, the first of a and b, and OtherNamespace: %v", byNamespace)
	assert.Equal(t, 1, byNamespace[""], "the default namespace, without db.namespace")
	assert.Equal(t, 1, byNamespace[upsertotel.OtherNamespace], "the second of a and b")
}
