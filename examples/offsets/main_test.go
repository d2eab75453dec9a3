package main

import (
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert"
)

// The consumer, killed by a crash and by a cancel and restarted from its
// committed offsets, commits nothing before it is stored or dead-lettered,
// and loses nothing, against an index that answers 429s, 503s and a late
// answer, and refuses some records.
func TestOffsetsCommittedOnlyUpToWhatLanded(t *testing.T) {
	for seed := range int64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			s, err := run(seed, io.Discard)
			require.NoError(t, err)
			assert.Zero(t, s.Early, "no offset committed before its record was stored or dead-lettered")
			assert.Zero(t, s.Lost, "every record of the log is on the index or in the dead letters")
			assert.Equal(t, s.LogPerTopic, s.FinalOffsets, "the log is consumed to its end")

			require.Equal(t, 3, s.Runs)
			for i := 1; i < 3; i++ {
				assert.NotEqual(t, s.LogPerTopic, s.StartOffsets[i], "run %d restarted before the end", i+1)
			}
			assert.Positive(t, sum(s.StartOffsets[1])+sum(s.StartOffsets[2]), "the killed runs committed something")
			assert.Greater(t, s.Added, sum(s.LogPerTopic), "the restarts read again what was not committed")

			assert.Positive(t, s.ServerCodes[codes.ResourceExhausted], "429s")
			assert.Positive(t, s.ServerCodes[codes.Unavailable], "503s")
			assert.Positive(t, s.ErrorsByClass[upsert.ClassTimeout], "a timeout")
			assert.Positive(t, s.DeadLetters, "records refused, dead-lettered")
			assert.Positive(t, s.Replaced, "changes of a key replaced by later ones")
		})
	}
}

// Writes that land after their client gave up, at any time (a write
// latency with a heavy tail, besides every twenty-fifth answer delayed):
// within a run the Writer reports the records they may overwrite as Stale,
// and the consumer rechecks them; across runs, the restarted consumer
// comes up once the index is quiet. Nothing is committed early or lost
// (without the wait for quiet, both happen: 23 failed assertions in 18
// runs). Not in -short: about ten seconds.
func TestOffsetsWithLateWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds; run without -short")
	}
	for seed := range int64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			s, err := runWith(options{seed: seed, lateWrites: true}, io.Discard)
			require.NoError(t, err)
			assert.Zero(t, s.Early, "no offset committed before its record was stored or dead-lettered")
			assert.Zero(t, s.Lost, "every record of the log is on the index or in the dead letters")
			assert.Equal(t, s.LogPerTopic, s.FinalOffsets, "the log is consumed to its end")
			assert.Positive(t, s.ErrorsByClass[upsert.ClassTimeout], "writes that outlived their request")
			assert.Positive(t, s.LateWrites, "writes applied after their client gave up: what the run's Stale reports are for")
			t.Logf("%d requests written after their client gave up", s.LateWrites)
		})
	}
}

// The audit is not blind: a consumer that commits each offset as soon as
// Add returns, without acknowledgements, commits records that are not
// stored yet, and a crash then loses them.
func TestCommittingWithoutAcksIsCaught(t *testing.T) {
	s, err := runWith(options{seed: 1, naive: true}, io.Discard)
	require.NoError(t, err)
	assert.Positive(t, s.Early, "records committed before they were stored")
	assert.Positive(t, s.Lost, "and lost")
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
