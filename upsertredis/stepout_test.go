package upsertredis

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/internal/share"
	"github.com/upsertlib/upsert/upserttest"
)

// nsWriter is a Writer of one simulated process (a Store, a client and a
// Limiter of its own) that routes a record to the namespace before the
// "/" in its id.
type nsWriter struct {
	s   *Store
	lim *upsert.Limiter
	w   *upsert.Writer
}

func newNSWriter(t *testing.T, host string, opts ...Option) *nsWriter {
	rdb := shared.Client(nil)
	t.Cleanup(func() { rdb.Close() })
	opts = append([]Option{WithPrefix(t.Name() + ":"), WithInterval(time.Second), WithTimeout(time.Second)}, opts...)
	s := New(rdb, opts...)
	lim := upsert.NewLimiter()
	w, err := upsert.NewWriter(context.Background(), upsert.WithIndex(indexConn(t, host)), upsert.WithLimiter(lim),
		s.Option(), upsert.WithBatchSize(1),
		upsert.WithNamespaceOf(func(v *pinecone.Vector) string { ns, _, _ := strings.Cut(v.Id, "/"); return ns }))
	require.NoError(t, err)
	return &nsWriter{s: s, lim: lim, w: w}
}

// add writes one record into namespace ns and waits for it to land.
func (w *nsWriter) add(t *testing.T, ns string, i int) {
	t.Helper()
	v := vectors(i, 1)[0]
	v.Id = fmt.Sprintf("%s/%d", ns, i)
	require.NoError(t, w.w.Add(context.Background(), v))
}

// rejoinAfterTheLastLeft runs the sequence of a Writer over many
// namespaces (process a) that shares namespace "x" with another process
// (b, a bare member): b's 429 episode (cut) is applied to the lane and a
// adopts it (adopted says when); b's run is done with x and leaves; a's
// idle route for x is dropped with ~1000 others and its membership leaves
// in the background, the last one out; a then writes x again: it rejoins
// the lane, its Limiter still holding what the lane learned. A third
// process, c, then starts writing x. It returns a and c, c having joined.
func rejoinAfterTheLastLeft(t *testing.T, cut share.Cut, adopted func(upsert.LimiterState) bool) (a, c *nsWriter) {
	ctx := context.Background()
	admin := client(t, nil)
	a, b, state, writers, idx := stepOutSetup(t, cut, adopted)
	require.NoError(t, b.Leave(ctx))

	a.add(t, "o9999", 9999) // the routes' sweep drops x's, idle, with the others
	require.Eventually(t, func() bool { return admin.HLen(ctx, writers).Val() == 0 }, 5*time.Second, time.Millisecond,
		"a's membership of x left, the last one")
	require.Zero(t, admin.Exists(ctx, state).Val(), "the last writer out drops the lane's state")
	require.True(t, adopted(a.lim.State("x")), "a's Limiter still holds what x's lane learned: %+v", a.lim.State("x"))

	a.add(t, "x", 5000) // a rejoins x
	c = newNSWriter(t, idx.Host())
	c.add(t, "x", 6000) // c joins x
	return a, c
}

// minRoutesInCore is the core's minRoutes: a Writer drops its idle routes
// once it holds that many.
const minRoutesInCore = 1024

// A Writer over many namespaces steps out of a namespace's shared lane
// with its idle route, and may be the last writer out, which drops the
// lane's state. When it writes the namespace again, its new membership
// proposes the cut its lane still enforces: a process that joins next
// takes its part of it, rather than +Inf. Once, the rejoin brought
// nothing back.
func TestARejoinAfterTheLastStepOutKeepsTheLanesCutShared(t *testing.T) {
	a, c := rejoinAfterTheLastLeft(t, share.Cut{Rate: 200, Level: 200, Recovery: time.Hour}, capped)
	ctx := context.Background()
	t.Logf("a: %+v, c: %+v", a.lim.State("x"), c.lim.State("x"))
	assert.False(t, math.IsInf(c.lim.State("x").Rate, 1),
		"c joined x while a enforces the lane's cut (%+v), and took no part of it: %+v", a.lim.State("x"), c.lim.State("x"))
	_, err := c.w.Close(ctx)
	require.NoError(t, err)
	_, err = a.w.Close(ctx)
	require.NoError(t, err)
}

// As above, for a Retry-After, which pauses every writer of the lane: a
// process that joins during the pause waits it out too.
func TestARejoinAfterTheLastStepOutKeepsTheLanesRetryAfterShared(t *testing.T) {
	a, c := rejoinAfterTheLastLeft(t, share.Cut{Rate: 1e6, Level: 1e6, Recovery: time.Second, RetryAfter: 4 * time.Second},
		func(s upsert.LimiterState) bool { return s.Paused })
	ctx := context.Background()
	t.Logf("a: %+v, c: %+v", a.lim.State("x"), c.lim.State("x"))
	assert.True(t, a.lim.State("x").Paused)
	assert.True(t, c.lim.State("x").Paused,
		"c joined x while a waits out the lane's Retry-After, and does not: %+v", c.lim.State("x"))
	_, err := c.w.Close(ctx)
	require.NoError(t, err)
	_, err = a.w.Close(ctx)
	require.NoError(t, err)
}

// stepOutSetup starts the scenes of this file: a Writer a over
// minRoutesInCore namespaces, x among them, and a bare member b of x
// (another process) whose cut a adopts (adopted says when). It returns a,
// b, the lane's keys and the index.
func stepOutSetup(t *testing.T, cut share.Cut, adopted func(upsert.LimiterState) bool) (a *nsWriter, b *member, state, writers string, idx *upserttest.Server) {
	idx = upserttest.NewServer()
	t.Cleanup(idx.Close)
	ctx := context.Background()
	host := strings.TrimPrefix(idx.Host(), "http://")
	state, writers = laneKeys(t.Name()+":", host, "x")

	a = newNSWriter(t, idx.Host())
	for i := range minRoutesInCore - 1 {
		a.add(t, fmt.Sprintf("o%04d", i), i+1)
	}
	a.add(t, "x", 0)
	require.NoError(t, a.w.Flush(ctx))

	sb := New(client(t, nil), WithPrefix(t.Name()+":"), WithInterval(time.Second), WithTimeout(time.Second))
	b = sb.Join(ctx, share.Lane{Host: host, Namespace: "x"}).(*member)
	t.Cleanup(func() { _ = b.Leave(ctx) })
	cut.Seen, cut.Sent = b.View().Epoch, time.Now()
	_, applied, err := b.Cut(ctx, cut)
	require.NoError(t, err)
	require.True(t, applied)
	require.Eventually(t, func() bool { return adopted(a.lim.State("x")) }, 2*time.Second, time.Millisecond,
		"a adopts b's cut")
	return a, b, state, writers, idx
}

// capped reports whether a Limiter's state holds a cut.
func capped(s upsert.LimiterState) bool { return !math.IsInf(s.Rate, 1) }

// The other order of TestARejoinAfterTheLastStepOutKeepsTheLanesCutShared:
// a's Writer steps out of x while b still writes it, then b's run ends,
// the last writer, which drops the lane's state. a rejoins x, its lane
// still enforcing the cut, and proposes it: c, which joins next, takes its
// part of it.
func TestAStepOutThenAnotherWritersEndKeepsTheLanesCutShared(t *testing.T) {
	ctx := context.Background()
	a, b, state, writers, idx := stepOutSetup(t, share.Cut{Rate: 200, Level: 200, Recovery: time.Hour}, capped)
	admin := client(t, nil)

	a.add(t, "o9999", 9999) // the sweep drops x's idle route: a steps out, b still a live writer
	require.Eventually(t, func() bool {
		ids, err := admin.HKeys(ctx, writers).Result()
		return err == nil && len(ids) == 1 && ids[0] == b.id
	}, 5*time.Second, time.Millisecond, "a's membership of x left; b is the lane's only writer")
	require.True(t, !math.IsInf(a.lim.State("x").Rate, 1), "a's Limiter still holds the lane's cut")

	require.NoError(t, b.Leave(ctx)) // b's run ends: it is the last live writer
	assert.Zero(t, admin.Exists(ctx, state).Val(), "the last writer out drops the lane's state")

	a.add(t, "x", 5000) // a rejoins x
	c := newNSWriter(t, idx.Host())
	c.add(t, "x", 6000) // c joins x
	t.Logf("a: %+v, c: %+v", a.lim.State("x"), c.lim.State("x"))
	assert.False(t, math.IsInf(c.lim.State("x").Rate, 1),
		"c joined x while a enforces the lane's cut (%+v), and took no part of it: %+v", a.lim.State("x"), c.lim.State("x"))
	_, err := c.w.Close(ctx)
	require.NoError(t, err)
	_, err = a.w.Close(ctx)
	require.NoError(t, err)
}
