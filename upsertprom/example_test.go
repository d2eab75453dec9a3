package upsertprom_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upsertprom"
	"github.com/upsertlib/upsert/upserttest"
)

// Register the metrics once, then pass the Collector's observer to every
// run. A real program registers with prometheus.DefaultRegisterer and serves
// promhttp.Handler(); here the index is a local test server and the metrics
// are read back directly.
func Example() {
	srv := upserttest.NewServer()
	defer srv.Close()
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test"})
	if err != nil {
		log.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"})
	if err != nil {
		log.Fatal(err)
	}
	defer idx.Close()

	reg := prometheus.NewRegistry()
	metrics, err := upsertprom.New(reg)
	if err != nil {
		log.Fatal(err)
	}

	records := make([]*pinecone.Vector, 250)
	for i := range records {
		records[i] = &pinecone.Vector{Id: fmt.Sprintf("doc-%d", i), Values: &[]float32{float32(i), 1, 2}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := upsert.All(ctx, records, upsert.WithIndex(idx), upsert.WithObserver(metrics.Observer()))
	if err != nil {
		log.Fatal(err)
	}

	fmt.Println("upserted:", res.Upserted)
	fmt.Println("series of upsert_requests_total:", testutil.CollectAndCount(metrics, "upsert_requests_total"))
	// The failures counter has a series per class from the namespace's
	// first event on, at zero here, so that the first failure is an increase.
	fmt.Println("series of upsert_records_failed_total:", testutil.CollectAndCount(metrics, "upsert_records_failed_total"))
	// Output:
	// upserted: 250
	// series of upsert_requests_total: 1
	// series of upsert_records_failed_total: 8
}
