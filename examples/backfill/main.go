// Command backfill upserts 50,000 vectors with the upsert library and
// checks that every one of them landed.
//
// Without configuration it writes into an embedded loopback Pinecone data
// plane (package upserttest) that answers some requests with 429s, 503s
// and writes slower than the request timeout, then reads back what the
// server stored and compares it with what was sent. With PINECONE_API_KEY
// and PINECONE_HOST set (one without the other is an error), it writes to
// that real index instead, with the library's default request timeout
// (into the namespace "upsert-backfill-example", or PINECONE_NAMESPACE); a host
// given as plain http:// must be a loopback one (such as Pinecone Local),
// for elsewhere the API key would cross the network unencrypted.
//
//	go run ./examples/backfill
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upserttest"
)

const (
	records   = 50_000
	dimension = 64
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	vectors := makeVectors(records, dimension)
	idx, verify, cleanup, err := connect()
	if err != nil {
		return err
	}
	defer cleanup()

	fmt.Printf("sending %d vectors of %d dimensions to namespace %q\n", len(vectors), dimension, idx.Namespace())
	progress := func(p upsert.Progress) {
		if !p.Final {
			fmt.Printf("  %6d/%d  %7.0f rec/s  in flight %d, batch %d, rate cap %s\n",
				p.Done, p.Total, p.Rate, p.Stats.Limiter.InFlight, p.Stats.Limiter.BatchSize, rateText(p.Stats.Limiter.Rate))
		}
	}
	// The embedded index's slow writes are meant to outlast a 2 s timeout;
	// a real index keeps the library's default.
	timeout := upsert.DefaultRequestTimeout
	if verify != nil {
		timeout = 2 * time.Second
	}
	start := time.Now()
	res, runErr := upsert.All(ctx, vectors, upsert.WithIndex(idx), upsert.WithProgress(time.Second, progress),
		upsert.WithRequestTimeout(timeout))
	report(res, time.Since(start))

	if verify != nil {
		if err := verify(vectors, res); err != nil {
			return err
		}
	}
	if runErr != nil {
		return fmt.Errorf("%d records failed: %w", len(res.Failed), runErr)
	}
	return nil
}

// connect returns the index to write to, and for the embedded one a
// function that checks what it stored.
func connect() (idx *pinecone.IndexConnection, verify func([]*pinecone.Vector, upsert.Result) error, cleanup func(), err error) {
	key, host := os.Getenv("PINECONE_API_KEY"), os.Getenv("PINECONE_HOST")
	namespace := os.Getenv("PINECONE_NAMESPACE")
	if namespace == "" {
		namespace = "upsert-backfill-example"
	}
	if (key == "") != (host == "") {
		return nil, nil, nil, errors.New("set both PINECONE_API_KEY and PINECONE_HOST to write to a real index, or neither for the embedded one; only one is set")
	}
	var srv *upserttest.Server
	if key == "" {
		// An index with a fault for every class the library retries: it
		// accepts 10,000 vectors/s and answers 429 beyond, answers 2% of
		// requests 503, and 1% of its writes land after the client's 2 s
		// deadline (the client sees a timeout, the write is there).
		srv = upserttest.NewServer(
			upserttest.Serverless(),
			upserttest.WithRate(10_000, 2_000),
			upserttest.WithLatency(5*time.Millisecond, 20*time.Microsecond),
			upserttest.WithFaults(upserttest.Chain(
				upserttest.ErrorRate(codes.Unavailable, 0.02, 1),
				upserttest.AmbiguousTimeouts(0.01, 3*time.Second, 2),
			)),
		)
		key, host = "loopback", srv.Host()
		fmt.Printf("no PINECONE_API_KEY/PINECONE_HOST: writing to an embedded loopback index at %s\n", host)
		fmt.Println("  (it accepts 10,000 vectors/s and answers 429 beyond, answers 2% of requests 503,")
		fmt.Println("   and 1% of its writes land after the client's 2 s timeout)")
	} else if err := checkPlaintext(host); err != nil {
		return nil, nil, nil, err
	}
	pc, err := upsert.NewClient(pinecone.NewClientParams{ApiKey: key})
	if err != nil {
		return nil, nil, nil, err
	}
	idx, err = pc.Index(pinecone.NewIndexConnParams{Host: host, Namespace: namespace}, upsert.PushbackDialOption())
	if err != nil {
		return nil, nil, nil, err
	}
	cleanup = func() {
		idx.Close()
		if srv != nil {
			srv.Close()
		}
	}
	if srv != nil {
		verify = func(sent []*pinecone.Vector, res upsert.Result) error { return check(srv, namespace, sent, res) }
	}
	return idx, verify, cleanup, nil
}

// checkPlaintext refuses a host the SDK would dial without TLS (http://)
// unless it is on the loopback interface (localhost or a loopback IP, as
// Pinecone Local is): elsewhere the API key, sent with every request,
// would cross the network unencrypted. No name is looked up.
func checkPlaintext(host string) error {
	u, err := url.Parse(host)
	if err != nil || u.Scheme != "http" {
		return nil // the SDK dials it with TLS
	}
	name := u.Hostname()
	ip, _ := netip.ParseAddr(name)
	if strings.EqualFold(strings.TrimSuffix(name, "."), "localhost") || ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("PINECONE_HOST: plain http:// is for a loopback host only (localhost, 127.0.0.1, [::1]), not %q: "+
		"the API key would cross the network unencrypted; use https://", name)
}

// check compares what the embedded server stored with what was sent.
func check(srv *upserttest.Server, namespace string, sent []*pinecone.Vector, res upsert.Result) error {
	failed := make(map[string]bool, len(res.Failed))
	for _, f := range res.Failed {
		failed[f.ID] = true
	}
	stored := srv.Vectors(namespace)
	same, missing, differ := 0, 0, 0
	for _, v := range sent {
		got, ok := stored[v.Id]
		switch {
		case !ok && !failed[v.Id]:
			missing++
		case !ok:
		case slices.Equal(*got.Values, *v.Values) && proto.Equal(got.Metadata, v.Metadata):
			same++
		default:
			differ++
		}
	}
	st := srv.Stats()
	fmt.Printf("\nserver: %d requests, %d answered 429, %d answered 503, stored %d vectors\n",
		st.Requests, st.Codes[codes.ResourceExhausted], st.Codes[codes.Unavailable], len(stored))
	fmt.Printf("verified: %d stored with exactly the values sent, %d reported failed, %d missing and unreported, %d with other values\n",
		same, len(res.Failed), missing, differ)
	if missing > 0 || differ > 0 {
		return errors.New("the index does not hold what was sent")
	}
	return nil
}

func report(res upsert.Result, elapsed time.Duration) {
	s := res.Stats
	fmt.Printf("\nupserted %d of %d records in %v (%.0f rec/s), %d failed\n",
		res.Upserted, s.Records, elapsed.Round(time.Millisecond), float64(res.Upserted)/elapsed.Seconds(), len(res.Failed))
	fmt.Printf("requests %d, mean batch %.0f, latency p50 %v p99 %v\n",
		s.Requests, s.BatchSizes.Mean, s.Latency.P50, s.Latency.P99)
	var parts []string
	for _, c := range upsert.Classes() {
		if n := s.RetriesByClass[c]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c, n))
		}
	}
	fmt.Printf("retries by class: %s; splits %d\n", orNone(strings.Join(parts, ", ")), s.Splits)
	for _, f := range res.Failed[:min(len(res.Failed), 5)] {
		fmt.Printf("  failed %s: %v\n", f.ID, f.Err)
	}
}

func makeVectors(n, dim int) []*pinecone.Vector {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]*pinecone.Vector, n)
	for i := range out {
		vals := make([]float32, dim)
		for j := range vals {
			vals[j] = rng.Float32()
		}
		md, _ := structpb.NewStruct(map[string]any{"doc": fmt.Sprintf("doc-%d", i/10), "chunk": float64(i % 10)})
		out[i] = &pinecone.Vector{Id: fmt.Sprintf("doc-%d#%d", i/10, i%10), Values: &vals, Metadata: md}
	}
	return out
}

func rateText(r float64) string {
	if r > 1e18 {
		return "none"
	}
	return fmt.Sprintf("%.0f/s", r)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
