package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upserttest"
)

// consumer is one run of the consuming process. Its acknowledgement
// function commits, per partition, the offset up to which every record
// has been acked as landed, replaced by a later change of its key, or
// failed for good (a dead letter); a record to send again (Resend: the
// run stopped before it landed) stops its partition's commits until the
// restart reads it again.
type consumer struct {
	store   *commitStore
	crashed atomic.Bool // a crashed process commits nothing more

	// The acknowledgement function's own: it is called from one
	// goroutine at a time.
	next              []int
	stuck             []bool
	dead              []deadLetter
	recheck, replaced []*message
	commits           int
	nReplaced, resend int
}

// onAcks is the Writer's acknowledgement function. The acks come in the
// order the records were added; each partition's producer added its
// records in offset order, so each partition's acks come in offset order
// too.
func (c *consumer) onAcks(acks []upsert.Ack) {
	if c.crashed.Load() {
		return
	}
	for _, a := range acks {
		m := a.Tag.(*message)
		p := m.partition
		if c.stuck[p] {
			continue
		}
		switch {
		case a.Resend:
			c.stuck[p] = true
			c.resend++
			continue
		case a.Failure != nil:
			c.dead = append(c.dead, deadLetter{m: m, class: a.Failure.Class, err: a.Failure.Err.Error()})
		case a.Stale != nil:
			// Landed, but a request of an earlier change of its key had
			// no answer and may still be applied after it: a job reads
			// the key's source again once the index is quiet.
			c.recheck = append(c.recheck, m)
		case a.Replaced:
			c.replaced = append(c.replaced, m)
			c.nReplaced++
		}
		c.next[p] = m.offset + 1
	}
	c.store.commit(c.next, c.dead, c.recheck, c.replaced)
	c.commits++
	c.dead, c.recheck, c.replaced = c.dead[:0], c.recheck[:0], c.replaced[:0]
}

// runResult is what one run did.
type runResult struct {
	added, commits, replaced, resend int
	stats                            upsert.Stats
}

// consume runs the consumer from the committed offsets until k kills it,
// or to the end of the log. Naive, it commits each offset as soon as Add
// returns, without acknowledgements.
func consume(ctx context.Context, t topic, srv *upserttest.Server, store *commitStore, k kill, naive bool) (runResult, error) {
	idx, err := connect(srv)
	if err != nil {
		return runResult{}, err
	}
	defer idx.Close()
	start := store.offsetsNow()
	c := &consumer{store: store, next: start, stuck: make([]bool, partitions)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := []upsert.Option{upsert.WithIndex(idx), upsert.WithNamespaceOf(vectorNamespace),
		upsert.WithRequestTimeout(100 * time.Millisecond), upsert.WithBackoff(5*time.Millisecond, 100*time.Millisecond),
		upsert.WithMaxDelay(10 * time.Millisecond)}
	if !naive {
		opts = append(opts, upsert.WithAcks(c.onAcks))
	}
	w, err := upsert.NewWriter(ctx, opts...)
	if err != nil {
		return runResult{}, err
	}
	var added atomic.Int64
	stop := func() {
		c.crashed.Store(k.crash)
		cancel()
	}
	var wg sync.WaitGroup
	for p := range partitions {
		wg.Go(func() {
			for o := start[p]; o < len(t.parts[p]); o++ {
				m := &t.parts[p][o]
				if w.AddTagged(ctx, m.vec, m) != nil {
					return // killed
				}
				if naive {
					store.commit(offsetAt(store, p, o+1), nil, nil, nil)
				}
				if int(added.Add(1)) == k.after {
					stop()
				}
			}
		})
	}
	wg.Wait()
	res, _ := w.Close(context.Background()) // failures are in the acks
	return runResult{added: int(added.Load()), commits: c.commits, replaced: c.nReplaced, resend: c.resend, stats: res.Stats}, nil
}

// offsetAt is the committed offsets with partition p's at o.
func offsetAt(store *commitStore, p, o int) []int {
	next := store.offsetsNow()
	next[p] = o
	return next
}
