package upsert

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// indexShape is what a run knows of the records its index takes: the
// dense dimension and the vector type. The index says them when the
// connection can ask (DescribeIndexStats, see [WithIndex]); otherwise the
// dimension is that of the first dense record the index accepted, and the
// type stays unknown. Until then, no record is refused for its dimension:
// a guess from the first record given would make every correct record
// after a wrong first one fail. A nil *indexShape knows nothing.
type indexShape struct {
	dimension  atomic.Int32 // 0 until known
	vectorType string       // "dense", "sparse", or "" when unknown; set before the run starts
}

// Pinecone's vector types (DescribeIndexStatsResponse.VectorType).
const (
	vectorTypeDense  = "dense"
	vectorTypeSparse = "sparse"
)

// accepts returns the rule of the index that a record with dense dense
// values and sparse values (or none) breaks, or nil.
func (s *indexShape) accepts(dense int, sparse bool) error {
	if s == nil {
		return nil
	}
	switch {
	case s.vectorType == vectorTypeSparse && dense > 0:
		return fmt.Errorf("has %s; the index is sparse and takes sparse values only", denseValues(dense))
	case s.vectorType == vectorTypeDense && dense == 0 && sparse:
		return fmt.Errorf("has sparse values only; the index is dense and needs dense values")
	}
	dim := int(s.dimension.Load())
	switch {
	case dim != 0 && dense > 0 && dense != dim:
		return fmt.Errorf("has %s; the index's dimension is %d", denseValues(dense), dim)
	case dim != 0 && dense == 0 && sparse:
		// Only a dense index has a dimension, and it refuses a record
		// without dense values.
		return fmt.Errorf("has sparse values only; the index has dimension %d and needs dense values", dim)
	}
	return nil
}

// learn takes the dimension from a batch the index accepted, when it is
// not known yet.
func (s *indexShape) learn(items []item) {
	if s == nil || s.dimension.Load() != 0 {
		return
	}
	for _, it := range items {
		if it.vec != nil && it.vec.Values != nil && len(*it.vec.Values) > 0 {
			s.dimension.CompareAndSwap(0, int32(len(*it.vec.Values)))
			return
		}
	}
}

// indexInfo is what DescribeIndexStats says of an index's records.
type indexInfo struct {
	dimension  int
	vectorType string
}

// describeTimeout bounds the question: the answer saves a few rejected
// requests, not worth holding a run up for longer.
const describeTimeout = 5 * time.Second

// errDescribeTimedOut is the cause of a question cut off by its timeout:
// the index did not answer in time, unlike a caller that went away.
var errDescribeTimedOut = errors.New("DescribeIndexStats timed out")

// describedFor is how long an answer of DescribeIndexStats is kept: an
// index's shape is fixed at its creation, but an index deleted and
// created again under its name (a re-index to another model) keeps its
// host, and a connection kept meanwhile must not refuse its records.
const describedFor = time.Minute

// described keeps what each connection's index said, so that repeated
// calls through one connection ask once a minute (describedFor). An entry
// goes when its connection is garbage-collected.
var described struct {
	mu    sync.Mutex
	infos map[weak.Pointer[pinecone.IndexConnection]]describedInfo
}

// describedInfo is an answer kept, and when it was given.
type describedInfo struct {
	indexInfo
	at time.Time
}

// describeIndex returns what idx's index says of its records, asking it
// only when it has not answered within describedFor of now. When asking
// again fails (an outage), it returns no error but nothing known: the
// index answered this connection (a short outage is waited out, see
// newIndexShape), and its shape may have changed since (the dimension is
// learned as when the index cannot be asked); that is kept a minute too,
// so that an outage makes each call wait for no failing question.
func describeIndex(ctx context.Context, idx *pinecone.IndexConnection, now time.Time) (indexInfo, error) {
	key := weak.Make(idx)
	described.mu.Lock()
	kept, ok := described.infos[key]
	described.mu.Unlock()
	if ok && now.Sub(kept.at) < describedFor && !now.Before(kept.at) {
		return kept.indexInfo, nil
	}
	var info indexInfo
	st, err := idx.DescribeIndexStats(ctx)
	if err != nil {
		if ok && (ctx.Err() == nil || context.Cause(ctx) == errDescribeTimedOut) { // the index failed, not the caller
			keepFailedDescribe(key, kept.at, now)
		}
		if ok {
			return indexInfo{}, nil
		}
		return indexInfo{}, err
	}
	if st.Dimension != nil {
		info.dimension = int(*st.Dimension)
	}
	if st.VectorType != nil {
		info.vectorType = *st.VectorType
	}
	if info == (indexInfo{}) {
		// An index that says nothing (a test server before its first
		// record) may say more later: nothing is kept.
		return info, nil
	}
	keepDescribed(idx, key, info, now)
	return info, nil
}

// keepFailedDescribe keeps, as what the index said at now, nothing known,
// in place of the entry given at seen, unless another call kept a newer
// one meanwhile.
func keepFailedDescribe(key weak.Pointer[pinecone.IndexConnection], seen, now time.Time) {
	described.mu.Lock()
	defer described.mu.Unlock()
	if e, ok := described.infos[key]; ok && e.at.Equal(seen) {
		described.infos[key] = describedInfo{at: now}
	}
}

// keepDescribed keeps info as what idx's index said at now.
func keepDescribed(idx *pinecone.IndexConnection, key weak.Pointer[pinecone.IndexConnection], info indexInfo, now time.Time) {
	described.mu.Lock()
	defer described.mu.Unlock()
	if described.infos == nil {
		described.infos = make(map[weak.Pointer[pinecone.IndexConnection]]describedInfo)
	}
	if _, ok := described.infos[key]; !ok {
		runtime.AddCleanup(idx, forgetDescribed, key)
	}
	described.infos[key] = describedInfo{info, now}
}

func forgetDescribed(key weak.Pointer[pinecone.IndexConnection]) {
	described.mu.Lock()
	defer described.mu.Unlock()
	delete(described.infos, key)
}

// newIndexShape returns the shape of the run's index: what describe says
// (cfg.describe, set by WithIndex), else the dimension of WithDimension,
// or nothing known; and whether the index answered describe (now or on an
// earlier call through the connection).
func newIndexShape(ctx context.Context, cfg *config) (_ *indexShape, answered bool) {
	s := &indexShape{}
	s.dimension.Store(int32(cfg.dimension))
	if cfg.describe == nil {
		return s, false
	}
	ctx, cancel := context.WithTimeoutCause(ctx, min(describeTimeout, cfg.requestTimeout), errDescribeTimedOut)
	defer cancel()
	info, err := cfg.describe(ctx, cfg.clock.Now())
	if err != nil {
		from := "it is taken from the first record the index accepts"
		if cfg.dimension != 0 {
			from = "WithDimension's is used"
		}
		cfg.logger.LogAttrs(ctx, slog.LevelWarn, "cannot ask the index its dimension; "+from,
			slog.String("error", err.Error()))
		return s, false
	}
	// The index's answer wins over WithDimension, a sparse index's (no
	// dimension) too.
	if info.dimension != 0 || info.vectorType == vectorTypeSparse {
		s.dimension.Store(int32(info.dimension))
	}
	s.vectorType = info.vectorType
	return s, true
}

// denseValues says how many dense values a record has, in words.
func denseValues(n int) string {
	if n == 1 {
		return "1 dense value"
	}
	return fmt.Sprintf("%d dense values", n)
}
