// Command offsets consumes a partitioned log (a simulated Kafka topic of
// change events, keys updated again and again) into an index through an
// upsert.Writer, and commits each partition's offset only up to the
// records that have landed or gone to the dead letters, as the Writer's
// acknowledgements (upsert.WithAcks) tell. It is killed twice on the way,
// once as a crash (commits stop at once) and once by canceling its
// context, and restarts each time from the offsets it committed, once the
// requests the killed one left in flight are over (see [upsert.Stale]). The
// index, an embedded upserttest server, answers some requests with 429s
// and 503s, answers every twenty-fifth so late that the client times out (the write
// lands), and refuses some records.
//
// At every commit it checks that each record committed is on the index or
// in the dead letters committed with it, and at the end that every record
// of the log is: nothing committed early, nothing lost.
//
//	go run ./examples/offsets
//	go run ./examples/offsets -seed 7
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upserttest"
)

func main() {
	seed := flag.Int64("seed", 1, "seed of the log and of the points where the consumer is killed")
	flag.Parse()
	s, err := run(*seed, os.Stdout)
	if err != nil {
		log.Fatal(err)
	}
	if s.Early > 0 || s.Lost > 0 {
		os.Exit(1)
	}
}

// summary is what the runs did, for the output and the test.
type summary struct {
	Runs, Added, Commits      int
	CommitsPerRun             []int
	StartOffsets              [][]int // of each run
	Early, Lost               int
	DeadLetters, Recheck      int
	Replaced, Resend          int
	ErrorsByClass             map[upsert.Class]int // of the requests, seen by the Writers
	Splits                    int
	ServerCodes               map[codes.Code]int
	LateWrites                int // requests written after their client gave up
	FinalOffsets, LogPerTopic []int
}

// options are the knobs of a run of the example.
type options struct {
	seed  int64
	naive bool // commit as soon as Add returns, without acks: the mistake the audit catches
	// lateWrites gives the index a heavy-tailed write latency, so that
	// writes land after their client gave up: the run's Stale reports are
	// what keeps the commits right.
	lateWrites bool
}

// run consumes the log in three runs: killed by a crash, killed by a
// cancel, then to the end.
func run(seed int64, out io.Writer) (summary, error) {
	return runWith(options{seed: seed}, out)
}

func runWith(o options, out io.Writer) (summary, error) {
	topic := makeTopic(o.seed)
	srv := newIndex(topic, o.lateWrites)
	defer srv.Close()
	store := newCommitStore(topic, srv)
	s := summary{ErrorsByClass: map[upsert.Class]int{}, LogPerTopic: topic.lengths()}
	rng := rand.New(rand.NewPCG(uint64(o.seed), 99))
	total := topic.records()
	kills := []kill{ // at random points in the first two thirds of the log
		{after: total/5 + rng.IntN(total/5), crash: true},
		{after: total/8 + rng.IntN(total/5)},
		{after: -1},
	}
	fmt.Fprintf(out, "log: %d partitions, %d records, %d keys over %d namespaces\n", partitions, total, topic.keys(), namespaces)
	for i, k := range kills {
		if i > 0 {
			// The restarted consumer comes up after what the killed one
			// left in flight was written or dropped, as a process restart
			// outlasts a request's life on the index. Without it, such a
			// request, applied late, may overwrite the restart's later
			// change of its key: the Writer reports that as Stale only for
			// requests of its own run.
			awaitQuiet(srv)
		}
		start := store.offsetsNow()
		r, err := consume(context.Background(), topic, srv, store, k, o.naive)
		if err != nil {
			return s, err
		}
		s.add(r, start)
		fmt.Fprintf(out, "run %d: from offsets %v, added %d, %s; committed up to %v in %d commits\n",
			i+1, start, r.added, k, store.offsetsNow(), r.commits)
	}
	s.Early = store.early
	awaitQuiet(srv) // a write whose client gave up may land yet
	s.Lost = store.lost()
	s.DeadLetters, s.Recheck = len(store.dead), len(store.recheck)
	s.FinalOffsets = store.offsetsNow()
	st := srv.Stats()
	s.ServerCodes, s.LateWrites = st.Codes, st.LateWrites
	fmt.Fprintf(out, "server: %d requests, %d answered 429, %d answered 503, %d written after their client gave up; the writers saw errors %v, split %d batches\n",
		st.Requests, s.ServerCodes[codes.ResourceExhausted], s.ServerCodes[codes.Unavailable], s.LateWrites, s.ErrorsByClass, s.Splits)
	fmt.Fprintf(out, "dead letters %d, to recheck (may be stale) %d, replaced in their batch %d\n", s.DeadLetters, s.Recheck, s.Replaced)
	fmt.Fprintf(out, "committed before stored: %d; records of the log neither stored nor dead-lettered: %d\n", s.Early, s.Lost)
	return s, nil
}

func (s *summary) add(r runResult, start []int) {
	s.Runs++
	s.Added += r.added
	s.Commits += r.commits
	s.CommitsPerRun = append(s.CommitsPerRun, r.commits)
	s.StartOffsets = append(s.StartOffsets, start)
	s.Replaced += r.replaced
	s.Resend += r.resend
	s.Splits += r.stats.Splits
	for c, n := range r.stats.ErrorsByClass {
		s.ErrorsByClass[c] += n
	}
}

// kill says when a run of the consumer ends: after how many records
// added (-1: at the end of the log), by a crash (no commit after it) or
// by its context ending (the Writer fails what it holds as canceled, and
// acks it).
type kill struct {
	after int
	crash bool
}

func (k kill) String() string {
	switch {
	case k.after < 0:
		return "read to the end"
	case k.crash:
		return fmt.Sprintf("crashed after %d adds", k.after)
	default:
		return fmt.Sprintf("canceled after %d adds", k.after)
	}
}

// newIndex starts the embedded index, with its faults: 429s (a burst),
// 503s (two, and 3% of requests), every twenty-fifth answer so late that the
// client times out though the write landed (more than one, so that a kill
// of the consumer while one is in flight leaves others), and the records
// of the poisoned keys refused as invalid.
func newIndex(t topic, lateWrites bool) *upserttest.Server {
	late := func(r upserttest.Request) upserttest.Fault {
		if r.Seq%25 == 12 {
			return upserttest.Fault{Delay: 300 * time.Millisecond}
		}
		return upserttest.Fault{}
	}
	unavailable := func(r upserttest.Request) upserttest.Fault {
		if r.Seq == 8 || r.Seq == 9 {
			return upserttest.Fault{Code: codes.Unavailable}
		}
		return upserttest.Fault{}
	}
	opts := []upserttest.Option{upserttest.WithDimension(dimension), upserttest.WithFaults(upserttest.Chain(
		upserttest.RateLimitBurst(4, 3),
		unavailable,
		upserttest.ErrorRate(codes.Unavailable, 0.03, 5),
		late,
		upserttest.RejectIDs(t.poisoned...),
	))}
	if lateWrites {
		// 20 ms on average, past the 100-ms request timeout for about 3%
		// of writes (the lognormal's tail at σ 1.5, computed): 4 to 12
		// requests a run of the test, counted in Stats.LateWrites.
		opts = append(opts, upserttest.WithLatency(20*time.Millisecond, 0), upserttest.WithLatencyJitter(1.5, 1))
	}
	return upserttest.NewServer(opts...)
}

// awaitQuiet waits (up to a minute) until the index has written or
// dropped every request it received and none has come for 100 ms: writes
// whose client gave up land on their own time, and a request canceled
// by a kill may still be on its way.
func awaitQuiet(srv *upserttest.Server) {
	const quiet = 100 * time.Millisecond
	last, since := -1, time.Now()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		st := srv.Stats()
		if st.InFlight > 0 || st.Queued > 0 || st.Requests != last {
			last, since = st.Requests, time.Now()
			continue
		}
		if time.Since(since) >= quiet {
			return
		}
	}
}

// connect opens a connection to the index, as a consumer process does at
// its start.
func connect(srv *upserttest.Server) (*pinecone.IndexConnection, error) {
	pc, err := upsert.NewClient(pinecone.NewClientParams{ApiKey: "example"})
	if err != nil {
		return nil, err
	}
	return pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: namespaceOf(0)}, upsert.PushbackDialOption())
}
