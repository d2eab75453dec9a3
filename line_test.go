package upsert

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Places are served in the order they were taken; a place left before its
// time (its holder stopped waiting) is skipped when its time comes, and a
// nil or left place never waits.
func TestALineServesPlacesInOrderAndSkipsThoseLeft(t *testing.T) {
	tests := []struct {
		name  string
		left  []int // the places left, in this order, before the check
		ready []int // the places whose wait returns at once after them
	}{
		{name: "the first place goes first", left: nil, ready: []int{0}},
		{name: "each leaving lets the next go", left: []int{0, 1}, ready: []int{2}},
		{name: "a place left ahead is skipped", left: []int{1, 0}, ready: []int{2}},
		{name: "places left in a row are all skipped", left: []int{2, 1, 0}, ready: []int{3}},
		{name: "a place left behind does not let it go early", left: []int{2}, ready: []int{0}},
		{name: "leaving twice moves the line once", left: []int{0, 0}, ready: []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l line
			places := make([]*place, 4)
			for i := range places {
				places[i] = l.take()
			}
			for _, i := range tt.left {
				places[i].leave()
			}
			done, cancel := context.WithCancel(context.Background())
			cancel()
			for i, p := range places {
				err := p.wait(done)
				if slices.Contains(tt.left, i) || slices.Contains(tt.ready, i) {
					assert.NoError(t, err, "place %d", i)
				} else {
					assert.ErrorIs(t, err, context.Canceled, "place %d must wait", i)
				}
			}
			assert.False(t, l.empty(), "a place is still held")
			for _, p := range places {
				p.leave()
			}
			assert.True(t, l.empty())
		})
	}
	var nothing *place
	assert.NoError(t, nothing.wait(context.Background()))
	nothing.leave()
}

// A call with one request in flight sends its batches in the order it cut
// them: the goroutines that send them start in any order, and a stream's
// checkpoint is left behind every record a later batch landed first.
// Repeated, since without the line most runs sent a later batch first.
func TestOneRequestInFlightSendsTheBatchesInInputOrder(t *testing.T) {
	const n, size = 60, 10
	vectors := func() []*pinecone.Vector {
		out := make([]*pinecone.Vector, n)
		for i := range out {
			out[i] = &pinecone.Vector{Id: strconv.Itoa(i), Values: &[]float32{1}}
		}
		return out
	}
	calls := map[string]func(ctx context.Context, opts ...Option) error{
		"All": func(ctx context.Context, opts ...Option) error {
			_, err := All(ctx, vectors(), opts...)
			return err
		},
		"Stream": func(ctx context.Context, opts ...Option) error {
			_, err := Stream(ctx, slices.Values(vectors()), opts...)
			return err
		},
		"Writer": func(ctx context.Context, opts ...Option) error {
			w, err := NewWriter(ctx, opts...)
			if err != nil {
				return err
			}
			for _, v := range vectors() {
				if err := w.Add(ctx, v); err != nil {
					return err
				}
			}
			_, err = w.Close(ctx)
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			for range 20 {
				var mu sync.Mutex
				var firsts []string
				send := func(_ context.Context, _ string, b []*pinecone.Vector) error {
					mu.Lock()
					defer mu.Unlock()
					firsts = append(firsts, b[0].Id)
					return nil
				}
				require.NoError(t, call(context.Background(), WithUpsertFunc(send), WithConcurrency(1), WithBatchSize(size)))
				want := make([]string, 0, n/size)
				for i := 0; i < n; i += size {
					want = append(want, fmt.Sprint(i))
				}
				require.Equal(t, want, firsts, "the first record of each request")
			}
		})
	}
}

// goroutineStacks returns the stacks of every goroutine.
func goroutineStacks() string {
	buf := make([]byte, 8<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// othersParked reports whether no goroutine but the caller is running or
// runnable: everything else is parked (on a channel, a mutex, a cond).
func othersParked() bool {
	running := 0
	for _, g := range strings.Split(goroutineStacks(), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		switch {
		case strings.Contains(head, "[running]"):
			running++
		case strings.Contains(head, "[runnable"), strings.Contains(head, "[syscall"):
			return false
		}
	}
	return running <= 1
}

// pollUntil polls cond until it holds or ctx ends.
func pollUntil(ctx context.Context, cond func() bool) bool {
	for !cond() {
		if ctx.Err() != nil {
			return false
		}
		time.Sleep(200 * time.Microsecond)
	}
	return true
}

// settleGoroutines waits until every goroutine but the caller is parked,
// seen three times in a row.
func settleGoroutines(ctx context.Context) bool {
	for seen := 0; seen < 3; {
		if ctx.Err() != nil {
			return false
		}
		runtime.Gosched()
		if othersParked() {
			seen++
		} else {
			seen = 0
			time.Sleep(100 * time.Microsecond)
		}
	}
	return true
}

// countingDoneCtx counts the calls of Done: place.wait calls it once
// per wake-up.
type countingDoneCtx struct {
	context.Context
	calls atomic.Int64
}

func (c *countingDoneCtx) Done() <-chan struct{} {
	c.calls.Add(1)
	return c.Context.Done()
}

// Leaving a place wakes the next place alone: a route's line holds up to
// its concurrency + 2 batches (258 with WithConcurrency(256)), and a
// broadcast made each admission wake them all (All of 100k records in
// batches of 10, a 1-ms sink, WithConcurrency(256): 611 ms, against 78 ms
// without a line and 90 ms waking one). Here 63 places wait and are
// served in turn: each wakes once.
func TestLeavingAPlaceWakesOnlyTheNext(t *testing.T) {
	const n = 64
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var q line
	places := make([]*place, n)
	for i := range places {
		places[i] = q.take()
	}
	ctxs := make([]*countingDoneCtx, n)
	served := make(chan int, n)
	for i := 1; i < n; i++ {
		ctxs[i] = &countingDoneCtx{Context: ctx}
		go func() {
			if places[i].wait(ctxs[i]) == nil {
				served <- i
			}
		}()
	}
	require.True(t, pollUntil(ctx, func() bool {
		for i := 1; i < n; i++ {
			if ctxs[i].calls.Load() == 0 {
				return false
			}
		}
		return true
	}), "the waiters never waited")
	for k := 0; k < n-1; k++ {
		places[k].leave()
		select {
		case i := <-served:
			require.Equal(t, k+1, i, "served out of order")
		case <-ctx.Done():
			t.Fatalf("place %d never served after %d passed", k+1, k)
		}
	}
	places[n-1].leave()
	total := int64(0)
	for i := 1; i < n; i++ {
		total += ctxs[i].calls.Load()
	}
	assert.LessOrEqual(t, total, int64(2*(n-1)),
		"%d wake-ups for %d batches passing in turn: each pass woke the whole line", total, n-1)
}

// Calls that share a lane (one Limiter and namespace; the default shared
// Limiter for one index) split it by their concurrency: a batch leaves its
// place in its route's line once it holds one in the lane's queue, so a
// call with WithConcurrency(4) has up to four requests queued there. When
// it held its place until admitted, each call had one and the head
// alternated: 4 against 1 got half the lane. Virtual time moves a request's
// spacing at a time once every goroutine is parked, so each step admits
// what the rate allows.
func TestCallsSharingALaneSplitItByTheirConcurrency(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	clk := newGateClock()
	lim := &Limiter{clock: clk}
	var mu sync.Mutex
	count := map[string]int{}
	sink := func(name string) UpsertFunc {
		return func(context.Context, string, []*pinecone.Vector) error {
			mu.Lock()
			defer mu.Unlock()
			count[name]++
			return nil
		}
	}
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return count["A"], count["B"]
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for name, conc := range map[string]int{"A": 4, "B": 1} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = All(runCtx, vectors(2000, 2), WithUpsertFunc(sink(name)), WithConcurrency(conc), WithBatchSize(1),
				WithLimiter(lim), withClock(clk), withRand(maxRand), WithIndexLimits(IndexLimits{RequestsPerSecond: 10}))
		}()
	}
	defer wg.Wait()
	defer stop()
	// Both calls under way, and the lane's one token spent.
	step := func() {
		require.True(t, settleGoroutines(ctx), "the calls never settled")
		clk.Advance(100 * time.Millisecond)
	}
	for a, b := counts(); a == 0 || b == 0; a, b = counts() {
		step()
	}
	require.True(t, settleGoroutines(ctx), "the calls never settled")
	a0, b0 := counts()
	for range 40 {
		step()
	}
	require.True(t, settleGoroutines(ctx), "the calls never settled")
	a, b := counts()
	a, b = a-a0, b-b0
	require.Greater(t, a+b, 20, "the rate admitted too little to judge")
	share := float64(a) / float64(a+b)
	assert.GreaterOrEqual(t, share, 0.7, fmt.Sprintf(
		"WithConcurrency(4) got %d of %d requests (%.0f%%) of a lane shared with a WithConcurrency(1) call: as many as it", a, a+b, 100*share))
}
