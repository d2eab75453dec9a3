package upsertredis

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert/internal/redistest"
	"github.com/upsertlib/upsert/internal/share"
)

// childEnv, set to a test's name, makes the test binary run that test as
// a child process of the test that started it (see inChild).
const childEnv = "UPSERTREDIS_TEST_CHILD"

// inChild reports whether t runs in a child process of the test binary.
// Outside one, it runs t's test in one, fails t if that child failed or
// crashed, and returns false: a test whose failure may crash the process
// (a panic on a goroutine of its own) returns unless in a child, which
// reports that crash as its failure rather than end the whole run.
func inChild(t *testing.T) bool {
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the test's process failed or crashed:\n%s", lastLines(string(out), 12))
	return false
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// unixRing returns a Ring of srvs over their sockets, its shards checked
// every 100 ms, closed at the end of t.
func unixRing(t *testing.T, srvs ...*redistest.Server) *redis.Ring {
	addrs := make(map[string]string, len(srvs))
	for i, srv := range srvs {
		addrs[fmt.Sprint(i)] = srv.Socket()
	}
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:              addrs,
		NewClient:          func(o *redis.Options) *redis.Client { o.Network = "unix"; return redis.NewClient(o) },
		HeartbeatFrequency: 100 * time.Millisecond,
	})
	t.Cleanup(func() { _ = ring.Close() })
	return ring
}

// allShardsDown waits until ring has marked all its shards down (three
// failed heartbeats).
func allShardsDown(t *testing.T, ring *redis.Ring) {
	t.Helper()
	require.Eventually(t, func() bool {
		return strings.Contains(fmt.Sprint(ring.Ping(context.Background()).Err()), "all ring shards are down")
	}, 5*time.Second, 10*time.Millisecond)
}

// TestARingWhoseShardsAreAllDownDoesNotCrashTheProcess: once go-redis
// has marked every shard of a Ring down, its Subscribe panics rather than
// fail; the lanes that join then (alone) start their subscription all the
// same, and the process must not crash. Run in a child process, whose
// crash the test reports.
func TestARingWhoseShardsAreAllDownDoesNotCrashTheProcess(t *testing.T) {
	if !inChild(t) {
		return
	}
	srv := redistest.Run(t)
	ring := unixRing(t, srv)
	s := New(ring, WithPrefix(t.Name()+":"))
	first := s.Join(context.Background(), laneN(0)).(*member)
	require.True(t, first.View().Shared)

	srv.Kill() // down for the rest of the run
	allShardsDown(t, ring)
	var ms []*member
	for i := 1; i <= 3; i++ { // a run reaching new namespaces
		m := s.Join(context.Background(), laneN(i)).(*member)
		assert.False(t, m.View().Shared)
		ms = append(ms, m)
	}
	time.Sleep(300 * time.Millisecond) // the hubs' goroutines subscribe
	for _, m := range append(ms, first) {
		leaveAndWait(m)
	}
}

// TestAHubOfAClosedRingDoesNotCrashTheProcess: a caller may close its
// Ring as soon as its lanes left, before a hub's goroutine subscribed
// (subscribing does not wait for Redis); a closed Ring's Subscribe panics
// rather than fail, and the process must not crash. Run in a child
// process, whose crash the test reports.
func TestAHubOfAClosedRingDoesNotCrashTheProcess(t *testing.T) {
	if !inChild(t) {
		return
	}
	ring := unixRing(t, redistest.Run(t))
	s := New(ring, WithPrefix(t.Name()+":"))
	require.NoError(t, ring.Close())
	poke := make(chan struct{}, 1)
	h := listen(s, "{lane}:cuts", poke) // its goroutine subscribes on the closed Ring
	time.Sleep(100 * time.Millisecond)
	h.forget("{lane}:cuts", poke)
	time.Sleep(100 * time.Millisecond)
}

// TestALaneOfARingSubscribesOnceItsShardIsBack: a lane that joined while
// all the Ring's shards were down (its subscription could not be opened)
// subscribes to its channel of cuts within about a second of the shard
// answering again. Run in a child process, since a Subscribe that panics
// could crash it.
func TestALaneOfARingSubscribesOnceItsShardIsBack(t *testing.T) {
	if !inChild(t) {
		return
	}
	srv := redistest.Run(t)
	ring := unixRing(t, srv)
	s := New(ring, WithPrefix(t.Name()+":"))
	srv.Kill()
	allShardsDown(t, ring)
	m := s.Join(context.Background(), laneN(0)).(*member)
	t.Cleanup(func() { leaveAndWait(m) })
	require.False(t, m.View().Shared)
	time.Sleep(100 * time.Millisecond) // the hub's first try fails

	require.NoError(t, srv.Restart())
	back := time.Now()
	rdb := client(t, srv)
	require.Eventually(t, func() bool {
		got, err := rdb.PubSubNumSub(context.Background(), m.channel()).Result()
		return err == nil && got[m.channel()] == 1
	}, 3*time.Second, 5*time.Millisecond, "the lane never subscribed")
	t.Logf("subscribed %v after the shard came back", time.Since(back).Round(10*time.Millisecond))
}

// TestARingLaneResubscribedWhileItsShardWasDownHearsCutsOnceItIsBack:
// a lane that joined while all the Ring's shards were down has its
// subscription retried every second (2be518d); the retry opens it on
// whichever shard answers first, which need not be the lane's own. Once
// the lane's shard is back, its scripts (and the cut script's PUBLISH)
// run there, while the hub stays subscribed on the stand-in shard for
// good unless it follows the shard its channel is routed to. A cut
// announced on the lane's shard must reach the other writer at once, as it
// does for a lane that joined with its shard up.
func TestARingLaneResubscribedWhileItsShardWasDownHearsCutsOnceItIsBack(t *testing.T) {
	home, standIn := redistest.Run(t), redistest.Run(t)
	ring := unixRing(t, home, standIn)
	s := newStore(t, ring, WithTimeout(300*time.Millisecond))
	homeClient, standInClient := client(t, home), client(t, standIn)
	ctx := context.Background()

	// A lane whose keys (and channel, under the same hash tag) land on home.
	onHome := func(l share.Lane) bool {
		state, _ := laneKeys(s.opts.prefix, l.Host, l.Namespace)
		probe := strings.TrimSuffix(state, ":state") + ":probe"
		if ring.Set(ctx, probe, 1, time.Minute).Err() != nil {
			return false
		}
		n, err := homeClient.Exists(ctx, probe).Result()
		return err == nil && n == 1
	}
	var l share.Lane
	found := false
	for i := 0; i < 64 && !found; i++ {
		l = laneN(i)
		found = onHome(l)
	}
	require.True(t, found)

	home.Kill()
	standIn.Kill()
	allShardsDown(t, ring)
	a := s.Join(ctx, l).(*member)
	b := s.Join(ctx, l).(*member)
	t.Cleanup(func() { leaveAndWait(a); leaveAndWait(b) })
	require.False(t, a.View().Shared)
	time.Sleep(150 * time.Millisecond) // the hub's first Subscribe fails

	require.NoError(t, standIn.Restart())
	require.Eventually(t, func() bool {
		got, err := standInClient.PubSubNumSub(ctx, a.channel()).Result()
		return err == nil && got[a.channel()] == 1
	}, 5*time.Second, 10*time.Millisecond, "the hub resubscribed on the only shard up")

	require.NoError(t, home.Restart())
	require.Eventually(t, func() bool { return onHome(l) }, 5*time.Second, 20*time.Millisecond,
		"the Ring routes the lane to its shard again")
	require.Eventually(t, func() bool {
		return a.sync(ctx) == nil && b.sync(ctx) == nil && b.View().Shared && a.View().Shared
	}, 3*time.Second, 20*time.Millisecond)
	time.Sleep(1200 * time.Millisecond) // the members' pending retries fire; their loops then heed pokes
	require.NoError(t, b.sync(ctx))

	cutHeard(t, a, b, "a cut of the lane, announced on its shard, never reached the lane's other writer: "+
		"the hub stayed subscribed on the shard that answered first")
}
