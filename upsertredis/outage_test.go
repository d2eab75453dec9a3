package upsertredis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/internal/redistest"
	"github.com/upsertlib/upsert/internal/share"
	"github.com/upsertlib/upsert/upserttest"
)

// namespaceOf routes a record of vectors() to one of n namespaces by the
// number in its id.
func namespaceOf(n int) func(*pinecone.Vector) string {
	return func(v *pinecone.Vector) string {
		var i int
		_, _ = fmt.Sscanf(v.Id, "r%d", &i)
		return fmt.Sprintf("ns%02d", i%n)
	}
}

// outage is a way for Redis to fail a Store that saw it work: fail stops
// answering, and returns the client to reach Redis through.
type outage struct {
	name  string
	start func(t *testing.T) (rdb *redis.Client, fail func())
}

var outages = []outage{
	{"killed", func(t *testing.T) (*redis.Client, func()) {
		srv := redistest.Run(t)
		return client(t, srv), srv.Kill
	}},
	{"hung", func(t *testing.T) (*redis.Client, func()) {
		proxy, rdb := proxied(t, 0)
		t.Cleanup(proxy.Release)
		return rdb, proxy.Hold
	}},
}

// TestRedisDownCostsARunOverManyNamespacesAboutOneTimeout: a backfill
// writes into 40 namespaces of a healthy index while Redis is down (killed,
// or hung) after the Store saw it work. Each namespace's lane joins when
// the run first writes to it, and leaves at the end: the first join waits
// out the store's timeout, and the Store then presumes Redis down, so the
// other joins go alone without a round trip and the leaves do not wait
// (their round trips fail in the background). It took 7.2 s (two
// timeouts a namespace, one after the other) against 25 ms unshared.
func TestRedisDownCostsARunOverManyNamespacesAboutOneTimeout(t *testing.T) {
	for _, o := range outages {
		t.Run(o.name, func(t *testing.T) {
			rdb, fail := o.start(t)
			idx := upserttest.NewServer(upserttest.WithLatency(time.Millisecond, 0))
			t.Cleanup(idx.Close)
			conn := indexConn(t, idx.Host())
			s := New(rdb, WithPrefix(t.Name()+":")) // the default timeout, 100 ms
			res, err := upsert.All(context.Background(), vectors(0, 10), upsert.WithIndex(conn),
				upsert.WithLimiter(upsert.NewLimiter()), s.Option())
			require.NoError(t, err)
			require.Zero(t, res.Stats.SharedFallbacks, "Redis worked")

			fail()
			const nss = 40
			before := s.Stats()
			start := time.Now()
			res, err = upsert.All(context.Background(), vectors(0, 10*nss), upsert.WithIndex(conn),
				upsert.WithLimiter(upsert.NewLimiter()), s.Option(), upsert.WithNamespaceOf(namespaceOf(nss)))
			took := time.Since(start)
			require.NoError(t, err)
			require.Equal(t, 10*nss, res.Upserted)
			t.Logf("%d namespaces with Redis %s: %v", nss, o.name, took)
			assert.Less(t, took, 1500*time.Millisecond, "each namespace waited out the store's timeout in turn")
			assert.Equal(t, nss, res.Stats.SharedFallbacks, "every lane went alone")
			assert.Equal(t, int64(nss), s.Stats().Fallbacks-before.Fallbacks)
			// Each lane's leave fails in the background, within the timeout.
			require.Eventually(t, func() bool { return s.Stats().Failures-before.Failures >= nss+1 }, 2*time.Second, 5*time.Millisecond,
				"the first join and the leaves failed")
			time.Sleep(2 * DefaultTimeout)
			failures := s.Stats().Failures - before.Failures
			t.Logf("%d failed round trips", failures)
			// The first join's, the leaves', perhaps the first lane's next try.
			assert.LessOrEqual(t, failures, int64(nss+2), "the joins after the first made a round trip")
		})
	}
}

// TestAWritersAddsForNewNamespacesDoNotEachWaitATimeoutWhileRedisIsDown:
// a Writer's Add that first writes to a namespace joins its lane, under
// the producers' turn. With Redis killed, one Add waits out the store's
// timeout, not one Add per new namespace, also past the second the Store
// presumes Redis down after a failure: the lanes that went alone renew it
// with their own tries.
func TestAWritersAddsForNewNamespacesDoNotEachWaitATimeoutWhileRedisIsDown(t *testing.T) {
	srv := redistest.Run(t)
	idx := upserttest.NewServer(upserttest.WithLatency(time.Millisecond, 0))
	t.Cleanup(idx.Close)
	s := New(client(t, srv), WithPrefix(t.Name()+":"))
	const nss = 40
	w, err := upsert.NewWriter(context.Background(), upsert.WithIndex(indexConn(t, idx.Host())),
		upsert.WithLimiter(upsert.NewLimiter()), s.Option(), upsert.WithNamespaceOf(namespaceOf(nss+1)))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, w.Add(ctx, vectors(0, 1)[0])) // ns00 shares
	require.NoError(t, w.Flush(ctx))
	require.Zero(t, s.Stats().Fallbacks, "Redis worked")

	srv.Kill()
	var slow []string
	for i := 1; i <= nss; i++ { // 30 ms apart: past the second Redis is presumed down
		start := time.Now()
		require.NoError(t, w.Add(ctx, vectors(i, 1)[0]))
		if took := time.Since(start); took >= DefaultTimeout/2 {
			slow = append(slow, fmt.Sprintf("ns%02d: %v", i, took))
		}
		time.Sleep(30 * time.Millisecond)
	}
	start := time.Now()
	res, err := w.Close(ctx)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), time.Second, "Close waited for the lanes' leaves, one after the other")
	assert.Equal(t, nss+1, res.Upserted)
	t.Logf("Adds that waited for Redis: %v", slow)
	assert.LessOrEqual(t, len(slow), 1, "Adds that waited for Redis: %v", slow)
	assert.Equal(t, int64(nss+1), s.Stats().Fallbacks, "every lane went alone")
}

// TestLanesThatStartedAloneShareAgainWhenRedisIsBack: lanes that join
// while Redis is presumed down start alone at once, without a round trip;
// when Redis is back (restarted, empty), they rejoin within their once a
// second try, and see each other; a lane that joins then shares at once.
func TestLanesThatStartedAloneShareAgainWhenRedisIsBack(t *testing.T) {
	srv := redistest.Run(t)
	s := New(client(t, srv), WithPrefix(t.Name()+":"))
	first := join(t, s)
	require.True(t, first.View().Shared)

	srv.Kill()
	require.Eventually(t, func() bool { return !first.View().Shared }, 2*time.Second, time.Millisecond)
	before := s.Stats()
	var alone []*member
	for range 10 {
		start := time.Now()
		m := join(t, s)
		assert.Less(t, time.Since(start), DefaultTimeout/2, "a join while Redis is presumed down waited for it")
		assert.False(t, m.View().Shared)
		alone = append(alone, m)
	}
	assert.Equal(t, before.Failures, s.Stats().Failures, "no round trip")
	assert.Equal(t, before.Fallbacks+10, s.Stats().Fallbacks, "each counts its fallback")

	require.NoError(t, srv.Restart())
	back := time.Now()
	all := append(alone, first)
	require.Eventually(t, func() bool {
		for _, m := range all {
			if v := m.View(); !v.Shared || v.Writers != len(all) {
				return false
			}
		}
		return true
	}, 3*time.Second, time.Millisecond, "the lanes did not share again")
	t.Logf("shared again %v after Redis restarted", time.Since(back).Round(10*time.Millisecond))
	assert.Less(t, time.Since(back), 2*time.Second, "a lane alone tries Redis once a second")
	assert.True(t, join(t, s).View().Shared, "a join after Redis answered exchanges at once")
}

// TestALeaveWhileRedisIsPresumedDownStillTakesTheWriterOffTheLane: a
// writer alone (its exchange timed out) that leaves does not wait for
// Redis, and its leave, made in the background, still takes it off the
// lane once Redis answers: the other writers do not hold its part until
// its heartbeat (a minute here) expires.
func TestALeaveWhileRedisIsPresumedDownStillTakesTheWriterOffTheLane(t *testing.T) {
	proxy, rdb := proxied(t, 0)
	s := newStore(t, rdb, WithTimeout(50*time.Millisecond), WithHeartbeat(time.Minute))
	a, b := join(t, s), join(t, s)
	require.Equal(t, 2, exchange(t, a).Writers)

	proxy.Hold()
	require.Error(t, a.sync(context.Background()))
	require.False(t, a.View().Shared)
	proxy.Release()
	start := time.Now()
	err := a.Leave(context.Background())
	assert.Less(t, time.Since(start), 25*time.Millisecond, "Leave waited for Redis")
	assert.ErrorIs(t, err, share.ErrUnavailable)
	assert.Eventually(t, func() bool { return exchange(t, b).Writers == 1 }, 2*time.Second, 5*time.Millisecond,
		"the writer that left is still counted")
}

// TestRedisIsPresumedDownFromAFailureUntilAnAnswerOrForASecondAndATimeout
// states when a Store presumes Redis down.
func TestRedisIsPresumedDownFromAFailureUntilAnAnswerOrForASecondAndATimeout(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	errDown := errors.New("down")
	wrongType := errorReply("WRONGTYPE Operation against a key holding the wrong kind of value")
	one := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialed
	t.Cleanup(func() { _ = one.Close() })
	for _, tc := range []struct {
		name string
		do   func(s *Store)
		down bool
	}{
		{"never failed", func(*Store) {}, false},
		{"failed", func(s *Store) { s.heard(bg, errDown) }, true},
		{"failed, then answered", func(s *Store) { s.heard(bg, errDown); s.heard(bg, nil) }, false},
		{"answered, then failed", func(s *Store) { s.heard(bg, nil); s.heard(bg, errDown) }, true},
		{"failed, then answered with an error", func(s *Store) { s.heard(bg, errDown); s.heard(bg, wrongType) }, false},
		{"answered with an error", func(s *Store) { s.heard(bg, fmt.Errorf("wrapped: %w", wrongType)) }, false},
		{"failed when the caller gave up", func(s *Store) { s.heard(canceled, context.Canceled) }, false},
		{"failed just under a second and a timeout ago", func(s *Store) {
			s.lastFailure.Store(&failure{at: time.Now().Add(-1050 * time.Millisecond), err: errDown})
		}, true},
		{"failed a second and a timeout ago", func(s *Store) {
			s.lastFailure.Store(&failure{at: time.Now().Add(-1100 * time.Millisecond), err: errDown})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(one)
			tc.do(s)
			if f := s.down(); tc.down {
				require.NotNil(t, f)
				assert.Equal(t, errDown, f.err)
			} else {
				assert.Nil(t, f)
			}
		})
	}
	assert.True(t, New(one).heard(bg, errDown), "a failure tells that Redis is down")
	assert.False(t, New(one).heard(canceled, context.Canceled), "a caller giving up tells nothing")
	assert.Equal(t, 1100*time.Millisecond, New(one).opts.downFor(), "by default")
	assert.Equal(t, 60*time.Millisecond, New(one, WithHeartbeat(100*time.Millisecond), WithTimeout(10*time.Millisecond)).opts.downFor(),
		"half the heartbeat when it is shorter, and the timeout")
}

// TestOnlyAStoreThroughOneServerPresumesRedisDown: the shards of a Ring
// and the nodes of a Cluster fail one by one, so a Store through one
// presumes nothing from a failure; a Store through a single node or a
// failover client (both a *redis.Client) does.
func TestOnlyAStoreThroughOneServerPresumesRedisDown(t *testing.T) {
	errDown := errors.New("down")
	for _, tc := range []struct {
		name     string
		rdb      redis.UniversalClient
		presumes bool
	}{
		{"a client", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), true},
		{"a failover client", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}}), true},
		{"a ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), false},
		{"a cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() { _ = tc.rdb.Close() })
			s := New(tc.rdb)
			s.heard(context.Background(), errDown)
			assert.Equal(t, tc.presumes, s.down() != nil)
		})
	}
}

// errorReply is an error reply of Redis, as go-redis gives it.
type errorReply string

func (e errorReply) Error() string { return string(e) }
func (errorReply) RedisError()     {}

// As TestAWriterJoiningAnOldSharedOutageFailsNoRecordUnsent says, "an outage verdict that none of its own failures bore out lately
// fails nothing: its requests wait for the probe, and the index answers".
// Here the joining writer is a service's Limiter kept between calls
// (WithLimiter) whose last call met one server error a moment ago, which
// the index's answers followed (the blip is over: the index answered this
// writer after it, and long after the lane's outage began). Its next call
// joins the lane, whose state still holds another writer's outage of two
// minutes ago: the breaker opens on it (a new membership is no "rejoin",
// so applyView's check that this writer's own answers show the outage is
// over is skipped), the blip "bears it out" (borneOut: within 2×probeMax),
// and every batch but the probe failed unsent with "every request has
// failed ... for over a minute", although the index answered every request.
func TestAKeptLimiterJoiningAnOldSharedOutageAfterABlipFailsNoRecordUnsent(t *testing.T) {
	rdb := client(t, nil)
	idx := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		if r.Seq == 2 {
			return upserttest.Fault{Code: codes.Unavailable} // a blip: the retry lands
		}
		return upserttest.Fault{}
	}))
	t.Cleanup(idx.Close)
	conn := indexConn(t, idx.Host())
	s := newStore(t, rdb)
	ctx := context.Background()
	lim := upsert.NewLimiter() // a service's, kept between calls
	idle := s.Join(ctx, share.Lane{Host: strings.TrimPrefix(idx.Host(), "http://"), Namespace: e2eNamespace}).(*member)
	t.Cleanup(func() { _ = idle.Leave(ctx) })
	idle.Demand(0)

	res, err := upsert.All(ctx, vectors(0, 15), upsert.WithIndex(conn), upsert.WithLimiter(lim), s.Option(),
		upsert.WithBatchSize(5), upsert.WithConcurrency(1))
	require.NoError(t, err)
	require.Equal(t, 15, res.Upserted)
	require.Equal(t, 1, res.Stats.Retries, "one server error, retried and landed")

	// The other writer's outage, two minutes old (it cannot reach the
	// index, or went idle since), as Redis holds it.
	_, err = idle.Breaker(ctx, true)
	require.NoError(t, err)
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, rdb.HSet(ctx, idle.keys[0], "open_since", now.Add(-2*time.Minute).UnixMilli(), "answered", 1).Err())

	res, err = upsert.All(ctx, vectors(100, 50), upsert.WithIndex(conn), upsert.WithLimiter(lim), s.Option())
	assert.NoError(t, err)
	if len(res.Failed) > 0 {
		t.Errorf("%d of 50 records failed unsent on another writer's outage, the index answering this writer; first: %v",
			len(res.Failed), res.Failed[0].Err)
	}
	assert.Equal(t, 50, res.Upserted)
	assert.Equal(t, 65, idx.Count(e2eNamespace))
}

// downIndex is an index that answers every request with a 503 while down
// is set.
func downIndex(t *testing.T) (*upserttest.Server, *atomic.Bool) {
	var down atomic.Bool
	srv := upserttest.NewServer(upserttest.WithLatency(2*time.Millisecond, 20*time.Microsecond),
		upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
			if down.Load() {
				return upserttest.Fault{Code: codes.Unavailable}
			}
			return upserttest.Fault{}
		}))
	t.Cleanup(srv.Close)
	return srv, &down
}

// TestAnOutageOfAWriterThatDiedDoesNotFailANewWritersShortOutage: a
// writer process dies (SIGKILL) in an outage of 503s, after its breaker
// opened and recorded the lane's outage (open_since), moved here to two
// minutes ago. The index comes back, seen by no live writer, while a
// writer process waiting for input (a quiet member) keeps the lane's keys
// alive. The outage was kept until a breaker closed: then the index had a
// new, 3-s outage as a writer started a run of 200 records into it, whose
// breaker opened on the lane's old outage (breaker.heard: openedAt =
// open_since), and once its first probe failed, gave up counting from two
// minutes ago: every record failed unsent within 300 ms with "every
// request has failed ... for over a minute". The lane's outage now ends
// once no writer that reported it is live (outageLua).
func TestAnOutageOfAWriterThatDiedDoesNotFailANewWritersShortOutage(t *testing.T) {
	rdb := client(t, nil)
	ix, down := downIndex(t)
	ctx := context.Background()

	quiet := New(client(t, nil), WithPrefix(t.Name()+":"), WithInterval(5*time.Millisecond), WithHeartbeat(50*time.Millisecond))
	idle := quiet.Join(ctx, share.Lane{Host: strings.TrimPrefix(ix.Host(), "http://"), Namespace: e2eNamespace}).(*member)
	t.Cleanup(func() { _ = idle.Leave(ctx) })
	idle.Demand(0)

	cmd := startHelper(t, "writing", helperEnv+"_HOST="+ix.Host())
	down.Store(true)
	require.Eventually(t, func() bool { return !exchange(t, idle).OpenSince.IsZero() }, 10*time.Second, time.Millisecond,
		"the writer's breaker opened and recorded the lane's outage")
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, rdb.HSet(ctx, idle.keys[0], "open_since", now.Add(-2*time.Minute).UnixMilli()).Err())
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	down.Store(false) // the index is back; no live writer writes to see it
	require.Eventually(t, func() bool { return exchange(t, idle).Writers == 1 }, 5*time.Second, time.Millisecond, "the dead writer dropped")
	assert.True(t, exchange(t, idle).OpenSince.IsZero(), "no writer that saw the outage is left: the lane holds none")

	// A new outage, 3 s long, as a writer starts.
	down.Store(true)
	time.AfterFunc(3*time.Second, func() { down.Store(false) })
	runCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s := New(rdb, WithPrefix(t.Name()+":"), WithInterval(20*time.Millisecond), WithTimeout(time.Second))
	start := time.Now()
	res, err := upsert.All(runCtx, vectors(0, 200), upsert.WithIndex(indexConn(t, ix.Host())),
		upsert.WithLimiter(upsert.NewLimiter()), s.Option())
	t.Logf("%v: upserted %d, failed %d, errors %v", time.Since(start), res.Upserted, len(res.Failed), res.Stats.ErrorsByClass)
	assert.NoError(t, err)
	assert.Equal(t, 200, res.Upserted, "a 3-s outage fails no record")
	if len(res.Failed) > 0 {
		t.Errorf("%d of 200 records failed in a 3-s outage; first: %v", len(res.Failed), res.Failed[0].Err)
	}
}

// Rule 25i's first gap, end to end: a writer in an outage two minutes old
// goes idle (a Writer waiting for input: no request, so no probe and no
// failure) and stays live. A writer that starts later meets a blip (its
// first request fails once, the index answers every later one). The
// lane's outage was kept, with its start, for as long as the idle writer
// lived: the new writer's breaker opened on it, its first request was the
// probe, and at the blip it gave up counting from two minutes ago, every
// other record failing unsent. The idle writer's mark now lapses (its
// report, not renewed by failures, is older than the lapse), and the
// outage ends under it.
func TestAnIdleWritersOldOutageDoesNotFailANewWritersBlip(t *testing.T) {
	rdb := client(t, nil)
	ctx := context.Background()
	ix := upserttest.NewServer(upserttest.WithLatency(2*time.Millisecond, 20*time.Microsecond),
		upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
			if r.Seq == 1 {
				return upserttest.Fault{Code: codes.Unavailable}
			}
			return upserttest.Fault{}
		}))
	t.Cleanup(ix.Close)
	host := strings.TrimPrefix(ix.Host(), "http://")

	other := New(client(t, nil), WithPrefix(t.Name()+":"), WithInterval(5*time.Millisecond), WithHeartbeat(50*time.Millisecond),
		withLapse(200*time.Millisecond))
	idle := other.Join(ctx, share.Lane{Host: host, Namespace: e2eNamespace}).(*member)
	t.Cleanup(func() { _ = idle.Leave(ctx) })
	idle.Demand(0)
	oldOutage(t, idle)
	require.Eventually(t, func() bool {
		v, err := rdb.HGet(ctx, idle.keys[0], "open_since").Result()
		return err == nil && v == "0"
	}, 3*time.Second, time.Millisecond, "the idle writer's outage outlived the lapse of its report")
	require.Equal(t, 1, idle.View().Writers, "the idle writer is live")

	runCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s := New(rdb, WithPrefix(t.Name()+":"), WithInterval(20*time.Millisecond), WithTimeout(time.Second))
	res, err := upsert.All(runCtx, vectors(0, 200), upsert.WithIndex(indexConn(t, ix.Host())),
		upsert.WithLimiter(upsert.NewLimiter()), s.Option())
	t.Logf("upserted %d, failed %d, errors %v", res.Upserted, len(res.Failed), res.Stats.ErrorsByClass)
	assert.NoError(t, err)
	if len(res.Failed) > 0 {
		t.Errorf("%d of 200 records failed unsent at a blip, on an idle writer's outage of two minutes ago; first: %v",
			len(res.Failed), res.Failed[0].Err)
	}
	assert.Equal(t, 200, res.Upserted)
}

// oldOutage marks m in the lane's outage (Breaker(true)) and moves
// the outage's start two minutes back, as Redis holds it two minutes into
// an outage m saw.
func oldOutage(t *testing.T, m *member) {
	t.Helper()
	ctx := context.Background()
	_, err := m.Breaker(ctx, true)
	require.NoError(t, err)
	now, err := m.store.rdb.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, m.store.rdb.HSet(ctx, m.keys[0], "open_since", now.Add(-2*time.Minute).UnixMilli(), "answered", 1).Err())
}

// A writer starts while the lane holds another writer's outage, two
// minutes old: its breaker opens on it (breaker.heard: openedAt =
// open_since) and its first request is the probe. While the probe is in
// flight, the only writer in the outage dies, and the lane's outage ends
// (settle: no writer in it is left; the index may have been back for
// minutes): a writer that joins now counts a new outage from its own
// breaker (rule 25i). The probe then fails (one slow 503, the index
// answers every later request): this writer, which never failed in the
// lane's outage, gave up at once counting from the dead writer's start,
// and 200 of 200 records failed unsent in 1.8 s, though the lane held no
// outage. A breaker that only heard the lane's outage now closes when the
// lane holds it no more (breaker.unheard).
func TestAWriterThatHeardAnOutageWhoseWritersAllDiedDoesNotCountFromItsStart(t *testing.T) {
	rdb := client(t, nil)
	ctx := context.Background()
	probing := make(chan struct{}, 1)
	ix := upserttest.NewServer(upserttest.WithLatency(2*time.Millisecond, 20*time.Microsecond),
		upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
			if r.Seq == 1 {
				probing <- struct{}{}
				return upserttest.Fault{Code: codes.Unavailable, Delay: 1500 * time.Millisecond}
			}
			return upserttest.Fault{}
		}))
	t.Cleanup(ix.Close)
	host := strings.TrimPrefix(ix.Host(), "http://")

	// Another process's writer, in an outage two minutes old.
	other := New(client(t, nil), WithPrefix(t.Name()+":"), WithInterval(5*time.Millisecond), WithHeartbeat(50*time.Millisecond))
	opener := other.Join(ctx, share.Lane{Host: host, Namespace: e2eNamespace}).(*member)
	oldOutage(t, opener)
	// A quiet member (a Writer waiting for input) keeps the lane's keys.
	quiet := New(client(t, nil), WithPrefix(t.Name()+":"), WithInterval(5*time.Millisecond), WithHeartbeat(50*time.Millisecond))
	idle := quiet.Join(ctx, share.Lane{Host: host, Namespace: e2eNamespace}).(*member)
	t.Cleanup(func() { _ = idle.Leave(ctx) })
	idle.Demand(0)

	ended := make(chan time.Duration, 1)
	go func() {
		<-probing
		start := time.Now()
		crash(opener) // it dies (SIGKILL) as the new writer's probe is out
		for time.Since(start) < 5*time.Second {
			if v, err := rdb.HGet(ctx, opener.keys[0], "open_since").Result(); err == nil && v == "0" {
				break
			}
			time.Sleep(time.Millisecond)
		}
		ended <- time.Since(start)
	}()
	runCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s := New(rdb, WithPrefix(t.Name()+":"), WithInterval(20*time.Millisecond), WithTimeout(time.Second))
	res, err := upsert.All(runCtx, vectors(0, 200), upsert.WithIndex(indexConn(t, ix.Host())),
		upsert.WithLimiter(upsert.NewLimiter()), s.Option())
	t.Logf("upserted %d, failed %d, errors %v", res.Upserted, len(res.Failed), res.Stats.ErrorsByClass)
	require.Less(t, <-ended, time.Second, "the lane's outage ended with its last writer, while the probe was out")
	assert.NoError(t, err)
	if len(res.Failed) > 0 {
		t.Errorf("%d of 200 records failed unsent after one failed probe, on an outage the lane had ended; first: %v",
			len(res.Failed), res.Failed[0].Err)
	}
	assert.Equal(t, 200, res.Upserted)
}

// As above, end to end: a writer process is in an outage of 503s (its
// breaker opened and marked it) when Redis is flushed; the state is
// rebuilt with the outage but without open_by, and the process, its
// breaker open and its probes failing, never reports itself again. A
// second writer joins the outage, fails in it (reported) and ends its run:
// its leave ended the lane's outage while the process was still in it and
// still failing, and the lane held none from then on. The rebuilt outage
// is now kept until a close (breakerScript begins no open_by on it).
func TestAFlushedOutageOutlivesAJoinersLeaveWhileItsWriterIsStillFailingInIt(t *testing.T) {
	rdb := client(t, nil) // the tests do not run in parallel: the flush spares theirs
	ix, down := downIndex(t)
	ctx := context.Background()
	host := strings.TrimPrefix(ix.Host(), "http://")

	quiet := New(client(t, nil), WithPrefix(t.Name()+":"), WithInterval(5*time.Millisecond), WithHeartbeat(50*time.Millisecond))
	idle := quiet.Join(ctx, share.Lane{Host: host, Namespace: e2eNamespace}).(*member)
	t.Cleanup(func() { _ = idle.Leave(ctx) })
	idle.Demand(0)

	startHelper(t, "writing", helperEnv+"_HOST="+ix.Host())
	down.Store(true)
	require.Eventually(t, func() bool { return !exchange(t, idle).OpenSince.IsZero() }, 10*time.Second, time.Millisecond,
		"the process's breaker opened and recorded the lane's outage")
	require.NoError(t, rdb.FlushAll(ctx).Err())
	require.Eventually(t, func() bool { v := exchange(t, idle); return v.Writers == 2 && !v.OpenSince.IsZero() },
		5*time.Second, time.Millisecond, "the lane's state rebuilt, with its outage")

	// Another writer's run joins the outage, fails in it and ends.
	runCtx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	s := New(rdb, WithPrefix(t.Name()+":"), WithInterval(20*time.Millisecond), WithTimeout(time.Second))
	res, _ := upsert.All(runCtx, vectors(0, 10), upsert.WithIndex(indexConn(t, ix.Host())),
		upsert.WithLimiter(upsert.NewLimiter()), s.Option())
	require.Positive(t, res.Stats.ErrorsByClass[upsert.ClassServer], "its probes failed in the outage")

	time.Sleep(time.Second) // the process goes on failing in the outage
	v := exchange(t, idle)
	assert.Equal(t, 2, v.Writers, "the process is live")
	assert.False(t, v.OpenSince.IsZero(), "the lane's outage ended while a writer in it is live and failing")
}

// End to end, the flapping index of the core's
// TestSharedLaneReportsItselfInANewOutageItHeardWithoutAGap: a
// writer's run is in an outage of 503s (its breaker opened and marked
// it); between two of its exchanges another writer's request is answered
// (a close: open_by cleared) and a third writer's breaker opens the next
// outage. The run, failing all along, never reported itself in the new
// outage, which ended when the third writer left: the lane held no outage
// while the run was live and failing in one. The run now reports itself
// in an outage other than the one it marked itself in (lane.markedIn).
func TestAnOutageReopenedBetweenTwoExchangesIsKeptByTheWriterStillFailingInIt(t *testing.T) {
	ix, down := downIndex(t)
	ctx := context.Background()
	host := strings.TrimPrefix(ix.Host(), "http://")
	lane := share.Lane{Host: host, Namespace: e2eNamespace}

	bare := New(client(t, nil), WithPrefix(t.Name()+":"), WithInterval(5*time.Millisecond), WithHeartbeat(200*time.Millisecond))
	watch := bare.Join(ctx, lane).(*member)
	t.Cleanup(func() { _ = watch.Leave(ctx) })
	watch.Demand(0)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	s := New(client(t, nil), WithPrefix(t.Name()+":"), WithInterval(100*time.Millisecond), WithTimeout(time.Second))
	go func() {
		defer close(done)
		_, _ = upsert.All(runCtx, vectors(0, 200000), upsert.WithIndex(indexConn(t, ix.Host())),
			upsert.WithLimiter(upsert.NewLimiter()), s.Option())
	}()
	require.Eventually(t, func() bool { return ix.Count(e2eNamespace) > 0 }, 10*time.Second, time.Millisecond)
	down.Store(true)
	require.Eventually(t, func() bool { return !exchange(t, watch).OpenSince.IsZero() }, 10*time.Second, time.Millisecond,
		"the run's breaker opened and recorded the lane's outage")
	time.Sleep(300 * time.Millisecond) // the run heard its own outage

	closer, opener := bare.Join(ctx, lane).(*member), bare.Join(ctx, lane).(*member)
	_, err := closer.Breaker(ctx, false) // another writer's request answered: the outage closed
	require.NoError(t, err)
	_, err = opener.Breaker(ctx, true) // and a third writer's breaker opened the next one
	require.NoError(t, err)
	require.NoError(t, closer.Leave(ctx))
	time.Sleep(time.Second) // the run goes on failing in the new outage
	require.NoError(t, opener.Leave(ctx))

	v := exchange(t, watch)
	assert.Equal(t, 2, v.Writers, "the run is live")
	assert.False(t, v.OpenSince.IsZero(), "the lane's outage ended while a writer in it is live and failing")
	cancel()
	<-done
}
