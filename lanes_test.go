package upsert

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Writer holds its route, and so its lane, for its whole life: another
// call on the same Limiter that meets more than maxLanes namespaces must
// not evict it (it once did, nothing being in flight, and the next call
// writing the Writer's namespace got a fresh lane: one namespace paced
// through two lanes, each with the whole rate).
func TestLimiterKeepsALaneACallsRouteHolds(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	fi := newFakeIndex(nil)
	hot := func(*pinecone.Vector) string { return "hot" }
	a, err := NewWriter(ctx, WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand), WithLimiter(lim), WithNamespaceOf(hot))
	require.NoError(t, err)
	defer a.Close(ctx) //nolint:errcheck
	vs := vectors(maxLanes+100, 4)
	require.NoError(t, a.Add(ctx, vs[0]))
	require.NoError(t, a.Flush(ctx))
	laneA := a.in.r.routes.byKey["hot"].lane
	clk.Advance(time.Millisecond) // "hot" is the least recently used lane

	// Another call spreads over many namespaces, through the same Limiter.
	_, err = All(ctx, vs[1:], WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand), WithLimiter(lim),
		WithNamespaceOf(func(v *pinecone.Vector) string { return "spread-" + v.Id }))
	require.NoError(t, err)

	b, err := NewWriter(ctx, WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand), WithLimiter(lim), WithNamespaceOf(hot))
	require.NoError(t, err)
	defer b.Close(ctx) //nolint:errcheck
	require.NoError(t, b.Add(ctx, vs[1]))
	require.NoError(t, b.Flush(ctx))
	laneB := b.in.r.routes.byKey["hot"].lane
	assert.True(t, laneA == laneB, "two live Writers on one namespace and one Limiter pace it through two lanes")
}

// A Writer keeps an id's writes in order within a namespace: a record
// waits while an earlier one with its id and namespace is in flight. The
// key is a hash of the route's namespace as first seen, not of the
// namespace: once the default namespace's route was dropped (a Writer over
// more than minRoutes namespaces) and comes back under its other name,
// "" and "__default__" hash apart, and a newer write of an id goes out
// while the older is still in flight: the older may land last.
func TestTheDefaultNamespacesTwoNamesKeepIDOrderAfterARouteDrop(t *testing.T) {
	ctx := context.Background()
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fi := newFakeIndex(func(call int, ids []string) error {
		if slices.Contains(ids, "x") {
			first := false
			once.Do(func() { first = true })
			if first {
				close(arrived)
				<-release
			}
		}
		return nil
	})
	nsOf := func(v *pinecone.Vector) string { return v.Metadata.Fields["ns"].GetStringValue() }
	w, err := NewWriter(ctx, testOpts(fi, WithMaxDelay(time.Hour), WithNamespaceOf(nsOf))...)
	require.NoError(t, err)
	released := false
	defer func() {
		if !released {
			close(release)
		}
		_, _ = w.Close(ctx)
	}()
	vs := vectors(minRoutes+2, 4)
	x1 := withMetadata(vs[0], map[string]any{"ns": "", "v": 1.0})
	x1.Id = "x"
	require.NoError(t, w.Add(ctx, x1))
	go func() { _ = w.Flush(ctx) }()
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the first write of x was not sent")
	}
	// Records to minRoutes other namespaces: the default namespace's
	// route, with nothing waiting, is dropped.
	for i := 1; i <= minRoutes; i++ {
		v := withMetadata(vs[i], map[string]any{"ns": fmt.Sprint("n", i)})
		v.Id = fmt.Sprint("y", i)
		require.NoError(t, w.Add(ctx, v))
	}
	_, kept := w.in.r.routes.byKey[""]
	require.False(t, kept, "the default route was dropped (test setup)")

	x2 := withMetadata(vs[minRoutes+1], map[string]any{"ns": defaultNamespace, "v": 2.0})
	x2.Id = "x"
	added := make(chan error, 1)
	go func() { added <- w.Add(ctx, x2) }()
	select {
	case err := <-added:
		require.NoError(t, err)
	case <-time.After(300 * time.Millisecond):
		// Waits for the first write of x, as it should.
		return
	}
	go func() { _ = w.Flush(ctx) }()
	deadline := time.Now().Add(2 * time.Second)
	second := false
	for !second && time.Now().Before(deadline) {
		n := 0
		for _, ids := range fi.Calls() {
			if slices.Contains(ids, "x") {
				n++
			}
		}
		second = n >= 2
		time.Sleep(time.Millisecond)
	}
	assert.False(t, second, "the second write of x (as %q) was sent while the first (as \"\") was in flight", defaultNamespace)
	assert.Fail(t, "Add of x under \"__default__\" did not wait for x under \"\" to settle")
}
