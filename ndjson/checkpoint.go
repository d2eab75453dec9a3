package ndjson

import (
	"context"
	"fmt"

	"github.com/upsertlib/upsert"
)

// Checkpoint returns a checkpoint for upsert.WithCheckpoint that keeps
// the dead letters in step with cp, so that a run killed at any moment and
// resumed from cp loses no record: each record the checkpoint passes has
// landed, or has its letter on disk.
//
// Its Save(ctx, n) first makes d's letters durable ([DeadLetters.Sync]),
// then calls cp.Save(ctx, n); n, passed on unchanged, is as for any
// upsert.Checkpoint the number of records at the start of the input
// (values of the run's iterator, not lines of a file) that have settled.
// The run saves at most once a second while that number grows, and at the
// end: each save costs an fsync. When Sync fails, Save returns an error
// naming the dead-letter file and wrapping Sync's, and cp is not saved;
// since Sync keeps failing once it has failed, no later save succeeds
// either, and cp keeps the last position whose letters were on disk. The
// run treats this as any failed save (see upsert.Checkpoint): the first
// one, before anything is sent, fails the run. Its Load is cp.Load.
//
// From this call on, [DeadLetters.Write] skips the failures with Resend
// set (the run stopped, the index was down, the caller's code panicked):
// the run resumed from cp sends their records again, and a replay of
// their letters would send them twice, and could overwrite a newer record
// of their id. They get no letter and Count does not count them; the
// run's Result still reports them. WriteStale and WriteBad are
// unaffected: a resumed run reads its input from the start again (Stream
// skips the records the checkpoint settled), so a program that writes its
// bad lines with WriteBad writes those before the checkpoint a second time
// unless it keeps how far it wrote them (cmd/pcupsert keeps that line in
// its checkpoint).
//
// So the returned checkpoint must be the one given to the run whose
// failures d receives: a run with another checkpoint or none would resend
// nothing, and its Resend failures would be in no file. Give a run that
// checkpoint and d.Write as its Failure hook (and d.WriteStale as its
// Stale hook, if it keeps them), and open d with [AppendDeadLetters] when
// resuming, or the letters of the interrupted run are lost:
//
//	dl, err := ndjson.AppendDeadLetters("failed.ndjson")
//	…
//	res, err := upsert.Stream(ctx, records, upsert.WithIndex(idx),
//		upsert.WithCheckpoint(dl.Checkpoint(upsert.FileCheckpoint("backfill.ckpt"))),
//		upsert.WithObserver(upsert.Observer{Failure: dl.Write}))
//	if cerr := dl.Close(); cerr != nil { … }
//
// The resumed run sends again every record after the position last saved,
// whatever became of it: one that failed for good after a failure with
// Resend set has its letter already, and may get a second one, or land
// after all.
//
// A nil cp gives nil, which upsert.WithCheckpoint rejects, and changes
// nothing.
func (d *DeadLetters) Checkpoint(cp upsert.Checkpoint) upsert.Checkpoint {
	if cp == nil {
		return nil
	}
	d.resumable.Store(true)
	return durableCheckpoint{d: d, cp: cp}
}

// durableCheckpoint is the checkpoint DeadLetters.Checkpoint returns.
type durableCheckpoint struct {
	d  *DeadLetters
	cp upsert.Checkpoint
}

func (c durableCheckpoint) Load(ctx context.Context) (int64, error) {
	return c.cp.Load(ctx)
}

func (c durableCheckpoint) Save(ctx context.Context, n int64) error {
	if err := c.d.Sync(); err != nil {
		return fmt.Errorf("ndjson: checkpoint not saved at %d: the dead-letter file %s is not on disk: %w", n, c.d.path, err)
	}
	return c.cp.Save(ctx, n)
}
