package ndjson_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/ndjson"
)

// Records that do not land go to a dead-letter file as they fail; the file
// is then read back, as a later run would, to replay them.
func Example() {
	dir, err := os.MkdirTemp("", "ndjson-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "failed.ndjson")

	dl, err := ndjson.CreateDeadLetters(path)
	if err != nil {
		log.Fatal(err)
	}
	// An index that rejects every request holding record "b". With a real
	// index: upsert.WithIndex(idx).
	index := func(ctx context.Context, namespace string, batch []*pinecone.Vector) error {
		if slices.ContainsFunc(batch, func(v *pinecone.Vector) bool { return v.Id == "b" }) {
			return status.Error(codes.InvalidArgument, "bad record")
		}
		return nil
	}
	records := []*pinecone.Vector{
		{Id: "a", Values: &[]float32{0.1, 0.2}},
		{Id: "b", Values: &[]float32{0.3, 0.4}},
	}
	res, _ := upsert.All(context.Background(), records,
		upsert.WithUpsertFunc(index),
		upsert.WithObserver(upsert.Observer{Failure: dl.Write}))
	if err := dl.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("upserted:", res.Upserted, "dead letters:", dl.Count())

	data, _ := os.ReadFile(path)
	fmt.Print(string(data))

	f, err := os.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	r := ndjson.NewReader(f)
	for {
		v, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("replay:", v.Id, *v.Values)
	}
	// Output:
	// upserted: 1 dead letters: 1
	// {"id":"b","values":[0.3,0.4],"class":"invalid","error":"invalid (gRPC InvalidArgument): rpc error: code = InvalidArgument desc = bad record","attempts":2,"may_have_landed":false,"index":1}
	// replay: b [0.3 0.4]
}

// A backfill resumable from a checkpoint keeps its dead letters with it:
// given dl.Checkpoint(cp) in place of cp, the run saves cp only once the
// letters of the records it passes are on disk, and writes no letter of a
// record that the resumed run sends again. Here the first run stops when
// the index revokes the key: record "b", refused for good, is a dead
// letter; "c" and "d" are left to the resumed run, which opens the file to
// append and sends them.
func ExampleDeadLetters_Checkpoint() {
	dir, err := os.MkdirTemp("", "ndjson-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	deadPath := filepath.Join(dir, "failed.ndjson")
	ckpt := upsert.FileCheckpoint(filepath.Join(dir, "backfill.ckpt"))

	records := []*pinecone.Vector{
		{Id: "a", Values: &[]float32{0.1, 0.2}},
		{Id: "b", Values: &[]float32{0, 0}}, // invalid: all zero
		{Id: "c", Values: &[]float32{0.3, 0.4}},
		{Id: "d", Values: &[]float32{0.5, 0.6}},
	}
	backfill := func(index func(context.Context, string, []*pinecone.Vector) error) {
		dl, err := ndjson.AppendDeadLetters(deadPath) // keeps the letters of an interrupted run
		if err != nil {
			log.Fatal(err)
		}
		res, runErr := upsert.Stream(context.Background(), slices.Values(records),
			upsert.WithUpsertFunc(index), // with a real index: upsert.WithIndex(idx)
			upsert.WithBatchSize(1), upsert.WithConcurrency(1),
			upsert.WithCheckpoint(dl.Checkpoint(ckpt)),
			upsert.WithObserver(upsert.Observer{Failure: dl.Write}))
		if err := dl.Close(); err != nil {
			log.Fatal(err)
		}
		saved, _ := ckpt.Load(context.Background())
		fmt.Printf("upserted: %d, new dead letters: %d, checkpoint: %d, key denied: %t\n",
			res.Upserted, dl.Count(), saved, errors.Is(runErr, upsert.ErrDenied))
	}

	// The key is revoked after the first request.
	requests := 0
	backfill(func(context.Context, string, []*pinecone.Vector) error {
		if requests++; requests > 1 {
			return status.Error(codes.PermissionDenied, "key revoked")
		}
		return nil
	})
	// The key is fixed: the resumed run sends what is left.
	backfill(func(context.Context, string, []*pinecone.Vector) error { return nil })

	data, _ := os.ReadFile(deadPath)
	fmt.Print(string(data))
	// Output:
	// upserted: 1, new dead letters: 1, checkpoint: 2, key denied: true
	// upserted: 2, new dead letters: 0, checkpoint: 4, key denied: false
	// {"id":"b","values":[0,0],"class":"invalid","error":"invalid: record 1 (id \"b\"): dense values are all zero; Pinecone requires at least one non-zero value","attempts":0,"may_have_landed":false,"index":1}
}

// Metadata held as JSON text elsewhere, here a column of a CSV export, is
// decoded by the rules of a line's "metadata" field: a string that is not
// valid Unicode is refused, not replaced.
func ExampleDecodeMetadata() {
	for _, column := range []string{`{"genre":"drama","year":2020}`, `{"title":"\ud800"}`, `["drama"]`} {
		md, err := ndjson.DecodeMetadata([]byte(column))
		if err != nil {
			fmt.Println("refused:", errors.Is(err, ndjson.ErrWrongType))
			continue
		}
		fmt.Println(md.Fields["genre"].GetStringValue(), md.Fields["year"].GetNumberValue())
	}
	// Output:
	// drama 2020
	// refused: true
	// refused: true
}
