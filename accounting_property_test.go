package upsert_test

// A property test of a run's accounting, against upserttest through the
// real SDK: rapid draws the API (All, Stream, Records, a Writer), the
// faults of the index, the options, hostile inputs and a cancellation
// point; after each run it checks (and reports every violation, with
// rapid's seed to replay):
//
//   - every record taken is upserted, failed (Failure.Index unique, in
//     range, in order; ID, Namespace, Record/Integrated its own) or a
//     duplicate, and Upserted+Failed+Duplicates = Stats.Records;
//   - the error is nil only when nothing failed, is a *RunError whose
//     counts agree, and matches the sentinel of every failed class;
//   - MayHaveLanded is false for records never sent, and the server holds
//     no record reported failed without it;
//   - what the server stores under each id is the record that landed last
//     (unless listed MayBeStale, or a later one may have landed);
//   - Stats (Requests, ErrorsByClass/Code, Retries, RetriesByClass,
//     RetriesPerBatch, Splits, BatchSizes, Latency, Skipped, MayBeStale)
//     agree with the Observer's events, RunDone, the final Progress and,
//     where comparable, the server's own Stats;
//   - with WithAcks: each record acked once, in order, with its outcome,
//     tag and failure; a checkpoint never passes a Resend failure;
//   - no goroutine is left behind.
//
// It takes about 20 s under -race, and is left out of -short:
//
//	go test -race -count=1 -run TestAccountingProperty .

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"
	"pgregory.net/rapid"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upserttest"
)

type acctAPI int

const (
	apiAll acctAPI = iota
	apiStream
	apiRecords
	apiWriter
)

func (a acctAPI) String() string { return [...]string{"All", "Stream", "Records", "Writer"}[a] }

type acctKind int

const (
	kValid    acctKind = iota
	kDup               // an id from a small pool
	kNil               // a nil record
	kEmptyID           // no id
	kBadUTF8           // metadata (or text) that is not UTF-8
	kNaN               // a NaN value (vectors) / a null field (records)
	kWrongDim          // another dimension (vectors) / no text field (records)
	kRejected          // the index rejects it (RejectIDs)
	kBig               // valid, with a few KB of metadata
	numAcctKinds
)

func (k acctKind) locallyInvalid() bool {
	return k == kNil || k == kEmptyID || k == kBadUTF8 || k == kNaN || k == kWrongDim
}

const acctDim = 4

// acctInput is one drawn input record.
type acctInput struct {
	kind acctKind
	id   string
	ns   string
	tok  int
}

func (in acctInput) key() string { return acctNSKey(in.ns) + "/" + in.id }

// acctNSKey is a namespace as Pinecone knows it: "" is "__default__".
func acctNSKey(ns string) string {
	if ns == "" {
		return "__default__"
	}
	return ns
}

func (in acctInput) vector() *pinecone.Vector {
	if in.kind == kNil {
		return nil
	}
	dim := acctDim
	if in.kind == kWrongDim {
		dim = acctDim + 1
	}
	vals := make([]float32, dim)
	vals[0] = float32(in.tok) + 1
	vals[1] = 1
	if in.kind == kNaN {
		vals[2] = float32(math.NaN())
	}
	title := "ok"
	if in.kind == kBadUTF8 {
		title = "caf\xe9"
	}
	if in.kind == kBig {
		title = strings.Repeat("x", 3000)
	}
	return &pinecone.Vector{Id: in.id, Values: &vals, Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
		"tok": structpb.NewNumberValue(float64(in.tok)), "ns": structpb.NewStringValue(in.ns), "title": structpb.NewStringValue(title),
	}}}
}

func (in acctInput) record() *pinecone.IntegratedRecord {
	if in.kind == kNil {
		return nil
	}
	r := pinecone.IntegratedRecord{"_id": in.id, "chunk_text": fmt.Sprint("text ", in.tok), "tok": float64(in.tok), "ns": in.ns}
	switch in.kind {
	case kBig:
		r["chunk_text"] = strings.Repeat("y", 3000)
	case kBadUTF8:
		r["chunk_text"] = "caf\xe9"
	case kNaN:
		r["extra"] = nil
	case kWrongDim:
		delete(r, "chunk_text")
		r["ns"] = 7.0 // no string field; the namespace is read from tok
	}
	if in.kind == kEmptyID {
		r["_id"] = ""
	}
	return &r
}

func acctNSOfVector(v *pinecone.Vector) string {
	return v.Metadata.Fields["ns"].GetStringValue()
}

func acctNSOfRecord(r *pinecone.IntegratedRecord) string {
	if s, ok := (*r)["ns"].(string); ok {
		return s
	}
	return "n0"
}

// acctFaults is a drawn fault mix.
type acctFaults struct {
	desc      []string
	fs        []upserttest.FaultFunc
	resets    bool
	denial    bool
	ambiguous bool
}

func drawFaults(t *rapid.T, rejected []string) acctFaults {
	var f acctFaults
	add := func(desc string, ff upserttest.FaultFunc) {
		f.desc = append(f.desc, desc)
		f.fs = append(f.fs, ff)
	}
	seed := int64(rapid.IntRange(1, 1<<30).Draw(t, "faultSeed"))
	if rapid.IntRange(0, 2).Draw(t, "burst?") == 0 {
		from, n := rapid.IntRange(1, 8).Draw(t, "burstFrom"), rapid.IntRange(1, 3).Draw(t, "burstN")
		add(fmt.Sprintf("RateLimitBurst(%d,%d)", from, n), upserttest.RateLimitBurst(from, n))
	}
	nerr := rapid.IntRange(0, 2).Draw(t, "errorRates")
	for i := range nerr {
		code := rapid.SampledFrom([]codes.Code{
			codes.Unavailable, codes.Internal, codes.ResourceExhausted, codes.Unknown, codes.Aborted,
			codes.DeadlineExceeded, codes.Canceled, codes.InvalidArgument, codes.Unauthenticated, codes.PermissionDenied,
		}).Draw(t, "errCode")
		p := rapid.SampledFrom([]float64{0.05, 0.15, 0.3}).Draw(t, "errP")
		if code == codes.Unauthenticated || code == codes.PermissionDenied {
			f.denial = true
			p = 0.05
		}
		add(fmt.Sprintf("ErrorRate(%v,%v)", code, p), upserttest.ErrorRate(code, p, seed+int64(i)))
	}
	if rapid.IntRange(0, 4).Draw(t, "outage?") == 0 {
		every := time.Duration(rapid.IntRange(20, 60).Draw(t, "outageEvery")) * time.Millisecond
		length := time.Duration(rapid.IntRange(2, 10).Draw(t, "outageLen")) * time.Millisecond
		add(fmt.Sprintf("Outage(%v,%v)", every, length), upserttest.Outage(every, length, codes.Unavailable))
	}
	if rapid.IntRange(0, 2).Draw(t, "ambiguous?") == 0 {
		p := rapid.SampledFrom([]float64{0.1, 0.3}).Draw(t, "ambP")
		d := time.Duration(rapid.IntRange(5, 80).Draw(t, "ambDelay")) * time.Millisecond
		f.ambiguous = true
		add(fmt.Sprintf("AmbiguousTimeouts(%v,%v)", p, d), upserttest.AmbiguousTimeouts(p, d, seed))
	}
	if rapid.IntRange(0, 2).Draw(t, "partial?") == 0 {
		p := rapid.SampledFrom([]float64{0.1, 0.3}).Draw(t, "partP")
		add(fmt.Sprintf("PartialWrites(%v)", p), upserttest.PartialWrites(p, seed))
	}
	if rapid.IntRange(0, 3).Draw(t, "resets?") == 0 {
		p := rapid.SampledFrom([]float64{0.05, 0.2}).Draw(t, "resetP")
		f.resets = true
		add(fmt.Sprintf("ConnectionResets(%v)", p), upserttest.ConnectionResets(p, seed))
	}
	if rapid.IntRange(0, 3).Draw(t, "hint?") == 0 {
		p := rapid.SampledFrom([]float64{0.1, 0.3}).Draw(t, "hintP")
		add(fmt.Sprintf("RetryAfter429(%v)", p), func(r upserttest.Request) upserttest.Fault {
			if upserttest.ErrorRate(codes.ResourceExhausted, p, seed+99)(r).Code != codes.OK {
				return upserttest.Fault{Code: codes.ResourceExhausted, RetryAfter: 2 * time.Millisecond}
			}
			return upserttest.Fault{}
		})
	}
	if len(rejected) > 0 {
		add(fmt.Sprintf("RejectIDs(%v)", rejected), upserttest.RejectIDs(rejected...))
	}
	// Shuffle-free: Chain asks them in the drawn order.
	return f
}

// acctObserver records every event of a run.
type acctObserver struct {
	mu           sync.Mutex
	requests     int
	reqErrs      map[upsert.Class]int
	reqCodes     map[string]int
	reqRecords   int
	maxLatency   time.Duration
	sumLatency   time.Duration
	minB, maxB   int
	retries      int
	retriesBy    map[upsert.Class]int
	splits       int
	failures     []upsert.Failure
	stales       []upsert.Stale
	runDone      int
	runDoneStats upsert.Stats
	runDoneErr   error
	onRequest    func(n int)
}

func newAcctObserver() *acctObserver {
	return &acctObserver{reqErrs: map[upsert.Class]int{}, reqCodes: map[string]int{}, retriesBy: map[upsert.Class]int{}}
}

func (o *acctObserver) observer(failures bool) upsert.Observer {
	obs := upsert.Observer{
		RequestDone: func(e upsert.RequestEvent) {
			o.mu.Lock()
			o.requests++
			n := o.requests
			o.reqRecords += e.Records
			o.maxLatency = max(o.maxLatency, e.Latency)
			o.sumLatency += e.Latency
			if o.minB == 0 || e.Records < o.minB {
				o.minB = e.Records
			}
			o.maxB = max(o.maxB, e.Records)
			if e.Err != nil {
				o.reqErrs[e.Err.Class]++
				o.reqCodes[e.Err.Code()]++
			}
			f := o.onRequest
			o.mu.Unlock()
			if f != nil {
				f(n)
			}
		},
		Retry: func(e upsert.RetryEvent) {
			o.mu.Lock()
			defer o.mu.Unlock()
			if e.Split {
				o.splits++
			} else {
				o.retries++
				o.retriesBy[e.Err.Class]++
			}
		},
		Stale: func(s upsert.Stale) {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.stales = append(o.stales, s)
		},
		RunDone: func(e upsert.RunEvent) {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.runDone++
			o.runDoneStats, o.runDoneErr = e.Stats, e.Err
		},
	}
	if failures {
		obs.Failure = func(f upsert.Failure) {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.failures = append(o.failures, f)
		}
	}
	return obs
}

// acctAcks records the acks of a run.
type acctAcks struct {
	base     int
	mu       sync.Mutex
	next     int
	byPos    map[int][]upsert.Ack
	problems []string
}

func (a *acctAcks) f(acks []upsert.Ack) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range acks {
		if k.Position != a.next {
			a.problems = append(a.problems, fmt.Sprintf("ack of position %d where %d was due", k.Position, a.next))
		}
		a.next = k.Position + 1
		c := k
		if c.Failure != nil {
			f := *c.Failure
			c.Failure = &f
		}
		a.byPos[k.Position-a.base] = append(a.byPos[k.Position-a.base], c)
	}
}

// acctRun is one drawn run and what it saw.
type acctRun struct {
	api         acctAPI
	inputs      []acctInput
	faults      acctFaults
	optsDesc    []string
	obs         *acctObserver
	failObs     bool
	acks        *acctAcks
	cancelReq   int // cancel after this many requests done (0: never)
	cancelPos   int // Stream/Records: cancel when pulling this record; Writer: before adding it (-1: never)
	canceled    atomic.Bool
	taken       []int // positions-base -> input index (Stream/Records: pulled; Writer: Add returned nil)
	base        int   // the checkpoint's position: the first position taken
	skip        int   // records the checkpoint says were settled
	cp          *acctCheckpoint
	tmu         sync.Mutex
	nTaken      atomic.Int64
	producers   int // Writer: goroutines adding
	tooLarge    bool
	skipped     atomic.Int64
	shortAdds   bool
	addOK       map[int]bool
	cancelAfter time.Duration
	progress    []upsert.Progress
	progMu      sync.Mutex

	res upsert.Result
	err error
}

func (r *acctRun) describe() string {
	return fmt.Sprintf("%v n=%d faults=%v opts=%v failObs=%v acks=%v cancelReq=%d cancelPos=%d cancelAfter=%v skip=%d producers=%d",
		r.api, len(r.inputs), r.faults.desc, r.optsDesc, r.failObs, r.acks != nil, r.cancelReq, r.cancelPos, r.cancelAfter, r.skip, r.producers)
}

// acctCheckpoint is a Checkpoint in memory that remembers every save.
type acctCheckpoint struct {
	mu    sync.Mutex
	load  int64
	saves []int64
}

func (c *acctCheckpoint) Load(context.Context) (int64, error) { return c.load, nil }

func (c *acctCheckpoint) Save(_ context.Context, n int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.saves = append(c.saves, n)
	return nil
}

func drawInputs(t *rapid.T, api acctAPI) []acctInput {
	n := rapid.IntRange(0, 40).Draw(t, "n")
	nss := rapid.IntRange(1, 3).Draw(t, "namespaces")
	ins := make([]acctInput, n)
	for i := range ins {
		k := acctKind(rapid.IntRange(0, int(numAcctKinds)-1).Draw(t, "kind"))
		if rapid.IntRange(0, 2).Draw(t, "plain?") != 0 {
			k = kValid
		}
		in := acctInput{kind: k, tok: i, ns: []string{"n0", "", "__default__", "n1"}[rapid.IntRange(0, nss).Draw(t, "ns")]}
		switch k {
		case kDup:
			in.id = fmt.Sprintf("dup-%d", rapid.IntRange(0, 3).Draw(t, "pool"))
		case kEmptyID, kNil:
			in.id = ""
		case kRejected:
			in.id = fmt.Sprintf("rej-%d", i)
		default:
			in.id = fmt.Sprintf("rec-%d", i)
			if rapid.IntRange(0, 4).Draw(t, "pooled?") == 0 {
				in.id = fmt.Sprintf("dup-%d", rapid.IntRange(0, 3).Draw(t, "pool"))
			}
		}
		if api == apiRecords && k == kWrongDim {
			in.ns = "n0" // see record()
		}
		ins[i] = in
	}
	return ins
}

var acctExplored = map[string]int{}

func acctNote(r *acctRun) {
	st := r.res.Stats
	acctExplored["api "+r.api.String()]++
	if st.Failed > 0 {
		acctExplored["failed"]++
	}
	if r.res.Duplicates > 0 {
		acctExplored["dups"]++
	}
	if st.MayBeStale > 0 {
		acctExplored["stale"]++
	}
	if r.canceled.Load() {
		acctExplored["canceled"]++
	}
	for c, n := range st.ErrorsByClass {
		if n > 0 {
			acctExplored["err "+c.String()]++
		}
	}
	for c, n := range st.RetriesByClass {
		if n > 0 {
			acctExplored["retry "+c.String()]++
		}
	}
	if st.Splits > 0 {
		acctExplored["splits"]++
	}
	for _, f := range r.res.Failed {
		acctExplored["failclass "+f.Class.String()]++
		if f.MayHaveLanded {
			acctExplored["mayHaveLanded"]++
		}
	}
}

func TestAccountingProperty(t *testing.T) {
	if testing.Short() {
		t.Skip("a few hundred runs against the server: go test -run TestAccountingProperty .")
	}
	// TestMain makes rapid's default 1000 checks; a few hundred runs
	// against the server suffice here, unless -rapid.checks says more.
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == "1000" && os.Getenv("RAPID_CHECKS") == "" {
		_ = flag.Set("rapid.checks", "250")
		defer func() { _ = flag.Set("rapid.checks", "1000") }()
	}
	defer func() { t.Logf("explored: %v", acctExplored); clear(acctExplored) }()
	rapid.Check(t, func(t *rapid.T) {
		leaks := goleak.IgnoreCurrent()
		api := acctAPI(rapid.IntRange(0, 3).Draw(t, "api"))
		r := &acctRun{api: api, obs: newAcctObserver(), cancelPos: -1}
		r.inputs = drawInputs(t, api)
		var rejected []string
		for _, in := range r.inputs {
			if in.kind == kRejected {
				rejected = append(rejected, in.id)
			}
		}
		r.faults = drawFaults(t, rejected)
		sopts := []upserttest.Option{upserttest.WithDimension(acctDim), upserttest.WithFaults(upserttest.Chain(r.faults.fs...))}
		if rapid.IntRange(0, 3).Draw(t, "latency?") == 0 {
			d := time.Duration(rapid.IntRange(1, 12).Draw(t, "latencyMs")) * time.Millisecond
			r.faults.desc = append(r.faults.desc, fmt.Sprint("WithLatency(", d, ")"))
			sopts = append(sopts, upserttest.WithLatency(d, 0))
			if rapid.Bool().Draw(t, "jitter?") {
				r.faults.desc = append(r.faults.desc, "WithLatencyJitter(1)")
				sopts = append(sopts, upserttest.WithLatencyJitter(1, 7))
			}
			if rapid.Bool().Draw(t, "slots?") {
				r.faults.desc = append(r.faults.desc, "WithSlots(1)")
				sopts = append(sopts, upserttest.WithSlots(1))
			}
		}
		if rapid.IntRange(0, 4).Draw(t, "maxBytes?") == 0 {
			n := rapid.IntRange(2000, 12000).Draw(t, "maxBytes")
			r.faults.desc = append(r.faults.desc, fmt.Sprint("WithMaxRequestBytes(", n, ")"))
			sopts = append(sopts, upserttest.WithMaxRequestBytes(n))
			r.tooLarge = true
		}
		switch rapid.IntRange(0, 9).Draw(t, "quota?") {
		case 0:
			r.faults.desc = append(r.faults.desc, "WithMaxNamespaces(1)")
			sopts = append(sopts, upserttest.WithMaxNamespaces(1))
			r.faults.denial = true
		case 1:
			n := int64(rapid.IntRange(10, 200).Draw(t, "writeUnits"))
			r.faults.desc = append(r.faults.desc, fmt.Sprint("WithMonthlyWriteUnits(", n, ")"))
			sopts = append(sopts, upserttest.WithMonthlyWriteUnits(n))
			r.faults.denial = true
		case 2:
			r.faults.desc = append(r.faults.desc, "WithRate(2000,50)")
			sopts = append(sopts, upserttest.WithRate(2000, 50))
		}
		srv := upserttest.NewServer(sopts...)
		defer srv.Close() // also when rapid abandons a draw

		var opts []upsert.Option
		desc := func(s string, o upsert.Option) {
			r.optsDesc = append(r.optsDesc, s)
			opts = append(opts, o)
		}
		desc("backoff(1ms,3ms)", upsert.WithBackoff(time.Millisecond, 3*time.Millisecond))
		if bs := rapid.IntRange(0, 10).Draw(t, "batch"); bs > 0 {
			desc(fmt.Sprint("batch=", bs), upsert.WithBatchSize(bs))
		}
		if c := rapid.IntRange(0, 4).Draw(t, "conc"); c > 0 {
			desc(fmt.Sprint("conc=", c), upsert.WithConcurrency(c))
		}
		to := rapid.SampledFrom([]time.Duration{20 * time.Millisecond, 60 * time.Millisecond, time.Second}).Draw(t, "timeout")
		desc(fmt.Sprint("timeout=", to), upsert.WithRequestTimeout(to))
		for _, c := range []upsert.Class{upsert.ClassRateLimited, upsert.ClassTimeout, upsert.ClassServer} {
			n := rapid.IntRange(0, 3).Draw(t, "retries")
			desc(fmt.Sprintf("retries(%v)=%d", c, n), upsert.WithMaxRetries(c, n))
		}
		if api != apiAll {
			desc("maxDelay=2ms", upsert.WithMaxDelay(2*time.Millisecond))
		}
		r.failObs = rapid.Bool().Draw(t, "failObs")
		opts = append(opts, upsert.WithObserver(r.obs.observer(r.failObs)))
		if api != apiAll && rapid.IntRange(0, 2).Draw(t, "acks?") != 0 {
			r.acks = &acctAcks{byPos: map[int][]upsert.Ack{}}
			opts = append(opts, upsert.WithAcks(r.acks.f))
			if w := rapid.SampledFrom([]int{0, 1, 3, 20}).Draw(t, "ackWindow"); w > 0 {
				desc(fmt.Sprint("ackWindow=", w), upsert.WithAckWindow(w))
			}
		}
		r.shortAdds = api == apiWriter && rapid.IntRange(0, 2).Draw(t, "shortAdds?") == 0
		if api == apiRecords {
			opts = append(opts, upsert.WithNamespaceOf(acctNSOfRecord))
		} else {
			opts = append(opts, upsert.WithNamespaceOf(acctNSOfVector))
		}
		switch rapid.IntRange(0, 4).Draw(t, "cancel?") {
		case 0:
			r.cancelReq = rapid.IntRange(1, 15).Draw(t, "cancelReq")
		case 1:
			if len(r.inputs) > 0 && api != apiAll {
				r.cancelPos = rapid.IntRange(0, len(r.inputs)-1).Draw(t, "cancelPos")
			}
		case 2:
			r.cancelAfter = time.Duration(rapid.IntRange(1, 30000).Draw(t, "cancelAfterUs")) * time.Microsecond
		}
		if (api == apiStream || api == apiRecords) && rapid.IntRange(0, 3).Draw(t, "checkpoint?") == 0 {
			r.skip = rapid.IntRange(0, len(r.inputs)).Draw(t, "skip")
			r.base = r.skip
			if r.acks != nil {
				r.acks.base, r.acks.next = r.skip, r.skip
			}
			r.cp = &acctCheckpoint{load: int64(r.skip)}
			opts = append(opts, upsert.WithCheckpoint(r.cp))
		}
		r.producers = 1
		if api == apiWriter && r.acks != nil {
			r.producers = rapid.IntRange(1, 3).Draw(t, "producers")
		}
		if rapid.Bool().Draw(t, "progress?") {
			opts = append(opts, upsert.WithProgress(time.Millisecond, func(p upsert.Progress) {
				r.progMu.Lock()
				defer r.progMu.Unlock()
				r.progress = append(r.progress, p)
			}))
		}

		r.exec(t, srv, opts)
		// What landed late must have landed before the server is read.
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.WaitIdle(wctx)
		wcancel()
		problems := r.check(srv)
		srv.Close()
		acctNote(r)
		for _, p := range problems {
			t.Errorf("%s\n    run: %s", p, r.describe())
		}
		if err := goleak.Find(leaks, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait")); err != nil {
			t.Errorf("goroutines left after the run: %v\n    run: %s", err, r.describe())
		}
	})
}

// exec runs r against srv.
func (r *acctRun) exec(t *rapid.T, srv *upserttest.Server, opts []upsert.Option) {
	params := pinecone.NewClientParams{ApiKey: "test-key", RestClient: srv.Client()}
	pc, err := upsert.NewClient(params)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "n0"}, upsert.PushbackDialOption())
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	opts = append([]upsert.Option{upsert.WithIndex(idx)}, opts...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	doCancel := func() {
		r.canceled.Store(true)
		cancel()
	}
	if r.cancelReq > 0 {
		r.obs.onRequest = func(n int) {
			if n == r.cancelReq {
				doCancel()
			}
		}
	}
	if r.cancelAfter > 0 {
		tm := time.AfterFunc(r.cancelAfter, doCancel)
		defer tm.Stop()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		switch r.api {
		case apiAll:
			vs := make([]*pinecone.Vector, len(r.inputs))
			for i, in := range r.inputs {
				vs[i] = in.vector()
			}
			r.res, r.err = upsert.All(ctx, vs, opts...)
			for i := range r.inputs {
				r.taken = append(r.taken, i)
			}
		case apiStream:
			seq := func(yield func(*pinecone.Vector) bool) {
				for i, in := range r.inputs {
					if i == r.cancelPos {
						doCancel()
					}
					if i >= r.skip {
						r.taken = append(r.taken, i)
					} else {
						r.skipped.Add(1)
					}
					if !yield(in.vector()) {
						return
					}
				}
			}
			r.res, r.err = upsert.Stream(ctx, seq, opts...)
		case apiRecords:
			seq := func(yield func(*pinecone.IntegratedRecord) bool) {
				for i, in := range r.inputs {
					if i == r.cancelPos {
						doCancel()
					}
					if i >= r.skip {
						r.taken = append(r.taken, i)
					} else {
						r.skipped.Add(1)
					}
					if !yield(in.record()) {
						return
					}
				}
			}
			r.res, r.err = upsert.Records(ctx, seq, opts...)
		case apiWriter:
			w, err := upsert.NewWriter(ctx, opts...)
			if err != nil {
				r.err = err
				return
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			r.addOK = map[int]bool{}
			for range r.producers {
				wg.Go(func() {
					for {
						i := int(next.Add(1)) - 1
						if i >= len(r.inputs) {
							return
						}
						if i == r.cancelPos {
							doCancel()
						}
						d := 10 * time.Second
						if r.shortAdds && i%3 == 0 {
							d = time.Duration(i%5) * 300 * time.Microsecond
						}
						actx, acancel := context.WithTimeout(context.Background(), d)
						err := w.AddTagged(actx, r.inputs[i].vector(), i)
						acancel()
						r.tmu.Lock()
						r.addOK[i] = err == nil
						r.tmu.Unlock()
						if err == nil && r.producers == 1 {
							r.tmu.Lock()
							r.taken = append(r.taken, i)
							r.tmu.Unlock()
						}
						if err == nil {
							r.nTaken.Add(1)
						}
						if i%17 == 16 {
							fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
							_ = w.Flush(fctx)
							fcancel()
						}
					}
				})
			}
			wg.Wait()
			cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
			r.res, r.err = w.Close(cctx)
			ccancel()
		}
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute): // an index failing every request is waited out for a minute
		t.Fatalf("the run hangs: %s", r.describe())
	}
}

// storedTok is the token of what the server holds under in's key, or -1.
func storedTok(srv *upserttest.Server, api acctAPI, ns, id string) int {
	if api == apiRecords {
		f, ok := srv.Record(ns, id)
		if !ok {
			return -1
		}
		tok, _ := f["tok"].(float64)
		return int(tok)
	}
	v, ok := srv.Vector(ns, id)
	if !ok || v.Values == nil {
		return -1
	}
	return int((*v.Values)[0]) - 1
}

func (r *acctRun) check(srv *upserttest.Server) []string {
	var ps []string
	bad := func(format string, args ...any) { ps = append(ps, fmt.Sprintf(format, args...)) }
	res, err := r.res, r.err
	st := res.Stats
	if r.producers > 1 {
		// The positions of several producers' records are their acks'.
		n := int(r.nTaken.Load())
		r.taken = make([]int, n)
		for pos := range n {
			if as := r.acks.byPos[pos]; len(as) > 0 {
				r.taken[pos], _ = as[0].Tag.(int)
			} else {
				bad("record at position %d of %d taken never acked", pos, n)
				return ps
			}
		}
	}
	total := len(r.taken)
	if err != nil && errors.Is(err, upsert.ErrBadOption) {
		bad("bad option: %v", err)
		return ps
	}
	r.obs.mu.Lock()
	defer r.obs.mu.Unlock()

	// --- Result arithmetic.
	if st.Records != total {
		bad("Stats.Records = %d, %d records were taken", st.Records, total)
	}
	if st.Upserted != res.Upserted {
		bad("Stats.Upserted %d != Result.Upserted %d", st.Upserted, res.Upserted)
	}
	if st.Duplicates != res.Duplicates {
		bad("Stats.Duplicates %d != Result.Duplicates %d", st.Duplicates, res.Duplicates)
	}
	if res.Upserted+st.Failed+res.Duplicates != total {
		bad("Upserted %d + Failed %d + Duplicates %d != %d records taken", res.Upserted, st.Failed, res.Duplicates, total)
	}
	keepAll := !r.failObs || r.api == apiAll
	if keepAll && len(res.Failed) != st.Failed {
		bad("len(Result.Failed) = %d, Stats.Failed = %d", len(res.Failed), st.Failed)
	}
	if !keepAll && len(res.Failed) != min(st.Failed, 1000) {
		bad("len(Result.Failed) = %d, Stats.Failed = %d (observer keeps all)", len(res.Failed), st.Failed)
	}
	if r.failObs && len(r.obs.failures) != st.Failed {
		bad("the Failure observer saw %d failures, Stats.Failed = %d", len(r.obs.failures), st.Failed)
	}
	if st.MayBeStale != len(r.obs.stales) {
		bad("Stats.MayBeStale = %d, the Stale observer saw %d", st.MayBeStale, len(r.obs.stales))
	}
	if len(res.MayBeStale) != st.MayBeStale {
		bad("len(Result.MayBeStale) = %d, Stats.MayBeStale = %d", len(res.MayBeStale), st.MayBeStale)
	}

	// --- Failures: unique, in range, in order, consistent.
	allFailures := res.Failed
	if r.failObs {
		allFailures = slices.Clone(r.obs.failures)
		sort.Slice(allFailures, func(i, j int) bool { return allFailures[i].Index < allFailures[j].Index })
	}
	failedAt := map[int]upsert.Failure{} // position -> failure
	for i, f := range res.Failed {
		if i > 0 && res.Failed[i-1].Index >= f.Index {
			bad("Result.Failed not in input order or repeats: index %d after %d", f.Index, res.Failed[i-1].Index)
		}
	}
	byClass := map[upsert.Class]int{}
	for _, f := range allFailures {
		byClass[f.Class]++
		if f.Index < r.base || f.Index >= r.base+total {
			bad("Failure.Index %d out of range [%d,%d)", f.Index, r.base, r.base+total)
			continue
		}
		rel := f.Index - r.base
		if _, dup := failedAt[rel]; dup {
			bad("record at position %d failed twice", f.Index)
		}
		failedAt[rel] = f
		in := r.inputs[r.taken[rel]]
		if f.ID != in.id {
			bad("Failure at %d has ID %q, the record's is %q", f.Index, f.ID, in.id)
		}
		if in.kind != kNil && acctNSKey(f.Namespace) != acctNSKey(in.ns) && f.Namespace != "" {
			bad("Failure at %d has Namespace %q, the record's is %q", f.Index, f.Namespace, in.ns)
		}
		if in.kind != kNil && acctNSKey(in.ns) != "__default__" && f.Namespace == "" && f.Class != upsert.ClassCanceled && f.Class != upsert.ClassDenied && f.Class != upsert.ClassQuotaExceeded {
			bad("Failure at %d (%v) has no Namespace, the record's is %q", f.Index, f.Class, in.ns)
		}
		switch {
		case in.kind == kNil:
			if f.Record != nil || f.Integrated != nil {
				bad("Failure at %d of a nil record carries a record", f.Index)
			}
		case r.api == apiRecords:
			if f.Integrated == nil || (*f.Integrated)["tok"] != float64(in.tok) {
				bad("Failure at %d: Integrated %v is not record %d", f.Index, f.Integrated, in.tok)
			}
		default:
			if f.Record == nil || f.Record.Metadata.Fields["tok"].GetNumberValue() != float64(in.tok) {
				bad("Failure at %d: Record %v is not record %d", f.Index, f.Record, in.tok)
			}
		}
		if f.Err == nil || !errors.Is(f.Err, f.Class.Err()) {
			bad("Failure at %d: Err %v does not match its class %v", f.Index, f.Err, f.Class)
		}
		if f.Attempts == 0 && f.MayHaveLanded {
			bad("Failure at %d (%v, %v): never sent (Attempts 0) yet MayHaveLanded", f.Index, f.Class, f.Err)
		}
		if in.kind.locallyInvalid() && f.Attempts > 0 {
			bad("record %d breaks a rule (%v) and was sent %d times", f.Index, in.kind, f.Attempts)
		}
		if in.kind.locallyInvalid() && f.Class != upsert.ClassInvalid && f.Class != upsert.ClassCanceled && f.Class != upsert.ClassDenied && f.Class != upsert.ClassQuotaExceeded {
			bad("record %d breaks a rule and failed as %v: %v", f.Index, f.Class, f.Err)
		}
		if f.Class == upsert.ClassCanceled && !r.canceled.Load() && r.acks == nil {
			bad("record %d failed canceled, and nothing canceled the run: %v", f.Index, f.Err)
		}
		if (f.Class == upsert.ClassDenied || f.Class == upsert.ClassQuotaExceeded) && !r.faults.denial {
			bad("record %d failed denied without a denial fault: %v", f.Index, f.Err)
		}
		if in.kind == kRejected && f.Class == upsert.ClassInvalid && f.Attempts == 0 {
			bad("record %d rejected by the index failed invalid with 0 attempts", f.Index)
		}
	}
	for pos, in := range r.taken {
		if r.inputs[in].kind.locallyInvalid() {
			if _, ok := failedAt[pos]; !ok && (keepAll || r.failObs) {
				bad("record %d breaks a rule (%v) and did not fail", pos+r.base, r.inputs[in].kind)
			}
		}
	}
	for i, f := range st.FailureSamples {
		if i >= 5 {
			bad("%d FailureSamples", len(st.FailureSamples))
			break
		}
		if g, ok := failedAt[f.Index-r.base]; !ok || g.Class != f.Class || g.ID != f.ID {
			bad("FailureSamples[%d] (index %d, %v) is no failure of the run", i, f.Index, f.Class)
		}
	}
	if len(st.FailureSamples) != min(5, st.Failed) {
		bad("%d FailureSamples, %d failed", len(st.FailureSamples), st.Failed)
	}

	// --- Stale records.
	staleAt := map[int]upsert.Stale{}
	for i, sr := range res.MayBeStale {
		rel := sr.Index - r.base
		if i > 0 && res.MayBeStale[i-1].Index >= sr.Index {
			bad("MayBeStale not in input order: %d after %d", sr.Index, res.MayBeStale[i-1].Index)
		}
		if rel < 0 || rel >= total {
			bad("Stale.Index %d out of range", sr.Index)
			continue
		}
		staleAt[rel] = sr
		in := r.inputs[r.taken[rel]]
		if sr.ID != in.id {
			bad("Stale at %d has ID %q, want %q", sr.Index, sr.ID, in.id)
		}
		if _, failed := failedAt[rel]; failed {
			bad("record %d is listed MayBeStale (landed) and failed", sr.Index)
		}
		erel := sr.Earlier - r.base
		if erel < 0 || erel >= rel {
			bad("Stale at %d: Earlier %d is not an earlier position", sr.Index, sr.Earlier)
		} else if r.inputs[r.taken[erel]].key() != in.key() {
			bad("Stale at %d: Earlier %d is another id (%s, %s)", sr.Index, sr.Earlier, r.inputs[r.taken[erel]].key(), in.key())
		}
	}

	// --- Retries per batch.
	perBatch := 0
	for k, n := range st.RetriesPerBatch {
		perBatch += k * n
	}
	if perBatch != st.Retries {
		bad("RetriesPerBatch %v adds up to %d retries, Retries %d", st.RetriesPerBatch, perBatch, st.Retries)
	}

	// --- Progress.
	r.progMu.Lock()
	if len(r.progress) > 0 {
		last := r.progress[len(r.progress)-1]
		finals := 0
		prevDone := 0
		for _, p := range r.progress {
			if p.Final {
				finals++
			}
			if p.Done < prevDone {
				bad("Progress.Done went back from %d to %d", prevDone, p.Done)
			}
			prevDone = p.Done
			if p.Done != p.Stats.Upserted+p.Stats.Failed+p.Stats.Duplicates {
				bad("Progress.Done %d, its stats settle %d+%d+%d", p.Done, p.Stats.Upserted, p.Stats.Failed, p.Stats.Duplicates)
			}
		}
		if finals != 1 || !last.Final {
			bad("%d final Progress calls, the last final: %v", finals, last.Final)
		}
		if last.Stats.Upserted != st.Upserted || last.Stats.Failed != st.Failed || last.Stats.Requests != st.Requests || last.Done != total {
			bad("the final Progress (up %d failed %d req %d done %d) is not the result's (%d %d %d %d)",
				last.Stats.Upserted, last.Stats.Failed, last.Stats.Requests, last.Done, st.Upserted, st.Failed, st.Requests, total)
		}
	}
	r.progMu.Unlock()

	// --- Checkpoint saves.
	if r.cp != nil {
		r.cp.mu.Lock()
		for _, m := range r.cp.saves {
			rel := int(m) - r.base
			if rel < 0 || rel > total {
				bad("checkpoint saved %d, outside [%d,%d]", m, r.base, r.base+total)
				continue
			}
			for pos := range rel {
				if f, ok := failedAt[pos]; ok && f.Resend {
					bad("checkpoint saved %d past record %d, which failed to be resent (%v: %v)", m, pos+r.base, f.Class, f.Err)
					break
				}
			}
		}
		r.cp.mu.Unlock()
	}

	// --- The run's error.
	if err == nil {
		if st.Failed > 0 {
			bad("error nil with %d records failed", st.Failed)
		}
	} else {
		var re *upsert.RunError
		if st.Failed == 0 {
			if !r.canceled.Load() || !errors.Is(err, upsert.ErrCanceled) {
				bad("error %v with no record failed", err)
			}
		} else if !errors.As(err, &re) {
			bad("error %T %v is no *RunError", err, err)
		} else {
			if re.Failed != st.Failed || re.Total != total {
				bad("RunError says %d of %d failed, Stats %d of %d", re.Failed, re.Total, st.Failed, total)
			}
			n := 0
			for _, v := range re.ByClass {
				n += v
			}
			if n != re.Failed {
				bad("RunError.ByClass sums to %d, Failed %d", n, re.Failed)
			}
			for c, v := range byClass {
				if re.ByClass[c] != v {
					bad("RunError.ByClass[%v] = %d, %d failures of that class", c, re.ByClass[c], v)
				}
			}
		}
		for c := range byClass {
			if !errors.Is(err, c.Err()) {
				bad("the error %v does not match %v, the class of failed records", err, c)
			}
		}
	}
	if r.obs.runDone != 1 {
		bad("RunDone called %d times", r.obs.runDone)
	} else {
		if r.obs.runDoneErr != err && fmt.Sprint(r.obs.runDoneErr) != fmt.Sprint(err) {
			bad("RunDone's error %v, the call returned %v", r.obs.runDoneErr, err)
		}
		if r.obs.runDoneStats.Failed != st.Failed || r.obs.runDoneStats.Upserted != st.Upserted || r.obs.runDoneStats.Requests != st.Requests {
			bad("RunDone's stats (up %d, failed %d, req %d) differ from the result's (%d, %d, %d)",
				r.obs.runDoneStats.Upserted, r.obs.runDoneStats.Failed, r.obs.runDoneStats.Requests, st.Upserted, st.Failed, st.Requests)
		}
	}

	// --- Stats against the observer's events.
	if st.Requests != r.obs.requests {
		bad("Stats.Requests = %d, RequestDone seen %d times", st.Requests, r.obs.requests)
	}
	for _, c := range upsert.Classes() {
		if st.ErrorsByClass[c] != r.obs.reqErrs[c] {
			bad("Stats.ErrorsByClass[%v] = %d, RequestDone saw %d", c, st.ErrorsByClass[c], r.obs.reqErrs[c])
		}
		if st.RetriesByClass[c] != r.obs.retriesBy[c] {
			bad("Stats.RetriesByClass[%v] = %d, Retry events (not split) %d", c, st.RetriesByClass[c], r.obs.retriesBy[c])
		}
	}
	for code, n := range r.obs.reqCodes {
		if st.ErrorsByCode[code] != n {
			bad("Stats.ErrorsByCode[%s] = %d, RequestDone saw %d", code, st.ErrorsByCode[code], n)
		}
	}
	for code, n := range st.ErrorsByCode {
		if r.obs.reqCodes[code] != n {
			bad("Stats.ErrorsByCode[%s] = %d, RequestDone saw %d", code, n, r.obs.reqCodes[code])
		}
	}
	if st.Retries != r.obs.retries {
		bad("Stats.Retries = %d, Retry events (not split) %d", st.Retries, r.obs.retries)
	}
	sumBy := 0
	for _, v := range st.RetriesByClass {
		sumBy += v
	}
	if sumBy != st.Retries {
		bad("RetriesByClass sums to %d, Retries %d", sumBy, st.Retries)
	}
	if st.Splits != r.obs.splits {
		bad("Stats.Splits = %d, split Retry events %d", st.Splits, r.obs.splits)
	}
	if st.Requests > 0 {
		if st.BatchSizes.Min != r.obs.minB || st.BatchSizes.Max != r.obs.maxB {
			bad("BatchSizes min/max %d/%d, RequestDone saw %d/%d", st.BatchSizes.Min, st.BatchSizes.Max, r.obs.minB, r.obs.maxB)
		}
		if mean := float64(r.obs.reqRecords) / float64(st.Requests); math.Abs(mean-st.BatchSizes.Mean) > 1e-9 {
			bad("BatchSizes.Mean %v, RequestDone says %v", st.BatchSizes.Mean, mean)
		}
		if mx := r.obs.maxLatency; math.Abs(float64(st.Latency.Max-mx)) > 0.04*float64(mx)+float64(time.Microsecond) {
			bad("Latency.Max %v, RequestDone's largest %v", st.Latency.Max, mx)
		}
		if mean := r.obs.sumLatency / time.Duration(st.Requests); math.Abs(float64(st.Latency.Mean-mean)) > 0.04*float64(mean)+float64(time.Microsecond) {
			bad("Latency.Mean %v, RequestDone's mean %v", st.Latency.Mean, mean)
		}
		if st.Latency.P50 > st.Latency.P95 || st.Latency.P95 > st.Latency.P99 || float64(st.Latency.P99) > 1.04*float64(st.Latency.Max)+1e3 {
			bad("Latency percentiles out of order: %+v", st.Latency)
		}
	}
	if st.Skipped != int(r.skipped.Load()) {
		bad("Skipped = %d, the checkpoint skipped %d records pulled", st.Skipped, r.skipped.Load())
	}

	// --- Stats against the server's.
	ss := srv.Stats()
	libErrs := 0
	for _, v := range st.ErrorsByClass {
		libErrs += v
	}
	libOK := st.Requests - libErrs
	if ss.Requests > st.Requests {
		bad("the server saw %d requests, the run counted %d", ss.Requests, st.Requests)
	}
	if libOK > ss.Codes[codes.OK] {
		bad("the run counted %d successful requests, the server answered %d OK", libOK, ss.Codes[codes.OK])
	}
	ambiguous := st.ErrorsByClass[upsert.ClassTimeout] + st.ErrorsByClass[upsert.ClassCanceled] + st.ErrorsByClass[upsert.ClassServer]
	if st.Requests-ss.Requests > ambiguous {
		bad("the run counted %d requests, the server saw %d, and only %d failed without a clear answer", st.Requests, ss.Requests, ambiguous)
	}
	for _, c := range []codes.Code{codes.ResourceExhausted, codes.InvalidArgument, codes.Internal, codes.Unauthenticated, codes.PermissionDenied, codes.Aborted, codes.Unknown} {
		name := c.String()
		if r.api == apiRecords {
			name = fmt.Sprint(map[codes.Code]int{codes.ResourceExhausted: 429, codes.InvalidArgument: 400, codes.Internal: 500, codes.Unauthenticated: 401, codes.PermissionDenied: 403, codes.Aborted: 409, codes.Unknown: 500}[c])
			if c == codes.Unknown || c == codes.Internal {
				if n := st.ErrorsByCode["500"]; n > ss.Codes[codes.Internal]+ss.Codes[codes.Unknown] {
					bad("the run counted %d answers 500, the server sent %d", n, ss.Codes[codes.Internal]+ss.Codes[codes.Unknown])
				}
				continue
			}
		}
		if st.ErrorsByCode[name] > ss.Codes[c] {
			bad("the run counted %d answers %s, the server sent %d", st.ErrorsByCode[name], name, ss.Codes[c])
		}
	}
	clean := !r.canceled.Load() && !r.faults.resets && !r.tooLarge && st.ErrorsByClass[upsert.ClassTimeout] == 0 && st.ErrorsByClass[upsert.ClassCanceled] == 0 && r.acks == nil
	if clean && ss.Requests != st.Requests {
		bad("no timeout, reset or cancel, and the server saw %d requests, the run counted %d", ss.Requests, st.Requests)
	}
	if clean && ss.Codes[codes.OK] != libOK {
		bad("no timeout, reset or cancel, and the server answered %d OK, the run counted %d successes", ss.Codes[codes.OK], libOK)
	}

	// --- Acks.
	var landed map[int]bool // positions that landed, when known
	replaced := map[int]bool{}
	if r.acks != nil {
		r.acks.mu.Lock()
		defer r.acks.mu.Unlock()
		for _, p := range r.acks.problems {
			bad("%s", p)
		}
		landed = map[int]bool{}
		nLanded, nReplaced, nFailed := 0, 0, 0
		for pos := range total {
			as := r.acks.byPos[pos]
			if len(as) != 1 {
				bad("record at position %d acked %d times", pos+r.base, len(as))
				continue
			}
			a := as[0]
			in := r.inputs[r.taken[pos]]
			if r.api == apiWriter {
				if tag, _ := a.Tag.(int); tag != r.taken[pos] {
					bad("ack of position %d carries tag %v, want %d", pos, a.Tag, r.taken[pos])
				}
				if tag, _ := a.Tag.(int); !r.addOK[tag] {
					bad("record %d acked (position %d), and its Add returned an error", tag, pos)
				}
			}
			if a.ID != in.id {
				bad("ack of position %d has ID %q, want %q", pos, a.ID, in.id)
			}
			f, failed := failedAt[pos]
			switch {
			case a.Failure != nil:
				nFailed++
				if !failed {
					bad("record %d acked failed (%v), and it is not among the failures", pos, a.Failure.Err)
				} else if a.Failure.Class != f.Class || a.Failure.Index != f.Index || a.Failure.Index != a.Position {
					bad("record %d acked failed %v at %d, the failure says %v at %d", pos, a.Failure.Class, a.Failure.Index, f.Class, f.Index)
				}
				if a.Resend != f.Resend {
					bad("record %d: ack Resend %v, Failure.Resend %v", pos, a.Resend, f.Resend)
				}
			case a.Replaced:
				nReplaced++
				replaced[pos] = true
				if failed {
					bad("record %d acked replaced and failed", pos)
				}
			default:
				nLanded++
				landed[pos] = true
				if failed {
					bad("record %d acked landed and failed (%v)", pos, f.Err)
				}
				if _, st := staleAt[pos]; st != (a.Stale != nil) {
					bad("record %d: ack Stale %v, in MayBeStale %v", pos+r.base, a.Stale != nil, st)
				}
			}
		}
		for pos := range r.acks.byPos {
			if pos >= total || pos < 0 {
				bad("ack of position %d, only %d records were taken", pos, total)
			}
		}
		if nLanded != res.Upserted {
			bad("%d acks landed, Upserted %d", nLanded, res.Upserted)
		}
		if nReplaced != res.Duplicates {
			bad("%d acks replaced, Duplicates %d", nReplaced, res.Duplicates)
		}
		if nFailed != st.Failed {
			bad("%d acks failed, Stats.Failed %d", nFailed, st.Failed)
		}
	}

	// All: which records land is known from its rules.
	if r.api == apiAll && (keepAll || r.failObs) {
		landed = map[int]bool{}
		lastValid := map[string]int{}
		for pos, in := range r.inputs {
			if !in.kind.locallyInvalid() {
				lastValid[in.key()] = pos
			}
		}
		dups := 0
		for pos, in := range r.inputs {
			if in.kind.locallyInvalid() {
				continue
			}
			if lastValid[in.key()] != pos {
				dups++
				replaced[pos] = true
				if f, ok := failedAt[pos]; ok {
					if f.Class != upsert.ClassCanceled && f.Class != upsert.ClassDenied && f.Class != upsert.ClassQuotaExceeded {
						bad("record %d, replaced by a later record of its id, failed: %v", pos, f.Err)
					}
					delete(replaced, pos)
					dups--
				}
				continue
			}
			if _, ok := failedAt[pos]; !ok {
				landed[pos] = true
			}
		}
		if !r.canceled.Load() && dups != res.Duplicates {
			bad("%d earlier records of a repeated id, Duplicates %d", dups, res.Duplicates)
		}
	}

	// --- What the server stored.
	if landed != nil {
		stale := map[int]bool{}
		for rel := range staleAt {
			stale[rel] = true
		}
		lastLanded := map[string]int{}
		keys := map[string][]int{}
		for pos, i := range r.taken {
			in := r.inputs[i]
			if in.kind == kNil {
				continue
			}
			keys[in.key()] = append(keys[in.key()], pos)
			if landed[pos] {
				lastLanded[in.key()] = pos
			}
		}
		for key, poss := range keys {
			ns, id, _ := strings.Cut(key, "/")
			got := storedTok(srv, r.api, ns, id)
			gotPos := -1
			if got >= 0 {
				gotPos = slices.Index(r.taken, got)
				if gotPos < 0 {
					bad("the server holds token %d under %s, a record never taken", got, key)
					continue
				}
				f, failed := failedAt[gotPos]
				switch {
				case landed[gotPos]:
				case failed && f.MayHaveLanded:
				case failed:
					bad("the server holds record %d under %s, reported failed (%v, %d attempts) and not MayHaveLanded: %v", gotPos, key, f.Class, f.Attempts, f.Err)
				case replaced[gotPos]:
					bad("the server holds record %d under %s, counted as a duplicate (never sent)", gotPos, key)
				default:
					bad("the server holds record %d under %s, neither landed nor failed", gotPos, key)
				}
			}
			last, ok := lastLanded[key]
			if !ok {
				continue
			}
			switch {
			case gotPos == last:
			case gotPos < 0:
				bad("record %d under %s landed, and the server holds nothing there", last, key)
			case gotPos > last:
				if f, failed := failedAt[gotPos]; !failed || !f.MayHaveLanded {
					bad("record %d under %s landed last, the server holds the later %d", last, key, gotPos)
				}
			case gotPos < last:
				if !stale[last] {
					bad("record %d under %s landed (not MayBeStale), and the server holds the earlier record %d", last, key, gotPos)
				}
			}
			_ = poss
		}
		n := 0
		for range landed {
			n++
		}
		if n != res.Upserted && r.acks == nil {
			bad("%d records landed by the rules, Upserted %d", n, res.Upserted)
		}
	}
	return ps
}
