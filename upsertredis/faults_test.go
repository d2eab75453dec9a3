package upsertredis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/internal/redistest"
	"github.com/upsertlib/upsert/internal/share"
)

// TestRedisKilledAndRestarted kills Redis under two writers that exchange
// every few milliseconds: they go on alone from what they had learned
// (logged once each), a cut fails at once without a round trip, and when
// Redis comes back, empty, they rejoin and rebuild the lane's state from
// their views.
func TestRedisKilledAndRestarted(t *testing.T) {
	t.Parallel() // a server of its own
	srv := redistest.Run(t)
	var logs logBuffer
	s := newStore(t, client(t, srv), WithInterval(2*time.Millisecond), WithTimeout(DefaultTimeout), WithLogger(logs.logger()))
	a, b := join(t, s), join(t, s)
	_, applied, err := a.Cut(context.Background(), share.Cut{Sent: time.Now(), Rate: 800, Level: 1000})
	require.NoError(t, err)
	require.True(t, applied)
	require.Eventually(t, func() bool { return b.View().Epoch == 1 && a.View().Writers == 2 }, 5*time.Second, time.Millisecond)
	changed := a.Changed()

	srv.Kill()
	require.Eventually(t, func() bool { return !a.View().Shared && !b.View().Shared }, 5*time.Second, time.Millisecond)
	assert.Equal(t, uint64(1), a.View().Epoch, "a writer alone keeps what it learned")
	assert.Equal(t, 800.0, a.View().Rate)
	assert.Equal(t, 2, a.View().Writers, "and its part of the rate")
	select {
	case <-changed:
	default:
		t.Error("going alone did not fire Changed")
	}
	failures := s.Stats().Failures
	_, _, err = a.Cut(context.Background(), share.Cut{Seen: 1, Sent: time.Now(), Rate: 500})
	require.ErrorIs(t, err, share.ErrUnavailable, "a cut while alone is the writer's own")
	_, err = a.Breaker(context.Background(), true)
	require.ErrorIs(t, err, share.ErrUnavailable)
	assert.LessOrEqual(t, s.Stats().Failures-failures, int64(2), "no round trip for a cut or a breaker while alone (the syncs may fail meanwhile)")

	// Alone, each writer tries Redis again once a second, whatever its interval.
	require.Eventually(t, func() bool { return s.Stats().Failures >= failures+4 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, int64(2), s.Stats().Fallbacks, "one fallback per writer, however many exchanges fail")
	assert.Equal(t, 2, logs.lines("Redis failed"), "logged once per writer")

	require.NoError(t, srv.Restart())
	require.Eventually(t, func() bool { return a.View().Shared && b.View().Shared }, 5*time.Second, time.Millisecond)
	assert.Equal(t, int64(2), s.Stats().Rejoins)
	assert.Equal(t, 2, logs.lines("Redis answers again"))
	// The first writer back rebuilt the state; the other may rebuild it
	// again if its view was one exchange newer.
	assert.GreaterOrEqual(t, s.Stats().Resets, int64(1))
	require.Eventually(t, func() bool { return a.View().Writers == 2 && b.View().Writers == 2 }, 5*time.Second, time.Millisecond)
	for _, m := range []*member{a, b} {
		v := m.View()
		assert.Equal(t, uint64(1), v.Epoch, "the lane carries on from the writers' views")
		assert.Equal(t, 800.0, v.Rate)
		assert.Equal(t, 1000.0, v.Level)
	}
	_, applied, err = b.Cut(context.Background(), share.Cut{Seen: 1, Sent: time.Now(), Rate: 600})
	require.NoError(t, err)
	assert.True(t, applied, "episodes go on from the epoch before the restart")
	assert.Equal(t, uint64(2), b.View().Epoch)
	rdb := client(t, srv)
	require.Eventually(t, func() bool {
		n, err := rdb.PubSubNumSub(context.Background(), a.channel()).Result()
		return err == nil && n[a.channel()] == 1
	}, 5*time.Second, time.Millisecond, "the Store's subscription is back on the lane's channel")
}

// TestRedisFlushed flushes Redis between two exchanges: the next writer to
// exchange rebuilds the lane's state from its view, and every writer
// registers again.
func TestRedisFlushed(t *testing.T) {
	rdb := client(t, nil) // the tests do not run in parallel: the flush spares theirs
	var logs logBuffer
	s := newStore(t, rdb, WithLogger(logs.logger()))
	a, b := join(t, s), join(t, s)
	subscribed(t, rdb, a, 1) // one Store: one subscription
	a.Accepted(100)
	exchange(t, a)
	_, _, err := a.Cut(context.Background(), share.Cut{Sent: time.Now(), Rate: 800, Level: 1000, Recovery: time.Second})
	require.NoError(t, err)
	_, err = a.Breaker(context.Background(), true)
	require.NoError(t, err)
	// The cut's announcement pokes both members to exchange: let them,
	// so that none does after the flush.
	require.Eventually(t, func() bool { return s.Stats().Exchanges >= 7 }, time.Second, time.Millisecond)
	before := exchange(t, b)

	require.NoError(t, rdb.FlushAll(context.Background()).Err())
	v := exchange(t, b)
	assert.True(t, v.Shared)
	assert.Equal(t, before.Epoch, v.Epoch)
	assert.Equal(t, before.Rate, v.Rate)
	assert.Equal(t, before.Level, v.Level)
	assert.Equal(t, before.Recovery, v.Recovery)
	assert.WithinDuration(t, before.CutAt, v.CutAt, 5*time.Millisecond)
	assert.WithinDuration(t, before.OpenSince, v.OpenSince, 5*time.Millisecond)
	assert.True(t, v.Answered)
	assert.Equal(t, 1, v.Writers, "a has not exchanged since")
	assert.Equal(t, 2, exchange(t, a).Writers)
	assert.Equal(t, 2, exchange(t, b).Writers)
	assert.Equal(t, int64(1), s.Stats().Resets)
	assert.Zero(t, s.Stats().Fallbacks, "a flush is no failure")
	assert.Equal(t, 1, logs.lines("state was missing"))
	assert.Len(t, keys(t, rdb, t.Name()), 2)
	assert.Zero(t, v.Accepted, "records are counted from the rebuild")
	assert.WithinDuration(t, time.Now(), v.AcceptedSince, time.Second)

	// A writer that knew nothing rebuilds the state first: the next
	// writer that knew more restores it.
	require.NoError(t, rdb.FlushAll(context.Background()).Err())
	c := join(t, s)
	assert.Equal(t, uint64(0), c.View().Epoch)
	assert.Equal(t, before.Epoch, exchange(t, a).Epoch, "the lane does not forget its episodes")
	assert.Equal(t, before.Rate, exchange(t, c).Rate)
	assert.Equal(t, int64(2), s.Stats().Resets)
}

// TestSlowRedis puts 5 ms of latency each way between the writers and
// Redis: well within the default timeout, they share as before. A Redis
// that does not answer at all costs a writer's cut one timeout, then it
// goes on alone, and comes back when Redis answers.
func TestSlowRedis(t *testing.T) {
	proxy, rdb := proxied(t, 5*time.Millisecond)
	s := newStore(t, rdb, WithTimeout(DefaultTimeout))
	a, b := join(t, s), join(t, s)
	require.True(t, a.View().Shared && b.View().Shared)
	_, applied, err := a.Cut(context.Background(), share.Cut{Sent: time.Now(), Rate: 800})
	require.NoError(t, err)
	assert.True(t, applied)
	assert.Equal(t, uint64(1), exchange(t, b).Epoch)
	assert.Zero(t, s.Stats().Failures)

	proxy.Hold()
	_, _, err = b.Cut(context.Background(), share.Cut{Seen: 1, Sent: time.Now(), Rate: 600})
	require.ErrorIs(t, err, share.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded, "bounded by the store's timeout")
	assert.False(t, b.View().Shared)
	assert.Equal(t, uint64(1), b.View().Epoch)
	proxy.Release()
	require.Eventually(t, func() bool { return b.sync(context.Background()) == nil }, 5*time.Second, time.Millisecond)
	assert.True(t, b.View().Shared)
	assert.Equal(t, int64(1), s.Stats().Rejoins)
}

// TestTimeoutBelowLatency: a Redis slower than the timeout is a Redis that
// is down, for the writers.
func TestTimeoutBelowLatency(t *testing.T) {
	_, rdb := proxied(t, 5*time.Millisecond)
	s := newStore(t, rdb, WithTimeout(2*time.Millisecond))
	a := join(t, s)
	assert.False(t, a.View().Shared)
	err := a.sync(context.Background())
	assert.True(t, errors.Is(err, share.ErrUnavailable) && errors.Is(err, context.DeadlineExceeded), "%v", err)
	assert.Equal(t, 1000.0, a.View().Allocation(1000), "alone from the start: the writer's own decisions")
}

// proxied returns a proxy to the shared server that adds latency each way,
// and a client through it, both closed at the end of t.
func proxied(t *testing.T, latency time.Duration) (*redistest.Proxy, *redis.Client) {
	proxy, err := redistest.NewProxy(shared.Socket(), latency)
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return proxy, rdb
}

// A Redis that hangs (the proxy holds every byte: a stopped server, a
// black-holed host) must cost a lane's join one store timeout, and its
// leave one more: Join subscribes to the lane's channel with
// context.Background(), which waits for the client's own dial/handshake
// timeouts (5 s with go-redis's defaults), and Leave waits for the
// subscription's reconnect under the PubSub's mutex as long.
func TestHungRedisBoundsJoinAndLeave(t *testing.T) {
	proxy, rdb := proxied(t, 0)
	s := newStore(t, rdb, WithTimeout(50*time.Millisecond))
	proxy.Hold()
	t.Cleanup(proxy.Release)
	start := time.Now()
	m := s.Join(context.Background(), lane).(*member)
	joined := time.Since(start)
	assert.False(t, m.View().Shared)
	assert.Less(t, joined, time.Second, "Join is bounded by the store's timeout (50 ms)")
	time.Sleep(50 * time.Millisecond)
	start = time.Now()
	_ = m.Leave(context.Background())
	assert.Less(t, time.Since(start), time.Second, "Leave is bounded by the store's timeout (50 ms)")
}

// The same at the user's level: a call of 50 records into a healthy index,
// sharing through a Redis that hangs, goes on alone after one timeout (it
// once took 15 s).
func TestHungRedisDoesNotHoldUpARun(t *testing.T) {
	proxy, rdb := proxied(t, 0)
	idx := e2eIndex(t, 100000)
	conn := indexConn(t, idx.Host())
	s := New(rdb, WithPrefix(t.Name()+":"), WithInterval(20*time.Millisecond), WithTimeout(100*time.Millisecond))
	proxy.Hold()
	t.Cleanup(proxy.Release)
	start := time.Now()
	res, err := upsert.All(context.Background(), vectors(0, 50), upsert.WithIndex(conn),
		upsert.WithLimiter(upsert.NewLimiter()), s.Option())
	require.NoError(t, err)
	assert.Equal(t, 50, res.Upserted)
	assert.Less(t, time.Since(start), 2*time.Second, "Redis hung: the run goes on alone after one 100 ms timeout")
}

// indexConn is an SDK connection to host, closed at the end of t.
func indexConn(t *testing.T, host string) *pinecone.IndexConnection {
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test"})
	require.NoError(t, err)
	conn, err := pc.Index(pinecone.NewIndexConnParams{Host: host, Namespace: e2eNamespace})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestRecentIsNeverNegativeAfterAnotherWriterRebuiltTheLane: when Redis
// lost the lane's state and another writer rebuilt it, the count of
// records accepted starts again from 0; a member whose own exchange did
// not rebuild it still measures View.Recent across the restart, never
// below 0 (the core reads it as what the index accepts now).
func TestRecentIsNeverNegativeAfterAnotherWriterRebuiltTheLane(t *testing.T) {
	rdb := client(t, nil)
	s := newStore(t, rdb)
	c := join(t, s)
	c.Accepted(1000)
	exchange(t, c)
	a := join(t, s) // a's first sample: the lane's count of 1000
	b := join(t, s) // b exchanged last: its view is the newest
	subscribed(t, rdb, b, 1)

	require.NoError(t, rdb.FlushAll(context.Background()).Err())
	require.True(t, exchange(t, b).Shared) // b rebuilds the lane; the count restarts at 0
	v := exchange(t, a)                    // a's view was older: it does not rebuild
	require.Positive(t, v.RecentSpan)
	assert.GreaterOrEqual(t, v.Recent, int64(0), "View.Recent counts records accepted: it cannot be negative")
}

// TestAWriterAloneTriesRedisAgainWithinASecondWhateverItsInterval: a
// writer that Redis failed (one exchange timed out) tries again within a
// second, as the package doc says, not after a count of intervals (10
// intervals of 300 ms kept it alone past the heartbeat, so the others
// split the lane without it while it still sent its part).
func TestAWriterAloneTriesRedisAgainWithinASecondWhateverItsInterval(t *testing.T) {
	proxy, rdb := proxied(t, 0)
	s := New(rdb, WithPrefix(t.Name()+":"), WithInterval(300*time.Millisecond), WithTimeout(50*time.Millisecond))
	a := s.Join(context.Background(), lane).(*member)
	t.Cleanup(func() { _ = a.Leave(context.Background()) })
	require.True(t, a.View().Shared)

	proxy.Hold() // one exchange times out
	require.Eventually(t, func() bool { return !a.View().Shared }, 2*time.Second, time.Millisecond)
	proxy.Release()
	back := time.Now()
	assert.Eventually(t, func() bool { return a.View().Shared }, 1200*time.Millisecond, time.Millisecond,
		"Redis answered again, and the writer did not rejoin within a second")
	t.Logf("rejoined %v after Redis answered again", time.Since(back).Round(10*time.Millisecond))
}

// TestAWriterBackFromAPartitionDoesNotOverwriteANewerLane: versions count
// from 1 again when the lane's keys are created anew (here after the last
// writer Redis saw left), so a writer back from a partition longer than
// its heartbeat holds a view with a higher version than the new lane's.
// The new lane's cut, dated by Redis's clock, is newer: the returning
// writer's seed does not replace it.
func TestAWriterBackFromAPartitionDoesNotOverwriteANewerLane(t *testing.T) {
	rdb := client(t, nil)
	s := newStore(t, rdb, WithHeartbeat(20*time.Millisecond))
	ctx := context.Background()
	a, b := join(t, s), join(t, s)
	_, applied, err := a.Cut(ctx, share.Cut{Sent: time.Now(), Rate: 800, Level: 1000, Recovery: time.Second})
	require.NoError(t, err)
	require.True(t, applied)
	for range 10 {
		exchange(t, a) // a long-running writer: its view's version is well up
	}

	// a is cut off from Redis (no exchange) past its heartbeat; b, the
	// last writer Redis sees, finishes and drops the lane.
	require.Eventually(t, func() bool { return exchange(t, b).Writers == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, b.Leave(ctx))
	require.Empty(t, keys(t, rdb, t.Name()))

	// A new writer starts the lane afresh and cuts it for the index as it is now.
	c := join(t, s)
	_, applied, err = c.Cut(ctx, share.Cut{Sent: time.Now(), Rate: 300, Level: 400, Recovery: time.Second})
	require.NoError(t, err)
	require.True(t, applied)

	exchange(t, a) // a reaches Redis again
	v := exchange(t, c)
	assert.Equal(t, 300.0, v.Rate, "the lane's current cut was replaced by a writer's view from before the lane was dropped")
	assert.Equal(t, 400.0, v.Level)
}
