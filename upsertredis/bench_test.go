package upsertredis

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/upsertlib/upsert/internal/share"
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
