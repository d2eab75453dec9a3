package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/upsertlib/upsert"
)

// A strategy is a way to write records into an index that a user might
// pick: the library, or what a team writes instead.
type strategy struct {
	name string
	// reports is true for a strategy that reports the records it failed
	// to write.
	reports bool
	// severalOnly is true for a strategy that runs only on profiles with
	// several clients.
	severalOnly bool
	// newRun returns the write function of one run of a profile. Every
	// client of the run calls the one it returns, so that they may share
	// state.
	newRun func() writeFunc
}

// A writeFunc sends records through idx and returns the ids it reported as
// failed; nil for a strategy that reports nothing. timeout is the profile's
// client request timeout, or 0 for the strategy's default. An error means
// the strategy could not run at all.
type writeFunc func(ctx context.Context, idx *pinecone.IndexConnection, records []*pinecone.Vector, timeout time.Duration) ([]string, error)

// strategies returns every strategy, in the order the benchmark runs them.
func strategies() []strategy {
	return []strategy{
		{name: "upsert", reports: true, newRun: func() writeFunc { return writeUpsert(false) }},
		{name: "separate", reports: true, severalOnly: true, newRun: func() writeFunc { return writeUpsert(true) }},
		{name: "article", newRun: func() writeFunc { return writeArticle }},
		{name: "naive", newRun: func() writeFunc { return writeNaive }},
	}
}

// writeUpsert is the library with its defaults: only the request timeout
// is set, and only where the profile sets one. The clients of a run, each
// with its own connection, then share a Limiter, as writers of one process
// do by default. With apart, each has a Limiter of its own, as writers in
// separate processes have.
func writeUpsert(apart bool) writeFunc {
	return func(ctx context.Context, idx *pinecone.IndexConnection, records []*pinecone.Vector, timeout time.Duration) ([]string, error) {
		opts := []upsert.Option{upsert.WithIndex(idx)}
		if apart {
			opts = append(opts, upsert.WithLimiter(upsert.NewLimiter()))
		}
		if timeout > 0 {
			opts = append(opts, upsert.WithRequestTimeout(timeout))
		}
		res, err := upsert.All(ctx, records, opts...)
		if errors.Is(err, upsert.ErrBadOption) {
			return nil, err
		}
		failed := make([]string, len(res.Failed))
		for i, f := range res.Failed {
			failed[i] = f.ID
		}
		return failed, nil
	}
}

// The parameters of the article's algorithm.
const (
	articleBatch              = 100
	articleWorkers            = 4
	articleTimeout            = 30 * time.Second
	articleRateLimitedRetries = 8 // retries of a batch answered 429
	articleTransientRetries   = 4 // retries of a batch that timed out or got a 5xx
	articleBackoffBase        = 250 * time.Millisecond
	articleBackoffMax         = 30 * time.Second
)

// article is the algorithm of the engineering article the library started
// from, written as a team would from the article: batches of 100 sent by a
// pool of 4 workers, each request bounded by a timeout; 429s retried up to
// 8 times, timeouts and 5xx up to 4 times, after a full-jitter backoff;
// a batch that timed out is split in halves sent one after the other; each
// 429 takes one worker off the pool for the rest of the run (down to one);
// other errors are not retried. Records whose retries run out are dropped.
type article struct {
	idx     *pinecone.IndexConnection
	timeout time.Duration
	// workers is the size of the pool; worker w stops taking batches once
	// w >= workers.
	workers atomic.Int32
}

// retries counts the retries of a batch by kind; the halves of a split
// batch each inherit the counts of the whole.
type retries struct {
	rateLimited, transient int
}

func (r retries) total() int { return r.rateLimited + r.transient }

// writeArticle runs the article's algorithm. It reports no failures.
func writeArticle(ctx context.Context, idx *pinecone.IndexConnection, records []*pinecone.Vector, timeout time.Duration) ([]string, error) {
	a := &article{idx: idx, timeout: timeout}
	if a.timeout <= 0 {
		a.timeout = articleTimeout
	}
	a.workers.Store(articleWorkers)

	batches := make(chan []*pinecone.Vector)
	go func() {
		defer close(batches)
		for b := range slices.Chunk(records, articleBatch) {
			select {
			case batches <- b:
			case <-ctx.Done():
				return
			}
		}
	}()

	var wg sync.WaitGroup
	for w := range articleWorkers {
		wg.Go(func() {
			for int32(w) < a.workers.Load() {
				b, ok := <-batches
				if !ok {
					return
				}
				a.send(ctx, b, retries{})
			}
		})
	}
	// Worker 0 is never taken off the pool, so batches is drained.
	wg.Wait()
	return nil, nil
}

// send writes batch, retrying and splitting it as the article says, until
// it lands, its retries run out, or ctx ends.
func (a *article) send(ctx context.Context, batch []*pinecone.Vector, r retries) {
	for {
		err := upsertOnce(ctx, a.idx, batch, a.timeout)
		code := status.Code(err)
		if code == codes.OK || ctx.Err() != nil {
			return
		}
		wait := fullJitter(r.total())
		switch code {
		case codes.ResourceExhausted:
			if r.rateLimited == articleRateLimitedRetries {
				return
			}
			r.rateLimited++
			a.shrinkPool()
		case codes.DeadlineExceeded:
			if r.transient == articleTransientRetries {
				return
			}
			r.transient++
			if len(batch) > 1 {
				half := len(batch) / 2
				a.send(ctx, batch[:half], r)
				a.send(ctx, batch[half:], r)
				return
			}
		case codes.Unavailable, codes.Internal, codes.Unknown:
			if r.transient == articleTransientRetries {
				return
			}
			r.transient++
		default: // another 4xx: never retried
			return
		}
		if !sleep(ctx, wait) {
			return
		}
	}
}

// shrinkPool takes one worker off the pool, keeping at least one.
func (a *article) shrinkPool() {
	for {
		n := a.workers.Load()
		if n <= 1 || a.workers.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// fullJitter returns the wait before retry n (from 0): uniformly random in
// [0, min(30 s, 250 ms·2^n)].
func fullJitter(n int) time.Duration {
	ceiling := articleBackoffMax
	if n < 20 {
		ceiling = min(ceiling, articleBackoffBase<<n)
	}
	return rand.N(ceiling + 1)
}

// sleep waits d and reports whether ctx is still alive.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Naive's parameters.
const (
	naiveBatch   = 100
	naiveRetries = 3
)

// writeNaive is the loop a user writes first: batches of 100 sent one at a
// time, a failed batch resent at once up to 3 times and then dropped. It
// bounds each request only where the profile sets a client timeout, and
// reports no failures.
func writeNaive(ctx context.Context, idx *pinecone.IndexConnection, records []*pinecone.Vector, timeout time.Duration) ([]string, error) {
	for b := range slices.Chunk(records, naiveBatch) {
		for range 1 + naiveRetries {
			if ctx.Err() != nil {
				return nil, nil
			}
			if err := upsertOnce(ctx, idx, b, timeout); err == nil {
				break
			}
		}
	}
	return nil, nil
}

// upsertOnce sends batch once, within timeout if it is positive.
func upsertOnce(ctx context.Context, idx *pinecone.IndexConnection, batch []*pinecone.Vector, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	_, err := idx.UpsertVectors(ctx, batch)
	return err
}
