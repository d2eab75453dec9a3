package upsert

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// A call whose caller's code panics ends its run before the panic reaches
// the caller, and RunDone, the observers' only word on it, says it failed:
// All's namespace function panicking in its first pass once left RunDone
// with 50 records given, none settled and Err nil (a run span ended OK).
func TestRunDoneOfAnAllStoppedByAPanicSaysItFailed(t *testing.T) {
	fi := newFakeIndex(nil)
	var done []RunEvent
	obs := Observer{RunDone: func(e RunEvent) { done = append(done, e) }}
	func() {
		defer func() { require.NotNil(t, recover(), "the namespace function's panic reaches the caller") }()
		_, _ = All(context.Background(), vectors(50, 2), testOpts(fi, WithBatchSize(5), WithConcurrency(1), WithObserver(obs),
			WithNamespaceOf(func(v *pinecone.Vector) string {
				if v.Id == "v30" {
					panic("namespace function bug")
				}
				return ""
			}))...)
	}()
	require.Len(t, done, 1)
	s := done[0].Stats
	assert.Error(t, done[0].Err, "RunDone of a run cut short by a panic carries an error")
	assert.Equal(t, s.Records, s.Upserted+s.Failed+s.Duplicates,
		"every record the run was given is settled (upserted %d, failed %d of %d)", s.Upserted, s.Failed, s.Records)
}

// A Stream whose iterator panics after every record it gave landed: RunDone
// carries the panic's stop, not a clean run.
func TestRunDoneOfAStreamStoppedByAPanicSaysItStopped(t *testing.T) {
	fi := newFakeIndex(nil)
	var done []RunEvent
	obs := Observer{RunDone: func(e RunEvent) { done = append(done, e) }}
	vs := vectors(10, 2)
	seq := func(yield func(*pinecone.Vector) bool) {
		for _, v := range vs {
			if !yield(v) {
				return
			}
		}
		panic("iterator bug")
	}
	func() {
		defer func() { require.NotNil(t, recover(), "the iterator's panic reaches the caller") }()
		_, _ = Stream(context.Background(), seq, testOpts(fi, WithObserver(obs))...)
	}()
	require.Len(t, done, 1)
	require.ErrorIs(t, done[0].Err, ErrCanceled)
	assert.ErrorContains(t, done[0].Err, "panicked")
	s := done[0].Stats
	assert.Equal(t, s.Records, s.Upserted+s.Failed+s.Duplicates)
}
