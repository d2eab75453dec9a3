// Package readme_test holds the README's code snippets, compiled.
package readme_test

import (
	"context"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/redis/go-redis/v9"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/ndjson"
	"github.com/upsertlib/upsert/upsertredis"
)

// readmeSnippets holds the README's inline code, as written there (only
// the variables it assumes are declared): it is compiled, never run, so
// that a snippet that no longer compiles fails the build of this test. The
// README's ```go blocks are read from it and compiled by
// TestTheREADMEsGoBlocksCompile.
func readmeSnippets(ctx context.Context, idx *pinecone.IndexConnection, vectors []*pinecone.Vector, rdb *redis.Client, dl *ndjson.DeadLetters) {
	// Resumable backfills.
	_, _ = upsert.Stream(ctx, nil,
		upsert.WithCheckpoint(dl.Checkpoint(upsert.FileCheckpoint("backfill.ckpt"))),
		upsert.WithObserver(upsert.Observer{Failure: dl.Write, Stale: func(s upsert.Stale) { dl.WriteStale(s, "") }}))
	_ = upsert.WithNamespaceOf(func(v *pinecone.Vector) string { return "" })
	_ = upsert.WithLimiter(upsert.NewLimiter())
	_ = upsert.WithIndexLimits(upsert.IndexLimits{})
	_ = upsert.WithIndexLimits(upsert.ServerlessLimits)

	// upsertredis.
	_, _ = upsert.All(ctx, vectors, upsert.WithIndex(idx), upsertredis.Shared(rdb))
	_, _ = upsert.All(ctx, vectors, upsert.WithIndex(idx), upsertredis.New(rdb).Option())
}

// The README's inline code compiles: the function above is type-checked
// with this file. A change to the README's inline code goes here too.
func TestTheREADMEsSnippetsCompile(t *testing.T) { _ = readmeSnippets }
