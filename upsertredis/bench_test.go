package upsertredis

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/redis/go-redis/v9"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/internal/share"
	"github.com/upsertlib/upsert/upserttest"
)

// roundTrips counts the commands a client sends.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

// report reports the commands sent since before, per operation of b.
func (r *roundTrips) report(b *testing.B, before int64) {
	b.ReportMetric(float64(r.n.Load()-before)/float64(b.N), "roundtrips/op")
}

// benchLane returns a member of a lane with 16 writers (the reply of an
// exchange names 15 demands), through a client whose commands are counted.
func benchLane(b *testing.B) (*member, *roundTrips) {
	rdb := shared.Client(nil)
	b.Cleanup(func() { rdb.Close() })
	count := new(roundTrips)
	rdb.AddHook(count)
	s := New(rdb, WithPrefix(b.Name()+":"), WithInterval(manual))
	var m *member
	for range 16 {
		m = s.Join(context.Background(), lane).(*member)
		b.Cleanup(func() { _ = m.Leave(context.Background()) })
	}
	return m, count
}

// BenchmarkHotPath is what a writer does per request: count the records
// the index accepted, read the view and take its part of the rate.
func BenchmarkHotPath(b *testing.B) {
	m, count := benchLane(b)
	before := count.n.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		m.Accepted(100)
		_ = m.View().Allocation(20000)
	}
	count.report(b, before)
}

// BenchmarkExchange is a writer's periodic exchange (every interval).
func BenchmarkExchange(b *testing.B) {
	m, count := benchLane(b)
	before := count.n.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		m.Accepted(100)
		if err := m.sync(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	count.report(b, before)
}

// BenchmarkCut is a writer's proposal for a 429 episode, which the others'
// episode already covers: what most proposals of a crowd are.
func BenchmarkCut(b *testing.B) {
	m, count := benchLane(b)
	before := count.n.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := m.Cut(context.Background(), share.Cut{Seen: 0, Sent: time.Now(), MinGap: time.Hour, Rate: 1000}); err != nil {
			b.Fatal(err)
		}
	}
	count.report(b, before)
}

// BenchmarkRunShared runs upsert.All of 20,000 records into an upserttest
// index that limits nothing (loopback gRPC, no latency), with and without
// a Store: records per second, and the round trips to Redis per request
// the index answered (the periodic exchanges, the join and the leave: the
// hot path makes none).
//
//	go test -run '^$' -bench BenchmarkRunShared -count 3 ./upsertredis
func BenchmarkRunShared(b *testing.B) {
	srv := upserttest.NewServer()
	b.Cleanup(srv.Close)
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: e2eNamespace})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { idx.Close() })
	recs := vectors(0, 20_000)
	for _, shared := range []bool{false, true} {
		b.Run(map[bool]string{false: "without", true: "with"}[shared], func(b *testing.B) {
			rdb := shared0(b)
			count := new(roundTrips)
			rdb.AddHook(count)
			opts := []upsert.Option{upsert.WithIndex(idx), upsert.WithLimiter(upsert.NewLimiter())}
			if shared {
				opts = append(opts, New(rdb, WithPrefix(b.Name()+":")).Option())
			}
			requests := 0
			b.ResetTimer()
			for range b.N {
				res, err := upsert.All(context.Background(), recs, opts...)
				if err != nil {
					b.Fatal(err)
				}
				requests += res.Stats.Requests
			}
			b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(count.n.Load())/float64(requests), "roundtrips/request")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// shared0 is a client of the shared server, closed at the end of b.
func shared0(b *testing.B) *redis.Client {
	rdb := shared.Client(nil)
	b.Cleanup(func() { rdb.Close() })
	return rdb
}
