package upsert

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// A Stream with a Failure observer keeps only the first failuresKept
// failures in Result.Failed; its RunError (and the RunDone event's Err)
// still counts them all (it was once built from the kept ones).
func TestRunErrorCountsEveryFailureWhenResultKeepsSome(t *testing.T) {
	fi := newFakeIndex(nil)
	recs := vectors(1500, 2)
	for _, v := range recs {
		v.Id = "" // invalid: fails before sending
	}
	var observed int
	var doneErr error
	var doneStats Stats
	obs := Observer{
		Failure: func(Failure) { observed++ },
		RunDone: func(e RunEvent) { doneErr, doneStats = e.Err, e.Stats },
	}
	res, err := Stream(context.Background(), slices.Values(recs), testOpts(fi, WithObserver(obs))...)
	var re *RunError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want a *RunError", err)
	}
	if res.Stats.Failed != 1500 || observed != 1500 || doneStats.Failed != 1500 {
		t.Fatalf("Stats.Failed %d, observed %d, RunDone Stats.Failed %d; want 1500", res.Stats.Failed, observed, doneStats.Failed)
	}
	if re.Failed != res.Stats.Failed || re.ByClass[ClassInvalid] != res.Stats.Failed {
		t.Errorf("RunError says %q (Failed %d, ByClass %v), but Stats.Failed = %d and the observer saw %d failures",
			re.Error(), re.Failed, re.ByClass, res.Stats.Failed, observed)
	}
	if doneErr == nil || doneErr.Error() != err.Error() {
		t.Errorf("RunDone err %v, returned %v", doneErr, err)
	}
}

// fixedCheckpoint loads n and saves nothing.
type reviewFixedCheckpoint int64

func (c reviewFixedCheckpoint) Load(context.Context) (int64, error) { return int64(c), nil }
func (c reviewFixedCheckpoint) Save(context.Context, int64) error   { return nil }

// A stream whose checkpoint lies past the end of its input returns
// ErrCheckpointPastEnd with Stats.Skipped corrected to the records the
// input had; RunDone ("Stats and Err ... as the call returns them") and
// the final Progress must say the same.
func TestRunDoneMatchesTheResultOfACheckpointPastTheEnd(t *testing.T) {
	fi := newFakeIndex(nil)
	var done RunEvent
	var final Progress
	finals := 0
	obs := Observer{RunDone: func(e RunEvent) { done = e }}
	res, err := Stream(context.Background(), slices.Values(vectors(4, 2)), testOpts(fi, WithCheckpoint(reviewFixedCheckpoint(10)),
		WithObserver(obs), WithProgress(0, func(p Progress) {
			if p.Final {
				final, finals = p, finals+1
			}
		}))...)
	if !errors.Is(err, ErrCheckpointPastEnd) {
		t.Fatalf("err = %v, want ErrCheckpointPastEnd", err)
	}
	if res.Stats.Skipped != 4 {
		t.Fatalf("Result Stats.Skipped = %d, want 4", res.Stats.Skipped)
	}
	if finals != 1 {
		t.Errorf("%d final progress reports, want 1", finals)
	}
	if done.Stats.Skipped != res.Stats.Skipped {
		t.Errorf("RunDone Stats.Skipped = %d, Result's = %d", done.Stats.Skipped, res.Stats.Skipped)
	}
	if final.Stats.Skipped != res.Stats.Skipped {
		t.Errorf("final Progress Stats.Skipped = %d, Result's = %d", final.Stats.Skipped, res.Stats.Skipped)
	}
	if !errors.Is(done.Err, ErrCheckpointPastEnd) {
		t.Errorf("RunDone Err = %v, but the call returned %v", done.Err, err)
	}
}

// A stream whose acks function panics returns an error wrapping the
// *PanicError; RunDone must carry the error the call returns.
func TestRunDoneCarriesTheErrorOfAPanickingAckFunction(t *testing.T) {
	fi := newFakeIndex(nil)
	var done RunEvent
	calls := 0
	obs := Observer{RunDone: func(e RunEvent) { done = e; calls++ }}
	_, err := Stream(context.Background(), slices.Values(vectors(3, 2)), testOpts(fi, WithBatchSize(3), WithObserver(obs),
		WithAcks(func([]Ack) { panic("ack handler bug") }))...)
	var pe *PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want one wrapping a *PanicError", err)
	}
	if calls != 1 {
		t.Fatalf("RunDone called %d times", calls)
	}
	if !errors.As(done.Err, &pe) {
		t.Errorf("RunDone Err = %v, but the call returned %v", done.Err, err)
	}
}
