package upsert

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/upsertlib/upsert/upserttest"
)

// "" and "__default__" are one namespace for Pinecone: one batch stream,
// one lane of the limiter, one id space.
func TestTheDefaultNamespaceHasOneName(t *testing.T) {
	recs := vectors(9, 2)
	// v0 again, under the other name: the last occurrence wins.
	recs = append(recs, &pinecone.Vector{Id: recs[0].Id, Values: &[]float32{9, 9}})
	// By position in the input (a Stream copies the records it takes, so
	// the pointers are not the caller's): even positions under "".
	calls := 0
	nsOf := func(*pinecone.Vector) string {
		calls++
		if (calls-1)%2 == 0 {
			return ""
		}
		return "__default__"
	}
	for _, call := range []struct {
		name string
		run  func(opts ...Option) (Result, error)
	}{
		{"All", func(opts ...Option) (Result, error) { return All(context.Background(), recs, opts...) }},
		{"Stream", func(opts ...Option) (Result, error) {
			return Stream(context.Background(), slices.Values(recs), opts...)
		}},
	} {
		t.Run(call.name, func(t *testing.T) {
			calls = 0
			var mu sync.Mutex
			var requests [][]string
			send := func(_ context.Context, ns string, batch []*pinecone.Vector) error {
				mu.Lock()
				defer mu.Unlock()
				ids := []string{ns}
				for _, v := range batch {
					ids = append(ids, v.Id)
				}
				requests = append(requests, ids)
				return nil
			}
			lim := NewLimiter()
			res, err := call.run(WithUpsertFunc(send), WithNamespaceOf(nsOf), WithBatchSize(10), WithLimiter(lim), withClock(newFakeClock()))
			require.NoError(t, err)
			assert.Equal(t, 1, res.Duplicates, "v0 under both names is one record")
			assert.Equal(t, 9, res.Upserted)
			require.Len(t, requests, 1, "one batch for both names: %v", requests)
			assert.Equal(t, "", requests[0][0], "sent under the name seen first")
			assert.Equal(t, 1, len(lim.lanes), "one lane of the limiter")
		})
	}
}

// A Writer keeps an id's writes in order within a namespace: a record
// waits while an earlier one with its id and namespace is in flight, also
// under the namespace's other name after a Writer over more than
// minRoutes namespaces swept its idle routes. The sweep keeps the default
// namespace's route, whose batch is in flight (were it dropped and made
// again under "__default__", the records' keys must still not hash apart:
// the older write could land last).
func TestTheDefaultNamespacesTwoNamesKeepIDOrderAcrossARouteSweep(t *testing.T) {
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
	// Records to minRoutes other namespaces: the routes are swept, and
	// the default namespace's, with nothing waiting but a batch in
	// flight, is kept.
	for i := 1; i <= minRoutes; i++ {
		v := withMetadata(vs[i], map[string]any{"ns": fmt.Sprint("n", i)})
		v.Id = fmt.Sprint("y", i)
		require.NoError(t, w.Add(ctx, v))
	}
	_, kept := w.in.r.routes.byKey[""]
	require.True(t, kept, "the sweep dropped the default route while its batch was in flight")

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

// "" names the default namespace as well as "__default__", and
// WithNamespaceOf may return either: records routed to "" through
// WithIndex go to "__default__" (go-pinecone v5 once asked for
// /records/namespaces//upsert, a path with an empty segment).
func TestRecordsRoutedToTheEmptyNamespaceLandInTheDefaultNamespace(t *testing.T) {
	srv := upserttest.NewServer()
	defer srv.Close()
	pc, err := NewClient(pinecone.NewClientParams{ApiKey: "test-key", RestClient: srv.Client()})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"})
	require.NoError(t, err)
	defer idx.Close()
	recs := textRecords(3)
	res, err := Records(context.Background(), slices.Values(recs), WithIndex(idx),
		WithNamespaceOf(func(*pinecone.IntegratedRecord) string { return "" }),
		WithBackoff(time.Millisecond, 2*time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, 3, res.Upserted)
	assert.Len(t, srv.Records(defaultNamespace), 3)
}

// A failure names the default namespace "", whichever of its two names
// the run was given: a dead-letter file or a metric gets one name for it.
func TestAFailureInTheDefaultNamespaceNamesIt(t *testing.T) {
	for _, ns := range []string{"", defaultNamespace} {
		recs := vectors(2, 2)
		zero := []float32{0, 0}
		recs[1].Values = &zero // invalid
		res, err := All(context.Background(), recs, WithUpsertFunc(newFakeIndex(nil).Upsert),
			WithNamespaceOf(func(*pinecone.Vector) string { return ns }), withClock(newFakeClock()), withRand(maxRand))
		require.ErrorIs(t, err, ErrInvalid)
		require.Len(t, res.Failed, 1)
		assert.Empty(t, res.Failed[0].Namespace, "given %q", ns)
	}
}

// Events and failures name the default namespace alike (""), whichever
// of its names the connection was given, so that observers can set
// failures against requests by namespace.
func TestEventsAndFailuresNameTheDefaultNamespaceAlike(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithFaults(upserttest.RejectIDs("v1")))
	defer srv.Close()
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test-key"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: ""})
	require.NoError(t, err)
	defer idx.Close()
	var mu sync.Mutex
	requests := map[string]int{}
	obs := Observer{RequestDone: func(e RequestEvent) {
		mu.Lock()
		requests[e.Namespace]++
		mu.Unlock()
	}}

	res, err := All(context.Background(), vectors(4, 2), WithIndex(idx), WithObserver(obs), WithBackoff(time.Millisecond, 2*time.Millisecond))

	require.ErrorIs(t, err, ErrInvalid)
	require.Len(t, res.Failed, 1)
	ns := res.Failed[0].Namespace
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]int{ns: res.Stats.Requests}, requests,
		"the requests that carried the failed record name its namespace as its Failure does (%q)", ns)
}

// retryAfterInHot returns a Writer of WithConcurrency(conc), batches of
// 10 and a gate clock, routing "ns-i" to ns, whose second request to
// namespace "hot" is answered UNAVAILABLE with a Retry-After of 2 s (the
// first answered: not a wrong host), and which counts in cold the records
// of the other namespaces that landed. Its context ends with the test,
// ending the sleeps left when the test fails.
func retryAfterInHot(t *testing.T, conc int) (w *Writer, clk *gateClock, cold *atomic.Int64) {
	clk, cold = newGateClock(), new(atomic.Int64)
	var hot atomic.Int64
	send := func(_ context.Context, ns string, batch []*pinecone.Vector) error {
		if ns == "hot" {
			if hot.Add(1) == 2 {
				return &Error{Class: ClassServer, RetryAfter: 2 * time.Second, Err: errors.New("unavailable")}
			}
			return nil
		}
		cold.Add(int64(len(batch)))
		return nil
	}
	nsOf := func(v *pinecone.Vector) string { ns, _, _ := strings.Cut(v.Id, "-"); return ns }
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := NewWriter(ctx, WithUpsertFunc(send), WithNamespaceOf(nsOf),
		WithConcurrency(conc), WithBatchSize(10), WithMaxDelay(time.Hour), withClock(clk), withRand(maxRand))
	require.NoError(t, err)
	return w, clk, cold
}

// With a fixed WithConcurrency, a namespace paused by a Retry-After holds
// none of the call's slots, nor its other namespaces' room: a Writer's
// records of other namespaces land while it waits (the README: a
// Retry-After pauses the namespace).
func TestARetryAfterInOneNamespaceLeavesTheFixedConcurrencyToTheOthers(t *testing.T) {
	w, clk, cold := retryAfterInHot(t, 2)
	hotDone := make(chan error, 1)
	go func() {
		for i := range 100 {
			if err := w.Add(context.Background(), hotCold("hot", i)); err != nil {
				hotDone <- err
				return
			}
		}
		hotDone <- nil
	}()
	require.Eventually(t, func() bool { return clk.Sleepers() > 0 }, generous, time.Millisecond, "hot waits out its Retry-After")
	addCtx, stop := context.WithTimeout(context.Background(), generous)
	defer stop()
	for i := range 200 {
		require.NoError(t, w.Add(addCtx, hotCold("cold", i)), "an Add for cold waits for hot's Retry-After")
	}
	require.Eventually(t, func() bool { return cold.Load() == 200 }, generous, time.Millisecond,
		"cold's records land while hot waits out its Retry-After")
	type closed struct {
		res Result
		err error
	}
	done := make(chan closed, 1)
	go func() {
		require.NoError(t, <-hotDone)
		res, err := w.Close(context.Background())
		done <- closed{res, err}
	}()
	for {
		select {
		case c := <-done:
			require.NoError(t, c.err)
			assert.Equal(t, 300, c.res.Upserted)
			return
		case <-time.After(time.Millisecond):
			clk.Advance(time.Second)
		}
	}
}

// Under WithConcurrency(1), a request of a namespace that took the call's
// only slot before its lane was paused (a Retry-After answered while it
// queued) gives it back for the pause: the other namespace's record lands
// meanwhile.
func TestARequestQueuedForTheFixedSlotGivesItBackWhenItsLaneIsPaused(t *testing.T) {
	clk := newGateClock()
	hotGate := make(chan struct{})
	var hotCalls atomic.Int64
	var cold atomic.Int64
	send := func(ctx context.Context, ns string, b []*pinecone.Vector) error {
		if ns == "hot" {
			switch hotCalls.Add(1) {
			case 1:
				return nil // the index answered: not a wrong host
			case 2:
				select {
				case <-hotGate:
				case <-ctx.Done():
					return ctx.Err()
				}
				return &Error{Class: ClassServer, RetryAfter: 2 * time.Second, Err: errors.New("unavailable")}
			}
			return nil
		}
		cold.Add(int64(len(b)))
		return nil
	}
	nsOf := func(v *pinecone.Vector) string { ns, _, _ := strings.Cut(v.Id, "-"); return ns }
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := NewWriter(ctx, WithUpsertFunc(send), WithNamespaceOf(nsOf), WithConcurrency(1), WithBatchSize(1),
		WithMaxDelay(time.Hour), withClock(clk), withRand(maxRand))
	require.NoError(t, err)
	addCtx, stop := context.WithTimeout(context.Background(), generous)
	defer stop()
	require.NoError(t, w.Add(addCtx, hotCold("hot", 0)))
	require.Eventually(t, func() bool { return hotCalls.Load() == 1 }, generous, time.Millisecond)
	require.NoError(t, w.Add(addCtx, hotCold("hot", 1))) // in flight, held by the index
	require.Eventually(t, func() bool { return hotCalls.Load() == 2 }, generous, time.Millisecond)
	require.NoError(t, w.Add(addCtx, hotCold("hot", 2))) // queued for the call's slot
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, w.Add(addCtx, hotCold("cold", 0))) // queued behind it
	time.Sleep(5 * time.Millisecond)
	close(hotGate) // hot's request is answered with a Retry-After of 2 s

	require.Eventually(t, func() bool { return cold.Load() == 1 }, 2*time.Second, time.Millisecond,
		"cold's record lands while hot waits out its Retry-After")
	for range 10 {
		clk.Advance(time.Second)
	}
}

// Under WithConcurrency(1) the pool has four workers: a namespace waiting
// out a Retry-After (one batch resting, the others waiting for the pause)
// leaves one to the other namespaces, whose batch lands meanwhile.
func TestAPausedNamespaceLeavesAWorkerUnderConcurrencyOne(t *testing.T) {
	w, clk, cold := retryAfterInHot(t, 1)
	hotCtx, stopHot := context.WithCancel(context.Background())
	defer stopHot()
	go func() {
		for i := 0; w.Add(hotCtx, hotCold("hot", i)) == nil; i++ {
		}
	}()
	require.Eventually(t, func() bool { return clk.Sleepers() > 0 }, generous, time.Millisecond, "hot waits out its Retry-After")
	require.Eventually(t, func() bool { return len(w.in.r.pool.workers) == w.in.r.pool.reserve }, generous, time.Millisecond,
		"hot takes every worker but the reserve")
	addCtx, stop := context.WithTimeout(context.Background(), generous)
	defer stop()
	for i := range 10 {
		require.NoError(t, w.Add(addCtx, hotCold("cold", i)), "an Add for cold waits for hot's Retry-After")
	}
	require.Eventually(t, func() bool { return cold.Load() == 10 }, 2*time.Second, time.Millisecond,
		"cold's batch lands while hot waits out its Retry-After")
	stopHot()
	for range 10 {
		clk.Advance(time.Second)
	}
}

// A namespace that is not ASCII, or has a NUL, fails its records before
// sending, the rule named; the other records land. Pinecone allows "ASCII
// except \0" in a namespace, as in an id (docs.pinecone.io/reference/api/
// database-limits/identifier-limits): sent, the request would be refused
// whole and split down to single records.
func TestANamespaceThatIsNotASCIIFailsItsRecordsBeforeSending(t *testing.T) {
	for _, bad := range []string{"café", "tenant-☃", "a\x00b"} {
		t.Run(fmt.Sprintf("%q", bad), func(t *testing.T) {
			recs := make([]*pinecone.Vector, 6)
			for i := range recs {
				v := []float32{1, float32(i) + 1}
				recs[i] = &pinecone.Vector{Id: fmt.Sprintf("r%d", i), Values: &v}
			}
			var mu sync.Mutex
			sentTo := map[string]int{}
			send := func(_ context.Context, ns string, batch []*pinecone.Vector) error {
				mu.Lock()
				defer mu.Unlock()
				sentTo[ns] += len(batch)
				return nil
			}
			nsOf := func(v *pinecone.Vector) string {
				if v.Id == "r2" || v.Id == "r4" {
					return bad
				}
				return "ok"
			}
			res, err := All(context.Background(), recs, WithUpsertFunc(send), WithNamespaceOf(nsOf))
			require.Error(t, err, "records in a namespace Pinecone does not allow must fail")
			assert.ErrorIs(t, err, ErrInvalid)
			require.Len(t, res.Failed, 2)
			for _, f := range res.Failed {
				assert.Equal(t, ClassInvalid, f.Class)
				assert.Zero(t, f.Attempts, "refused before sending")
				assert.Contains(t, f.Err.Error(), "namespace")
				assert.Contains(t, f.Err.Error(), "ASCII")
			}
			assert.Equal(t, 4, res.Upserted, "the valid records still land")
			mu.Lock()
			defer mu.Unlock()
			assert.Zero(t, sentTo[bad], "nothing is sent to a namespace Pinecone refuses")
		})
	}
}

// heldSleepsClock is virtual time (fakeClock) with two sleeps held until
// the test lets them go, picked by the function sleeping, to fix an
// interleaving real time produces at random: a batch's backoff
// (sleepBackoff) waits for backoff; a request's wait for its lane's
// Retry-After after it had taken a fixed slot (ThroughPause) waits for
// pause.
type heldSleepsClock struct {
	*fakeClock
	pause, backoff         chan struct{}
	pauseHeld, backoffHeld atomic.Int64
}

func (c *heldSleepsClock) Sleep(ctx context.Context, d time.Duration) error {
	buf := make([]byte, 16<<10)
	stack := string(buf[:runtime.Stack(buf, false)])
	gate, held := c.backoff, &c.backoffHeld
	switch {
	case strings.Contains(stack, "ThroughPause"):
		gate, held = c.pause, &c.pauseHeld
	case strings.Contains(stack, "sleepBackoff"):
	default:
		return c.fakeClock.Sleep(ctx, d)
	}
	held.Add(1)
	select {
	case <-gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return c.fakeClock.Sleep(ctx, d)
}

// Under WithConcurrency(1), a request at its lane's head that meets a
// Retry-After gives back its slot and the head for the pause: a request
// that takes the slot meanwhile (the batch answered the Retry-After, its
// backoff over) goes out, and neither waits for ever on the other (the
// head waiting for the slot, the slot's holder for the head: nothing was
// sent again, and Close never returned).
func TestARequestPausedAtTheHeadHoldsNeitherTheHeadNorItsFixedSlot(t *testing.T) {
	clk := &heldSleepsClock{fakeClock: newFakeClock(), pause: make(chan struct{}), backoff: make(chan struct{})}
	answer := make(chan struct{})
	var calls atomic.Int64
	send := func(context.Context, string, []*pinecone.Vector) error {
		if calls.Add(1) == 1 {
			<-answer
			return &Error{Class: ClassRateLimited, RetryAfter: time.Second, Err: errors.New("slow down")}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // frees a deadlocked Writer
	w, err := NewWriter(ctx, WithUpsertFunc(send), withClock(clk), withRand(maxRand), WithConcurrency(1), WithBatchSize(1))
	require.NoError(t, err)
	vec := func(id string) *pinecone.Vector { return &pinecone.Vector{Id: id, Values: &[]float32{1, 1}} }

	require.NoError(t, w.Add(context.Background(), vec("r1")))
	require.Eventually(t, func() bool { return calls.Load() == 1 }, generous, time.Millisecond, "r1 in flight holds the one slot")
	require.NoError(t, w.Add(context.Background(), vec("r2")))
	require.Eventually(t, func() bool { return goroutinesIn("upsert.takeOwnSlot(") == 1 }, generous, time.Millisecond, "r2 waits for the slot")
	close(answer) // r1: a Retry-After of 1 s; r2 takes the slot and the head, and finds the lane paused
	require.Eventually(t, func() bool { return clk.pauseHeld.Load() == 1 && clk.backoffHeld.Load() == 1 }, generous, time.Millisecond,
		"r2 waits out the pause; r1 its Retry-After")
	close(clk.backoff)
	require.Eventually(t, func() bool { return calls.Load() == 2 }, generous, time.Millisecond, "r1 is resent while r2 waits out the pause")
	close(clk.pause)
	closeCtx, stop := context.WithTimeout(context.Background(), generous)
	defer stop()
	res, err := w.Close(closeCtx)
	require.NoError(t, err)
	assert.Equal(t, 2, res.Upserted)
}

// goroutinesIn counts the goroutines whose stack holds fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), fn)
}
