package ndjson_test

import (
	"context"
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
