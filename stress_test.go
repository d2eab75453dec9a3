package upsert

import (
	"context"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// stressIndex is an in-memory index that refuses a share of its requests
// with a 429 carrying a short Retry-After; it writes a request whole or not
// at all.
type stressIndex struct {
	mu      sync.Mutex
	rnd     *rand.Rand
	p429    float64
	store   map[string]map[string]float32 // namespace → id → version
	writes  atomic.Int64
	refused atomic.Int64
}

func (x *stressIndex) send(ctx context.Context, ns string, batch []*pinecone.Vector) error {
	x.mu.Lock()
	r := x.rnd.Float64()
	ra := time.Duration(x.rnd.IntN(21)) * time.Millisecond
	cut := x.rnd.IntN(4) == 0
	lat := time.Duration(x.rnd.IntN(2000)) * time.Microsecond
	x.mu.Unlock()
	if lat > 0 {
		t := time.NewTimer(lat)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if r < x.p429 {
		x.refused.Add(1)
		lim := LimitEmbedTokens // a per-minute limit: a pause, no cut of the rates
		if cut {
			lim = LimitUnknown
		}
		return &Error{Class: ClassRateLimited, RetryAfter: ra, Limit: lim, Err: fmt.Errorf("429 (stress index)")}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	m := x.store[ns]
	if m == nil {
		m = make(map[string]float32)
		x.store[ns] = m
	}
	for _, v := range batch {
		m[v.Id] = (*v.Values)[0]
	}
	x.writes.Add(1)
	return nil
}

// stressCall is one call of the stress: its records and what became of each.
type stressCall struct {
	name    string
	op      string // "All", "Writer", "Stream"
	conc    int    // 0: adaptive
	batch   int    // 0: adaptive
	cancel  time.Duration
	records []*pinecone.Vector
	nsOf    func(*pinecone.Vector) string

	mu      sync.Mutex
	landed  map[int]bool // by position; true: landed, false: failed or replaced
	taken   int          // records taken (Writer: Adds that returned nil; Stream: pulled)
	res     Result
	err     error
	reqs    atomic.Int64 // RequestDone events
	reqErrs sync.Map     // class → *atomic.Int64
}

func (c *stressCall) ack(acks []Ack) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range acks {
		if _, dup := c.landed[a.Position]; dup {
			panic(fmt.Sprintf("%s: position %d acked twice", c.name, a.Position))
		}
		c.landed[a.Position] = a.Landed()
	}
}

func (c *stressCall) observer() Observer {
	return Observer{RequestDone: func(e RequestEvent) {
		c.reqs.Add(1)
		if e.Err != nil {
			v, _ := c.reqErrs.LoadOrStore(e.Err.Class, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		}
	}}
}

func (c *stressCall) run(ctx context.Context, t *testing.T, lim *Limiter, x *stressIndex) {
	if c.cancel > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cancel)
		defer cancel()
	}
	opts := []Option{
		WithUpsertFunc(x.send), WithLimiter(lim), WithNamespaceOf(c.nsOf), WithDimension(2),
		WithBackoff(time.Millisecond, 4*time.Millisecond), WithMaxRetries(ClassRateLimited, 50),
		WithObserver(c.observer()),
	}
	if c.conc > 0 {
		opts = append(opts, WithConcurrency(c.conc))
	}
	if c.batch > 0 {
		opts = append(opts, WithBatchSize(c.batch))
	}
	c.landed = make(map[int]bool)
	if c.op != "All" {
		opts = append(opts, WithMaxDelay(2*time.Millisecond))
	}
	switch c.op {
	case "All":
		c.res, c.err = All(ctx, c.records, opts...)
		c.taken = len(c.records)
	case "Stream":
		seq := iter.Seq[*pinecone.Vector](func(yield func(*pinecone.Vector) bool) {
			for _, v := range c.records {
				if !yield(v) {
					return
				}
			}
		})
		c.res, c.err = Stream(ctx, seq, append(opts, WithAcks(c.ack))...)
		c.taken = c.res.Stats.Records
	case "Writer":
		w, err := NewWriter(ctx, append(opts, WithAcks(c.ack))...)
		if err != nil {
			t.Errorf("%s: NewWriter: %v", c.name, err)
			return
		}
		for _, v := range c.records {
			if w.Add(context.Background(), v) != nil {
				break
			}
			c.taken++
		}
		c.res, c.err = w.Close(context.Background())
	}
}

// check verifies the call's accounting and that the store holds, for each
// id, the version of its last record that landed.
func (c *stressCall) check(t *testing.T, x *stressIndex) {
	t.Helper()
	s := c.res.Stats
	if got := c.res.Upserted + len(c.res.Failed) + c.res.Duplicates; got != c.taken {
		t.Errorf("%s (%s conc=%d cancel=%v): upserted %d + failed %d + duplicates %d = %d, want the %d records taken (err %v)",
			c.name, c.op, c.conc, c.cancel, c.res.Upserted, len(c.res.Failed), c.res.Duplicates, got, c.taken, c.err)
	}
	if int64(s.Requests) != c.reqs.Load() {
		t.Errorf("%s: Stats.Requests %d, RequestDone events %d", c.name, s.Requests, c.reqs.Load())
	}
	for cl, n := range s.ErrorsByClass {
		var got int64
		if v, ok := c.reqErrs.Load(cl); ok {
			got = v.(*atomic.Int64).Load()
		}
		if int64(n) != got {
			t.Errorf("%s: Stats.ErrorsByClass[%v] %d, RequestDone events %d", c.name, cl, n, got)
		}
	}
	// Outcome of each position.
	landed := make(map[int]bool, c.taken)
	if c.op == "All" {
		failed := make(map[int]bool)
		for _, f := range c.res.Failed {
			failed[f.Index] = true
		}
		// All sends the last record of each id: an earlier one is a duplicate.
		last := make(map[string]int)
		for i, v := range c.records {
			last[v.Id] = i
		}
		for i, v := range c.records {
			landed[i] = last[v.Id] == i && !failed[i]
		}
	} else {
		c.mu.Lock()
		if len(c.landed) != c.taken {
			t.Errorf("%s (%s): %d acks for %d records taken", c.name, c.op, len(c.landed), c.taken)
		}
		for k, v := range c.landed {
			landed[k] = v
		}
		c.mu.Unlock()
	}
	want := make(map[[2]string]float32)
	for i := 0; i < c.taken; i++ {
		v := c.records[i]
		if landed[i] {
			want[[2]string{c.nsOf(v), v.Id}] = (*v.Values)[0]
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := 0; i < c.taken; i++ {
		v := c.records[i]
		k := [2]string{c.nsOf(v), v.Id}
		w, ok := want[k]
		got, has := x.store[k[0]][k[1]]
		switch {
		case ok && (!has || got != w):
			t.Errorf("%s (%s conc=%d): %s/%s holds version %v (present %v), want %v, the last that landed", c.name, c.op, c.conc, k[0], k[1], got, has, w)
		case !ok && has:
			t.Errorf("%s (%s conc=%d): %s/%s holds version %v, though no record of it landed", c.name, c.op, c.conc, k[0], k[1], got)
		}
	}
}

// Calls of every kind sharing one Limiter, its two lines for the rates
// (headOf), its rests and the Retry-After pause: 2-4 calls on one Limiter, 1-2 namespaces, some with
// WithConcurrency(1-3), some adaptive, some canceled; every record lands or
// fails, the last write of each id wins, nothing hangs or leaks.
func TestCallsOfEveryKindOnOneLimiterLoseNothingUnderRefusalsAndPauses(t *testing.T) {
	iters := 40
	if testing.Short() {
		iters = 10
	}
	if s := os.Getenv("UPSERT_STRESS_ITERS"); s != "" {
		iters, _ = strconv.Atoi(s)
	}
	off := 0
	if s := os.Getenv("UPSERT_STRESS_SEED"); s != "" {
		off, _ = strconv.Atoi(s)
	}
	base := runtime.NumGoroutine()
	start := time.Now()
	var totalRefused, totalWrites int64
	for it := range iters {
		seed := uint64(off + it + 1)
		rnd := rand.New(rand.NewPCG(seed, 7))
		x := &stressIndex{rnd: rand.New(rand.NewPCG(seed, 9)), p429: 0.10 + 0.10*rnd.Float64(), store: make(map[string]map[string]float32)}
		lim := &Limiter{}
		nns := 1 + rnd.IntN(2)
		ncalls := 2 + rnd.IntN(3)
		calls := make([]*stressCall, ncalls)
		for k := range calls {
			c := &stressCall{name: fmt.Sprintf("seed %d call %d", seed, k)}
			c.op = []string{"All", "Writer", "Stream"}[rnd.IntN(3)]
			if rnd.IntN(2) == 0 {
				c.conc = 1 + rnd.IntN(3)
			}
			if rnd.IntN(3) > 0 {
				c.batch = 1 + rnd.IntN(12)
			}
			if rnd.IntN(4) == 0 {
				c.cancel = time.Duration(1+rnd.IntN(60)) * time.Millisecond
			}
			n := 50 + rnd.IntN(150)
			ids := 5 + rnd.IntN(30)
			for i := range n {
				id := fmt.Sprintf("c%d-%d", k, rnd.IntN(ids))
				c.records = append(c.records, &pinecone.Vector{Id: id, Values: &[]float32{float32(i + 1), 1}})
			}
			c.nsOf = func(v *pinecone.Vector) string {
				if nns == 1 {
					return "ns"
				}
				return "ns" + strconv.Itoa(int(v.Id[len(v.Id)-1])%2)
			}
			calls[k] = c
		}
		done := make(chan struct{})
		var wg sync.WaitGroup
		for _, c := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.run(context.Background(), t, lim, x)
			}()
		}
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			var b strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Fatalf("seed %d: calls hung\n%s", seed, b.String())
		}
		for _, c := range calls {
			c.check(t, x)
		}
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
		totalRefused += x.refused.Load()
		totalWrites += x.writes.Load()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Errorf("goroutines: %d before, %d after\n%s", base, n, b.String())
	}
	t.Logf("%d iterations in %v: %d writes, %d refused", iters, time.Since(start), totalWrites, totalRefused)
}

// Streams and a Writer on one Limiter,
// shared across processes (countingStore), over more namespaces than a
// run keeps routes for, revisiting them, so that routes are dropped, their
// memberships left in the background, and routes made again take them
// back while leaves are pending; some runs are canceled mid-way. At the
// end no membership is live, no lane is shared, no goroutine is left, and
// every record taken landed or failed.
func TestRunsSharingLanesAcrossProcessesLeaveNoMembershipBehind(t *testing.T) {
	iters := 6
	if testing.Short() {
		iters = 2
	}
	if s := os.Getenv("UPSERT_STRESS_SHARE_ITERS"); s != "" {
		iters, _ = strconv.Atoi(s)
	}
	base := runtime.NumGoroutine()
	for it := range iters {
		rnd := rand.New(rand.NewPCG(uint64(it+1), 3))
		store := &countingStore{}
		lim := &Limiter{clock: newFakeClock()}
		fi := newFakeIndex(nil)
		pool := minRoutes + 200 + rnd.IntN(800)
		type out struct {
			res   Result
			err   error
			taken int
		}
		runs := 2 + rnd.IntN(2)
		outs := make([]out, runs)
		var wg sync.WaitGroup
		for k := range runs {
			n := 1500 + rnd.IntN(2500)
			cancelAt := -1
			if rnd.IntN(3) == 0 {
				cancelAt = rnd.IntN(n)
			}
			writer := k == 2
			nsSeed := rnd.Uint64()
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				r := rand.New(rand.NewPCG(nsSeed, 1))
				recs := make([]*pinecone.Vector, n)
				for i := range recs {
					recs[i] = routeVec(fmt.Sprintf("t%d/%d-%d", r.IntN(pool), k, i))
				}
				opts := testOpts(fi, WithLimiter(lim), WithBatchSize(1),
					WithNamespaceOf(func(v *pinecone.Vector) string { ns, _, _ := strings.Cut(v.Id, "/"); return ns }),
					func(c *config) { c.store, c.shareHost = store, "h" })
				if writer {
					w, err := NewWriter(ctx, opts...)
					if err != nil {
						t.Error(err)
						return
					}
					for i, v := range recs {
						if i == cancelAt {
							cancel()
						}
						if w.Add(context.Background(), v) != nil {
							break
						}
						outs[k].taken++
					}
					outs[k].res, outs[k].err = w.Close(context.Background())
					return
				}
				seq := func(yield func(*pinecone.Vector) bool) {
					for i, v := range recs {
						if i == cancelAt {
							cancel()
						}
						if !yield(v) {
							return
						}
					}
				}
				outs[k].res, outs[k].err = Stream(ctx, seq, opts...)
				outs[k].taken = outs[k].res.Stats.Records
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			var b strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Fatalf("iteration %d hung\n%s", it, b.String())
		}
		for k, o := range outs {
			if got := o.res.Upserted + o.res.Stats.Failed + o.res.Duplicates; got != o.taken {
				t.Errorf("iteration %d run %d: upserted %d + failed %d + duplicates %d = %d, want %d taken (err %v)",
					it, k, o.res.Upserted, o.res.Stats.Failed, o.res.Duplicates, got, o.taken, o.err)
			}
		}
		upserted, taken := 0, 0
		for _, o := range outs {
			upserted, taken = upserted+o.res.Upserted, taken+o.taken
		}
		// Every id is a run's own: what landed is stored, and no more
		// than was taken (a record canceled in flight may have landed).
		if stored := len(fi.Stored()); stored < upserted || stored > taken {
			t.Errorf("iteration %d: %d records stored, %d upserted, %d taken", it, stored, upserted, taken)
		}
		joined, live := store.counts()
		if live != 0 {
			t.Errorf("iteration %d: %d memberships live after every run ended (%d joined)", it, live, joined)
		}
		lim.mu.Lock()
		for id, ln := range lim.lanes {
			ln.mu.Lock()
			if ln.share.users != 0 || ln.share.m != nil || ln.use.routes != 0 {
				t.Errorf("iteration %d: lane %q shared by %d runs (member %v), held by %d routes after the runs", it, id.key, ln.share.users, ln.share.m != nil, ln.use.routes)
			}
			ln.mu.Unlock()
		}
		lim.mu.Unlock()
		if t.Failed() {
			t.FailNow()
		}
		t.Logf("iteration %d: %d runs, %d namespaces, %d joins", it, runs, pool, joined)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Errorf("goroutines: %d before, %d after\n%s", base, n, b.String())
	}
}
