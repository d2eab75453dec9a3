package upsert

import (
	"context"
	"fmt"
	"hash/maphash"
	"iter"
	"math"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"

	"github.com/upsertlib/upsert/internal/share"
)

// noopIndex accepts every batch at once: what is left is the library's own
// cost.
func noopIndex(context.Context, string, []*pinecone.Vector) error { return nil }

// BenchmarkAll measures the pipeline on a no-op sink: records per second
// and allocations per record, for slices of 100k records of 128
// dimensions.
//
//	go test -run '^$' -bench BenchmarkAll -benchmem .
func BenchmarkAll(b *testing.B) {
	recs := vectors(100_000, 128)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		res, err := All(context.Background(), recs, WithUpsertFunc(noopIndex))
		if err != nil || res.Upserted != len(recs) {
			b.Fatalf("upserted %d: %v", res.Upserted, err)
		}
	}
	perRecord := time.Since(start) / time.Duration(b.N*len(recs))
	b.ReportMetric(float64(time.Second)/float64(perRecord), "records/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkIDPass measures the pass over the ids that All makes before it
// sends anything (hash each id, then find those that repeat), per million
// records: the delay All's doc gives.
//
//	go test -run '^$' -bench BenchmarkIDPass -benchtime 10x -count 3 .
func BenchmarkIDPass(b *testing.B) {
	recs := vectors(1_000_000, 2)
	seed := maphash.MakeSeed()
	b.ResetTimer()
	for range b.N {
		hashes := make([]uint64, len(recs)) // as All does, once per call
		for i, v := range recs {
			hashes[i] = maphash.String(seed, v.Id)
		}
		repeats(hashes, func(i, j int) bool { return recs[i].Id == recs[j].Id })
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/million")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkAllAllocs reports allocations per record (run with -benchmem and
// divide allocs/op by 100000, or read the allocs/record metric).
func BenchmarkAllAllocs(b *testing.B) {
	recs := vectors(100_000, 128)
	b.ReportAllocs()
	b.ResetTimer()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range b.N {
		if _, err := All(context.Background(), recs, WithUpsertFunc(noopIndex)); err != nil {
			b.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N*len(recs)), "allocs/record")
}

// generated yields n records of dim dimensions, made one at a time, so
// that the input itself takes no memory.
func generated(n, dim int) iter.Seq[*pinecone.Vector] {
	return func(yield func(*pinecone.Vector) bool) {
		for i := range n {
			vals := make([]float32, dim)
			vals[i%dim] = 1
			if !yield(&pinecone.Vector{Id: "r" + strconv.Itoa(i), Values: &vals}) {
				return
			}
		}
	}
}

// BenchmarkStream streams N generated records (10M by default; set
// UPSERT_BENCH_RECORDS) into a no-op sink and reports throughput and the
// peak heap, which must not grow with N.
//
//	go test -run '^$' -bench BenchmarkStream -benchtime 1x -timeout 30m .
func BenchmarkStream(b *testing.B) {
	n := 10_000_000
	if s, err := strconv.Atoi(getenv("UPSERT_BENCH_RECORDS")); err == nil && s > 0 {
		n = s
	}
	for range b.N {
		peak := samplePeakHeap()
		start := time.Now()
		res, err := Stream(context.Background(), generated(n, 128), WithUpsertFunc(noopIndex))
		elapsed := time.Since(start)
		heap := peak()
		if err != nil || res.Upserted != n {
			b.Fatalf("upserted %d of %d: %v", res.Upserted, n, err)
		}
		b.ReportMetric(float64(n)/elapsed.Seconds(), "records/s")
		b.ReportMetric(heap/(1<<20), "peak-heap-MiB")
		b.ReportMetric(0, "ns/op")
		fmt.Printf("streamed %d records in %v: %.0f records/s, peak heap %.1f MiB\n",
			n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), heap/(1<<20))
	}
}

// BenchmarkStreamManyNamespaces streams records each into a namespace of
// its own (UPSERT_BENCH_RECORDS of them, 300,000 by default) and reports
// the peak heap: the Limiter's lanes must not grow with the namespaces.
func BenchmarkStreamManyNamespaces(b *testing.B) {
	n := 300_000
	if s, err := strconv.Atoi(getenv("UPSERT_BENCH_RECORDS")); err == nil && s > 0 {
		n = s
	}
	for range b.N {
		peak := samplePeakHeap()
		res, err := Stream(context.Background(), generated(n, 128), WithUpsertFunc(noopIndex),
			WithNamespaceOf(func(v *pinecone.Vector) string { return "ns-" + v.Id }))
		heap := peak()
		if err != nil || res.Upserted != n {
			b.Fatalf("upserted %d of %d: %v", res.Upserted, n, err)
		}
		b.ReportMetric(heap/(1<<20), "peak-heap-MiB")
	}
}

// samplePeakHeap samples the heap in use every 50 ms until the function
// it returns is called, which returns the most seen, in bytes.
func samplePeakHeap() func() float64 {
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 {
		close(stop)
		<-sampled
		return float64(peak.Load())
	}
}

func getenv(k string) string { return os.Getenv(k) }

// BenchmarkAllCanceled measures how long All takes to return once its
// context is canceled, over two million records: the failures of the
// records never sent are built in one piece.
//
//	go test -run '^$' -bench BenchmarkAllCanceled -benchtime 3x -count 3 .
func BenchmarkAllCanceled(b *testing.B) {
	recs := vectors(2_000_000, 8)
	var total, worst time.Duration
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		var canceledAt atomic.Int64
		send := func(ctx context.Context, _ string, _ []*pinecone.Vector) error {
			if canceledAt.CompareAndSwap(0, time.Now().UnixNano()) {
				cancel()
			}
			<-ctx.Done()
			return ctx.Err()
		}
		res, _ := All(ctx, recs, WithUpsertFunc(send), WithConcurrency(1))
		if len(res.Failed) != len(recs) {
			b.Fatalf("%d failed of %d", len(res.Failed), len(recs))
		}
		d := time.Since(time.Unix(0, canceledAt.Load()))
		total, worst = total+d, max(worst, d)
	}
	b.ReportMetric((total / time.Duration(b.N)).Seconds(), "s-to-return")
	b.ReportMetric(worst.Seconds(), "max-s-to-return")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkAllShared compares a run on a no-op sink alone with one whose
// lane is shared through an in-memory Member (no I/O): what the shared
// lane's machinery costs per record, Redis aside (upsertredis's
// BenchmarkRunShared measures that).
//
//	go test -run '^$' -bench BenchmarkAllShared -count 3 .
func BenchmarkAllShared(b *testing.B) {
	recs := vectors(100_000, 128)
	for _, shared := range []bool{false, true} {
		b.Run(map[bool]string{false: "alone", true: "shared"}[shared], func(b *testing.B) {
			opts := []Option{WithUpsertFunc(noopIndex)}
			if shared {
				m := newFakeMember(share.View{Shared: true, Rate: math.Inf(1)}.WithDemands(math.Inf(1), nil))
				opts = append(opts, func(c *config) { c.store, c.shareHost = fakeStore{m}, "bench" })
			}
			b.ResetTimer()
			for range b.N {
				res, err := All(context.Background(), recs, opts...)
				if err != nil || res.Upserted != len(recs) {
					b.Fatalf("upserted %d: %v", res.Upserted, err)
				}
			}
			b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
