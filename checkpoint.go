package upsert

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/upsertlib/upsert/internal/dirsync"
)

// Checkpoint remembers how far a stream's input has been settled, so that
// a backfill that was interrupted resumes where it stopped instead of
// sending (and paying for) everything again. The position it holds is a
// watermark: every record before it has landed or failed for good, and
// was then passed to the observers (such as a dead-letter file). Failed
// for good means for a cause of its own: a rule it broke (invalid, too
// large), or retries that ran out after it was sent. A record that failed
// because the run stopped (its context ended, the index denied the
// caller), because the index was down (the circuit breaker gave up on
// it, sent or not, or while it spent its last retry) or because the caller's code panicked (the send
// function, the SDK, the classifier: a [*PanicError]) stops the
// watermark: the resumed run sends it. Records
// after the watermark may have landed too, and will be sent again, which
// upserts allow; a request the interrupted run left without an answer may
// even be applied after the resumed run's record of its id (see [Stale]),
// which matters only where the input holds several records of one id.
//
// The input must come back in the same order on the next run. A
// checkpoint past its end is an error ([ErrCheckpointPastEnd]). The run
// saves the position it loaded before sending anything: a checkpoint that
// cannot be saved fails the run at once, with an error matching
// [ErrBadOption] and the cause, or [ErrCanceled] when the call's context
// ended before Load or that save returned. A save that fails later is
// logged ([WithLogger]) and tried again at the next save, a second on;
// the run goes on. When the last save, at the end of the run, fails, the
// call's error matches [ErrCheckpointNotSaved]. Each save's context ends
// after 30 seconds (the final save's lives on after the call's context
// ends, for those 30 seconds): a Save that honours it holds the start of
// the run 30 seconds at most, and its return a minute at most (a periodic
// save under way, then the final one). A panic of Load or Save is
// recovered and counts as its error, wrapping a [*PanicError].
type Checkpoint interface {
	// Load returns how many records at the start of the input an earlier
	// run settled, or 0 when there was none. An error, or a negative
	// count, fails the run before anything is sent.
	Load(ctx context.Context) (int64, error)
	// Save records that the first n records of the input have settled.
	Save(ctx context.Context, n int64) error
}

// ErrCheckpointPastEnd is matched by the error of a stream whose input
// ended, while its context lived, before the position its checkpoint
// holds: the input is not the one the checkpoint was saved for (it
// changed, or the checkpoint belongs to another input). Nothing was sent
// and the checkpoint is left as it was. An input cut short because the
// context ended is a canceled run instead ([ErrCanceled]).
var ErrCheckpointPastEnd = errors.New("upsert: the checkpoint is past the end of the input")

// ErrCheckpointNotSaved is matched by the error of a stream whose last
// save of its checkpoint, at the end of the run, failed (the cause is
// wrapped too): the records it reports as landed did, but a run resumed
// from the checkpoint sends again those after the position saved before.
// The run's other errors, if any, are joined to it.
var ErrCheckpointNotSaved = errors.New("upsert: the checkpoint could not be saved")

// FileCheckpoint is a [Checkpoint] kept in a small file at the path, as
// decimal text. Save replaces the file atomically (a temporary file, then
// a rename), so that a crash leaves the old watermark or the new one, and
// keeps the file's permissions. A missing or empty file is a fresh start.
type FileCheckpoint string

// Load reads the watermark. A missing file means 0, and so does an empty
// one (made with touch to set its permissions: Save writes whole files).
func (f FileCheckpoint) Load(context.Context) (int64, error) {
	b, err := os.ReadFile(string(f))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	text := strings.TrimSpace(string(b))
	if text == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("checkpoint %s: not a record count: %q", f, b)
	}
	return n, nil
}

// Save writes the watermark durably. The file keeps its permissions (an
// operator may have made it readable to the account that resumes the
// run); a new file gets 0644 minus the umask, as with os.WriteFile.
func (f FileCheckpoint) Save(_ context.Context, n int64) error {
	path := string(f)
	perm, keep := fs.FileMode(0o644), false
	if fi, err := os.Stat(path); err == nil {
		perm, keep = fi.Mode().Perm(), true
	}
	tmp, err := createTemp(filepath.Dir(path), filepath.Base(path)+".tmp", perm)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, there is nothing to remove
	if keep {
		// The umask applied at creation; it does not to a chmod.
		if err := tmp.Chmod(perm); err != nil {
			tmp.Close()
			return err
		}
	}
	if _, err := fmt.Fprintf(tmp, "%d\n", n); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return dirsync.Sync(filepath.Dir(path))
}

// createTemp creates a new file in dir, named prefix and a random number,
// with perm minus the umask: os.CreateTemp always uses 0600.
func createTemp(dir, prefix string, perm fs.FileMode) (*os.File, error) {
	for range 10000 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, &fs.PathError{Op: "createtemp", Path: filepath.Join(dir, prefix+"*"), Err: fs.ErrExist}
}

// WithCheckpoint keeps a stream's progress in cp: [Stream] and [Records]
// skip the records that cp says an earlier run settled, save the loaded
// position before sending anything (a checkpoint that cannot be saved
// fails the run with [ErrBadOption], unless ctx ended first), then their
// own watermark every second and at the end. See [Checkpoint]. [All] and
// [NewWriter] reject it with [ErrBadOption]: their input cannot be
// replayed in order.
func WithCheckpoint(cp Checkpoint) Option {
	return func(c *config) {
		if cp == nil {
			c.bad("WithCheckpoint: nil Checkpoint")
			return
		}
		c.checkpoint = cp
	}
}

// checkpointEvery is how often a stream saves its watermark.
const checkpointEvery = time.Second

// resume loads the checkpoint, starts keeping the watermark from there,
// and saves it every second from now on. It returns how many records of
// the input to skip.
func (in *intake) resume(ctx context.Context) (int, error) {
	var n int64
	err := checkpointCall(func() (err error) { n, err = in.r.cfg.checkpoint.Load(ctx); return err })
	if err != nil {
		return 0, fmt.Errorf("upsert: loading the checkpoint: %w", canceledBy(ctx, err))
	}
	if n < 0 {
		return 0, fmt.Errorf("upsert: loading the checkpoint: it holds %d, not a count of records", n)
	}
	// Saved once before anything is sent: a checkpoint that cannot be
	// saved (a missing directory, no permission) would leave a long run
	// that cannot resume, found out only from its log.
	if err := in.save(ctx, n); err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("upsert: saving the checkpoint before sending: %w", canceledBy(ctx, err))
		}
		return 0, fmt.Errorf("%w: the checkpoint cannot be saved: %w", ErrBadOption, err)
	}
	in.next = int(n)
	in.ckpt.loaded = n
	in.ckpt.marks = &watermark{base: int(n)}
	if in.acks != nil {
		in.acks.start(int(n))
	}
	in.r.stats.skipped.Store(n)
	in.ckpt.saved.Store(n)
	every := in.saveEvery()
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if in.r.ctx.Err() != nil {
				continue // the final save, which outlives the run's context, saves it
			}
			if w := int64(in.ckpt.marks.value()); w > in.ckpt.saved.Load() {
				if err := in.save(in.r.ctx, w); err != nil {
					in.logWarn("saving the checkpoint", err)
					continue
				}
				in.ckpt.saved.Store(w)
			}
		}
	}()
	in.ckpt.stopSaver = func() {
		close(done)
		<-stopped
	}
	return int(n), nil
}

// canceledBy returns err, an error of the checkpoint's, as a canceled
// run's when ctx has ended: the store may have failed only because the
// caller stopped the run, which is no fault of the checkpoint.
func canceledBy(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	if cause := context.Cause(ctx); !errors.Is(err, cause) {
		err = fmt.Errorf("%w (%w)", err, cause)
	}
	return &Error{Class: ClassCanceled, Err: err}
}

// saveCheckpoint stops the periodic saves and saves the final watermark,
// once: it returns the save's error, wrapped in ErrCheckpointNotSaved.
func (in *intake) saveCheckpoint() error {
	if in.ckpt.stopSaver == nil {
		return nil
	}
	in.ckpt.stopSaver()
	in.ckpt.stopSaver = nil
	w := int64(in.ckpt.marks.value())
	if w == in.ckpt.saved.Load() {
		return nil // saved already, or nothing settled for good since the start
	}
	// The caller's context may have ended: the final save must happen
	// anyway, or the run's progress is lost.
	if err := in.save(context.WithoutCancel(in.r.ctx), w); err != nil {
		in.logWarn("saving the checkpoint", err)
		return fmt.Errorf("%w at %d (it holds %d): %w", ErrCheckpointNotSaved, w, in.ckpt.saved.Load(), err)
	}
	return nil
}

// withFinalSave returns end (nil: none) followed by the final save of the
// checkpoint, whose error joins the run's.
func (in *intake) withFinalSave(end func(error) error) func(error) error {
	return func(err error) error {
		if end != nil {
			err = end(err)
		}
		if serr := in.saveCheckpoint(); serr != nil {
			err = errors.Join(err, serr)
		}
		return err
	}
}

// saveTimeoutEvery bounds a save at this many save intervals (30 s by
// default): a store that stopped answering must not hold the run's return.
const saveTimeoutEvery = 30

// save saves n to the caller's checkpoint, with ctx ended after
// saveTimeoutEvery save intervals.
func (in *intake) save(ctx context.Context, n int64) error {
	ctx, cancel := context.WithTimeout(ctx, saveTimeoutEvery*in.saveEvery())
	defer cancel()
	return checkpointCall(func() error { return in.r.cfg.checkpoint.Save(ctx, n) })
}

// saveEvery returns the interval between a stream's checkpoint saves.
func (in *intake) saveEvery() time.Duration {
	if every := in.r.cfg.saveEvery; every > 0 {
		return every
	}
	return checkpointEvery
}

// checkpointCall calls f, a method of the caller's Checkpoint, and turns
// a panic into an error wrapping a *PanicError, as one of its error's
// Error method: the periodic saves run on a goroutine of the library's,
// where a panic would kill the process.
func checkpointCall(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack(), fn: "checkpoint"}
		}
	}()
	err = f()
	if pe := unreadable(err, "Error method of the checkpoint's error"); pe != nil {
		return pe
	}
	return err
}

// watermark tracks which input positions have settled, out of order, and
// the first one that has not. Memory is a bit per position from that one
// on.
type watermark struct {
	mu      sync.Mutex
	base    int           // every position below base has settled
	bits    []uint64      // bit i of word w: position base+64w+i has settled
	moved   chan struct{} // closed and replaced when the value grows, while someone waits
	waiting int           // calls in wait
}

// done marks the positions of items as settled.
func (w *watermark) done(items []item) {
	w.mu.Lock()
	defer w.mu.Unlock()
	before := w.valueLocked()
	for _, it := range items {
		w.mark(it.seq)
	}
	if w.moved != nil && w.valueLocked() > before {
		close(w.moved)
		w.moved = nil
	}
}

func (w *watermark) mark(pos int) {
	i := pos - w.base
	if i < 0 {
		return
	}
	for i/64 >= len(w.bits) {
		w.bits = append(w.bits, 0)
	}
	w.bits[i/64] |= 1 << (i % 64)
	k := 0
	for k < len(w.bits) && w.bits[k] == ^uint64(0) {
		k++
	}
	if k > 0 {
		w.bits = append(w.bits[:0], w.bits[k:]...)
		w.base += 64 * k
	}
}

// value returns the first position that has not settled.
func (w *watermark) value() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.valueLocked()
}

func (w *watermark) valueLocked() int {
	if len(w.bits) == 0 {
		return w.base
	}
	return w.base + bits.TrailingZeros64(^w.bits[0])
}

// wait waits until every position below pos has settled, or ctx ends.
func (w *watermark) wait(ctx context.Context, pos int) error {
	w.mu.Lock()
	w.waiting++
	defer func() {
		w.mu.Lock()
		w.waiting--
		w.mu.Unlock()
	}()
	for w.valueLocked() < pos {
		if w.moved == nil {
			w.moved = make(chan struct{})
		}
		ch := w.moved
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		w.mu.Lock()
	}
	w.mu.Unlock()
	return nil
}
