package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/upsertlib/upsert/internal/dirsync"
)

// The --checkpoint file holds how far the input has been settled, as
// upsert.FileCheckpoint does, and which input that is:
//
//	12345
//	input 65536 3f9a…(64 hexadecimal digits)
//
// The first line is the number of records at the start of the input that
// are settled (landed, or failed for good and in the dead-letter file).
// The second names the input by the SHA-256 of its first bytes, and how
// many: 64 KiB, or as many as the run had read when it saved, for an input
// shorter than that. A run given a checkpoint that skips records checks
// that its input starts with those bytes, and refuses to start otherwise: it
// would skip records of another input, which were never sent. An input
// that grew at its end since (a log, an export still being written) starts
// with the same bytes. A checkpoint of one line, as pcupsert wrote before
// it kept the second, is taken as it is, with a warning. The file is
// replaced atomically (a temporary file, then a rename), so that a crash
// leaves the old checkpoint or the new one.

// inputID identifies an input by its first bytes.
type inputID struct {
	n   int // how many
	sum [sha256.Size]byte
}

func idOf(head []byte) inputID { return inputID{len(head), sha256.Sum256(head)} }

func (id inputID) String() string { return fmt.Sprintf("input %d %x", id.n, id.sum) }

// parseInputID reads the second line of a checkpoint.
func parseInputID(line string) (inputID, bool) {
	var id inputID
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "input" {
		return id, false
	}
	n, err := strconv.Atoi(f[1])
	sum, herr := hex.DecodeString(f[2])
	if err != nil || n < 0 || n > headBytes || herr != nil || len(sum) != sha256.Size {
		return id, false
	}
	id.n = n
	copy(id.sum[:], sum)
	return id, true
}

// readCheckpoint reads the checkpoint file at path: the records settled,
// and the input's identity (nil for a checkpoint of an earlier pcupsert).
// A missing file is a fresh start: 0 and nil.
func readCheckpoint(path string) (int64, *inputID, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("reading the checkpoint: %w", err)
	}
	bad := fmt.Errorf("checkpoint %s: not a pcupsert checkpoint (a record count, then the input's identity): %q", path, b)
	first, rest, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	n, err := strconv.ParseInt(strings.TrimSpace(first), 10, 64)
	if err != nil || n < 0 {
		return 0, nil, bad
	}
	if strings.TrimSpace(rest) == "" {
		return n, nil, nil
	}
	id, ok := parseInputID(rest)
	if !ok {
		return 0, nil, bad
	}
	return n, &id, nil
}

// checkpointFile is the --checkpoint file, an upsert.Checkpoint: Load
// returns what openCheckpoint read, and Save writes the identity of the
// run's input with the count.
type checkpointFile struct {
	path   string
	loaded int64
	head   *inputHead
}

// openCheckpoint opens the checkpoint at path for a run of the input
// named name, whose start is head: it checks that the file can be
// written, reads it, and refuses a checkpoint that would skip records of
// another input (a *usageError). Checking reads the start of the input,
// which for stdin may wait until it comes: ctx ends the wait.
func openCheckpoint(ctx context.Context, path, name string, head *inputHead, con io.Writer) (*checkpointFile, error) {
	if err := checkWritable(path); err != nil {
		return nil, usagef("--checkpoint %s: cannot be saved there: %v", path, err)
	}
	n, id, err := readCheckpoint(path)
	if err != nil {
		return nil, err
	}
	c := &checkpointFile{path: path, loaded: n, head: head}
	switch {
	case n == 0: // nothing to skip, whatever the input
	case id == nil:
		fmt.Fprintf(con, "pcupsert: the checkpoint %s does not say which input it was saved for (an earlier pcupsert wrote it): "+
			"skipping the first %s of %s as it says; if it belongs to another input, stop and remove it to load %s from its start\n",
			path, quantity(int(n), "record"), name, name)
	default:
		got, err := peekHead(ctx, head, id.n)
		if err != nil {
			return nil, fmt.Errorf("reading %s to check it against the checkpoint %s: %w", name, path, err)
		}
		if len(got) < id.n || idOf(got[:id.n]) != *id {
			return nil, usagef("the checkpoint %s was saved for another input: %s does not start as that input did, "+
				"and resuming would skip %d of its records, which were never sent; remove %s to load %s from its start, "+
				"or give the checkpoint of %s", path, name, n, path, name, name)
		}
	}
	return c, nil
}

// errInterruptedAtStart is the error of a run interrupted while it read the
// start of its input to check it against the checkpoint.
var errInterruptedAtStart = errors.New("interrupted while waiting for the start of the input; nothing was sent")

// peekHead returns the first n bytes of the input, or all of it if it is
// shorter, unless ctx ends first. The read goes on after ctx ends, on a
// goroutine that returns when it does: a read of stdin cannot be stopped.
func peekHead(ctx context.Context, head *inputHead, n int) ([]byte, error) {
	type peeked struct {
		b   []byte
		err error
	}
	ch := make(chan peeked, 1)
	go func() {
		b, err := head.peek(n)
		ch <- peeked{b, err}
	}()
	select {
	case p := <-ch:
		return p.b, p.err
	case <-ctx.Done():
		return nil, errInterruptedAtStart
	}
}

// checkWritable returns an error if no checkpoint can be saved at path:
// its directory does not exist or is not writable, or path is a
// directory.
func checkWritable(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return errors.New("it is a directory")
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return rootCause(err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// rootCause returns the error of the system call behind err (a path, a
// temporary file's name left out), or err: the same cause, whatever the
// file, is the same error.
func rootCause(err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		return pe.Err
	case errors.As(err, &le):
		return le.Err
	}
	return err
}

// Load returns the count read when the checkpoint was opened.
func (c *checkpointFile) Load(context.Context) (int64, error) { return c.loaded, nil }

// Save writes n and the identity of the input, durably. Its errors name
// the step and the cause, not the temporary file, so that the same cause
// is the same error.
func (c *checkpointFile) Save(_ context.Context, n int64) error {
	if n == c.loaded {
		// The file holds it already. The library saves the loaded position
		// before any input is read, when the identity of the input read so
		// far would be that of nothing, which matches every input; the file
		// was checked writable when it was opened.
		return nil
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d\n%v\n", n, idOf(c.head.bytes()))
	tmp, err := os.CreateTemp(filepath.Dir(c.path), filepath.Base(c.path)+".tmp*")
	if err != nil {
		return fmt.Errorf("creating a file in %s: %w", filepath.Dir(c.path), rootCause(err))
	}
	defer os.Remove(tmp.Name()) // after a successful rename, there is nothing to remove
	_, err = tmp.Write(b.Bytes())
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing a file in %s: %w", filepath.Dir(c.path), rootCause(err))
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		return fmt.Errorf("replacing %s: %w", c.path, rootCause(err))
	}
	// The new name is on disk once its directory is.
	if err := dirsync.Sync(filepath.Dir(c.path)); err != nil {
		return fmt.Errorf("syncing %s: %w", filepath.Dir(c.path), rootCause(err))
	}
	return nil
}

// saveReporter returns a function that tells of a checkpoint that could not
// be saved on con, once per distinct error: the library only logs it,
// and a user who counts on resuming an interrupted load must know.
func saveReporter(con io.Writer, path string) func(error) {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if msg := err.Error(); !seen[msg] {
			seen[msg] = true
			fmt.Fprintf(con, "pcupsert: could not save the checkpoint %s: %s; a run resumed from it sends again what it does not cover\n", path, msg)
		}
	}
}
