package upsertotel_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upsertotel"
)

// discard is an exporter that drops the spans: what is left is the cost
// of making them.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkOverhead measures upsert.All on a no-op sink, as BenchmarkAll
// of the upsert package does (100k records of 128 dimensions), without
// the adapter, with it on no-op providers, and with it on the SDK's
// (every span sampled and batched to an exporter that drops them, metrics
// aggregated for a reader).
//
//	go test -run '^$' -bench BenchmarkOverhead -benchmem -count 3 ./upsertotel
func BenchmarkOverhead(b *testing.B) {
	recs := make([]*pinecone.Vector, 100_000)
	for i := range recs {
		vals := make([]float32, 128)
		vals[i%128] = 1
		recs[i] = &pinecone.Vector{Id: "r" + strconv.Itoa(i), Values: &vals}
	}
	noopSink := func(context.Context, string, []*pinecone.Vector) error { return nil }
	sdk := func(b *testing.B) []upsert.Option {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() {
			_ = tp.Shutdown(context.Background())
			_ = mp.Shutdown(context.Background())
		})
		tel, err := upsertotel.New(upsertotel.WithTracerProvider(tp), upsertotel.WithMeterProvider(mp))
		if err != nil {
			b.Fatal(err)
		}
		return []upsert.Option{upsert.WithObserver(tel.Observer())}
	}
	noop := func(b *testing.B) []upsert.Option {
		tel, err := upsertotel.New(upsertotel.WithTracerProvider(tracenoop.NewTracerProvider()),
			upsertotel.WithMeterProvider(metricnoop.NewMeterProvider()))
		if err != nil {
			b.Fatal(err)
		}
		return []upsert.Option{upsert.WithObserver(tel.Observer())}
	}
	for _, bc := range []struct {
		name string
		opts func(*testing.B) []upsert.Option
	}{
		{"without", func(*testing.B) []upsert.Option { return nil }},
		{"noop-providers", noop},
		{"sdk", sdk},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opts := append(bc.opts(b), upsert.WithUpsertFunc(noopSink))
			requests := 0
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				res, err := upsert.All(context.Background(), recs, opts...)
				if err != nil || res.Upserted != len(recs) {
					b.Fatalf("upserted %d: %v", res.Upserted, err)
				}
				requests += res.Stats.Requests
			}
			elapsed := time.Since(start)
			b.ReportMetric(float64(b.N*len(recs))/elapsed.Seconds(), "records/s")
			b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
			b.ReportMetric(0, "ns/op")
		})
	}
}
