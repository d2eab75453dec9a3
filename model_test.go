package upsert

// The model-based test of the Writer and of Stream: rapid draws a run
// (how the index fails, the options, hostile records, what several
// goroutines do and when contexts end), the run goes, and the outcome is
// checked against a simple model:
//
//   - every record taken (Add returned nil, or pulled by Stream) is
//     upserted, failed or replaced by a later record of its id, exactly
//     once, and the counts of the Result agree;
//   - records that break a rule fail as invalid without being sent, and
//     nothing the index could not take reaches it;
//   - Flush returns once the records added before it have settled, and
//     Close and Flush return within their contexts (a generous bound
//     detects a hang; nothing is timed);
//   - the records held never exceed the configured bounds (counted, not
//     measured in bytes);
//   - a checkpoint never passes a record that did not land or fail for
//     good;
//   - with acks: every record taken is acked exactly once, in input order
//     (the records of one producer in the order it added them), a landed
//     ack only once the index confirmed the record, a failed one with the
//     failure the observer saw, and none after a panic of the ack function;
//   - no goroutine is left behind.
//
// Short mode runs 200 runs of each (the README's test command); the long
// mode is a separate command:
//
//	go test -run TestModel -rapid.checks=10000 .

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"iter"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"pgregory.net/rapid"
)

// modelBound is the hang detector: every call must end long before it.
const modelBound = 30 * time.Second

// A shape is what a drawn record is.
type shape int

const (
	recValid   shape = iota
	recDupID         // an id from a small pool, so that ids repeat
	recNil           // a nil record
	recBadUTF8       // a metadata string that is not UTF-8
	recBadNS         // routed to a namespace that is not UTF-8
	recReused        // a valid record written into the goroutine's one reused *Vector
	numRecordKinds
)

// modelProfile is how the index behaves and how the library is set up for
// one run.
type modelProfile struct {
	seed        maphash.Seed
	faultPct    int     // share of requests that fail, in percent
	poisonEvery int     // a record whose token is a multiple of it is always refused as invalid (0: none)
	denyAfter   int     // the index denies the caller from this request on (0: never)
	namespaces  int     // 1, a few, or 0 for one per record
	concurrency int     // fixed
	batchSize   int     // fixed, or 0 for adaptive
	maxHeld     int     // the bound on records held undispatched
	panics      bool    // some requests panic in the send function
	maxRate     float64 // records a second (WithMaxRate), or 0 for none
}

func drawProfile(t *rapid.T) modelProfile {
	p := modelProfile{
		seed:        maphash.MakeSeed(),
		faultPct:    rapid.SampledFrom([]int{0, 0, 10, 30, 60}).Draw(t, "faultPct"),
		poisonEvery: rapid.SampledFrom([]int{0, 0, 7, 13}).Draw(t, "poisonEvery"),
		namespaces:  rapid.SampledFrom([]int{1, 1, 3, 0}).Draw(t, "namespaces"),
		concurrency: rapid.IntRange(1, 4).Draw(t, "concurrency"),
		batchSize:   rapid.SampledFrom([]int{0, 1, 2, 5, 20}).Draw(t, "batchSize"),
		maxHeld:     rapid.SampledFrom([]int{2, 8, 50}).Draw(t, "maxHeld"),
		panics:      rapid.Bool().Draw(t, "panics"),
		maxRate:     rapid.SampledFrom([]float64{0, 0, 50, 1e4}).Draw(t, "maxRate"),
	}
	if rapid.IntRange(0, 9).Draw(t, "deny?") == 0 {
		p.denyAfter = rapid.IntRange(1, 20).Draw(t, "denyAfter")
	}
	return p
}

func (p modelProfile) options(ix *modelIndex) []Option {
	opts := []Option{
		WithUpsertFunc(ix.send), WithConcurrency(p.concurrency), withClock(newFakeClock()),
		WithRequestTimeout(20 * time.Millisecond), WithMaxDelay(2 * time.Millisecond),
		WithMaxRetries(ClassServer, 2), WithMaxRetries(ClassTimeout, 1), WithMaxRetries(ClassRateLimited, 3),
		WithNamespaceOf(p.namespaceOf), WithObserver(Observer{Failure: ix.failed}),
		func(c *config) { c.maxHeld = p.maxHeld },
	}
	if p.batchSize > 0 {
		opts = append(opts, WithBatchSize(p.batchSize))
	}
	if p.maxRate > 0 {
		opts = append(opts, WithMaxRate(p.maxRate))
	}
	return opts
}

// namespaceOf routes a record by the "ns" field its id carries.
func (p modelProfile) namespaceOf(v *pinecone.Vector) string {
	if v == nil {
		return "ns"
	}
	var tok int
	var kind shape
	_, _ = fmt.Sscanf(v.Id, "k%d-t%d", &kind, &tok)
	switch {
	case kind == recBadNS:
		return "bad-\xff"
	case p.namespaces == 1:
		return "ns"
	case p.namespaces == 0:
		return fmt.Sprint("ns-", tok)
	default:
		return fmt.Sprint("ns-", tok%p.namespaces)
	}
}

// bound is the most records the run may hold: those waiting undispatched,
// those in the batches of the worker pool, and one per producer on its way
// in.
func (p modelProfile) bound(producers int) int64 {
	batch := p.batchSize
	if batch == 0 {
		batch = MaxBatchSize
	}
	return int64(p.maxHeld + (2*p.concurrency+2)*batch + producers)
}

// modelRecord makes the record of token tok: its id says its kind and
// token (so that the index can tell which record it got), and its
// metadata carries the token too, so that a failure's copy names it.
func modelRecord(kind shape, tok, pool int, reuse *pinecone.Vector) *pinecone.Vector {
	if kind == recNil {
		return nil
	}
	id := fmt.Sprintf("k%d-t%d", kind, tok)
	if kind == recDupID {
		id = fmt.Sprintf("k%d-dup%d", kind, pool) // its namespace too is the same for every token
	}
	v := &pinecone.Vector{}
	if kind == recReused && reuse != nil {
		v = reuse // written over in place: the library must have copied the last one
	}
	v.Id = id
	vals := []float32{float32(tok) + 1, 1}
	if v.Values != nil && len(*v.Values) == 2 {
		copy(*v.Values, vals)
	} else {
		v.Values = &vals
	}
	title := "ok"
	if kind == recBadUTF8 {
		title = "caf\xe9"
	}
	v.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{
		"tok": structpb.NewNumberValue(float64(tok)), "title": structpb.NewStringValue(title),
	}}
	return v
}

// idKey is what a record is deduplicated by: its namespace and id.
func idKey(v *pinecone.Vector, ns string) string { return ns + "/" + v.Id }

// modelIndex is the index of a run: it fails as its profile says, checks
// that nothing it could not take reaches it, and counts what it confirmed
// and what was reported failed, per token.
type modelIndex struct {
	p        modelProfile
	requests atomic.Int64

	mu         sync.Mutex
	attempts   map[int]int
	confirmed  map[int]int
	failures   map[int][]Failure
	nilFailed  int
	violations []string
}

func newModelIndex(p modelProfile) *modelIndex {
	return &modelIndex{p: p, attempts: map[int]int{}, confirmed: map[int]int{}, failures: map[int][]Failure{}}
}

func (m *modelIndex) violate(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.violations = append(m.violations, fmt.Sprintf(format, args...))
}

func tokenOf(v *pinecone.Vector) int {
	if v == nil || v.Metadata == nil {
		return -1
	}
	return int(v.Metadata.Fields["tok"].GetNumberValue())
}

func (m *modelIndex) send(ctx context.Context, ns string, batch []*pinecone.Vector) error {
	n := m.requests.Add(1)
	if !utf8.ValidString(ns) {
		m.violate("a request reached the index for namespace %q", ns)
	}
	toks := make([]int, len(batch))
	for i, v := range batch {
		if v == nil {
			m.violate("a nil record reached the index")
			return status.Error(codes.InvalidArgument, "nil")
		}
		if _, err := proto.Marshal(v.Metadata); err != nil {
			m.violate("record %s, which gRPC cannot encode, reached the index", v.Id)
		}
		toks[i] = tokenOf(v)
	}
	m.mu.Lock()
	attempt := m.attempts[toks[0]]
	for _, tok := range toks {
		m.attempts[tok]++
	}
	m.mu.Unlock()
	if m.p.denyAfter > 0 && int(n) >= m.p.denyAfter {
		return status.Error(codes.Unauthenticated, "Unauthorized")
	}
	for _, tok := range toks {
		if m.p.poisonEvery > 0 && tok%m.p.poisonEvery == 0 {
			return status.Error(codes.InvalidArgument, "Metadata size is too large")
		}
	}
	h := maphash.Comparable(m.p.seed, [2]int{toks[0], attempt})
	if int(h%100) < m.p.faultPct {
		switch h / 100 % 6 {
		case 0:
			return status.Error(codes.ResourceExhausted, "slow down")
		case 1:
			return status.Error(codes.Unavailable, "down")
		case 2:
			return context.DeadlineExceeded // an ambiguous timeout: it may have been applied
		case 3:
			if m.p.panics {
				panic(fmt.Sprint("send bug on ", toks[0]))
			}
		case 4:
			<-ctx.Done() // a request that hangs until its timeout
			return ctx.Err()
		case 5:
			select { // slow
			case <-time.After(time.Duration(h%300) * time.Microsecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, tok := range toks {
		m.confirmed[tok]++
	}
	return nil
}

func (m *modelIndex) failed(f Failure) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f.Record == nil {
		m.nilFailed++
		return
	}
	tok := tokenOf(f.Record)
	m.failures[tok] = append(m.failures[tok], f)
}

func (m *modelIndex) nils() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nilFailed
}

// settledTokens returns the tokens confirmed or failed so far.
func (m *modelIndex) settledTokens() map[int]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[int]bool, len(m.confirmed)+len(m.failures))
	for tok := range m.confirmed {
		out[tok] = true
	}
	for tok := range m.failures {
		out[tok] = true
	}
	return out
}

// taken is a record the run took in.
type taken struct {
	tok      int
	kind     shape
	key      string // namespace and id, as deduplicated
	producer int    // the goroutine that added it, for a Writer
}

// checkAccounts checks the model's first promises on the records taken:
// each settled exactly once (or was replaced by a later record of its id),
// the Result's counts agree, and what broke a rule failed as invalid
// unsent. It returns the tokens that were replaced.
func (m *modelIndex) checkAccounts(t *rapid.T, records []taken, res Result) map[int]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.violations {
		t.Error(v)
	}
	keys := map[string]int{}
	for _, r := range records {
		keys[r.key]++
	}
	replaced := map[int]bool{}
	confirmed, failed, nils := 0, 0, 0
	for _, r := range records {
		c, fs := m.confirmed[r.tok], m.failures[r.tok]
		if r.kind == recNil {
			nils++
			continue
		}
		if c > 1 || len(fs) > 1 || c+len(fs) > 1 {
			t.Errorf("record %d settled more than once: confirmed %d times, failed %d times", r.tok, c, len(fs))
		}
		confirmed += min(c, 1)
		failed += min(len(fs), 1)
		if c == 0 && len(fs) == 0 {
			if keys[r.key] < 2 {
				t.Errorf("record %d (%s) neither landed, nor failed, nor was replaced by a later record of its id", r.tok, r.key)
			}
			replaced[r.tok] = true
		}
		if r.kind == recBadUTF8 || r.kind == recBadNS {
			for _, f := range fs {
				if f.Class != ClassInvalid || f.Attempts != 0 {
					if f.Class != ClassCanceled && f.Class != ClassDenied {
						t.Errorf("record %d breaks a rule and failed as %v after %d attempts: %v", r.tok, f.Class, f.Attempts, f.Err)
					}
				}
			}
			if c > 0 {
				t.Errorf("record %d breaks a rule and was confirmed", r.tok)
			}
		}
	}
	if m.nilFailed != nils {
		t.Errorf("%d nil records taken, %d failed", nils, m.nilFailed)
	}
	if res.Stats.Records != len(records) {
		t.Errorf("Stats.Records is %d, %d records were taken", res.Stats.Records, len(records))
	}
	if res.Upserted != confirmed {
		t.Errorf("Upserted is %d, the index confirmed %d", res.Upserted, confirmed)
	}
	if res.Stats.Failed != failed+nils {
		t.Errorf("Stats.Failed is %d, %d failures were observed", res.Stats.Failed, failed+nils)
	}
	if res.Duplicates != len(replaced) {
		t.Errorf("Duplicates is %d, %d records were replaced", res.Duplicates, len(replaced))
	}
	return replaced
}

// modelCtx is the context of an operation: ended already, ending in a
// millisecond, or the hang detector's.
func modelCtx(t *rapid.T, label string) context.Context {
	switch rapid.IntRange(0, 5).Draw(t, label) {
	case 0:
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	case 1:
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	default:
		ctx, cancel := context.WithTimeout(context.Background(), modelBound)
		t.Cleanup(cancel)
		return ctx
	}
}

// modelOp is one step of a producer: a Flush, or an Add of a record.
type modelOp struct {
	flush bool
	kind  shape
	pool  int
	ctx   context.Context
}

// explored counts what the runs of a property went through, so that -v
// shows the model reaches what it is meant to (duplicates, stale
// records, panics, denials, checkpoints short of the input...).
var explored = map[string]int{}

func note(what string, happened bool) {
	if happened {
		explored[what]++
	}
}

func TestModelWriter(t *testing.T) {
	defer func() { t.Logf("explored: %v", explored); clear(explored) }()
	rapid.Check(t, func(t *rapid.T) {
		leaks := goleak.IgnoreCurrent()
		p := drawProfile(t)
		ix := newModelIndex(p)
		scripts, total := drawScripts(t)
		wctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		acks := drawAcks(t, ix)
		w, err := NewWriter(wctx, append(p.options(ix), acks.options()...)...)
		if err != nil {
			t.Fatal(err)
		}
		run := &writerRun{w: w, ix: ix, bound: p.bound(len(scripts)), cancelAt: -1, closeAt: total, cancel: cancel, closeNow: make(chan struct{})}
		if rapid.IntRange(0, 3).Draw(t, "cancel?") == 0 {
			run.cancelAt = rapid.IntRange(0, total).Draw(t, "cancelAt")
		}
		if rapid.Bool().Draw(t, "closeEarly") {
			run.closeAt = rapid.IntRange(0, total).Draw(t, "closeAt") // Close races the rest
		}
		run.step(0)
		var wg sync.WaitGroup
		for g, script := range scripts {
			wg.Go(func() { run.produce(g, script) })
		}
		produced := make(chan struct{})
		go func() {
			wg.Wait()
			close(produced)
		}()
		select {
		case <-run.closeNow:
		case <-produced:
		case <-time.After(modelBound):
			hung(t, "the producers hang")
		}
		cctx, ccancel := context.WithTimeout(context.Background(), modelBound)
		defer ccancel()
		res, err := w.Close(cctx)
		if err != nil && cctx.Err() != nil {
			hung(t, "Close hangs")
		}
		select {
		case <-produced:
		case <-time.After(modelBound):
			hung(t, "the producers hang after Close")
		}
		replaced := run.check(t, res)
		acks.check(t, run.records, replaced, res, err, true)
		if n := w.in.heldRoutes(); n != 0 {
			t.Fatalf("%d routes counted as holding records after Close", n)
		}
		if err := goleak.Find(leaks); err != nil {
			t.Fatal(err)
		}
	})
}

// drawScripts draws what each of one to four producers does.
func drawScripts(t *rapid.T) (scripts [][]modelOp, total int) {
	scripts = make([][]modelOp, rapid.IntRange(1, 4).Draw(t, "producers"))
	for g := range scripts {
		n := rapid.IntRange(0, 40).Draw(t, fmt.Sprint("ops", g))
		for i := range n {
			op := modelOp{flush: rapid.IntRange(0, 9).Draw(t, "flush?") == 0}
			if !op.flush {
				op.kind = shape(rapid.IntRange(0, int(numRecordKinds)-1).Draw(t, "kind"))
				op.pool = rapid.IntRange(0, 3).Draw(t, "pool")
			}
			op.ctx = modelCtx(t, fmt.Sprint("ctx", g, "-", i))
			scripts[g] = append(scripts[g], op)
		}
		total += n
	}
	return scripts, total
}

// writerRun is one run of the Writer's model: what the producers did.
type writerRun struct {
	w        *Writer
	ix       *modelIndex
	bound    int64
	cancelAt int // after how many operations the Writer's context ends, or -1
	closeAt  int // after how many operations Close is called
	cancel   context.CancelFunc
	closeNow chan struct{}
	done     atomic.Int64 // operations done
	tokens   atomic.Int64

	mu       sync.Mutex
	records  []taken
	problems []string
	flushes  []flushCheck
}

// flushCheck is a Flush that returned nil: the records its caller had
// added before it, and those settled when it returned.
type flushCheck struct{ before, settled map[int]bool }

// step counts n more operations done and ends the Writer's context or
// calls Close when their turn comes.
func (r *writerRun) step(n int) {
	done := int(r.done.Add(int64(n)))
	if done == r.cancelAt {
		r.cancel()
	}
	if done == r.closeAt {
		close(r.closeNow)
	}
}

func (r *writerRun) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// produce runs producer g's script.
func (r *writerRun) produce(g int, script []modelOp) {
	var reuse *pinecone.Vector
	mine := map[int]bool{} // tokens this producer added
	for _, op := range script {
		if op.flush {
			before := maps.Clone(mine)
			if err := r.w.Flush(op.ctx); err == nil {
				r.mu.Lock()
				r.flushes = append(r.flushes, flushCheck{before: before, settled: r.ix.settledTokens()})
				r.mu.Unlock()
			} else if !modelExpected(err) {
				r.problem("producer %d: Flush: %v", g, err)
			}
			r.step(1)
			continue
		}
		tok := int(r.tokens.Add(1))
		v := modelRecord(op.kind, tok, op.pool, reuse)
		if op.kind == recReused {
			reuse = v
		}
		key := ""
		if v != nil {
			key = idKey(v, r.ix.p.namespaceOf(v))
		}
		err := r.w.AddTagged(op.ctx, v, tok)
		switch {
		case err == nil:
			r.mu.Lock()
			r.records = append(r.records, taken{tok: tok, kind: op.kind, key: key, producer: g})
			r.mu.Unlock()
			if v != nil { // a nil record fails at once, and carries no token
				mine[tok] = true
			}
		case !modelExpected(err):
			r.problem("producer %d: Add: %v", g, err)
		}
		if held := r.w.in.unsettled.Load(); held > r.bound {
			r.problem("%d records held, more than the bound %d", held, r.bound)
		}
		r.step(1)
	}
}

// check checks the run against the model, and returns the tokens that
// were replaced.
func (r *writerRun) check(t *rapid.T, res Result) map[int]bool {
	for _, pr := range r.problems {
		t.Error(pr)
	}
	replaced := r.ix.checkAccounts(t, r.records, res)
	for i, f := range r.flushes {
		for tok := range f.before {
			if !f.settled[tok] && !replaced[tok] {
				t.Errorf("Flush %d returned before record %d, added before it, settled", i, tok)
			}
		}
	}
	note("runs", true)
	note("upserted", res.Upserted > 0)
	note("failed", res.Stats.Failed > 0)
	note("duplicates", res.Duplicates > 0)
	note("stale", res.Stats.MayBeStale > 0)
	note("flushes checked", len(r.flushes) > 0)
	note("Close raced the producers", r.closeAt < int(r.done.Load()))
	note("context ended", r.cancelAt >= 0)
	for c, n := range res.Stats.ErrorsByClass {
		note("request failed: "+c.String(), n > 0)
	}
	var pe *PanicError
	note("send panicked", slices.ContainsFunc(res.Failed, func(f Failure) bool { return errors.As(f.Err, &pe) }))
	return replaced
}

// modelExpected reports the errors a call may return in a run: its own
// context ending, the Writer closed, the run stopped.
func modelExpected(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrClosed) || errors.Is(err, ErrCanceled) || errors.Is(err, ErrDenied)
}

// modelFailedForGood is the model's rule for a failure a checkpoint may
// pass: a rule the record broke, or retries that ran out after it was
// sent; never the run stopping (canceled, denied), the index down (the
// breaker's failures, whose message says the record was not sent) or a
// panic of the caller's code.
func modelFailedForGood(f Failure) bool {
	var pe *PanicError
	switch {
	case f.Class == ClassInvalid || f.Class == ClassTooLarge:
		return true
	case f.Class == ClassCanceled || f.Class == ClassDenied || f.Class == ClassQuotaExceeded:
		return false
	case errors.As(f.Err, &pe):
		return false
	case strings.Contains(f.Err.Error(), "circuit breaker open"),
		strings.Contains(f.Err.Error(), "the circuit breaker has given up on the index"): // its last retry spent then
		return false
	default:
		return f.Attempts > 0
	}
}

// memCheckpoint is a Checkpoint in memory that remembers every save.
type memCheckpoint struct {
	mu    sync.Mutex
	saves []int64
}

func (c *memCheckpoint) Load(context.Context) (int64, error) { return 0, nil }

func (c *memCheckpoint) Save(_ context.Context, n int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.saves = append(c.saves, n)
	return nil
}

func TestModelStream(t *testing.T) {
	defer func() { t.Logf("explored: %v", explored); clear(explored) }()
	rapid.Check(t, func(t *rapid.T) {
		leaks := goleak.IgnoreCurrent()
		p := drawProfile(t)
		ix := newModelIndex(p)
		in := drawInput(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cp := &memCheckpoint{}
		var res Result
		var err error
		acks := drawAcks(t, ix)
		panicked := false
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			defer func() { panicked = recover() != nil }()
			res, err = Stream(ctx, in.seq(ix, cancel), append(append(p.options(ix), WithCheckpoint(cp)), acks.options()...)...)
		}()
		select {
		case <-finished:
		case <-time.After(modelBound):
			hung(t, "Stream hangs")
		}
		if panicked && in.panicAt < 0 {
			t.Fatal("Stream panicked, and the iterator did not")
		}
		var replaced map[int]bool
		if !panicked { // a panic returns no Result
			replaced = ix.checkAccounts(t, in.pulled, res)
		}
		ix.checkCheckpoint(t, in.pulled, cp)
		acks.check(t, in.pulled, replaced, res, err, !panicked)
		if err := goleak.Find(leaks); err != nil {
			t.Fatal(err)
		}
		note("runs", true)
		note("iterator panicked", panicked)
		note("context ended", in.cancelAt >= 0)
		note("stale", res.Stats.MayBeStale > 0)
		note("failed", res.Stats.Failed > 0)
		note("duplicates", res.Duplicates > 0)
		note("checkpoint short of the records pulled", slices.ContainsFunc(cp.saves, func(m int64) bool { return int(m) < len(in.pulled) }))
	})
}

// streamInput is a Stream's input: records of drawn shapes, a pull at
// which the caller's context ends and one at which the iterator panics.
type streamInput struct {
	kinds             []shape
	pools             []int
	cancelAt, panicAt int // -1 for never
	pulled            []taken
}

func drawInput(t *rapid.T) *streamInput {
	n := rapid.IntRange(0, 120).Draw(t, "records")
	in := &streamInput{kinds: make([]shape, n), pools: make([]int, n), cancelAt: -1, panicAt: -1}
	for i := range n {
		in.kinds[i] = shape(rapid.IntRange(0, int(numRecordKinds)-1).Draw(t, "kind"))
		in.pools[i] = rapid.IntRange(0, 3).Draw(t, "pool")
	}
	if rapid.IntRange(0, 3).Draw(t, "cancel?") == 0 {
		in.cancelAt = rapid.IntRange(0, n).Draw(t, "cancelAt")
	}
	if rapid.IntRange(0, 9).Draw(t, "panic?") == 0 {
		in.panicAt = rapid.IntRange(0, n).Draw(t, "panicAt")
	}
	return in
}

// seq yields the input, the token of each record its position, and checks
// after each pull that what the run holds stays within the bound.
func (in *streamInput) seq(ix *modelIndex, cancel context.CancelFunc) iter.Seq[*pinecone.Vector] {
	return func(yield func(*pinecone.Vector) bool) {
		var reuse *pinecone.Vector
		keys := map[string]bool{}
		for i, kind := range in.kinds {
			if i == in.cancelAt {
				cancel()
			}
			if i == in.panicAt {
				panic("iterator bug")
			}
			v := modelRecord(kind, i, in.pools[i], reuse)
			if kind == recReused {
				reuse = v
			}
			key := ""
			if v != nil {
				key = idKey(v, ix.p.namespaceOf(v))
			}
			in.pulled = append(in.pulled, taken{tok: i, kind: kind, key: key})
			keys[key] = true
			if !yield(v) {
				return
			}
			// Held, at most: pulled and not settled, less those a later
			// record of their id may have replaced.
			held := int64(len(in.pulled) - len(ix.settledTokens()) - (len(in.pulled) - len(keys)) - ix.nils())
			if bound := ix.p.bound(1); held > bound {
				ix.violate("%d records held, more than the bound %d", held, bound)
			}
		}
	}
}

// checkCheckpoint checks that no save passed a record that did not land
// or fail for good, or that a later record of its id did not replace.
func (m *modelIndex) checkCheckpoint(t *rapid.T, pulled []taken, cp *memCheckpoint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, mark := range cp.saves {
		if int(mark) > len(pulled) {
			t.Errorf("checkpoint %d is past the %d records pulled", mark, len(pulled))
		}
		for _, r := range pulled[:min(int(mark), len(pulled))] {
			if r.kind == recNil || m.confirmed[r.tok] > 0 {
				continue
			}
			fs := m.failures[r.tok]
			if len(fs) == 0 {
				if !slices.ContainsFunc(pulled[r.tok+1:], func(o taken) bool { return o.key == r.key }) {
					t.Errorf("checkpoint %d passes record %d, which neither landed nor failed nor was replaced", mark, r.tok)
				}
				continue
			}
			if f := fs[0]; !modelFailedForGood(f) {
				t.Errorf("checkpoint %d passes record %d, which failed as %v after %d attempts: %v", mark, r.tok, f.Class, f.Attempts, f.Err)
			}
		}
	}
}

// modelAcks is the acknowledgement function of a run, if it has one: it
// checks each ack against what the index and the observer saw when it
// comes, and keeps them for the checks at the end.
type modelAcks struct {
	ix      *modelIndex
	on      bool
	window  int  // 0: the default
	slow    bool // the function yields on every call, so that acks pile up
	panicAt int  // the call that panics, or -1

	mu       sync.Mutex
	calls    int
	next     int   // the position due
	order    []int // tokens in the order acked
	acks     map[int][]Ack
	problems []string
	panicked bool
}

func drawAcks(t *rapid.T, ix *modelIndex) *modelAcks {
	m := &modelAcks{ix: ix, panicAt: -1, acks: map[int][]Ack{}}
	if m.on = rapid.IntRange(0, 3).Draw(t, "acks?") != 0; !m.on {
		return m
	}
	m.window = rapid.SampledFrom([]int{0, 1, 3, 16}).Draw(t, "ackWindow")
	m.slow = rapid.Bool().Draw(t, "slowAcks")
	if rapid.IntRange(0, 9).Draw(t, "ackPanic?") == 0 {
		m.panicAt = rapid.IntRange(0, 5).Draw(t, "ackPanicAt")
	}
	return m
}

func (m *modelAcks) options() []Option {
	if !m.on {
		return nil
	}
	opts := []Option{WithAcks(m.f)}
	if m.window > 0 {
		opts = append(opts, WithAckWindow(m.window))
	}
	return opts
}

func (m *modelAcks) problem(format string, args ...any) {
	m.problems = append(m.problems, fmt.Sprintf(format, args...))
}

func (m *modelAcks) f(acks []Ack) {
	m.mu.Lock()
	call := m.calls
	m.calls++
	if m.panicked {
		m.problem("the ack function was called after it panicked")
	}
	for _, a := range acks {
		if a.Position != m.next {
			m.problem("ack of position %d where %d was due", a.Position, m.next)
		}
		m.next = a.Position + 1
		tok := a.Position // a stream's token is its position
		if a.Tag != nil {
			tok = a.Tag.(int)
		}
		m.order = append(m.order, tok)
		m.acks[tok] = append(m.acks[tok], a)
		m.checkNow(tok, a)
	}
	if call == m.panicAt {
		m.panicked = true
	}
	m.mu.Unlock()
	if m.slow {
		runtime.Gosched()
	}
	if call == m.panicAt {
		panic("ack function bug")
	}
}

// checkNow checks an ack against what the index and the observer have
// seen when it comes. m.mu is held.
func (m *modelAcks) checkNow(tok int, a Ack) {
	m.ix.mu.Lock()
	defer m.ix.mu.Unlock()
	confirmed, fs := m.ix.confirmed[tok], m.ix.failures[tok]
	switch {
	case a.Failure != nil:
		if a.Failure.Index != a.Position {
			m.problem("the ack of position %d carries the failure of %d", a.Position, a.Failure.Index)
		}
		if a.Failure.Record == nil {
			return // a nil record: the observer has no token for it
		}
		if len(fs) == 0 || fs[0].Err != a.Failure.Err {
			m.problem("record %d acked failed (%v) before the observer saw its failure", tok, a.Failure.Err)
		} else if a.Resend == modelFailedForGood(fs[0]) {
			m.problem("record %d failed as %v after %d attempts, and its ack says Resend %v", tok, fs[0].Class, fs[0].Attempts, a.Resend)
		}
	case a.Replaced:
		if confirmed > 0 || len(fs) > 0 {
			m.problem("record %d acked replaced, and it was confirmed %d times, failed %d times", tok, confirmed, len(fs))
		}
	default:
		if confirmed == 0 {
			m.problem("record %d acked landed before the index confirmed it", tok)
		}
		if a.Stale != nil && a.Stale.Index != a.Position {
			m.problem("the ack of position %d carries the Stale of %d", a.Position, a.Stale.Index)
		}
	}
}

// check checks, once the run is over, that every record taken was acked
// exactly once (only those before the function's panic when it panicked),
// each producer's in the order it added them, and that the outcomes agree
// with the result. complete is false when the run returned no Result.
func (m *modelAcks) check(t *rapid.T, records []taken, replaced map[int]bool, res Result, err error, complete bool) {
	if !m.on {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.problems {
		t.Error(p)
	}
	note("acks", true)
	note("ack function panicked", m.panicked)
	if m.panicked {
		var pe *PanicError
		if complete && !errors.As(err, &pe) {
			t.Errorf("the ack function panicked, and the run's error is %v", err)
		}
	}
	byTok := make(map[int]taken, len(records))
	for _, r := range records {
		byTok[r.tok] = r
		if n := len(m.acks[r.tok]); n > 1 || n == 0 && !m.panicked {
			t.Errorf("record %d acked %d times", r.tok, n)
		}
	}
	last := map[int]int{} // the last token acked of each producer
	stale := 0
	for _, tok := range m.order {
		r, ok := byTok[tok]
		if !ok {
			t.Errorf("token %d acked and not taken", tok)
			continue
		}
		if prev, ok := last[r.producer]; ok && prev > tok {
			t.Errorf("producer %d's record %d acked after its later record %d", r.producer, tok, prev)
		}
		last[r.producer] = tok
		a := m.acks[tok][0]
		if a.Replaced != replaced[tok] && complete {
			t.Errorf("record %d: acked replaced %v, replaced %v", tok, a.Replaced, replaced[tok])
		}
		if a.Stale != nil {
			stale++
		}
	}
	if complete && !m.panicked && stale != len(res.MayBeStale) {
		t.Errorf("%d acks say stale, the result lists %d", stale, len(res.MayBeStale))
	}
	note("stale acked", stale > 0)
}

// hung fails t for a hang, with every goroutine's stack: a hang seen once
// in a thousand runs (a lost wakeup, a slot not given back) is found from
// where each goroutine waits, which a replay of the same draws may not
// reach again.
func hung(t *rapid.T, what string) {
	buf := make([]byte, 1<<22)
	// To stderr, not t.Logf: rapid drops a run's log when a replay of its
	// draws does not fail again, and a hang's replay seldom does.
	fmt.Fprintf(os.Stderr, "%s; goroutines at the hang:\n%s\n", what, buf[:runtime.Stack(buf, true)])
	t.Fatal(what)
}
