package upsertredis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert/internal/redistest"
	"github.com/upsertlib/upsert/internal/share"
)

// laneN is the lane of namespace nsNN on lane's host.
func laneN(i int) share.Lane { return share.Lane{Host: lane.Host, Namespace: fmt.Sprintf("ns%02d", i)} }

// leaveAndWait leaves, and waits for the member's loop (and its forget of
// the lane's channel) to end: a Leave while Redis is presumed down
// returns first.
func leaveAndWait(m *member) {
	_ = m.Leave(context.Background())
	<-m.life.done
}

// TestALeaveRedisAnsweredEndsThePresumptionThatItIsDown: a leave's round
// trip is an exchange like any other: once Redis answers one (here a
// leave made in the background while Redis was presumed down, after it
// came back), the next Join tries Redis and shares, rather than go alone
// for the rest of the second.
func TestALeaveRedisAnsweredEndsThePresumptionThatItIsDown(t *testing.T) {
	proxy, rdb := proxied(t, 0)
	s := newStore(t, rdb, WithTimeout(100*time.Millisecond)) // presumed down 1.1 s after a failure
	other := newStore(t, client(t, nil))                     // another process, on a healthy path to Redis
	a, b := join(t, s), join(t, other)
	require.Equal(t, 2, exchange(t, b).Writers)

	proxy.Hold()
	require.Error(t, a.sync(context.Background())) // the Store now presumes Redis down
	failed := time.Now()
	proxy.Release()
	require.ErrorIs(t, a.Leave(context.Background()), share.ErrUnavailable)
	require.Eventually(t, func() bool { return exchange(t, b).Writers == 1 }, time.Second, 5*time.Millisecond,
		"a's leave, in the background, was answered")

	m := s.Join(context.Background(), laneN(1)).(*member)
	t.Cleanup(func() { _ = m.Leave(context.Background()) })
	require.Less(t, time.Since(failed), 800*time.Millisecond, "the test ran too slowly to tell")
	assert.True(t, m.View().Shared, "Redis answered the Store's leave moments ago, and the next Join went alone without trying it")
}

// TestAnErrorRedisAnswersForOneLaneDoesNotSendTheStoresOtherJoinsAlone:
// an error reply (here WRONGTYPE: a lane's key of another type) fails the
// lane's exchange, but Redis answered it: the Store does not presume
// Redis down, and a Join of another lane tries Redis and shares.
func TestAnErrorRedisAnswersForOneLaneDoesNotSendTheStoresOtherJoinsAlone(t *testing.T) {
	rdb := client(t, nil)
	s := newStore(t, rdb, WithTimeout(100*time.Millisecond))
	broken := laneN(7)
	state, _ := laneKeys(s.opts.prefix, broken.Host, broken.Namespace)
	require.NoError(t, rdb.Set(context.Background(), state, "not a hash", time.Minute).Err())
	x := s.Join(context.Background(), broken).(*member)
	t.Cleanup(func() { _ = x.Leave(context.Background()) })
	require.False(t, x.View().Shared, "the broken lane's exchange failed")
	require.Equal(t, int64(1), s.Stats().Failures, "an error reply is a failure")

	m := s.Join(context.Background(), laneN(1)).(*member)
	t.Cleanup(func() { _ = m.Leave(context.Background()) })
	assert.True(t, m.View().Shared, "Redis answered the broken lane's exchange (with an error), yet the Store presumed it down and the next Join went alone")
}

// TestADeadShardOfARingDoesNotSendJoinsOnLiveShardsAlone: the shards of a
// Ring fail one by one, so a Store through one presumes nothing from a
// failure: a lane on a live shard joins and shares while a lane on a dead
// one fails.
func TestADeadShardOfARingDoesNotSendJoinsOnLiveShardsAlone(t *testing.T) {
	dead, live := redistest.Run(t), redistest.Run(t)
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:     map[string]string{"dead": dead.Socket(), "live": live.Socket()},
		NewClient: func(o *redis.Options) *redis.Client { o.Network = "unix"; return redis.NewClient(o) },
	})
	t.Cleanup(func() { _ = ring.Close() })
	s := newStore(t, ring, WithTimeout(100*time.Millisecond))
	liveClient := client(t, live)
	ctx := context.Background()
	// Find a lane of each shard by where its keys land.
	var onDead, onLive *share.Lane
	for i := 0; i < 64 && (onDead == nil || onLive == nil); i++ {
		l := laneN(i)
		state, _ := laneKeys(s.opts.prefix, l.Host, l.Namespace)
		probe := strings.TrimSuffix(state, ":state") + ":probe"
		require.NoError(t, ring.Set(ctx, probe, 1, time.Minute).Err())
		n, err := liveClient.Exists(ctx, probe).Result()
		require.NoError(t, err)
		if n == 1 && onLive == nil {
			onLive = &l
		} else if n == 0 && onDead == nil {
			onDead = &l
		}
	}
	require.NotNil(t, onDead)
	require.NotNil(t, onLive)
	x := s.Join(ctx, *onDead).(*member)
	t.Cleanup(func() { leaveAndWait(x) })
	require.True(t, x.View().Shared)

	dead.Kill()
	require.Error(t, x.sync(ctx))
	m := s.Join(ctx, *onLive).(*member)
	t.Cleanup(func() { leaveAndWait(m) })
	assert.True(t, m.View().Shared, "the lane's shard answers, but the Join went alone because another shard is down")
}

// TestACallerGivingUpIsNoRedisFailure: an exchange whose caller gave up
// (its ctx canceled) fails, but says nothing of Redis: the writer does
// not go alone, and neither a failure nor a fallback is counted or
// logged.
func TestACallerGivingUpIsNoRedisFailure(t *testing.T) {
	var logs logBuffer
	s := newStore(t, client(t, nil), WithLogger(logs.logger()))
	a := join(t, s)
	require.True(t, a.View().Shared)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := a.Cut(canceled, share.Cut{Sent: time.Now(), Rate: 800, Level: 1000})
	require.ErrorIs(t, err, share.ErrUnavailable)
	require.Error(t, a.Leave(canceled))
	time.Sleep(50 * time.Millisecond) // a log line would come from a goroutine
	st := s.Stats()
	assert.True(t, a.View().Shared, "the writer went alone because its caller gave up")
	assert.Zero(t, st.Failures, "Failures counts round trips Redis did not answer")
	assert.Zero(t, st.Fallbacks, "Fallbacks counts writers going alone because Redis failed")
	assert.Zero(t, logs.lines("Redis failed"), "logged that Redis failed")
	assert.Nil(t, s.down(), "presumed Redis down")
}

// TestLeavesThatFailInTheBackgroundCountAsFailures: while Redis is
// presumed down, each Leave still makes its round trip, in the
// background, and each that fails counts as a failure.
func TestLeavesThatFailInTheBackgroundCountAsFailures(t *testing.T) {
	srv := redistest.Run(t)
	s := newStore(t, client(t, srv), WithTimeout(100*time.Millisecond))
	first := join(t, s)
	require.True(t, first.View().Shared)
	srv.Kill()
	require.Error(t, first.sync(context.Background()))
	ms := []*member{first}
	for i := 1; i < 5; i++ {
		ms = append(ms, s.Join(context.Background(), laneN(i)).(*member))
	}
	before := s.Stats()
	for _, m := range ms {
		require.ErrorIs(t, m.Leave(context.Background()), share.ErrUnavailable)
	}
	time.Sleep(500 * time.Millisecond) // each leave fails within the 100 ms timeout
	after := s.Stats()
	assert.Equal(t, before.Failures+int64(len(ms)), after.Failures,
		"%d leaves made a round trip that Redis did not answer", len(ms))
}

// TestALeaveRedisAnsweredCountsAsAnExchange: a leave's round trip counts
// in Stats as any other.
func TestALeaveRedisAnsweredCountsAsAnExchange(t *testing.T) {
	s := newStore(t, client(t, nil))
	a := s.Join(context.Background(), lane).(*member)
	require.True(t, a.View().Shared)
	before := s.Stats()
	require.NoError(t, a.Leave(context.Background()))
	after := s.Stats()
	assert.Equal(t, before.Exchanges+1, after.Exchanges)
	assert.Equal(t, before.Failures, after.Failures)
}
