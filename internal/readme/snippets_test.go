// Package readme_test holds the README's code snippets, compiled.
package readme_test

import (
	"context"
	"errors"
	"log"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/redis/go-redis/v9"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/ndjson"
	"github.com/upsertlib/upsert/upsertotel"
	"github.com/upsertlib/upsert/upsertredis"
)

type kafkaMessage struct{ Offset int64 }

// readmeSnippets holds the README's code snippets, as written there (only
// the variables they assume are declared): it is compiled, never run, so
// that a snippet that no longer compiles fails the build of this test.
func readmeSnippets(ctx context.Context, apiKey, host string, vectors []*pinecone.Vector, vector *pinecone.Vector, msg *kafkaMessage, rdb *redis.Client, dl *ndjson.DeadLetters) {
	// The opening snippet.
	pc, _ := upsert.NewClient(pinecone.NewClientParams{ApiKey: apiKey})
	idx, _ := pc.Index(pinecone.NewIndexConnParams{Host: host, Namespace: "docs"}, upsert.PushbackDialOption())

	res, err := upsert.All(ctx, vectors, upsert.WithIndex(idx))
	if err != nil { // nil only when every record landed
		for _, f := range res.Failed {
			log.Printf("%s: %v (class %v, %d attempts, may have landed: %v)", f.ID, f.Err, f.Class, f.Attempts, f.MayHaveLanded)
		}
		if errors.Is(err, upsert.ErrRateLimited) { /* ... */
			log.Print("rate-limited")
		}
	}

	// Resumable backfills.
	_, _ = upsert.Stream(ctx, nil,
		upsert.WithCheckpoint(dl.Checkpoint(upsert.FileCheckpoint("backfill.ckpt"))),
		upsert.WithObserver(upsert.Observer{Failure: dl.Write, Stale: func(s upsert.Stale) { dl.WriteStale(s, "") }}))
	_ = upsert.WithNamespaceOf(func(v *pinecone.Vector) string { return "" })
	_ = upsert.WithLimiter(upsert.NewLimiter())
	_ = upsert.WithIndexLimits(upsert.IndexLimits{})
	_ = upsert.WithIndexLimits(upsert.ServerlessLimits)

	// Acknowledgements.
	w, _ := upsert.NewWriter(ctx, upsert.WithIndex(idx), upsert.WithAcks(func(acks []upsert.Ack) {
		for _, a := range acks { // consecutive positions, in the order the records were added
			m := a.Tag.(*kafkaMessage)
			_ = m // advance m's partition to m.Offset+1 below, unless it is stuck
			switch {
			case a.Resend: // the run stopped before it landed: commit nothing past it in its partition
			case a.Failure != nil: // failed for good (a.Failure: class, error, MayHaveLanded): a dead letter
			case a.Stale != nil: // landed, but an earlier version may still be applied after it: recheck later
			}
		}
		// commit the offsets and the dead letters, in one step
	}))
	_ = w.AddTagged(ctx, vector, msg) // the tag comes back in the record's Ack

	// upsertredis.
	_, _ = upsert.All(ctx, vectors, upsert.WithIndex(idx), upsertredis.Shared(rdb))
	_, _ = upsert.All(ctx, vectors, upsert.WithIndex(idx), upsertredis.New(rdb).Option())

	// OpenTelemetry.
	tel, err := upsertotel.New() // global providers by default
	if err != nil {
		return
	}
	res, err = upsert.All(ctx, vectors, upsert.WithIndex(idx), upsert.WithObserver(tel.Observer()))
	_, _ = res, err
}

// The README's snippets compile: the function above is type-checked with
// this file. A change to the README's code goes here too.
func TestTheREADMEsSnippetsCompile(t *testing.T) { _ = readmeSnippets }
