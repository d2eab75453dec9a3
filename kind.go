package upsert

import (
	"context"
	"fmt"
	"strings"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// kind is what a run sends: vectors through gRPC, or integrated-embedding
// records through REST. The pipeline is the same; the limits, the request
// size and the call differ.
type kind struct {
	// lanePrefix keeps a Limiter's state for the two kinds apart within a
	// namespace, since their batch sizes have nothing in common; see laneKey.
	lanePrefix string
	maxBatch   int // records per request
	maxBytes   int // encoded request size
	// overhead is the bytes a request spends besides its records.
	overhead func(namespace string) int
	// inPath says that the namespace is a segment of the request's URL
	// path (REST), where "." and ".." cannot be sent (see checkNamespace).
	inPath bool
	// send sends items to namespace with the run's configuration.
	send func(ctx context.Context, cfg *config, namespace string, items []item) error
}

// vectorEscape starts the lane key of a vectors' namespace that begins
// with a kind's prefix, so that no vectors' namespace shares a lane with a
// records' one (vectors in "records:x" and records in "x").
const vectorEscape = "vectors:"

// laneKey returns the key of the lane for the kind's records in the
// namespace of key (namespaceKey's): distinct for every kind and
// namespace, and the namespace's own key for the vectors of any namespace
// that does not begin with "records:" or "vectors:". A Limiter keys its
// lanes by the index's host and it (laneID), and so does a Store
// (share.Lane): it must not change, or writers of earlier versions would
// no longer share their lanes with this one's.
func (k *kind) laneKey(key string) string {
	if k.lanePrefix == "" && (strings.HasPrefix(key, recordKind.lanePrefix) || strings.HasPrefix(key, vectorEscape)) {
		return vectorEscape + key
	}
	return k.lanePrefix + key
}

var vectorKind = &kind{
	lanePrefix: "",
	maxBatch:   MaxBatchSize,
	maxBytes:   MaxRequestBytes,
	overhead:   requestOverhead,
	send: func(ctx context.Context, cfg *config, namespace string, items []item) error {
		if cfg.send == nil {
			return &Error{Class: ClassDenied, Err: fmt.Errorf("no way to send vectors: pass WithIndex or WithUpsertFunc")}
		}
		batch := make([]*pinecone.Vector, len(items))
		for i, it := range items {
			batch[i] = it.vec
		}
		return cfg.send(ctx, namespace, batch)
	},
}

var recordKind = &kind{
	lanePrefix: "records:",
	maxBatch:   MaxRecordsBatchSize,
	maxBytes:   MaxRequestBytes,
	overhead:   func(string) int { return 0 },
	inPath:     true,
	send: func(ctx context.Context, cfg *config, namespace string, items []item) error {
		if cfg.sendRecords == nil {
			return &Error{Class: ClassDenied, Err: fmt.Errorf("no way to send records: pass WithIndex or WithRecordsFunc")}
		}
		batch := make([]*pinecone.IntegratedRecord, len(items))
		for i, it := range items {
			batch[i] = it.rec
		}
		return cfg.sendRecords(ctx, namespace, batch)
	},
}
