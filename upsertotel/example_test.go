package upsertotel_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upsertotel"
	"github.com/upsertlib/upsert/upserttest"
)

// The trace of a run whose first request is rate-limited (the batch is
// retried after a backoff) and whose retry times out (the batch is split
// in halves, which land), under the service's own span. The spans go to
// an in-memory exporter here; a service sets its TracerProvider up once,
// with an OTLP exporter.
func Example() {
	srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		switch r.Seq {
		case 1:
			return upserttest.Fault{Code: codes.ResourceExhausted}
		case 2:
			return upserttest.Fault{Delay: 300 * time.Millisecond} // outlasts the request timeout
		}
		return upserttest.Fault{}
	}))
	defer srv.Close()
	pc, err := upsert.NewClient(pinecone.NewClientParams{ApiKey: "example"})
	if err != nil {
		log.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"}, upsert.PushbackDialOption())
	if err != nil {
		log.Fatal(err)
	}
	defer idx.Close()

	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	tel, err := upsertotel.New(upsertotel.WithTracerProvider(tp)) // server.address: the index's host
	if err != nil {
		panic(err)
	}

	ctx, span := tp.Tracer("backfill").Start(context.Background(), "backfill")
	vectors := make([]*pinecone.Vector, 8)
	for i := range vectors {
		vectors[i] = &pinecone.Vector{Id: fmt.Sprint("doc-", i), Values: &[]float32{1, float32(i)}}
	}
	_, err = upsert.All(ctx, vectors, upsert.WithIndex(idx), upsert.WithObserver(tel.Observer()),
		upsert.WithBatchSize(8), upsert.WithConcurrency(1),
		upsert.WithRequestTimeout(100*time.Millisecond), upsert.WithBackoff(time.Millisecond, time.Millisecond))
	span.End()
	fmt.Println("error:", err)
	printTree(exporter.GetSpans())
	// Output:
	// error: <nil>
	// backfill
	//   upsert.All records=8 upserted=8 requests=4 retries=1 splits=1
	//     event upsert.retry attempt=1 records=8 error.type=rate-limited rpc.response.status_code=RESOURCE_EXHAUSTED
	//     event upsert.split attempt=2 records=8 error.type=timeout rpc.response.status_code=DEADLINE_EXCEEDED
	//     upsert docs attempt=1 records=8 error.type=rate-limited rpc.response.status_code=RESOURCE_EXHAUSTED
	//     upsert docs attempt=2 records=8 error.type=timeout rpc.response.status_code=DEADLINE_EXCEEDED
	//     upsert docs attempt=3 records=4
	//     upsert docs attempt=3 records=4
}

// printTree prints spans as a tree, children in the order they started,
// with a few of their attributes.
func printTree(spans tracetest.SpanStubs) {
	slices.SortFunc(spans, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	show := []attribute.Key{
		"upsert.run.records", "upsert.run.upserted", "upsert.run.requests", "upsert.run.retries", "upsert.run.splits",
		"upsert.attempt", "upsert.request.records", "error.type", "rpc.response.status_code",
	}
	label := func(name string, kvs []attribute.KeyValue) string {
		a := attrs(kvs)
		var b strings.Builder
		b.WriteString(name)
		for _, k := range show {
			if v, ok := a[k]; ok {
				short := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(string(k), "upsert.run."), "upsert.request."), "upsert.")
				fmt.Fprintf(&b, " %s=%s", short, v.String())
			}
		}
		return b.String()
	}
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		for _, s := range spans {
			if s.Parent.SpanID().String() != parent {
				continue
			}
			indent := strings.Repeat("  ", depth)
			fmt.Println(indent + label(s.Name, s.Attributes))
			for _, e := range s.Events {
				fmt.Println(indent + "  " + label("event "+e.Name, e.Attributes))
			}
			walk(s.SpanContext.SpanID().String(), depth+1)
		}
	}
	walk("0000000000000000", 0)
}
