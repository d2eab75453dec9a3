package upsertprom_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upsertprom"
)

// Namespaces are user data (one per tenant is Pinecone's multitenancy
// pattern, and WithNamespaceOf routes a run over any number of them): the
// namespace label takes the first DefaultMaxNamespaces, then
// OtherNamespace, so that one run does not make a series per tenant.
func TestTheNamespaceLabelIsBounded(t *testing.T) {
	const tenants = 1500
	reg := prometheus.NewPedanticRegistry()
	c, err := upsertprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	recs := records(tenants, 2)
	send := func(context.Context, string, []*pinecone.Vector) error { return nil }
	res, err := upsert.All(context.Background(), recs, upsert.WithUpsertFunc(send), upsert.WithObserver(c.Observer()),
		upsert.WithNamespaceOf(func(v *pinecone.Vector) string { return fmt.Sprintf("tenant-%s", v.Id) }))
	if err != nil || res.Upserted != tenants {
		t.Fatalf("upserted %d, err %v", res.Upserted, err)
	}
	for _, name := range []string{"upsert_requests_total", "upsert_records_sent_total", "upsert_request_duration_seconds"} {
		if n := testutil.CollectAndCount(c, name); n >= tenants {
			t.Errorf("%s: %d series after one run over %d namespaces: the label's cardinality grows with the user's data", name, n, tenants)
		}
	}
}

func TestWithMaxNamespaces(t *testing.T) {
	send := func(context.Context, string, []*pinecone.Vector) error { return nil }
	tests := []struct {
		name   string
		max    int
		series int // of upsert_records_sent_total after 20 namespaces
	}{
		{"five labelled, the rest as one", 5, 6},
		{"none labelled", 0, 1},
		{"more than seen", 50, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := upsertprom.New(nil, upsertprom.WithMaxNamespaces(tt.max))
			if err != nil {
				t.Fatal(err)
			}
			_, err = upsert.All(context.Background(), records(20, 2), upsert.WithUpsertFunc(send), upsert.WithObserver(c.Observer()),
				upsert.WithNamespaceOf(func(v *pinecone.Vector) string { return "tenant-" + v.Id }))
			if err != nil {
				t.Fatal(err)
			}
			if n := testutil.CollectAndCount(c, "upsert_records_sent_total"); n != tt.series {
				t.Errorf("%d series, want %d", n, tt.series)
			}
		})
	}
	if _, err := upsertprom.New(nil, upsertprom.WithMaxNamespaces(-1)); err == nil {
		t.Error("WithMaxNamespaces(-1) accepted")
	}
}
