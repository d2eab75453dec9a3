package upsert

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lateIndex stores what it accepts, except that the first request carrying
// id late times out on the client while the index applies it later, when
// applyLate is called: the "ambiguous timeout" of a real index.
type lateIndex struct {
	mu      sync.Mutex
	stored  map[string]float32
	late    []*pinecone.Vector
	delayed bool
	id      string
}

func (l *lateIndex) Upsert(ctx context.Context, _ string, batch []*pinecone.Vector) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range batch {
		if v.Id == l.id && !l.delayed {
			l.delayed = true
			l.late = append(l.late, batch...)
			return context.DeadlineExceeded
		}
	}
	for _, v := range batch {
		l.stored[v.Id] = (*v.Values)[0]
	}
	return nil
}

func (l *lateIndex) applyLate() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.late {
		l.stored[v.Id] = (*v.Values)[0]
	}
}

// A later record of an id lands while an earlier record's request, which
// timed out, may still be applied after it: the run cannot prevent the
// index from keeping the earlier one, so it says so (Result.MayBeStale
// and Stats.MayBeStale), instead of reporting a plain success.
func TestALaterVersionThatMayBeOverwrittenIsReported(t *testing.T) {
	mk := func(id string, val float32) *pinecone.Vector {
		return &pinecone.Vector{Id: id, Values: &[]float32{val, 1}}
	}
	recs := []*pinecone.Vector{mk("x", 1), mk("y", 1), mk("z", 1), mk("x", 3)}
	t.Run("Stream", func(t *testing.T) {
		idx := &lateIndex{stored: map[string]float32{}, id: "x"}
		res, err := Stream(context.Background(), slices.Values(recs), WithUpsertFunc(idx.Upsert), WithBatchSize(1), WithConcurrency(1),
			withClock(newFakeClock()), withRand(maxRand))
		require.NoError(t, err, "every record landed")
		idx.applyLate()
		assert.Equal(t, float32(1), idx.stored["x"], "the index kept the earlier record: what the report is for")
		require.Len(t, res.MayBeStale, 1)
		s := res.MayBeStale[0]
		assert.Equal(t, "x", s.ID)
		assert.Equal(t, 3, s.Index)
		assert.Equal(t, 0, s.Earlier)
		assert.Equal(t, float32(3), (*s.Record.Values)[0])
		assert.Equal(t, 1, res.Stats.MayBeStale)
		assert.Equal(t, 4, res.Upserted)
	})
	t.Run("Writer", func(t *testing.T) {
		idx := &lateIndex{stored: map[string]float32{}, id: "x"}
		w, err := NewWriter(context.Background(), WithUpsertFunc(idx.Upsert), WithBatchSize(1), WithConcurrency(1),
			withClock(newFakeClock()), withRand(maxRand))
		require.NoError(t, err)
		for _, v := range recs {
			require.NoError(t, w.Add(context.Background(), v))
		}
		res, err := w.Close(context.Background())
		require.NoError(t, err)
		require.Len(t, res.MayBeStale, 1)
		assert.Equal(t, 3, res.MayBeStale[0].Index)
	})
	t.Run("with the record's namespace, to upsert it again where it belongs", func(t *testing.T) {
		idx := &lateIndex{stored: map[string]float32{}, id: "x"}
		res, err := Stream(context.Background(), slices.Values(recs), WithUpsertFunc(idx.Upsert), WithBatchSize(1), WithConcurrency(1),
			WithNamespaceOf(func(v *pinecone.Vector) string { return "tenant-" + v.Id }), withClock(newFakeClock()), withRand(maxRand))
		require.NoError(t, err)
		require.Len(t, res.MayBeStale, 1)
		assert.Equal(t, "tenant-x", res.MayBeStale[0].Namespace)
	})
	t.Run("nothing is reported without an earlier ambiguous request", func(t *testing.T) {
		fi := newFakeIndex(nil)
		res, err := Stream(context.Background(), slices.Values(recs), WithUpsertFunc(fi.Upsert), WithBatchSize(1))
		require.NoError(t, err)
		assert.Empty(t, res.MayBeStale)
		assert.Zero(t, res.Stats.MayBeStale)
	})
}

func TestAmbiguousIDsAreForgottenAfterTheWindow(t *testing.T) {
	clock := newFakeClock()
	var a ambiguousIDs
	a.add(clock.Now(), 7, 3)
	clock.Advance(staleWindow / 2)
	pos, ok := a.lookup(clock.Now(), 7)
	assert.True(t, ok)
	assert.Equal(t, 3, pos)
	clock.Advance(staleWindow)
	_, ok = a.lookup(clock.Now(), 7)
	assert.True(t, ok, "kept for at least the window")
	clock.Advance(staleWindow)
	_, ok = a.lookup(clock.Now(), 7)
	assert.False(t, ok, "forgotten after twice the window at most")
}

// ambiguousIDs remembers an id for between one and two windows, whatever
// happens in between: an id that went quiet is forgotten after two
// windows, not kept until the next add or lookup rotates it.
func TestAmbiguousIDsAreForgottenAfterTwoWindowsWithoutActivity(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name   string
		later  time.Duration
		other  bool // another id is added at later before the lookup
		wantOK bool
	}{
		{"within the window", staleWindow / 2, false, true},
		{"between one and two windows", staleWindow * 3 / 2, false, true},
		{"after two windows, lookup alone", 2*staleWindow + time.Second, false, false},
		{"an hour later, lookup alone", time.Hour, false, false},
		{"an hour later, after another id was added", time.Hour, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var a ambiguousIDs
			a.add(t0, 7, 3)
			if tt.other {
				a.add(t0.Add(tt.later), 8, 5)
			}
			_, ok := a.lookup(t0.Add(tt.later), 7)
			assert.Equal(t, tt.wantOK, ok)
		})
	}
}

// lateWriter is a Writer of batches of one into a lateIndex whose writes
// of id "x" time out and land late.
func lateWriter(t *testing.T, clk clock) (*Writer, *lateIndex) {
	t.Helper()
	idx := &lateIndex{stored: map[string]float32{}, id: "x"}
	w, err := NewWriter(context.Background(), WithUpsertFunc(idx.Upsert), WithBatchSize(1), WithConcurrency(1),
		withClock(clk), withRand(maxRand))
	require.NoError(t, err)
	return w, idx
}

// vectorValued is a vector of id whose first value is val.
func vectorValued(id string, val float32) *pinecone.Vector {
	return &pinecone.Vector{Id: id, Values: &[]float32{val, 1}}
}

// A Writer that went quiet for an hour after an ambiguous timeout does not
// report the next record of that id as possibly stale: the request that
// timed out is taken as dropped after staleWindow.
func TestWriterDoesNotReportStaleAnHourAfterTheAmbiguousRequest(t *testing.T) {
	clk := newFakeClock()
	w, _ := lateWriter(t, clk)
	require.NoError(t, w.Add(context.Background(), vectorValued("x", 1)))
	require.NoError(t, w.Flush(context.Background()))
	clk.Advance(time.Hour)
	require.NoError(t, w.Add(context.Background(), vectorValued("x", 2)))
	res, err := w.Close(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, res.Upserted)
	assert.Empty(t, res.MayBeStale, "the timed-out request is an hour old: taken as dropped")
}

// The Stale observer gets each stale record as soon as it is known, before
// the record settles (so before its ack, and before a checkpoint passes
// it): a dead-letter store that keeps it is not lost to a crash after the
// checkpoint moved on.
func TestTheStaleObserverHearsOfARecordBeforeItSettles(t *testing.T) {
	mk := func(id string, val float32) *pinecone.Vector {
		return &pinecone.Vector{Id: id, Values: &[]float32{val, 1}}
	}
	recs := []*pinecone.Vector{mk("x", 1), mk("y", 1), mk("z", 1), mk("x", 3)}
	idx := &lateIndex{stored: map[string]float32{}, id: "x"}
	var mu sync.Mutex
	var events []string
	note := func(e string) { mu.Lock(); defer mu.Unlock(); events = append(events, e) }
	res, err := Stream(context.Background(), slices.Values(recs), WithUpsertFunc(idx.Upsert), WithBatchSize(1), WithConcurrency(1),
		withClock(newFakeClock()), withRand(maxRand),
		WithObserver(Observer{Stale: func(s Stale) { note(fmt.Sprintf("stale %d", s.Index)) }}),
		WithAcks(func(acks []Ack) {
			for _, a := range acks {
				note(fmt.Sprintf("ack %d", a.Position))
			}
		}))
	require.NoError(t, err)
	require.Len(t, res.MayBeStale, 1)
	mu.Lock()
	defer mu.Unlock()
	assert.ElementsMatch(t, []string{"ack 0", "ack 1", "ack 2", "stale 3", "ack 3"}, events)
	// Acks come from their own goroutine, in order among themselves.
	assert.Less(t, slices.Index(events, "stale 3"), slices.Index(events, "ack 3"), "heard of before its ack: %v", events)
}

// A record is reported stale only after an ambiguous request carrying an
// earlier record of its id in its namespace: the key of ids in flight and
// of ambiguous ids tells the pair (namespace, id) from its swap, and from
// any other pair (a symmetric combination of the halves' hashes, as XOR,
// would not, and would make an id equal to its namespace key 0). Here the
// first record's request times out and lands on a retry; the second,
// another id in another namespace, lands as a plain success.
func TestStaleIsOnlyReportedForAnEarlierRecordOfTheSameIDAndNamespace(t *testing.T) {
	nsOf := map[string]string{"x": "y", "y": "x"}
	recs := []*pinecone.Vector{
		{Id: "x", Values: &[]float32{1, 1}}, // in namespace "y"; its first request times out
		{Id: "y", Values: &[]float32{2, 1}}, // in namespace "x"; no earlier record of its id anywhere
	}
	idx := &lateIndex{stored: map[string]float32{}, id: "x"}
	res, err := Stream(context.Background(), slices.Values(recs), WithUpsertFunc(idx.Upsert), WithBatchSize(1), WithConcurrency(1),
		WithNamespaceOf(func(v *pinecone.Vector) string { return nsOf[v.Id] }),
		withClock(newFakeClock()), withRand(maxRand))
	require.NoError(t, err)
	assert.Equal(t, 2, res.Upserted)
	assert.Empty(t, res.MayBeStale, "record y in namespace x has no earlier record of its id: it cannot be stale")
	assert.Zero(t, res.Stats.MayBeStale)
}

// Stale's doc promises that a run remembers a request without an answer
// "for 10 to 20 minutes": a generation of ambiguous ids starts where the
// one before ended, not when a quiet Writer's next record rotates them.
// Here the generations rotate 19 minutes after the ambiguous request, and
// its id comes back 28 minutes after it: a plain success.
func TestWriterForgetsAnAmbiguousRequestWithinTwoWindows(t *testing.T) {
	clk := newFakeClock()
	w, _ := lateWriter(t, clk)
	require.NoError(t, w.Add(context.Background(), vectorValued("x", 1))) // times out, then lands: ambiguous
	require.NoError(t, w.Flush(context.Background()))
	clk.Advance(2*staleWindow - time.Minute)
	require.NoError(t, w.Add(context.Background(), vectorValued("y", 1))) // any record: its lookup rotates the generations
	require.NoError(t, w.Flush(context.Background()))
	clk.Advance(staleWindow - time.Minute) // 28 minutes after the ambiguous request
	require.NoError(t, w.Add(context.Background(), vectorValued("x", 2)))
	res, err := w.Close(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 3, res.Upserted)
	assert.Empty(t, res.MayBeStale, "the request without an answer is 28 minutes old: past the documented 20")
}
