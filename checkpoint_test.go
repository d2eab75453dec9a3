package upsert

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"iter"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/upsertlib/upsert/upserttest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The checkpoint passes only records that landed or failed for good (a
// rule they broke, or retries that ran out after they were sent): never
// records that failed unsent because the run stopped or the index was
// down, which a resumed run must send.
func TestACheckpointNeverPassesARecordThatWasNotTried(t *testing.T) {
	ctx := context.Background()
	recs := vectors(200, 2)
	t.Run("a key the index refuses midway", func(t *testing.T) {
		cp := FileCheckpoint(filepath.Join(t.TempDir(), "cp"))
		var requests atomic.Int64
		send := func(context.Context, string, []*pinecone.Vector) error {
			if requests.Add(1) > 7 {
				return status.Error(codes.Unauthenticated, "Unauthorized")
			}
			return nil
		}
		res, err := Stream(ctx, slices.Values(recs), WithUpsertFunc(send), WithBatchSize(10), WithConcurrency(1),
			WithCheckpoint(cp), withClock(newFakeClock()))
		require.ErrorIs(t, err, ErrDenied)
		assert.Equal(t, 70, res.Upserted)
		mark, err := cp.Load(ctx)
		require.NoError(t, err)
		assert.EqualValues(t, res.Failed[0].Index, mark, "the first record that did not land stops the checkpoint")

		var mu sync.Mutex // the resumed run sends with the default concurrency
		landed := make(map[string]bool)
		resumed, err := Stream(ctx, slices.Values(recs), WithUpsertFunc(func(_ context.Context, _ string, b []*pinecone.Vector) error {
			mu.Lock()
			defer mu.Unlock()
			for _, v := range b {
				landed[v.Id] = true
			}
			return nil
		}), WithCheckpoint(cp), withClock(newFakeClock()))
		require.NoError(t, err)
		assert.Equal(t, len(recs)-int(mark), resumed.Upserted)
		for _, f := range res.Failed {
			v := recs[f.Index]
			assert.True(t, landed[v.Id], "%s lands on the resumed run", v.Id)
		}
	})
	t.Run("an index that never answers", func(t *testing.T) {
		// The batch whose failures trip the breaker (a wrong host) spends
		// its retries first: it failed as the index did too. One batch:
		// with more, whether one of them spends all its retries before
		// the breaker gives up depends on the order they queue in.
		cp := FileCheckpoint(filepath.Join(t.TempDir(), "cp"))
		send := func(context.Context, string, []*pinecone.Vector) error {
			return status.Error(codes.Unavailable, "connection refused")
		}
		res, err := Stream(ctx, slices.Values(recs), WithUpsertFunc(send), WithBatchSize(len(recs)), WithConcurrency(1),
			WithCheckpoint(cp), withClock(newFakeClock()), withRand(maxRand))
		require.ErrorIs(t, err, ErrServer)
		assert.Zero(t, res.Upserted)
		require.Len(t, res.Failed, len(recs))
		spent := 0
		for _, f := range res.Failed {
			assert.True(t, f.Resend, "record %d failed because the index was down", f.Index)
			if errors.Is(f.Err, errIndexDown) {
				spent++
				assert.Equal(t, 5, f.Attempts, "record %d: its retries ran out", f.Index)
				assert.ErrorContains(t, f.Err, "connection refused; the circuit breaker has given up on the index")
			}
		}
		assert.Positive(t, spent, "a batch spent its retries before the breaker gave up")
		mark, err := cp.Load(ctx)
		require.NoError(t, err)
		assert.Zero(t, mark, "the checkpoint passed records that failed because the index was down")
	})
	t.Run("invalid records and records whose retries ran out are passed: the dead letters hold them", func(t *testing.T) {
		cp := FileCheckpoint(filepath.Join(t.TempDir(), "cp"))
		recs := vectors(30, 2)
		recs[3] = nil
		send := func(_ context.Context, _ string, b []*pinecone.Vector) error {
			for _, v := range b {
				if v.Id == "v5" {
					return status.Error(codes.ResourceExhausted, "slow down")
				}
			}
			return nil
		}
		res, err := Stream(ctx, slices.Values(recs), WithUpsertFunc(send), WithBatchSize(1), WithMaxRetries(ClassRateLimited, 1),
			WithCheckpoint(cp), withClock(newFakeClock()), withRand(maxRand))
		require.Error(t, err)
		assert.Len(t, res.Failed, 2)
		mark, err := cp.Load(ctx)
		require.NoError(t, err)
		assert.EqualValues(t, 30, mark)
	})
}

// A checkpoint beyond the end of the input means the input is not the one
// the checkpoint was saved for: an error, not a run that skips everything
// and says all is well.
func TestACheckpointPastTheEndOfTheInputIsAnError(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cp")
	require.NoError(t, os.WriteFile(path, []byte("9223372036854775807\n"), 0o600))
	fi := newFakeIndex(nil)
	res, err := Stream(ctx, slices.Values(vectors(10, 2)), WithUpsertFunc(fi.Upsert), WithCheckpoint(FileCheckpoint(path)))
	require.ErrorIs(t, err, ErrCheckpointPastEnd)
	assert.Contains(t, err.Error(), "9223372036854775807")
	assert.Contains(t, err.Error(), "10 records")
	assert.Empty(t, fi.Calls())
	assert.Equal(t, 10, res.Stats.Skipped)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "9223372036854775807\n", string(b), "the checkpoint is left as it was")

	require.NoError(t, os.WriteFile(path, []byte("10\n"), 0o600))
	res, err = Stream(ctx, slices.Values(vectors(10, 2)), WithUpsertFunc(fi.Upsert), WithCheckpoint(FileCheckpoint(path)))
	require.NoError(t, err, "a checkpoint at the end is a finished run")
	assert.Equal(t, 10, res.Stats.Skipped)
}

// A resumed stream skips its checkpoint's records by pulling them, and
// stops pulling when ctx ends meanwhile, as it does once it sends: a
// backfill of millions resumed near its end and interrupted while it
// skips stops at once, not after reading its whole input. An input cut
// short because ctx ended (an iterator that watches ctx, as a file reader
// does) is a canceled run, not ErrCheckpointPastEnd, which would tell an
// operator to delete a sound checkpoint and pay for the whole backfill
// again. Stats.Skipped counts what was skipped; the checkpoint stays.
func TestAResumedStreamCanceledWhileSkippingStopsPullingAndSaysCanceled(t *testing.T) {
	const settled = 1000
	tests := []struct {
		name       string
		cancelAt   int  // the input position at which the caller cancels
		watchesCtx bool // the iterator stops once ctx has ended
		wantPulled int
	}{
		{"the iterator goes on: Stream stops pulling", 0, false, 1},
		{"the iterator stops with ctx", 100, true, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cp := FileCheckpoint(filepath.Join(t.TempDir(), "cp"))
			require.NoError(t, cp.Save(context.Background(), settled))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pulled := 0
			seq := func(yield func(*pinecone.Vector) bool) {
				for i, v := range vectors(2*settled, 2) {
					if i == tt.cancelAt {
						cancel() // Ctrl-C while the run skips
					}
					if tt.watchesCtx && ctx.Err() != nil {
						return
					}
					pulled++
					if !yield(v) {
						return
					}
				}
			}
			fi := newFakeIndex(nil)
			res, err := Stream(ctx, seq, WithUpsertFunc(fi.Upsert), WithCheckpoint(cp), withClock(newFakeClock()), withRand(maxRand))
			require.ErrorIs(t, err, ErrCanceled)
			assert.NotErrorIs(t, err, ErrCheckpointPastEnd, "the input did not change: the run was canceled")
			assert.Equal(t, tt.wantPulled, pulled, "records pulled")
			assert.Equal(t, pulled, res.Stats.Skipped, "each record pulled was skipped, and no other")
			assert.Empty(t, fi.Calls())
			mark, err := cp.Load(context.Background())
			require.NoError(t, err)
			assert.EqualValues(t, settled, mark, "the checkpoint is left where it was")
		})
	}
}

// FileCheckpoint.Save keeps the file's permissions: a checkpoint the
// operator made readable (for the service account that resumes the
// backfill, or a dashboard that shows its progress) stays so. os.CreateTemp
// alone would make every save a file only the writing user can read, a new
// one included.
func TestFileCheckpointSaveKeepsTheFilesPermissions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp")
	require.NoError(t, os.WriteFile(path, []byte("0\n"), 0o644))
	require.NoError(t, os.Chmod(path, 0o644)) // whatever the umask
	cp := FileCheckpoint(path)
	require.NoError(t, cp.Save(context.Background(), 42))
	n, err := cp.Load(context.Background())
	require.NoError(t, err)
	assert.EqualValues(t, 42, n)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "Save replaced a 0644 checkpoint with a file only its owner can read")

	// A new checkpoint is made as os.WriteFile makes one: 0644 minus the umask.
	dir := t.TempDir()
	require.NoError(t, FileCheckpoint(filepath.Join(dir, "new")).Save(context.Background(), 1))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ref"), nil, 0o644))
	got, err := os.Stat(filepath.Join(dir, "new"))
	require.NoError(t, err)
	want, err := os.Stat(filepath.Join(dir, "ref"))
	require.NoError(t, err)
	assert.Equal(t, want.Mode().Perm(), got.Mode().Perm())
}

// negativeCheckpoint is a Checkpoint whose store holds a negative count (a
// bug, or a corrupted value in a user's own store).
type negativeCheckpoint struct {
	mu    sync.Mutex
	saved []int64
}

func (c *negativeCheckpoint) Load(context.Context) (int64, error) { return -3, nil }
func (c *negativeCheckpoint) Save(_ context.Context, n int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.saved = append(c.saved, n)
	return nil
}

// A Checkpoint whose Load returns a negative count (a bug, or a corrupted
// value in the caller's store) fails the run before anything is sent, as a
// Load error does: taken as it was, it shifted every position (Failure.Index,
// acks, the watermark) by that much.
func TestACheckpointHoldingANegativeCountFailsTheRunAtTheStart(t *testing.T) {
	recs := vectors(10, 2)
	recs[4] = nil
	fi := newFakeIndex(nil)
	cp := &negativeCheckpoint{}
	res, err := Stream(context.Background(), slices.Values(recs), WithUpsertFunc(fi.Upsert), WithCheckpoint(cp), withClock(newFakeClock()))
	require.ErrorContains(t, err, "upsert: loading the checkpoint: it holds -3, not a count of records")
	assert.Empty(t, fi.Calls(), "nothing is sent on a checkpoint that makes no sense")
	assert.Empty(t, res.Failed)
	assert.Empty(t, cp.saved, "nor saved")
}

// An empty checkpoint file (made with touch, to set its permissions before
// the first run) is a fresh start, as a missing one is; other text that is
// not a count is an error.
func TestFileCheckpointLoad(t *testing.T) {
	tests := []struct {
		name, content string
		want          int64
		err           string
	}{
		{name: "empty", content: "", want: 0},
		{name: "blank", content: " \n", want: 0},
		{name: "a count", content: "12\n", want: 12},
		{name: "negative", content: "-1\n", err: `not a record count: "-1\n"`},
		{name: "text", content: "twelve", err: `not a record count: "twelve"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cp")
			require.NoError(t, os.WriteFile(path, []byte(tt.content), 0o600))
			n, err := FileCheckpoint(path).Load(context.Background())
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, n)
		})
	}
}

// fullDiskCheckpoint saves nothing past its first save: the disk filled up
// during the run.
type fullDiskCheckpoint struct {
	saves int
}

func (c *fullDiskCheckpoint) Load(context.Context) (int64, error) { return 0, nil }
func (c *fullDiskCheckpoint) Save(context.Context, int64) error {
	if c.saves++; c.saves > 1 {
		return errors.New("no space left on device")
	}
	return nil
}

// The last save of the checkpoint, at the end of the run, is the run's
// error when it fails: every record landed, but a resumed run would send
// them all again, and without a logger nothing told the caller. Other
// errors of the run are joined to it.
func TestAFinalSaveThatFailsIsTheRunsError(t *testing.T) {
	recs := vectors(10, 2)
	res, err := Stream(context.Background(), slices.Values(recs), WithUpsertFunc(newFakeIndex(nil).Upsert),
		WithCheckpoint(&fullDiskCheckpoint{}), withClock(newFakeClock()))
	assert.Equal(t, 10, res.Upserted)
	require.ErrorIs(t, err, ErrCheckpointNotSaved)
	assert.EqualError(t, err, "upsert: the checkpoint could not be saved at 10 (it holds 0): no space left on device")

	recs[4] = nil
	res, err = Stream(context.Background(), slices.Values(recs), WithUpsertFunc(newFakeIndex(nil).Upsert),
		WithCheckpoint(&fullDiskCheckpoint{}), withClock(newFakeClock()))
	assert.Equal(t, 9, res.Upserted)
	assert.ErrorIs(t, err, ErrCheckpointNotSaved)
	assert.ErrorIs(t, err, ErrInvalid, "and the record's failure")
}

// onceGoodCheckpoint saves successfully until it holds a position past
// the start (the periodic save), then fails every save: the disk filled
// up after the run's progress was saved.
type onceGoodCheckpoint struct {
	mu     sync.Mutex
	held   int64
	saves  []int64
	stored chan int64 // told of each position stored past 0
}

func (c *onceGoodCheckpoint) Load(context.Context) (int64, error) { return 0, nil }

func (c *onceGoodCheckpoint) Save(_ context.Context, n int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.saves = append(c.saves, n)
	if c.held > 0 {
		return errors.New("no space left on device")
	}
	c.held = n
	if n > 0 {
		c.stored <- n
	}
	return nil
}

// A final save of the watermark the periodic save stored already is not
// made: it would cost a save (an fsync with ndjson's DeadLetters.Checkpoint)
// and, failing, report that the checkpoint could not be saved while it
// holds the final position.
func TestTheFinalSaveSkipsAWatermarkSavedAlready(t *testing.T) {
	recs := vectors(10, 2)
	cp := &onceGoodCheckpoint{stored: make(chan int64, 4)}
	var seq iter.Seq[*pinecone.Vector] = func(yield func(*pinecone.Vector) bool) {
		for _, v := range recs {
			if !yield(v) {
				return
			}
		}
		select { // the batch of 10 landed; wait for the periodic save of 10
		case <-cp.stored:
		case <-time.After(10 * time.Second):
		}
	}
	var doneErr error
	res, err := Stream(context.Background(), seq, WithUpsertFunc(newFakeIndex(nil).Upsert), WithBatchSize(10),
		WithCheckpoint(cp), withClock(newFakeClock()), withSaveEvery(time.Millisecond),
		WithObserver(Observer{RunDone: func(e RunEvent) { doneErr = e.Err }}))
	require.Equal(t, 10, res.Upserted)
	cp.mu.Lock()
	held, saves := cp.held, slices.Clone(cp.saves)
	cp.mu.Unlock()
	require.Equal(t, int64(10), held, "the periodic save stored the final watermark (saves: %v)", saves)
	assert.Equal(t, []int64{0, 10}, saves)
	assert.NoError(t, err)
	assert.NoError(t, doneErr, "RunDone's error")
}

// Over REST (the SDK's records endpoint through the library's transport)
// the checkpoint passes only records that landed or failed for good, and
// every record is accounted for once: in a mixed storm (records the index
// refuses, a 429 burst, then a 403 that stops the run), with the index
// down (503s), and with a client whose TLS handshake fails.
func TestACheckpointOverRESTPassesOnlyRecordsThatLandedOrFailedForGood(t *testing.T) {
	withoutText := func(recs []*pinecone.IntegratedRecord, at ...int) []*pinecone.IntegratedRecord {
		for _, i := range at {
			r := *recs[i]
			delete(r, "chunk_text")
			r["body"] = "text without the field map's field"
			recs[i] = &r
		}
		return recs
	}
	downAfter2 := upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		if r.Seq > 2 {
			return upserttest.Fault{Code: codes.Unavailable}
		}
		return upserttest.Fault{}
	})
	tests := []struct {
		name    string
		recs    []*pinecone.IntegratedRecord
		server  []upserttest.Option
		noTLS   bool // a client that does not trust the server's certificate
		opts    []Option
		wantErr error
	}{
		{"a mixed storm stopped by a 403", withoutText(textRecordsOf(600), 10, 250),
			[]upserttest.Option{upserttest.WithFieldMap("chunk_text"), upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
				switch {
				case r.Seq >= 3 && r.Seq < 7:
					return upserttest.Fault{Code: codes.ResourceExhausted}
				case r.Seq >= 30:
					return upserttest.Fault{Code: codes.PermissionDenied, Message: "Forbidden"}
				}
				return upserttest.Fault{}
			})},
			false, []Option{WithConcurrency(2)}, ErrDenied},
		{"an index down", textRecordsOf(300), []upserttest.Option{downAfter2}, false, []Option{WithBatchSize(10)}, ErrServer},
		{"a failed TLS handshake", textRecordsOf(300), []upserttest.Option{downAfter2}, true, []Option{WithBatchSize(10)}, ErrServer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := upserttest.NewServer(tt.server...)
			defer srv.Close()
			client := srv.Client()
			if tt.noTLS {
				client = &http.Client{}
			}
			cp := FileCheckpoint(filepath.Join(t.TempDir(), "cp"))
			var mu sync.Mutex
			var failures []Failure
			opts := append([]Option{WithIndex(recordsConn(t, srv, client, true)), WithCheckpoint(cp),
				WithObserver(Observer{Failure: func(f Failure) { mu.Lock(); failures = append(failures, f); mu.Unlock() }}),
				withClock(newFakeClock()), withRand(maxRand)}, tt.opts...)
			res, err := Records(context.Background(), slices.Values(tt.recs), opts...)
			require.ErrorIs(t, err, tt.wantErr)
			mark, err := cp.Load(context.Background())
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			stored := srv.Records("docs")
			requireMarkSound(t, tt.recs, int(mark), stored, failures)
			assert.Equal(t, res.Stats.Records, res.Upserted+res.Stats.Failed+res.Stats.Duplicates)
			assert.Len(t, failures, res.Stats.Failed)
			// A request the stop cut off may have been written all the
			// same: its records fail, MayHaveLanded.
			assert.LessOrEqual(t, res.Upserted, len(stored))
			for _, f := range failures {
				_, ok := stored[f.ID]
				assert.True(t, !ok || f.MayHaveLanded, "record %d was stored, and failed without MayHaveLanded", f.Index)
			}
		})
	}
}

// requireMarkSound checks a checkpoint's mark against what the index
// stored and the failures reported: it stops at or before the first
// record left to a resumed run (Resend), and every record before it
// landed or failed for good.
func requireMarkSound(t *testing.T, recs []*pinecone.IntegratedRecord, mark int, stored map[string]map[string]any, failures []Failure) {
	t.Helper()
	final := map[int]bool{}
	firstResend := len(recs)
	for _, f := range failures {
		if f.Resend {
			firstResend = min(firstResend, f.Index)
		} else {
			final[f.Index] = true
		}
	}
	require.LessOrEqual(t, mark, firstResend, "the checkpoint passed a record left to the resumed run")
	for i := range mark {
		_, ok := stored[(*recs[i])["_id"].(string)]
		require.True(t, ok || final[i], "record %d, below the checkpoint %d, neither landed nor failed for good", i, mark)
	}
}

// The failure that spends a batch's last retry once the breaker has given
// up is marked as the index's, also when it carries no cause (an
// UpsertFunc may return &Error{Class: ClassServer, StatusCode: 503}): the
// mark alone, not "%!w(<nil>)".
func TestAnIndexDownMarkOfAFailureWithoutACause(t *testing.T) {
	send := func(context.Context, string, []*pinecone.Vector) error {
		return &Error{Class: ClassServer, StatusCode: 503} // a wrong host behind a proxy
	}
	// Whether a batch spends its last retry before the breaker gives up,
	// rather than fail unsent after, depends on the scheduling of the
	// run's goroutines (in about one run in ten it does not): runs are
	// made until one does.
	marked := 0
	for range 50 {
		res, err := Stream(context.Background(), slices.Values(vectors(200, 2)), WithUpsertFunc(send), WithBatchSize(10),
			WithConcurrency(1), withClock(newFakeClock()), withRand(maxRand))
		require.ErrorIs(t, err, ErrServer)
		assert.NotContains(t, err.Error(), "%!w")
		for _, f := range res.Failed {
			if errors.Is(f.Err, errIndexDown) {
				marked++
				assert.EqualError(t, f.Err, "server (HTTP 503): the circuit breaker has given up on the index")
			}
		}
		if marked > 0 {
			break
		}
	}
	assert.Positive(t, marked, "a batch spent its retries before the breaker gave up")
}

// A record that failed because the caller's code panicked (here the
// classifier of WithClassifier; the same holds for the send function or the
// SDK) did not fail for a cause of its own: the checkpoint stops before it
// and its ack says Resend, so that once the bug is fixed the resumed run
// sends it. The panic is a server-class failure after one attempt, which
// for any other cause would settle the record for good.
func TestACheckpointDoesNotPassARecordFailedByAPanicOfTheCallersCode(t *testing.T) {
	ctx := context.Background()
	cp := FileCheckpoint(filepath.Join(t.TempDir(), "cp"))
	recs := vectors(10, 2)
	send := func(_ context.Context, _ string, b []*pinecone.Vector) error {
		if b[0].Id == "v3" {
			return status.Error(codes.Unavailable, "connection reset") // not written
		}
		return nil
	}
	classify := func(err error) Class {
		if status.Code(err) == codes.Unavailable {
			panic("classifier: unexpected status") // a bug of the caller's, fixed before the resume
		}
		return Classify(err)
	}
	var mu sync.Mutex
	resend := map[int]bool{}
	res, err := Stream(ctx, slices.Values(recs), WithUpsertFunc(send), WithClassifier(classify), WithBatchSize(1), WithConcurrency(1),
		WithCheckpoint(cp), withClock(newFakeClock()), withRand(maxRand),
		WithAcks(func(acks []Ack) {
			mu.Lock()
			defer mu.Unlock()
			for _, a := range acks {
				if a.Failure != nil {
					resend[a.Position] = a.Resend
				}
			}
		}))
	require.Error(t, err)
	require.Len(t, res.Failed, 1)
	require.Equal(t, 3, res.Failed[0].Index)
	mark, err := cp.Load(ctx)
	require.NoError(t, err)
	assert.LessOrEqual(t, mark, int64(3), "the checkpoint passed v3, which the index never wrote: a resumed run skips it")
	mu.Lock()
	defer mu.Unlock()
	assert.True(t, resend[3], "v3 failed because the caller's code panicked, not for a cause of its own")
}

// A checkpoint that cannot be saved (a missing directory) fails the run
// before anything is sent, naming the cause: a long backfill that could
// not resume would otherwise be found out only from its log.
func TestACheckpointThatCannotBeSavedFailsTheRunAtTheStart(t *testing.T) {
	fi := newFakeIndex(nil)
	cp := FileCheckpoint(filepath.Join(t.TempDir(), "missing", "cp"))
	_, err := Stream(context.Background(), slices.Values(vectors(10, 2)), WithUpsertFunc(fi.Upsert), WithCheckpoint(cp))
	require.ErrorIs(t, err, ErrBadOption)
	assert.ErrorIs(t, err, fs.ErrNotExist, "the cause is kept")
	assert.Empty(t, fi.Calls(), "nothing sent")
}

// stalledCheckpoint stores the first save, then never answers a save
// until its context ends: a store that stopped answering mid-run.
type stalledCheckpoint struct{ saves atomic.Int32 }

func (c *stalledCheckpoint) Load(context.Context) (int64, error) { return 0, nil }

func (c *stalledCheckpoint) Save(ctx context.Context, _ int64) error {
	if c.saves.Add(1) == 1 {
		return nil
	}
	<-ctx.Done()
	return context.Cause(ctx)
}

// A save is bounded (thirty save intervals): a checkpoint store that
// stopped answering does not hold the run's return for ever, even with
// the caller's context alive; the run says the checkpoint was not saved.
func TestACheckpointStoreThatStopsAnsweringDoesNotHoldTheRunsReturn(t *testing.T) {
	recs := vectors(10, 2)
	cp := &stalledCheckpoint{}
	type result struct {
		res Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := Stream(context.Background(), slices.Values(recs), WithUpsertFunc(newFakeIndex(nil).Upsert),
			WithCheckpoint(cp), withClock(newFakeClock()), withSaveEvery(time.Millisecond))
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		assert.Equal(t, 10, r.res.Upserted)
		require.ErrorIs(t, r.err, ErrCheckpointNotSaved)
		assert.ErrorIs(t, r.err, context.DeadlineExceeded)
	case <-time.After(10 * time.Second):
		t.Fatal("the run waited for a save that never returned")
	}
}

// nilErrorCheckpoint stores the first save, then returns a typed nil of
// an error type whose Error method dereferences it.
type nilErrorCheckpoint struct{ saves atomic.Int32 }

func (c *nilErrorCheckpoint) Load(context.Context) (int64, error) { return 0, nil }

func (c *nilErrorCheckpoint) Save(context.Context, int64) error {
	if c.saves.Add(1) == 1 {
		return nil
	}
	var e *derefError
	return e
}

// A save that returns a typed nil of the caller's own error type is a
// failed save, not a crash (the panic of its Error method): the library
// logs a periodic save's error from a goroutine of its own, where the
// panic killed the process.
func TestACheckpointErrorWhoseErrorMethodPanicsIsAFailedSave(t *testing.T) {
	res, err := Stream(context.Background(), slices.Values(vectors(10, 2)), WithUpsertFunc(newFakeIndex(nil).Upsert), WithBatchSize(10),
		WithCheckpoint(&nilErrorCheckpoint{}), withClock(newFakeClock()), withSaveEvery(time.Millisecond),
		WithLogger(slog.New(slog.DiscardHandler)))
	assert.Equal(t, 10, res.Upserted)
	require.ErrorIs(t, err, ErrCheckpointNotSaved)
	var pe *PanicError
	require.ErrorAs(t, err, &pe)
	assert.Contains(t, pe.Error(), "the Error method of the checkpoint's error panicked")
}

// ctxCheckpoint holds a position as a store over the network does: a call
// whose context has ended fails with the context's error. Its Load calls
// cancelOnLoad, if set, as it returns.
type ctxCheckpoint struct {
	held         int64
	cancelOnLoad context.CancelFunc
}

func (c *ctxCheckpoint) Load(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if c.cancelOnLoad != nil {
		c.cancelOnLoad()
	}
	return c.held, nil
}

func (c *ctxCheckpoint) Save(ctx context.Context, n int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.held = n
	return nil
}

// A run whose context ends before its checkpoint is loaded, or before the
// loaded position is saved, is a canceled run: the store failed for the
// caller's cancel, and nothing is wrong with the checkpoint (ErrBadOption
// reads as a misconfiguration, and pcupsert makes it a usage error).
func TestACheckpointFailingForAnEndedContextIsACanceledRun(t *testing.T) {
	for _, endsBefore := range []string{"Load", "the first save"} {
		t.Run(endsBefore, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cp := &ctxCheckpoint{held: 5}
			if endsBefore == "Load" {
				cancel()
			} else {
				cp.cancelOnLoad = cancel
			}
			fi := newFakeIndex(nil)
			_, err := Stream(ctx, slices.Values(vectors(10, 2)), WithUpsertFunc(fi.Upsert), WithCheckpoint(cp), withClock(newFakeClock()))
			assert.Empty(t, fi.Calls(), "nothing is sent")
			assert.ErrorIs(t, err, ErrCanceled)
			assert.NotErrorIs(t, err, ErrBadOption)
			assert.Equal(t, int64(5), cp.held)
		})
	}
}

// busyAliveCheckpoint is a store that takes the first save and then none
// while the run's context lives; it counts the saves asked for with an
// ended context.
type busyAliveCheckpoint struct {
	saves, ended atomic.Int32
}

func (c *busyAliveCheckpoint) Load(context.Context) (int64, error) { return 0, nil }

func (c *busyAliveCheckpoint) Save(ctx context.Context, _ int64) error {
	if c.saves.Add(1) == 1 {
		return nil
	}
	if ctx.Err() != nil {
		c.ended.Add(1)
		return ctx.Err()
	}
	return errors.New("store busy")
}

// Once the call's context has ended, the periodic saves stop (each would
// fail at once and log a warning every interval until the run returns);
// the final save, which outlives the context, saves the position.
func TestNoPeriodicSaveIsTriedOnceTheContextEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp := &busyAliveCheckpoint{}
	second, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	done := make(chan error, 1)
	go func() {
		_, err := Stream(ctx, slices.Values(vectors(2, 2)), WithUpsertFunc(func(context.Context, string, []*pinecone.Vector) error {
			if calls.Add(1) == 1 {
				return nil
			}
			cancel()
			close(second)
			<-release
			return context.Canceled
		}), WithBatchSize(1), WithConcurrency(1), WithCheckpoint(cp), withSaveEvery(time.Millisecond))
		done <- err
	}()
	<-second
	time.Sleep(10 * time.Millisecond) // ten intervals of saves
	close(release)
	assert.ErrorIs(t, <-done, ErrCanceled)
	assert.LessOrEqual(t, cp.ended.Load(), int32(1), "at most a save under way as the context ended")
}

// A Stream whose checkpoint cannot be loaded ends as every run does: the
// progress function's Final report ("once more with Final set when the run
// is over") and the logger's summary line, before RunDone.
func TestARunEndedByItsCheckpointGivesItsFinalProgressAndSummary(t *testing.T) {
	var logs bytes.Buffer
	var got []Progress
	_, err := Stream(context.Background(), slices.Values(vectors(10, 2)), testOpts(newFakeIndex(nil),
		WithCheckpoint(brokenCheckpoint{}),
		WithProgress(0, func(p Progress) { got = append(got, p) }),
		WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))...)
	require.Error(t, err)
	require.Len(t, got, 1)
	assert.True(t, got[0].Final)
	assert.Zero(t, got[0].Done)
	assert.Contains(t, logs.String(), `"msg":"upsert finished"`)
}

// panickingLoadCheckpoint panics in Load.
type panickingLoadCheckpoint struct{}

func (panickingLoadCheckpoint) Load(context.Context) (int64, error) { panic("load exploded") }
func (panickingLoadCheckpoint) Save(context.Context, int64) error   { return nil }

// A run ended by its checkpoint's panic returns the progress function's
// panic in its final report too: both are bugs of the caller's to hear of.
func TestARunEndedByItsCheckpointsPanicReturnsTheProgressPanicToo(t *testing.T) {
	_, err := Stream(context.Background(), slices.Values(vectors(3, 2)), testOpts(newFakeIndex(nil),
		WithCheckpoint(panickingLoadCheckpoint{}),
		WithProgress(0, func(Progress) { panic("progress exploded") }))...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "load exploded")
	assert.Contains(t, err.Error(), "progress exploded")
}

// A canceled run's error carries the cause of the context's end, also when
// the checkpoint's own error does not.
func TestACheckpointFailingForAnEndedContextCarriesItsCause(t *testing.T) {
	cause := errors.New("shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	_, err := Stream(ctx, slices.Values(vectors(3, 2)), testOpts(newFakeIndex(nil), WithCheckpoint(brokenCheckpoint{}))...)
	assert.ErrorIs(t, err, ErrCanceled)
	assert.ErrorIs(t, err, cause)
}
