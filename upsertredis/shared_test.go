package upsertredis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/internal/redistest"
	"github.com/upsertlib/upsert/internal/share"
	"github.com/upsertlib/upsert/upserttest"
)

const e2eNamespace = "docs"

// e2eIndex serves a rate-limited index (rate vectors/s, a fifth of a
// second's burst, 2 ms + 20 µs/vector), as upsertbench's fast profile at a
// smaller rate.
func e2eIndex(t *testing.T, rate float64) *upserttest.Server {
	srv := upserttest.NewServer(upserttest.Serverless(), upserttest.WithRate(rate, int(rate/5)),
		upserttest.WithLatency(2*time.Millisecond, 20*time.Microsecond))
	t.Cleanup(srv.Close)
	return srv
}

func vectors(first, n int) []*pinecone.Vector {
	out := make([]*pinecone.Vector, n)
	for i := range out {
		vals := make([]float32, 8)
		for j := range vals {
			vals[j] = float32(first+i+j+1) / 1000
		}
		out[i] = &pinecone.Vector{Id: fmt.Sprintf("r%07d", first+i), Values: &vals}
	}
	return out
}

// writer is one call of a writer that could be a process of its own: a
// connection, a Limiter and a Store of its own.
type writer struct {
	res   upsert.Result
	err   error
	store *Store
}

// runWriters runs n writers of per records each into srv's namespace, each
// with upsert.All and a Limiter of its own (WithLimiter defeats the
// sharing of one Limiter per host within a process: each writer is as a
// separate process), sharing through stores on rdb. during runs while
// they write.
func runWriters(t *testing.T, srv *upserttest.Server, newStore func() *Store, n, per int, during func()) []*writer {
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test"})
	require.NoError(t, err)
	ws := make([]*writer, n)
	var wg sync.WaitGroup
	for i := range ws {
		idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: e2eNamespace})
		require.NoError(t, err)
		t.Cleanup(func() { idx.Close() })
		w := &writer{store: newStore()}
		ws[i] = w
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			w.res, w.err = upsert.All(ctx, vectors(i*per, per), upsert.WithIndex(idx),
				upsert.WithLimiter(upsert.NewLimiter()), w.store.Option())
		})
	}
	if during != nil {
		during()
	}
	wg.Wait()
	return ws
}

// TestRedisKilledUnderRuns kills Redis under three writers sharing one
// namespace, and restarts it: every record lands (Redis is no part of
// correctness), the runs finish, and each writer counts its fallback, and
// its rejoin, in its Stats.
func TestRedisKilledUnderRuns(t *testing.T) {
	t.Parallel() // a server of its own
	rsrv := redistest.Run(t)
	rdb := client(t, rsrv)
	idx := e2eIndex(t, 6000)
	const n, per = 3, 6000
	stores := func() *Store {
		return New(rdb, WithPrefix(t.Name()+":"), WithInterval(20*time.Millisecond), WithTimeout(200*time.Millisecond))
	}
	ws := runWriters(t, idx, stores, n, per, func() {
		require.Eventually(t, func() bool { return idx.Count(e2eNamespace) >= n*per/4 }, 30*time.Second, time.Millisecond)
		rsrv.Kill()
		require.Eventually(t, func() bool { return idx.Count(e2eNamespace) >= n*per/2 }, 30*time.Second, time.Millisecond)
		require.NoError(t, rsrv.Restart())
	})
	for i, w := range ws {
		require.NoError(t, w.err, "writer %d", i)
		assert.Equal(t, per, w.res.Upserted, "writer %d: every record landed", i)
		assert.Equal(t, 1, w.res.Stats.SharedFallbacks, "writer %d fell back once", i)
		st := w.store.Stats()
		assert.GreaterOrEqual(t, st.MostWriters, int64(n), "writer %d shared with the others", i)
		if w.res.Stats.SharedRejoins == 0 {
			// A writer may finish before its once-a-second retry finds
			// Redis back.
			t.Logf("writer %d did not rejoin before its end", i)
		}
	}
	assert.Equal(t, n*per, idx.Count(e2eNamespace))
}

// TestSharedRunsSplitTheIndex runs three writers with Limiters of their
// own through a Store each: they see each other, one episode's cut is
// applied once for all of them, and they finish together.
func TestSharedRunsSplitTheIndex(t *testing.T) {
	t.Parallel()
	rdb := client(t, nil)
	idx := e2eIndex(t, 8000)
	const n, per = 3, 8000
	stores := func() *Store {
		return New(rdb, WithPrefix(t.Name()+":"), WithInterval(20*time.Millisecond), WithTimeout(time.Second))
	}
	ws := runWriters(t, idx, stores, n, per, nil)
	var cuts, same int64
	shortest, longest := time.Hour, time.Duration(0)
	var each []string // what each writer saw, for a failure's message
	for i, w := range ws {
		require.NoError(t, w.err, "writer %d", i)
		assert.Equal(t, per, w.res.Upserted)
		assert.Zero(t, w.res.Stats.SharedFallbacks)
		st := w.store.Stats()
		assert.Equal(t, int64(n), st.MostWriters, "writer %d saw every writer", i)
		cuts, same = cuts+st.Cuts, same+st.SameEpisode
		shortest, longest = min(shortest, w.res.Stats.Elapsed), max(longest, w.res.Stats.Elapsed)
		each = append(each, fmt.Sprintf("writer %d: %v, %d requests, 429s %d, store %+v", i, w.res.Stats.Elapsed,
			w.res.Stats.Requests, w.res.Stats.ErrorsByClass[upsert.ClassRateLimited], st))
	}
	t.Logf("cuts applied %d, proposals of an episode already cut %d, elapsed %v-%v", cuts, same, shortest, longest)
	assert.Positive(t, cuts, "the index's 429s cut the lane's rate")
	// 1.0–1.4 on a quiet machine; 2.05 once beside the whole suite under
	// -race. A writer starved of its part would take several times as long.
	assert.Less(t, float64(longest), 2.5*float64(shortest), "the writers split the index: none is left far behind\n%s",
		strings.Join(each, "\n"))
	assert.Empty(t, keys(t, rdb, t.Name()+":"), "the last writer out dropped the lane's keys")
}

// TestSlowOrHungRedisUnderRuns runs three writers through a proxy that
// adds 5 ms each way to every Redis round trip: they share as with a fast
// Redis (the hot path never waits for it); then the proxy holds every
// answer for a while (Redis hung): they go on alone, rejoin once it
// answers, and every record lands.
func TestSlowOrHungRedisUnderRuns(t *testing.T) {
	proxy, rdb := proxied(t, 5*time.Millisecond)
	idx := e2eIndex(t, 6000)
	const n, per = 3, 6000
	stores := func() *Store {
		// A heartbeat of 500 ms: a writer alone tries Redis every 250 ms, so
		// one that a loaded machine made miss the timeout early rejoins
		// within runs of a few seconds.
		return New(rdb, WithPrefix(t.Name()+":"), WithInterval(20*time.Millisecond), WithTimeout(100*time.Millisecond),
			WithHeartbeat(500*time.Millisecond))
	}
	ws := runWriters(t, idx, stores, n, per, func() {
		require.Eventually(t, func() bool { return idx.Count(e2eNamespace) >= n*per/3 }, 30*time.Second, time.Millisecond)
		proxy.Hold()
		require.Eventually(t, func() bool { return idx.Count(e2eNamespace) >= n*per/2 }, 30*time.Second, time.Millisecond)
		proxy.Release()
	})
	for i, w := range ws {
		require.NoError(t, w.err, "writer %d", i)
		assert.Equal(t, per, w.res.Upserted, "writer %d: every record landed", i)
		// Once while Redis hung; a loaded machine may make another round
		// trip miss the 100 ms timeout.
		assert.GreaterOrEqual(t, w.res.Stats.SharedFallbacks, 1, "writer %d went alone while Redis hung", i)
		assert.GreaterOrEqual(t, w.store.Stats().MostWriters, int64(n))
	}
}

// TestAWriterJoiningAnOldSharedOutageFailsNoRecordUnsent: the lane's
// outage (open_since) is ended by a writer whose breaker closes, or once
// no writer in it is live; a writer in it that went idle (a Writer waiting
// for input, its breaker still open) keeps it. A writer that joins adopts
// it, but an outage verdict that none of its own failures bore out lately
// fails nothing: its requests wait for the probe, and the index answers.
// The state below is what Redis holds two minutes after such a writer
// went idle: a live idle member in the outage, the outage's start two
// minutes ago, the index answered before.
func TestAWriterJoiningAnOldSharedOutageFailsNoRecordUnsent(t *testing.T) {
	rdb := client(t, nil)
	idx := e2eIndex(t, 100000)
	conn := indexConn(t, idx.Host())
	s := newStore(t, rdb)
	ctx := context.Background()
	idle := s.Join(ctx, share.Lane{Host: strings.TrimPrefix(idx.Host(), "http://"), Namespace: e2eNamespace}).(*member)
	t.Cleanup(func() { _ = idle.Leave(ctx) })
	idle.Demand(0)
	_, err := idle.Breaker(ctx, true) // the writer that saw the outage (idle since)
	require.NoError(t, err)
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, rdb.HSet(ctx, idle.keys[0], "open_since", now.Add(-2*time.Minute).UnixMilli(), "answered", 1).Err())

	res, err := upsert.All(ctx, vectors(0, 50), upsert.WithIndex(conn), upsert.WithLimiter(upsert.NewLimiter()), s.Option())
	require.NoError(t, err)
	assert.Empty(t, res.Failed, "records failed unsent, on an outage the index is long out of")
	assert.Equal(t, 50, res.Upserted)
	assert.Equal(t, 50, idx.Count(e2eNamespace))
}
