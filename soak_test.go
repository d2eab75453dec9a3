package upsert_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upserttest"
)

// TestSoak holds the library to its promise under a seeded matrix of
// faults: over a million records, no record goes missing without being
// reported, and none is stored with anything but what was sent.
//
// Each scenario runs against a fresh upserttest.Server through the real
// Pinecone SDK (gRPC, with upsert.PushbackDialOption), with a fixed seed,
// printed, that makes its records and drives its fault scripts. The scripts
// decide by request Seq, so a seed injects the same faults into the same
// request numbers on every run; which records those requests carry depends
// on timing.
//
// Once the server has no request in flight, every scenario asserts:
//
//   - lost = 0: every record given is stored on the server or is in
//     Result.Failed. For an id given more than once, the last occurrence
//     is the one that must be stored or reported.
//   - corrupted = 0: a stored record holds exactly what was sent under its
//     id (dense and sparse values equal bit for bit, metadata by
//     proto.Equal); a record reported as landed holds its last occurrence;
//     nothing is stored under an id that was not sent as a valid record.
//   - A record reported failed and stored anyway has MayHaveLanded set,
//     whatever its final class. The only ways a failed record can have
//     been written are a request that ended without a clear answer (a
//     timeout, a server error after a partial write, a reset, a restart),
//     and the library keeps that mark through later retries, splits and
//     bisections, so the final class may be any retried class (a 429 on
//     the last try, say). A record rejected before it was sent
//     (Attempts == 0) is never stored.
//   - Upserted + len(Failed) + Duplicates == records given, and
//     Stats.Failed == len(Failed): no Failure observer is set, so Failed
//     is complete for Stream and Writer too.
//   - Records fail only with the classes the scenario's faults can cause;
//     ClassCanceled only where the caller cancels (and when a run hits the
//     scenario's deadline, which fails it anyway). Invalid
//     records fail with ClassInvalid, unsent; records the server rejects
//     (RejectIDs) fail and are not stored; in the invalid-records
//     scenario, which has no other fault, exactly those fail and every
//     other record lands.
//
// A scenario that has not finished after soakDeadline is canceled and
// fails with a summary of the library's goroutines (the full dump goes to
// a file in os.TempDir); the records it was given are still checked. The
// whole test takes a minute or two and is skipped with -short.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test: a million records through a fault matrix; skipped with -short")
	}
	var total soakTotals
	start := time.Now()
	for _, sc := range soakScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			var got soakTotals
			defer func() { total.add(got) }() // also when the scenario fails
			soakRun(t, sc, &got)
		})
	}
	t.Logf("TOTAL: scenarios=%d records=%d upserted=%d failed=%d (may-have-landed %d, of which stored %d) duplicates=%d | "+
		"client requests=%d | server requests=%d, non-OK answers=%d %s | faults injected: scripted=%d (429s, 5xx, ambiguous delays, partial writes, resets, outage answers, rejections) + admission 429s=%d + restarts=%d | "+
		"lost=%d corrupted=%d | elapsed=%v",
		total.scenarios, total.records, total.upserted, total.failed, total.mayHaveLanded, total.storedFailed, total.duplicates,
		total.clientRequests, total.serverRequests, total.nonOK, soakCodes(total.codes), total.scripted, total.admission429, total.restarts,
		total.lost, total.corrupted, time.Since(start).Round(time.Millisecond))
	require.GreaterOrEqual(t, total.records, 1_000_000, "the soak covers at least a million records")
	require.Zero(t, total.lost, "records lost without being reported")
	require.Zero(t, total.corrupted, "records stored with other values than sent")
}

const (
	// soakRecordsPerScenario spreads the million records over the ten
	// fault scenarios; the cancellation scenario adds a few.
	soakRecordsPerScenario = 100_000
	// The cancellation scenario: its batch size, how long the server holds
	// the request of the record whose id comes back, and when the caller
	// cancels.
	soakBatch       = 100
	soakHold        = 500 * time.Millisecond
	soakCancelAfter = 100 * time.Millisecond
	// soakDeadline bounds each scenario: when it passes, the run is
	// canceled and the scenario fails with a goroutine dump instead of
	// hanging.
	soakDeadline = 45 * time.Second
)

type soakMode int

const (
	soakAll    soakMode = iota // upsert.All over a slice
	soakStream                 // upsert.Stream over an iter.Seq
	soakWriter                 // upsert.Writer: Add from several goroutines, then Close
)

func (m soakMode) String() string { return [...]string{"All", "Stream", "Writer"}[m] }

type soakScenario struct {
	name string
	seed int64
	n    int
	dim  int
	mode soakMode
	// faults returns the fault script, made from the seed; serverOpts are
	// the server's other options.
	faults     func(seed int64) upserttest.FaultFunc
	serverOpts []upserttest.Option
	opts       []upsert.Option
	// restartAt lists the shares of the records landed at which the
	// server is restarted, each time while a request is in flight.
	restartAt []float64
	// dups is how many of the n records repeat the id of an earlier
	// record, with other values: the last occurrence wins.
	dups int
	// cancelAt, when set, is the input index of a record that repeats the
	// id of the record soakBatch records earlier, whose request the server
	// holds for soakHold: the caller's context is canceled soakCancelAfter
	// after the stream yields it, while it waits for the earlier one.
	cancelAt int
	// invalid breaks some records and returns their input indexes with
	// what is wrong, and picks valid records for the server to reject.
	invalid func(recs []*pinecone.Vector, rng *rand.Rand) (bad map[int]string, serverRejects []string)
	// allowed lists the classes records may fail with.
	allowed []upsert.Class
	// exactFailures: the failures must be exactly the invalid and the
	// rejected records.
	exactFailures bool
}

func soakScenarios() []soakScenario {
	const n = soakRecordsPerScenario
	fast := upsert.WithBackoff(time.Millisecond, 50*time.Millisecond)
	server := []upsert.Class{upsert.ClassServer}
	everything := []upsert.Class{upsert.ClassRateLimited, upsert.ClassTimeout, upsert.ClassServer, upsert.ClassInvalid}
	return []soakScenario{
		{
			// 429 bursts at several points, two of them with a
			// Retry-After, over an admission limit that the run
			// reaches.
			name: "1-429-bursts-and-admission-rate", seed: 1001, n: n, dim: 16, mode: soakAll, dups: 200,
			serverOpts: []upserttest.Option{upserttest.WithRate(20_000, 2_000)},
			faults: func(int64) upserttest.FaultFunc {
				return upserttest.Chain(
					upserttest.RateLimitBurst(40, 2),
					soakRateLimitBurst(70, 3, 100*time.Millisecond),
					upserttest.RateLimitBurst(100, 2),
					soakRateLimitBurst(140, 2, 30*time.Millisecond),
					upserttest.RateLimitBurst(180, 3),
				)
			},
			opts:    []upsert.Option{fast},
			allowed: []upsert.Class{upsert.ClassRateLimited},
		},
		{
			// Fixed batches of 200, so that 500 requests meet the error
			// rates.
			name: "2-5xx-unavailable-and-internal", seed: 2002, n: n, dim: 8, mode: soakAll,
			faults: func(seed int64) upserttest.FaultFunc {
				return upserttest.Chain(
					upserttest.ErrorRate(codes.Unavailable, 0.15, seed),
					upserttest.ErrorRate(codes.Internal, 0.10, seed+1),
				)
			},
			opts:    []upsert.Option{fast, upsert.WithBatchSize(200)},
			allowed: server,
		},
		{
			// Writes that land while the client times out: the batch is
			// split and sent again, and lands twice, identically.
			name: "3-ambiguous-timeouts", seed: 3003, n: n, dim: 24, mode: soakAll,
			faults: func(seed int64) upserttest.FaultFunc {
				return upserttest.AmbiguousTimeouts(0.12, 400*time.Millisecond, seed)
			},
			opts:    []upsert.Option{fast, upsert.WithRequestTimeout(150 * time.Millisecond)},
			allowed: []upsert.Class{upsert.ClassTimeout},
		},
		{
			// Half a batch written, then a 500. A single retry leaves
			// some batches failed with half their records stored.
			name: "4-partial-writes", seed: 4004, n: n, dim: 12, mode: soakAll,
			faults:  func(seed int64) upserttest.FaultFunc { return upserttest.PartialWrites(0.15, seed) },
			opts:    []upsert.Option{fast, upsert.WithBatchSize(250), upsert.WithMaxRetries(upsert.ClassServer, 1)},
			allowed: server,
		},
		{
			name: "5-connection-resets", seed: 5005, n: n, dim: 32, mode: soakAll,
			faults:  func(seed int64) upserttest.FaultFunc { return upserttest.ConnectionResets(0.08, seed) },
			opts:    []upsert.Option{fast, upsert.WithBatchSize(200)},
			allowed: server,
		},
		{
			// 120 ms of 503s every 400 ms, longer than the four retries'
			// backoffs: the circuit breaker has to hold the requests.
			name: "6-outage", seed: 6006, n: n, dim: 16, mode: soakAll,
			faults: func(int64) upserttest.FaultFunc {
				return upserttest.Outage(400*time.Millisecond, 120*time.Millisecond, codes.Unavailable)
			},
			opts:    []upsert.Option{fast, upsert.WithBatchSize(250)},
			allowed: server,
		},
		{
			// Write latency keeps requests in flight, so that each
			// restart cuts some off before their write.
			name: "7-server-restarts", seed: 7007, n: n, dim: 8, mode: soakAll,
			serverOpts: []upserttest.Option{upserttest.WithLatency(10*time.Millisecond, 10*time.Microsecond)},
			opts:       []upsert.Option{fast},
			restartAt:  []float64{0.3, 0.65},
			allowed:    server,
		},
		{
			name: "8a-everything-at-once-Stream", seed: 8008, n: n, dim: 16, mode: soakStream, dups: 300,
			serverOpts: []upserttest.Option{upserttest.WithRate(25_000, 5_000)},
			faults:     soakEverything,
			opts:       []upsert.Option{fast, upsert.WithRequestTimeout(150 * time.Millisecond), upsert.WithMaxDelay(20 * time.Millisecond)},
			restartAt:  []float64{0.5},
			invalid:    soakMakeInvalid(16, 5),
			allowed:    everything,
		},
		{
			name: "8b-everything-at-once-Writer", seed: 8118, n: n, dim: 24, mode: soakWriter,
			serverOpts: []upserttest.Option{upserttest.WithRate(25_000, 5_000)},
			faults:     soakEverything,
			opts:       []upsert.Option{fast, upsert.WithRequestTimeout(150 * time.Millisecond), upsert.WithMaxDelay(20 * time.Millisecond)},
			restartAt:  []float64{0.4},
			allowed:    everything,
		},
		{
			name: "9-invalid-records", seed: 9009, n: n, dim: 12, mode: soakAll,
			opts:          []upsert.Option{fast},
			invalid:       soakMakeInvalid(48, 30),
			allowed:       []upsert.Class{upsert.ClassInvalid},
			exactFailures: true,
		},
		{
			// The caller gives up half-way through a stream, while a
			// record waits for an earlier one of its id, still in
			// flight, to settle. Every record the stream pulled must
			// land or fail with ClassCanceled, that one included.
			name: "10-caller-cancels-mid-stream", seed: 10010, n: 20_000, dim: 8, mode: soakStream,
			opts:     []upsert.Option{fast, upsert.WithBatchSize(soakBatch)},
			cancelAt: 10_000,
			allowed:  []upsert.Class{upsert.ClassCanceled},
		},
	}
}

// soakEverything is every fault at once, at lower rates.
func soakEverything(seed int64) upserttest.FaultFunc {
	return upserttest.Chain(
		upserttest.RateLimitBurst(10, 3),
		soakRateLimitBurst(120, 3, 50*time.Millisecond),
		upserttest.ErrorRate(codes.Unavailable, 0.03, seed+1),
		upserttest.ErrorRate(codes.Internal, 0.02, seed+2),
		upserttest.AmbiguousTimeouts(0.02, 400*time.Millisecond, seed+3),
		upserttest.PartialWrites(0.03, seed+4),
		upserttest.ConnectionResets(0.02, seed+5),
		upserttest.Outage(1500*time.Millisecond, 100*time.Millisecond, codes.Unavailable),
	)
}

// soakRateLimitBurst is upserttest.RateLimitBurst with a Retry-After.
func soakRateLimitBurst(from, n int, retryAfter time.Duration) upserttest.FaultFunc {
	return func(r upserttest.Request) upserttest.Fault {
		if r.Seq >= from && r.Seq < from+n {
			return upserttest.Fault{Code: codes.ResourceExhausted, RetryAfter: retryAfter}
		}
		return upserttest.Fault{}
	}
}

// soakCounted counts the faults f injects: errors, resets and delayed
// answers.
func soakCounted(f upserttest.FaultFunc, n *atomic.Int64) upserttest.FaultFunc {
	return func(r upserttest.Request) upserttest.Fault {
		ft := f(r)
		if ft.Code != codes.OK || ft.Delay > 0 || ft.Reset {
			n.Add(1)
		}
		return ft
	}
}

// soakMakeInvalid returns a function that breaks nBad records, each in one
// of the ways Pinecone refuses (a NaN or infinite value, an empty,
// over-long, NUL-holding or non-ASCII id, a wrong dimension, a nil record,
// unequal sparse indices and values), and picks nReject valid records for
// the server to reject.
func soakMakeInvalid(nBad, nReject int) func(recs []*pinecone.Vector, rng *rand.Rand) (map[int]string, []string) {
	return func(recs []*pinecone.Vector, rng *rand.Rand) (map[int]string, []string) {
		bad := make(map[int]string)
		taken := make(map[string]bool)
		pick := func() int {
			for {
				// Not the first record, and not an id that appears more
				// than once.
				i := 1 + rng.IntN(len(recs)-1)
				if id := recs[i].Id; !taken[id] && soakCount(recs, id) == 1 {
					taken[id] = true
					return i
				}
			}
		}
		for k := range nBad {
			i := pick()
			v := recs[i]
			switch k % 8 {
			case 0:
				(*v.Values)[rng.IntN(len(*v.Values))] = float32(math.NaN())
				bad[i] = "NaN value"
			case 1:
				v.Id = ""
				bad[i] = "empty id"
			case 2:
				v.Id += "-" + strings.Repeat("x", upsert.MaxIDBytes)
				bad[i] = "over-long id"
			case 3:
				(*v.Values)[0] = float32(math.Inf(-1))
				bad[i] = "infinite value"
			case 4:
				v.Id += "\x00nul"
				bad[i] = "NUL in id"
			case 5:
				short := slices.Clone((*v.Values)[:len(*v.Values)-1])
				v.Values = &short
				bad[i] = "wrong dimension"
			case 6:
				v.Id += "-é"
				bad[i] = "non-ASCII id"
			case 7:
				if k%16 == 7 {
					recs[i] = nil
					bad[i] = "nil record"
				} else {
					v.SparseValues = &pinecone.SparseValues{Indices: []uint32{1, 2, 3}, Values: []float32{0.5}}
					bad[i] = "sparse indices and values of unequal length"
				}
			}
		}
		var rejects []string
		for range nReject {
			rejects = append(rejects, recs[pick()].Id)
		}
		return bad, rejects
	}
}

func soakCount(recs []*pinecone.Vector, id string) int {
	n := 0
	for _, r := range recs {
		if r != nil && r.Id == id {
			n++
		}
	}
	return n
}

// soakRecords makes n records of dimension dim from rng: every fourth with
// metadata, every seventh hybrid; dups of them repeat the id of an earlier
// record, with other values, at a random later position.
func soakRecords(prefix string, n, dim, dups int, rng *rand.Rand) []*pinecone.Vector {
	mk := func(id string, i int) *pinecone.Vector {
		vals := make([]float32, dim)
		for j := range vals {
			vals[j] = rng.Float32()*2 - 1
		}
		v := &pinecone.Vector{Id: id, Values: &vals}
		if i%4 == 0 {
			v.Metadata, _ = structpb.NewStruct(map[string]any{
				"n":     float64(i),
				"score": rng.Float64(),
				"title": fmt.Sprintf("document %d of %s", i, prefix),
				"tags":  []any{"soak", prefix, fmt.Sprint("t", rng.IntN(10))},
				"hot":   i%8 == 0,
			})
		}
		if i%7 == 0 {
			k := 1 + rng.IntN(6)
			idx := make([]uint32, k)
			next := uint32(rng.IntN(50))
			for j := range idx {
				idx[j] = next
				next += 1 + uint32(rng.IntN(1000))
			}
			sv := make([]float32, k)
			for j := range sv {
				sv[j] = rng.Float32()
			}
			v.SparseValues = &pinecone.SparseValues{Indices: idx, Values: sv}
		}
		return v
	}
	unique := n - dups
	recs := make([]*pinecone.Vector, 0, n)
	for i := range unique {
		recs = append(recs, mk(fmt.Sprintf("%s-%07d", prefix, i), i))
	}
	for range dups {
		j := rng.IntN(unique)
		at := j + 1 + rng.IntN(len(recs)-j) // after the original
		recs = slices.Insert(recs, at, mk(fmt.Sprintf("%s-%07d", prefix, j), j+1))
	}
	return recs
}

// soakTotals is what scenarios add up to.
type soakTotals struct {
	scenarios                             int
	records, upserted, failed, duplicates int
	mayHaveLanded, storedFailed           int
	clientRequests, serverRequests, nonOK int
	scripted, admission429, restarts      int
	lost, corrupted                       int
	codes                                 map[codes.Code]int // non-OK answers
}

func (s *soakTotals) add(o soakTotals) {
	s.scenarios++
	s.records += o.records
	s.upserted += o.upserted
	s.failed += o.failed
	s.duplicates += o.duplicates
	s.mayHaveLanded += o.mayHaveLanded
	s.storedFailed += o.storedFailed
	s.clientRequests += o.clientRequests
	s.serverRequests += o.serverRequests
	s.nonOK += o.nonOK
	s.scripted += o.scripted
	s.admission429 += o.admission429
	s.restarts += o.restarts
	s.lost += o.lost
	s.corrupted += o.corrupted
	if s.codes == nil {
		s.codes = make(map[codes.Code]int)
	}
	for c, n := range o.codes {
		if c != codes.OK {
			s.codes[c] += n
		}
	}
}

func soakRun(t *testing.T, sc soakScenario, out *soakTotals) {
	tag, _, _ := strings.Cut(sc.name, "-")
	t.Logf("scenario %s: seed=%d records=%d dim=%d mode=%v", sc.name, sc.seed, sc.n, sc.dim, sc.mode)
	rng := rand.New(rand.NewPCG(uint64(sc.seed), 0x50a4))
	recs := soakRecords("r"+tag, sc.n, sc.dim, sc.dups, rng)
	var bad map[int]string
	var rejects []string
	if sc.invalid != nil {
		bad, rejects = sc.invalid(recs, rng)
	}
	var script []upserttest.FaultFunc
	if len(rejects) > 0 {
		script = append(script, upserttest.RejectIDs(rejects...)) // before any other fault
	}
	if sc.faults != nil {
		script = append(script, sc.faults(sc.seed))
	}
	var heldID string
	if sc.cancelAt > 0 {
		// The record at cancelAt takes the id of one a batch earlier,
		// whose request the server holds, so that it waits for it.
		heldID = recs[sc.cancelAt-soakBatch].Id
		recs[sc.cancelAt].Id = heldID
		script = append(script, func(r upserttest.Request) upserttest.Fault {
			if slices.Contains(r.IDs, heldID) {
				return upserttest.Fault{Delay: soakHold}
			}
			return upserttest.Fault{}
		})
	}
	var scripted atomic.Int64
	// The index has its dimension from the start, as a real one does, so
	// that the run learns it before sending and refuses the records of
	// another dimension unsent.
	srv := upserttest.NewServer(append(slices.Clone(sc.serverOpts), upserttest.WithDimension(sc.dim),
		upserttest.WithFaults(soakCounted(upserttest.Chain(script...), &scripted)))...)
	defer srv.Close()

	ns := "soak-" + tag
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "soak-key"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: ns}, upsert.PushbackDialOption())
	require.NoError(t, err)
	defer idx.Close()

	// The watchdog: at the deadline it takes a goroutine dump and cancels
	// the run; if the run has still not returned 30 s later, it panics
	// with a fresh dump.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var full, grouped bytes.Buffer // written by the watchdog before it closes dumped
	dumped := make(chan struct{})
	watchdog := time.AfterFunc(soakDeadline, func() {
		_ = pprof.Lookup("goroutine").WriteTo(&full, 2)
		_ = pprof.Lookup("goroutine").WriteTo(&grouped, 1)
		close(dumped)
		cancel()
	})
	defer watchdog.Stop()
	returned := make(chan struct{})
	go func() {
		select {
		case <-returned:
			return
		case <-time.After(soakDeadline + 30*time.Second):
		}
		var b bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
		panic(fmt.Sprintf("soak scenario %s (seed %d) did not return 30 s after its context was canceled; goroutines:\n%s", sc.name, sc.seed, b.String()))
	}()

	// Restarts, once enough records landed and a request is in flight.
	var landed atomic.Int64
	obs := upsert.Observer{RequestDone: func(e upsert.RequestEvent) {
		if e.Err == nil {
			landed.Add(int64(e.Records))
		}
	}}
	var restarts, cutOff atomic.Int64
	stopRestarts := make(chan struct{})
	restartsDone := make(chan struct{})
	go func() {
		defer close(restartsDone)
		for _, share := range sc.restartAt {
			for landed.Load() < int64(share*float64(sc.n)) || soakInFlight(srv.Stats()) == 0 {
				select {
				case <-stopRestarts:
					return
				case <-time.After(500 * time.Microsecond):
				}
			}
			before := srv.Stats().Codes[codes.Unavailable]
			srv.Restart()
			restarts.Add(1)
			cutOff.Add(int64(srv.Stats().Codes[codes.Unavailable] - before))
		}
	}()

	opts := append([]upsert.Option{upsert.WithIndex(idx), upsert.WithObserver(obs)}, sc.opts...)
	start := time.Now()
	var res upsert.Result
	var runErr error
	var taken []bool // the records the run was given; nil: all of them
	switch sc.mode {
	case soakAll:
		res, runErr = upsert.All(ctx, recs, opts...)
	case soakStream:
		seq := func(yield func(*pinecone.Vector) bool) {
			for i, r := range recs {
				if i == sc.cancelAt && i > 0 {
					time.AfterFunc(soakCancelAfter, cancel)
				}
				if !yield(r) {
					return
				}
			}
		}
		res, runErr = upsert.Stream(ctx, seq, opts...)
		if res.Stats.Records < len(recs) {
			// Canceled: the stream was not pulled to its end. Stats.Records
			// counts the records it pulled.
			taken = make([]bool, len(recs))
			for i := range res.Stats.Records {
				taken[i] = true
			}
		}
	case soakWriter:
		var refused int
		res, taken, refused, runErr = soakWrite(ctx, t, recs, opts)
		if refused > 0 && ctx.Err() == nil {
			t.Errorf("Writer.Add refused %d records before the deadline", refused)
		}
	}
	elapsed := time.Since(start)
	close(returned)
	close(stopRestarts)
	<-restartsDone
	deadlineHit := !watchdog.Stop()
	if deadlineHit {
		<-dumped
		path := filepath.Join(os.TempDir(), fmt.Sprintf("soak-%s-%d-goroutines.txt", tag, time.Now().Unix()))
		_ = os.WriteFile(path, full.Bytes(), 0o644)
		t.Errorf("scenario %s (seed %d) had not finished after %v and was canceled: %d records landed, %d requests "+
			"(limiter at the end: %+v, mean batch %.1f); the records it was given are still checked below; "+
			"goroutine dump at the deadline in %s; the library's goroutines then:\n%s",
			sc.name, sc.seed, soakDeadline, res.Upserted, res.Stats.Requests, res.Stats.Limiter, res.Stats.BatchSizes.Mean, path, soakGoroutines(grouped.String()))
	}

	soakQuiesce(t, srv)
	st := srv.Stats()
	v := soakVerify(t, srv, ns, recs, taken, res, sc.mode == soakWriter, bad, rejects, sc.exactFailures)

	given := len(recs)
	if taken != nil {
		given = 0
		for _, ok := range taken {
			if ok {
				given++
			}
		}
	}
	failedByClass := make(map[upsert.Class]int)
	mayHaveLanded := 0
	for _, f := range res.Failed {
		failedByClass[f.Class]++
		if f.MayHaveLanded {
			mayHaveLanded++
		}
	}
	nonOK := st.Requests - st.Codes[codes.OK]
	*out = soakTotals{
		records: given, upserted: res.Upserted, failed: len(res.Failed), duplicates: res.Duplicates,
		mayHaveLanded: mayHaveLanded, storedFailed: v.storedFailed,
		clientRequests: res.Stats.Requests, serverRequests: st.Requests, nonOK: nonOK,
		scripted: int(scripted.Load()), admission429: st.RateLimited, restarts: int(restarts.Load()),
		lost: v.lost, corrupted: v.corrupted, codes: st.Codes,
	}
	t.Logf("%s seed=%d mode=%v | records=%d upserted=%d failed=%d %s duplicates=%d | client requests=%d retries=%d %s splits=%d | "+
		"server requests=%d by code %s; scripted faults=%d admission 429s=%d restarts=%d (cut off %d in flight) | "+
		"may-have-landed=%d stored-though-failed=%d lost=%d corrupted=%d | elapsed=%v | limiter at the end: rate=%.0f/s concurrency=%d batch=%d, mean batch %.0f",
		sc.name, sc.seed, sc.mode, given, res.Upserted, len(res.Failed), soakClasses(failedByClass), res.Duplicates,
		res.Stats.Requests, res.Stats.Retries, soakClasses(res.Stats.RetriesByClass), res.Stats.Splits,
		st.Requests, soakCodes(st.Codes), scripted.Load(), st.RateLimited, restarts.Load(), cutOff.Load(),
		mayHaveLanded, v.storedFailed, v.lost, v.corrupted, elapsed.Round(time.Millisecond),
		res.Stats.Limiter.Rate, res.Stats.Limiter.Concurrency, res.Stats.Limiter.BatchSize, res.Stats.BatchSizes.Mean)

	assert.Equal(t, given, res.Upserted+len(res.Failed)+res.Duplicates, "Upserted + Failed + Duplicates == records given")
	assert.Equal(t, res.Stats.Failed, len(res.Failed), "Result.Failed holds every failure")
	assert.Equal(t, given, res.Stats.Records, "Stats.Records")
	if len(res.Failed) == 0 {
		assert.NoError(t, runErr)
	} else {
		require.Error(t, runErr)
		for c := range failedByClass {
			assert.ErrorIs(t, runErr, c.Err(), "the run's error matches every failure class")
		}
	}
	for c, k := range failedByClass {
		if deadlineHit && c == upsert.ClassCanceled {
			continue // reported above
		}
		assert.Contains(t, sc.allowed, c, "%d records failed with %v, which this scenario's faults cannot cause; first: %s", k, c, soakFirstFailure(res.Failed, c))
	}
	if !deadlineHit {
		assert.EqualValues(t, len(sc.restartAt), restarts.Load(), "restarts while the run went")
	}
	assert.Zero(t, v.wrongFailures, "records that failed in a way they should not have")
	require.Zero(t, v.lost, "records neither stored nor reported failed (scenario %s, seed %d)", sc.name, sc.seed)
	require.Zero(t, v.corrupted, "records stored with other values than sent (scenario %s, seed %d)", sc.name, sc.seed)
	require.Zero(t, v.storedNotAmbiguous, "records reported failed, and not as maybe landed, yet stored (scenario %s, seed %d)", sc.name, sc.seed)
}

// soakGoroutines summarises a goroutine profile (debug=1) to the
// library's goroutines: how many wait where, and what started them.
func soakGoroutines(profile string) string {
	const lib = "github.com/upsertlib/upsert."
	var b strings.Builder
	if i := strings.Index(profile, "\n"); strings.HasPrefix(profile, "goroutine profile:") && i >= 0 {
		profile = profile[i+1:]
	}
	for _, block := range strings.Split(profile, "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		count, _, _ := strings.Cut(lines[0], " @ ")
		var frames []string
		for _, l := range lines[1:] {
			f := strings.Fields(l) // "#", pc, function+offset, file:line
			if len(f) == 4 && strings.HasPrefix(f[2], lib) && !strings.Contains(f[3], "_test.go") {
				fn, _, _ := strings.Cut(strings.TrimPrefix(f[2], "github.com/upsertlib/"), "+")
				frames = append(frames, fn+" ("+filepath.Base(f[3])+")")
			}
		}
		if len(frames) > 0 {
			fmt.Fprintf(&b, "  %s × %s\n", count, strings.Join(frames, " ← "))
		}
	}
	return b.String()
}

// soakInFlight is how many upsert requests the server has received and
// not yet answered.
func soakInFlight(st upserttest.Stats) int {
	n := st.Requests
	for _, k := range st.Codes {
		n -= k
	}
	return n
}

// soakWrite feeds recs to a Writer from several goroutines, each adding
// its share in order, then closes it. taken tells which records Add took.
func soakWrite(ctx context.Context, t *testing.T, recs []*pinecone.Vector, opts []upsert.Option) (res upsert.Result, taken []bool, refused int, err error) {
	w, err := upsert.NewWriter(ctx, opts...)
	require.NoError(t, err)
	const producers = 4
	taken = make([]bool, len(recs)) // each producer sets its own elements
	var refusals atomic.Int64
	var firstRefusal atomic.Value
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := p; i < len(recs); i += producers {
				if err := w.Add(ctx, recs[i]); err != nil {
					if refusals.Add(1) == 1 {
						firstRefusal.Store(fmt.Sprintf("Add(%q): %v", recs[i].Id, err))
					}
					continue
				}
				taken[i] = true
			}
		})
	}
	wg.Wait()
	if n := refusals.Load(); n > 0 {
		t.Logf("Writer.Add refused %d records; first: %v", n, firstRefusal.Load())
	}
	res, err = w.Close(context.WithoutCancel(ctx))
	return res, taken, int(refusals.Load()), err
}

// soakQuiesce waits until the server has answered every request it
// received: writes of requests the client gave up on land before that.
func soakQuiesce(t *testing.T, srv *upserttest.Server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	stable := 0
	last := -1
	for time.Now().Before(deadline) {
		st := srv.Stats()
		answered := 0
		for _, n := range st.Codes {
			answered += n
		}
		if answered == st.Requests && st.Requests == last {
			stable++
			if stable >= 3 {
				return
			}
		} else {
			stable = 0
		}
		last = st.Requests
		time.Sleep(20 * time.Millisecond)
	}
	st := srv.Stats()
	t.Errorf("the server still has requests in flight after 10 s: %d received, answers %s", st.Requests, soakCodes(st.Codes))
}

// sameRecord reports whether a failure's record is the record given: the
// caller's own for All, the copy Stream and Writer take for the others.
func sameRecord(got, want *pinecone.Vector) bool {
	if got == want {
		return true
	}
	return got != nil && got.Id == want.Id && (got.Values == nil) == (want.Values == nil) &&
		(want.Values == nil || slices.EqualFunc(*got.Values, *want.Values, sameBits)) &&
		proto.Equal(got.Metadata, want.Metadata) && reflect.DeepEqual(got.SparseValues, want.SparseValues)
}

// sameBits compares values bit for bit, so that a NaN equals its copy.
func sameBits(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

type soakVerdict struct {
	lost, corrupted, storedFailed, storedNotAmbiguous, wrongFailures int
}

// soakVerify compares what the server stores with the records given and
// the result. taken, when not nil, tells which records the run was given.
// byID keys failures by id (a Writer fed from several goroutines numbers
// records in arrival order); otherwise by input index. bad are the invalid
// records, rejects the ids the server rejects; exact says that nothing
// else may fail.
func soakVerify(t *testing.T, srv *upserttest.Server, ns string, recs []*pinecone.Vector, taken []bool, res upsert.Result,
	byID bool, bad map[int]string, rejects []string, exact bool) soakVerdict {
	t.Helper()
	var v soakVerdict
	const maxReports = 20
	reports := 0
	report := func(format string, args ...any) {
		if reports < maxReports {
			t.Errorf(format, args...)
		}
		reports++
	}
	stored := srv.Vectors(ns)

	failedAt := make(map[int]upsert.Failure, len(res.Failed))
	failedID := make(map[string]upsert.Failure, len(res.Failed))
	for _, f := range res.Failed {
		if byID {
			if _, dup := failedID[f.ID]; dup {
				report("record %q reported failed twice", f.ID)
			}
			failedID[f.ID] = f
			continue
		}
		if f.Index < 0 || f.Index >= len(recs) {
			report("failure with index %d out of range: %+v", f.Index, f)
			continue
		}
		if _, dup := failedAt[f.Index]; dup {
			report("record %d (%q) reported failed twice", f.Index, f.ID)
		}
		failedAt[f.Index] = f
		if r := recs[f.Index]; r != nil && (f.ID != r.Id || !sameRecord(f.Record, r)) {
			report("failure %d names id %q, but the input record there is %q", f.Index, f.ID, r.Id)
		}
	}
	failureOf := func(i int) (upsert.Failure, bool) {
		if byID {
			f, ok := failedID[recs[i].Id]
			return f, ok
		}
		f, ok := failedAt[i]
		return f, ok
	}

	// Invalid records: each fails with ClassInvalid, unsent, and is not
	// stored.
	for i, why := range bad {
		if taken != nil && !taken[i] {
			continue
		}
		f, ok := failureOf(i)
		switch {
		case !ok:
			v.lost++
			report("invalid record %d (%s) is not reported failed", i, why)
		case f.Class != upsert.ClassInvalid || f.Attempts != 0:
			v.wrongFailures++
			report("invalid record %d (%s) failed with %v after %d attempts; want invalid, unsent: %v", i, why, f.Class, f.Attempts, f.Err)
		}
		if r := recs[i]; r != nil {
			if _, ok := stored[r.Id]; ok && r.Id != "" {
				v.corrupted++
				report("invalid record %d (%s) is stored", i, why)
			}
		}
	}

	// Records the server rejects: they fail (with ClassInvalid, unless a
	// fault of another kind had the last word) and are never stored.
	rejected := make(map[string]bool, len(rejects))
	for _, id := range rejects {
		rejected[id] = true
		i := slices.IndexFunc(recs, func(r *pinecone.Vector) bool { return r != nil && r.Id == id })
		if taken != nil && !taken[i] {
			continue
		}
		f, ok := failureOf(i)
		switch {
		case !ok:
			v.wrongFailures++ // and lost, counted below
			report("record %q, which the server rejects, is not reported failed", id)
		case exact && (f.Class != upsert.ClassInvalid || f.MayHaveLanded):
			v.wrongFailures++
			report("record %q, which the server rejects, failed with %v (may have landed: %v); want invalid: %v", id, f.Class, f.MayHaveLanded, f.Err)
		}
		if _, ok := stored[id]; ok {
			v.wrongFailures++
			report("record %q, which the server rejects, is stored", id)
		}
	}

	// Valid records, by id: the last occurrence wins.
	occ := make(map[string][]int, len(recs))
	for i, r := range recs {
		if _, isBad := bad[i]; isBad || r == nil || taken != nil && !taken[i] {
			continue
		}
		occ[r.Id] = append(occ[r.Id], i)
	}
	for id, is := range occ {
		last := is[len(is)-1]
		got, ok := stored[id]
		f, failed := failureOf(last)
		if failed && exact && !rejected[id] {
			v.wrongFailures++
			report("record %q (input %d) failed, and nothing but the invalid and rejected records may: %v", id, last, f.Err)
		}
		if failed {
			if !ok {
				continue
			}
			matches := -1
			for _, i := range is {
				if soakSame(recs[i], got) {
					matches = i
				}
			}
			if matches == last {
				v.storedFailed++
			}
			switch {
			case matches < 0:
				v.corrupted++
				report("record %q (failed with %v) is stored with values never sent: got %s, sent %s", id, f.Class, soakShow(got), soakShow(recs[last]))
			case matches == last && !f.MayHaveLanded:
				v.storedNotAmbiguous++
				report("record %q is stored, yet reported failed (%v, %d attempts) without MayHaveLanded: %v", id, f.Class, f.Attempts, f.Err)
			}
			if f.Attempts == 0 && matches == last {
				v.storedNotAmbiguous++
				report("record %q is stored, yet reported failed before it was sent: %v", id, f.Err)
			}
			continue
		}
		if !ok {
			v.lost++
			report("record %q (input %d) is neither stored nor reported failed", id, last)
			continue
		}
		if soakSame(recs[last], got) {
			continue
		}
		earlier := -1
		for _, i := range is[:len(is)-1] {
			if soakSame(recs[i], got) {
				earlier = i
			}
		}
		if earlier >= 0 {
			// The last occurrence is missing: what is stored is an
			// earlier one.
			v.lost++
			report("record %q (input %d) is neither stored nor reported failed: the server holds the earlier occurrence at input %d", id, last, earlier)
			continue
		}
		v.corrupted++
		report("record %q (input %d) is stored with other values than sent: got %s, sent %s", id, last, soakShow(got), soakShow(recs[last]))
	}
	// Nothing is stored that was not sent.
	for id := range stored {
		if _, ok := occ[id]; !ok && taken == nil {
			v.corrupted++
			report("id %q is stored but was never sent as a valid record", id)
		}
	}
	if reports > maxReports {
		t.Errorf("... and %d more problems", reports-maxReports)
	}
	return v
}

// soakSame reports whether the server's copy holds exactly what was sent.
func soakSame(want, got *pinecone.Vector) bool {
	if want.Id != got.Id {
		return false
	}
	var wv, gv []float32
	if want.Values != nil {
		wv = *want.Values
	}
	if got.Values != nil {
		gv = *got.Values
	}
	if !soakFloatsEqual(wv, gv) {
		return false
	}
	if !proto.Equal(want.Metadata, got.Metadata) {
		// A nil and an empty Struct are the same on the wire.
		if len(want.Metadata.GetFields()) != 0 || len(got.Metadata.GetFields()) != 0 {
			return false
		}
	}
	ws, gs := want.SparseValues, got.SparseValues
	if ws == nil || gs == nil {
		return (ws == nil || len(ws.Indices) == 0) && (gs == nil || len(gs.Indices) == 0)
	}
	return slices.Equal(ws.Indices, gs.Indices) && soakFloatsEqual(ws.Values, gs.Values)
}

// soakFloatsEqual compares float32s exactly, bit for bit.
func soakFloatsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func soakShow(v *pinecone.Vector) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{id %q", v.Id)
	if v.Values != nil {
		fmt.Fprintf(&b, " values %v", *v.Values)
	}
	if v.Metadata != nil {
		fmt.Fprintf(&b, " metadata %v", v.Metadata.AsMap())
	}
	if v.SparseValues != nil {
		fmt.Fprintf(&b, " sparse %v/%v", v.SparseValues.Indices, v.SparseValues.Values)
	}
	b.WriteString("}")
	return b.String()
}

func soakFirstFailure(fs []upsert.Failure, c upsert.Class) string {
	for _, f := range fs {
		if f.Class == c {
			return fmt.Sprintf("record %d %q after %d attempts: %v", f.Index, f.ID, f.Attempts, f.Err)
		}
	}
	return ""
}

func soakClasses(m map[upsert.Class]int) string {
	var parts []string
	for _, c := range upsert.Classes() {
		if m[c] > 0 {
			parts = append(parts, fmt.Sprintf("%v:%d", c, m[c]))
		}
	}
	if len(parts) == 0 {
		return "{}"
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func soakCodes(m map[codes.Code]int) string {
	cs := make([]codes.Code, 0, len(m))
	for c := range m {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i] < cs[j] })
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%v:%d", c, m[c]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}
