package upsert_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"

	"github.com/upsertlib/upsert/upserttest"
)

// BenchmarkSDKTrip measures what one Upsert request costs the SDK and
// upserttest over loopback gRPC, one at a time, on an index with no
// latency of its own: the trip the simulation's simWire stands for.
func BenchmarkSDKTrip(b *testing.B) {
	for _, c := range []struct{ records, dims int }{
		{100, 8}, {100, 91}, {100, 1056}, {425, 1171}, {1000, 91}, {1000, 282},
	} {
		b.Run(fmt.Sprintf("records=%d/dims=%d", c.records, c.dims), func(b *testing.B) {
			srv := upserttest.NewServer()
			defer srv.Close()
			idx := connect(b, srv)
			batch := tripBatch(c.records, c.dims)
			b.SetBytes(int64(c.records * c.dims * 4))
			ctx := context.Background()
			for b.Loop() {
				if _, err := idx.UpsertVectors(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// tripBatch makes n records of dims nonzero values.
func tripBatch(n, dims int) []*pinecone.Vector {
	batch := make([]*pinecone.Vector, n)
	for i := range batch {
		values := make([]float32, dims)
		for j := range values {
			values[j] = float32(i*j%97+1) / 97
		}
		batch[i] = &pinecone.Vector{Id: fmt.Sprintf("r%d", i), Values: &values}
	}
	return batch
}
