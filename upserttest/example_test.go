package upserttest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/upsertlib/upsert/upserttest"
)

// A test of your own ingestion code: start a server, point the real SDK at
// it, upsert, and check what the server stored.
func Example() {
	srv := upserttest.NewServer(upserttest.WithDimension(3))
	defer srv.Close()

	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test"})
	if err != nil {
		log.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"})
	if err != nil {
		log.Fatal(err)
	}
	defer idx.Close()

	metadata, _ := structpb.NewStruct(map[string]any{"title": "Getting started"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := idx.UpsertVectors(ctx, []*pinecone.Vector{
		{Id: "doc-1", Values: &[]float32{0.1, 0.2, 0.3}, Metadata: metadata},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("upserted:", n)

	v, ok := srv.Vector("docs", "doc-1")
	fmt.Println("stored:", ok, *v.Values, v.Metadata.Fields["title"].GetStringValue())
	fmt.Println("OK answers:", srv.Stats().Codes[codes.OK])
	// Output:
	// upserted: 1
	// stored: true [0.1 0.2 0.3] Getting started
	// OK answers: 1
}

// A fault script makes the server misbehave on purpose: here every request
// is half written and answered INTERNAL, as a real service can do.
func ExampleWithFaults() {
	srv := upserttest.NewServer(upserttest.WithFaults(upserttest.PartialWrites(1, 0)))
	defer srv.Close()

	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test"})
	if err != nil {
		log.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"})
	if err != nil {
		log.Fatal(err)
	}
	defer idx.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = idx.UpsertVectors(ctx, []*pinecone.Vector{
		{Id: "a", Values: &[]float32{1}},
		{Id: "b", Values: &[]float32{2}},
	})
	fmt.Println("code:", status.Code(err))
	fmt.Println("stored:", srv.Count("docs"))
	_, ok := srv.Vector("docs", "a")
	fmt.Println("first half written:", ok)
	// Output:
	// code: Internal
	// stored: 1
	// first half written: true
}

// A write that holds a write slot is applied even if its client gives up:
// with a latency longer than the client's deadline, the client sees
// DeadlineExceeded, and the vector lands anyway. WaitIdle waits for that
// write, which the server received well before the client gave up (it
// does not wait for a request still on its way).
func ExampleWithLatency() {
	srv := upserttest.NewServer(upserttest.WithLatency(250*time.Millisecond, 0))
	defer srv.Close()

	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test"})
	if err != nil {
		log.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"})
	if err != nil {
		log.Fatal(err)
	}
	defer idx.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = idx.UpsertVectors(ctx, []*pinecone.Vector{{Id: "a", Values: &[]float32{1}}})
	fmt.Println("client:", status.Code(err))

	wait, cancelWait := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelWait()
	if err := srv.WaitIdle(wait); err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored:", srv.Count("docs"))
	// Output:
	// client: DeadlineExceeded
	// stored: 1
}

// Indexes with integrated embedding take text records through the SDK's
// UpsertRecords, a REST call over HTTPS to the same host; the server's
// Client trusts its certificate. The SDK returns a *pinecone.PineconeError
// with the HTTP status for any answer but 201 (since v5.4.1; v5.2.0 returned
// nil and the records were lost).
func ExampleServer_Client() {
	srv := upserttest.NewServer()
	defer srv.Close()

	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test", RestClient: srv.Client()})
	if err != nil {
		log.Fatal(err)
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"})
	if err != nil {
		log.Fatal(err)
	}
	defer idx.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = idx.UpsertRecords(ctx, []*pinecone.IntegratedRecord{
		{"_id": "rec1", "chunk_text": "Apples are rich in fiber.", "category": "nutrition"},
	})
	fmt.Println("error:", err)
	fmt.Println("stored:", srv.Records("docs"))

	srv.SetFaults(upserttest.RateLimitBurst(2, 1))
	err = idx.UpsertRecords(ctx, []*pinecone.IntegratedRecord{{"_id": "rec2", "chunk_text": "Refused."}})
	var pe *pinecone.PineconeError
	fmt.Println("refused:", errors.As(err, &pe) && pe.Code == http.StatusTooManyRequests)
	fmt.Println("records:", srv.RecordCount("docs"), "answers:", srv.Stats().HTTPCodes)
	// Output:
	// error: <nil>
	// stored: map[rec1:map[category:nutrition chunk_text:Apples are rich in fiber.]]
	// refused: true
	// records: 1 answers: map[201:1 429:1]
}
