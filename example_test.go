package upsert_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upserttest"
)

// Upsert a slice into an index, here the loopback one of upserttest,
// through the real SDK.
func ExampleAll() {
	srv := upserttest.NewServer(upserttest.WithDimension(2))
	defer srv.Close()
	pc, err := upsert.NewClient(pinecone.NewClientParams{ApiKey: "example"})
	if err != nil {
		log.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"}, upsert.PushbackDialOption())
	if err != nil {
		log.Fatal(err)
	}
	defer idx.Close()

	vectors := []*pinecone.Vector{
		{Id: "a", Values: &[]float32{0.1, 0.2}},
		{Id: "b", Values: &[]float32{0.3, 0.4}},
		{Id: "c", Values: &[]float32{0.5}}, // not the dimension of the others
	}
	res, err := upsert.All(context.Background(), vectors, upsert.WithIndex(idx))
	fmt.Println("upserted:", res.Upserted, "stored:", srv.Count("docs"))
	for _, f := range res.Failed {
		fmt.Printf("failed %s (%v): %v\n", f.ID, f.Class, f.Err)
	}
	fmt.Println(errors.Is(err, upsert.ErrInvalid))
	// Output:
	// upserted: 2 stored: 2
	// failed c (invalid): invalid: record 2 (id "c"): has 1 dense value; the index's dimension is 2
	// true
}

// Classify tells what the library makes of an error, and so what it does.
func ExampleClassify() {
	for _, err := range []error{
		status.Error(codes.ResourceExhausted, "Request failed. You've reached the max upsert size limit per second"),
		status.Error(codes.ResourceExhausted, "grpc: received message larger than max (2500000 vs. 2097152)"),
		&pinecone.PineconeError{Code: 503, Msg: errors.New("unavailable")},
		context.DeadlineExceeded,
		status.Error(codes.InvalidArgument, "Vector dimension 3 does not match the dimension of the index 4"),
		status.Error(codes.Unauthenticated, "Invalid API key"),
	} {
		fmt.Println(upsert.Classify(err))
	}
	// Output:
	// rate-limited
	// too-large
	// server
	// timeout
	// invalid
	// denied
}

// A Writer takes records as a service produces them; Close returns the
// result of its whole life.
func ExampleWriter() {
	srv := upserttest.NewServer()
	defer srv.Close()
	pc, err := upsert.NewClient(pinecone.NewClientParams{ApiKey: "example"})
	if err != nil {
		log.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "events"})
	if err != nil {
		log.Fatal(err)
	}
	defer idx.Close()

	ctx := context.Background()
	w, err := upsert.NewWriter(ctx, upsert.WithIndex(idx))
	if err != nil {
		panic(err)
	}
	for i := range 250 {
		v := &pinecone.Vector{Id: fmt.Sprint("event-", i), Values: &[]float32{float32(i), 1}}
		if err := w.Add(ctx, v); err != nil {
			panic(err)
		}
	}
	res, err := w.Close(ctx)
	fmt.Println(res.Upserted, err, srv.Count("events"))
	// Output: 250 <nil> 250
}

// Stream pulls records from an iterator as fast as the index takes them.
// With a checkpoint, a run resumes where the last one stopped: here the
// second run finds every record settled, and sends none.
func ExampleStream() {
	srv := upserttest.NewServer()
	defer srv.Close()
	pc, err := upsert.NewClient(pinecone.NewClientParams{ApiKey: "example"})
	if err != nil {
		log.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "backfill"})
	if err != nil {
		log.Fatal(err)
	}
	defer idx.Close()
	dir, _ := os.MkdirTemp("", "backfill")
	defer os.RemoveAll(dir)
	cp := upsert.FileCheckpoint(filepath.Join(dir, "backfill.checkpoint"))

	records := make([]*pinecone.Vector, 1000)
	for i := range records {
		records[i] = &pinecone.Vector{Id: fmt.Sprint("doc-", i), Values: &[]float32{float32(i), 1}}
	}
	for range 2 {
		res, err := upsert.Stream(context.Background(), slices.Values(records), upsert.WithIndex(idx), upsert.WithCheckpoint(cp))
		fmt.Println("upserted:", res.Upserted, "skipped:", res.Stats.Skipped, err)
	}
	// Output:
	// upserted: 1000 skipped: 0 <nil>
	// upserted: 0 skipped: 1000 <nil>
}

// Records writes text records into an index with integrated embedding,
// which embeds them itself, at most 96 to a request. A record without the
// text to embed fails alone, before anything is sent; the others land.
func ExampleRecords() {
	srv := upserttest.NewServer(upserttest.WithFieldMap("chunk_text"))
	defer srv.Close()
	pc, err := upsert.NewClient(pinecone.NewClientParams{ApiKey: "example", RestClient: srv.Client()})
	if err != nil {
		log.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"})
	if err != nil {
		log.Fatal(err)
	}
	defer idx.Close()

	records := make([]*pinecone.IntegratedRecord, 200)
	for i := range records {
		records[i] = &pinecone.IntegratedRecord{"_id": fmt.Sprint("chunk-", i), "chunk_text": fmt.Sprint("Paragraph ", i, "."), "page": i / 10}
	}
	records[7] = &pinecone.IntegratedRecord{"_id": "chunk-7", "page": 0} // no text
	res, err := upsert.Records(context.Background(), slices.Values(records), upsert.WithIndex(idx))
	fmt.Println("upserted:", res.Upserted, "stored:", srv.RecordCount("docs"))
	fmt.Println(err)
	for _, f := range res.Failed {
		fmt.Println(f.ID, f.Class)
	}
	// Output:
	// upserted: 199 stored: 199
	// upsert: 1 of 200 records failed: 1 invalid (first: invalid: record 7 (id "chunk-7"): has no text to embed: every integrated index embeds a string field (its field_map), and this record has none but its id)
	// chunk-7 invalid
}

// A service that writes into an index call after call keeps one Limiter
// for it, so that each call starts from what the earlier ones learned (the
// rate the index accepts, the batch size and concurrency that suit it)
// instead of finding it again. Calls that run at the same time share one
// without being told.
func ExampleWithLimiter() {
	// An index that takes 2,000 records a second, and answers 429 above.
	srv := upserttest.NewServer(upserttest.WithRate(2000, 100))
	defer srv.Close()
	pc, err := upsert.NewClient(pinecone.NewClientParams{ApiKey: "example"})
	if err != nil {
		log.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"}, upsert.PushbackDialOption())
	if err != nil {
		log.Fatal(err)
	}
	defer idx.Close()

	lim := upsert.NewLimiter()
	rateKnown := func() bool { return !math.IsInf(lim.State("docs").Rate, 1) }
	fmt.Println("before the first call, the rate is known:", rateKnown())
	for call := range 2 {
		vectors := make([]*pinecone.Vector, 1000)
		for i := range vectors {
			vectors[i] = &pinecone.Vector{Id: fmt.Sprintf("c%d-%d", call, i), Values: &[]float32{float32(i), 1}}
		}
		res, err := upsert.All(context.Background(), vectors, upsert.WithIndex(idx), upsert.WithLimiter(lim))
		fmt.Println("call", call, "upserted:", res.Upserted, err, "- then the rate is known:", rateKnown())
	}
	fmt.Println("stored:", srv.Count("docs"))
	// Output:
	// before the first call, the rate is known: false
	// call 0 upserted: 1000 <nil> - then the rate is known: true
	// call 1 upserted: 1000 <nil> - then the rate is known: true
	// stored: 2000
}

// A service that consumes a log (Kafka, Pub/Sub, a CDC stream) commits a
// source offset only once every record up to it has landed or gone to the
// dead letters: the acks say so, in the order the records were added.
func ExampleWithAcks() {
	srv := upserttest.NewServer(upserttest.WithDimension(2))
	defer srv.Close()
	pc, err := upsert.NewClient(pinecone.NewClientParams{ApiKey: "example"})
	if err != nil {
		log.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "events"})
	if err != nil {
		log.Fatal(err)
	}
	defer idx.Close()

	type message struct {
		offset int64
		vector *pinecone.Vector
	}
	committed := int64(-1) // every message up to it has landed or is a dead letter
	stuck := false         // a record to send again: nothing past it is committed until a restart reads it again
	var deadLetters []upsert.Failure
	onAcks := func(acks []upsert.Ack) {
		for _, a := range acks {
			m := a.Tag.(*message)
			if stuck || a.Resend {
				stuck = true
				continue
			}
			if a.Failure != nil {
				deadLetters = append(deadLetters, *a.Failure)
			}
			committed = m.offset
			fmt.Printf("offset %d: landed %v\n", m.offset, a.Landed())
		}
		// Commit the offset and the dead letters here, in one step.
	}

	ctx := context.Background()
	w, err := upsert.NewWriter(ctx, upsert.WithIndex(idx), upsert.WithAcks(onAcks))
	if err != nil {
		panic(err)
	}
	for i, values := range [][]float32{{1, 2}, {3, 4}, {5}, {7, 8}} {
		m := &message{offset: int64(100 + i), vector: &pinecone.Vector{Id: fmt.Sprint("e", i), Values: &values}}
		if err := w.AddTagged(ctx, m.vector, m); err != nil {
			panic(err)
		}
	}
	_, err = w.Close(ctx) // returns once every ack was delivered
	fmt.Println("committed up to offset", committed)
	fmt.Println("dead letters:", len(deadLetters), deadLetters[0].ID, deadLetters[0].Class, errors.Is(err, upsert.ErrInvalid))
	// Output:
	// offset 100: landed true
	// offset 101: landed true
	// offset 102: landed false
	// offset 103: landed true
	// committed up to offset 103
	// dead letters: 1 e2 invalid true
}

// An index whose limits were raised (or a pod-based one, which has none)
// is described with WithIndexLimits: the limiter starts from them instead
// of Pinecone's serverless limits, and still probes above them.
func ExampleWithIndexLimits() {
	srv := upserttest.NewServer(upserttest.WithRequestRate(500, 0))
	defer srv.Close()
	pc, err := upsert.NewClient(pinecone.NewClientParams{ApiKey: "example"})
	if err != nil {
		log.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"}, upsert.PushbackDialOption())
	if err != nil {
		log.Fatal(err)
	}
	defer idx.Close()

	vectors := make([]*pinecone.Vector, 2000)
	for i := range vectors {
		vectors[i] = &pinecone.Vector{Id: fmt.Sprint("v", i), Values: &[]float32{float32(i), 1}}
	}
	raised := upsert.IndexLimits{RequestsPerSecond: 500, BytesPerSecond: 250e6}
	res, err := upsert.All(context.Background(), vectors, upsert.WithIndex(idx), upsert.WithIndexLimits(raised))
	fmt.Println("upserted:", res.Upserted, err)
	// Output:
	// upserted: 2000 <nil>
}

// A backfill held to 10,000 records a second, whatever the index would
// accept: ten requests of 100 records, the last sent 90 ms after the
// first.
func ExampleWithMaxRate() {
	vectors := make([]*pinecone.Vector, 1000)
	for i := range vectors {
		vectors[i] = &pinecone.Vector{Id: fmt.Sprint("v", i), Values: &[]float32{float32(i), 1}}
	}
	var sent []time.Time
	send := func(_ context.Context, _ string, _ []*pinecone.Vector) error {
		sent = append(sent, time.Now()) // one request at a time: no lock needed
		return nil
	}
	res, err := upsert.All(context.Background(), vectors, upsert.WithUpsertFunc(send),
		upsert.WithBatchSize(100), upsert.WithConcurrency(1), upsert.WithMaxRate(10000))
	fmt.Println("upserted:", res.Upserted, err)
	fmt.Println("paced:", sent[len(sent)-1].Sub(sent[0]) >= 90*time.Millisecond)
	// Output:
	// upserted: 1000 <nil>
	// paced: true
}

// A namespace taken from configuration, checked before a long run: every
// record routed to one Pinecone does not allow would fail.
func ExampleValidNamespace() {
	fmt.Println(upsert.ValidNamespace("tenant-42"))
	fmt.Println(upsert.ValidNamespace("café"))
	// Output:
	// <nil>
	// namespace "café" has a non-ASCII byte at offset 3; namespaces must be ASCII without NUL
}
