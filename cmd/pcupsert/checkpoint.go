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
// upsert.FileCheckpoint does, which input that is, and how far its bad
// lines have been reported:
//
//	12345
//	input 65536 3f9a…(64 hexadecimal digits)
//	reported-through 12400
//
// The first line is the number of records at the start of the input that
// are settled (landed, or failed for good and in the dead-letter file).
// The second names the input by the SHA-256 of its first bytes, and how
// many: 64 KiB, or as many as the run had read when it saved, for an input
// shorter than that. A run given a checkpoint that skips records checks
// that its input starts with those bytes, and refuses to start otherwise: it
// would skip records of another input, which were never sent. An input
// that grew at its end since (a log, an export still being written) starts
// with the same bytes. A Parquet file is named by more than its first
// 64 KiB, which are the start of its first column (ids) alone, and which
// an export regenerated with new values shares: by its size and the
// SHA-256 of its footer and of the start of each of its columns (see
// inputTail and parquetTail), after "parquet":
//
//	input 65536 3f9a… parquet 1234567 9c1b…
//
// An NDJSON input's line is as it was before, and a Parquet file's
// checkpoint of an earlier pcupsert, without "parquet", is taken on its
// first bytes alone, with a warning (checkTail).
//
// The third line names where the records were settled, the index's host
// (canonicalHost) and the namespace (namespaceName), both quoted as Go
// strings (a namespace may hold spaces):
//
//	target "name-project.svc.region.pinecone.io" "__default__"
//
// A run that writes elsewhere refuses a checkpoint that skips records, as
// it refuses one of another input: the records it skips never landed
// where it writes (checkSettledTarget). The embedded index, a new one at
// each run, is "embedded loopback index", which no host is.
//
// The last line, left out when 0, is the line (or row) of the input up
// to which every bad line is in the dead-letter file: a resumed run does
// not report those again, wherever they are (after the last record of a
// finished load, too). A checkpoint of one line, as pcupsert wrote before
// it kept the second, is taken as it is, with a warning; one without the
// target line, as pcupsert wrote before it kept it, with a warning too
// (checkSettledTarget), and the run saves that line even if it settles no
// record, once the identity it saves is of the input it read
// (checkpointFile.targetOwed); one without the reported line is taken as it is:
// the bad lines after its last settled record are reported once more,
// and the run saves that line even if it settles no record
// (durableCheckpoint.finish). The lines after the second are told apart
// by their first word. The file is replaced atomically (a temporary file,
// then a rename), so that a crash leaves the old checkpoint or the new
// one.
//
// A run holds an exclusive lock on PATH.lock (see lockFile) from before it
// reads the checkpoint to its end: a second pcupsert on the same
// checkpoint is refused, since its saves would interleave with the first
// one's and could leave older records of an id on the index.

// inputID identifies an input by its first bytes, and a Parquet file by
// its end as well. It is comparable: equal identities name one input.
type inputID struct {
	n   int // how many
	sum [sha256.Size]byte
	// tail is the rest of a Parquet file's identity; the zero inputTail
	// for NDJSON, and in a checkpoint of an earlier pcupsert.
	tail inputTail
}

// inputTail identifies a Parquet file beyond its first bytes: its size and
// the SHA-256 of its footer and of the start of each column chunk of its
// first row group (parquetTail), so that an export regenerated with other
// values, of the same size even, has another. The zero inputTail is none:
// a Parquet file has at least 12 bytes.
type inputTail struct {
	size int64
	sum  [sha256.Size]byte
}

// lockSuffix names the lock file next to a checkpoint (see lockFile).
const lockSuffix = ".lock"

// idOf returns the identity of an input that starts with head, without
// a tail.
func idOf(head []byte) inputID { return inputID{n: len(head), sum: sha256.Sum256(head)} }

// idOfHead returns the identity of the input whose head is h, as far as
// it was read.
func idOfHead(h *inputHead) inputID {
	id := idOf(h.bytes())
	id.tail = h.tail
	return id
}

func (id inputID) String() string {
	s := fmt.Sprintf("input %d %x", id.n, id.sum)
	if id.tail != (inputTail{}) {
		s += fmt.Sprintf(" parquet %d %x", id.tail.size, id.tail.sum)
	}
	return s
}

// parseInputID reads the second line of a checkpoint: "input N SUM", and
// for a Parquet file " parquet SIZE SUM" after it.
func parseInputID(line string) (inputID, bool) {
	var id inputID
	f := strings.Fields(line)
	if (len(f) != 3 && len(f) != 6) || f[0] != "input" {
		return id, false
	}
	n, err := strconv.Atoi(f[1])
	if err != nil || n < 0 || n > headBytes || !parseSum(f[2], &id.sum) {
		return id, false
	}
	id.n = n
	if len(f) == 6 {
		size, err := strconv.ParseInt(f[4], 10, 64)
		if f[3] != "parquet" || err != nil || size < 12 || !parseSum(f[5], &id.tail.sum) {
			return inputID{}, false
		}
		id.tail.size = size
	}
	return id, true
}

// parseSum reads a SHA-256 in hexadecimal into sum.
func parseSum(s string, sum *[sha256.Size]byte) bool {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != sha256.Size {
		return false
	}
	copy(sum[:], b)
	return true
}

// checkpointTarget is where a checkpoint's records were settled, or where
// a run writes: the index's host, as canonicalHost spells it
// (embeddedHost for the embedded index; "" for a dry run's --index,
// whose host is not looked up), and the namespace, as namespaceName
// spells it.
type checkpointTarget struct{ host, namespace string }

// embeddedHost is the host of the embedded index in a checkpoint: it has
// spaces, which no host has, and is not the loopback address of the
// run's index, which the next run's does not share.
const embeddedHost = "embedded loopback index"

// targetPrefix starts the target line of a checkpoint.
const targetPrefix = "target "

func (t checkpointTarget) String() string {
	return targetPrefix + strconv.Quote(t.host) + " " + strconv.Quote(t.namespace)
}

// parseTarget reads the target line of a checkpoint.
func parseTarget(line string) (checkpointTarget, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), targetPrefix)
	host, rest, ok2 := cutQuoted(rest)
	rest, ok3 := strings.CutPrefix(rest, " ")
	ns, rest, ok4 := cutQuoted(rest)
	if !ok || !ok2 || !ok3 || !ok4 || rest != "" || host == "" {
		return checkpointTarget{}, false
	}
	return checkpointTarget{host: host, namespace: namespaceName(ns)}, true
}

// cutQuoted cuts the Go string quoted at the start of s off it.
func cutQuoted(s string) (unquoted, rest string, ok bool) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", s, false
	}
	unquoted, err = strconv.Unquote(q)
	return unquoted, s[len(q):], err == nil
}

// holds reports whether records settled at t landed where a run writing
// to run writes: the same namespace, and the same host unless run's is
// not known (a dry run's --index), which is never the embedded index.
func (t checkpointTarget) holds(run checkpointTarget) bool {
	sameHost := t.host == run.host || (run.host == "" && t.host != embeddedHost)
	return t.namespace == run.namespace && sameHost
}

// describe names t for a message.
func (t checkpointTarget) describe() string {
	switch t.host {
	case "":
		return fmt.Sprintf("namespace %q of the index --index names", t.namespace)
	case embeddedHost:
		return fmt.Sprintf("namespace %q of the embedded loopback index", t.namespace)
	}
	return fmt.Sprintf("namespace %q of the index at %s", t.namespace, t.host)
}

// canonicalHost spells an index's host as the library does (its
// canonicalHost): one index has one spelling, whichever way --host or
// --index gave it. The scheme is left out too: checkHost adds https://
// to a host given without one, and its default port is left out with it.
func canonicalHost(host string) string {
	defaultPort := ":443"
	if scheme, rest, ok := strings.Cut(host, "://"); ok {
		host = rest
		if strings.EqualFold(scheme, "http") {
			defaultPort = ":80"
		}
	}
	host = strings.ToLower(strings.TrimSuffix(host, "/"))
	return strings.TrimSuffix(host, defaultPort)
}

// defaultNamespace is Pinecone's other name of the default namespace "",
// which go-pinecone v5 sends for it: the two are one namespace.
const defaultNamespace = "__default__"

// namespaceName spells namespace ns one way: the default namespace,
// "" or "__default__", as "__default__", the name the report gives it.
func namespaceName(ns string) string {
	if ns == "" {
		return defaultNamespace
	}
	return ns
}

// savedCheckpoint is what a checkpoint file holds.
type savedCheckpoint struct {
	settled int64    // records settled at the start of the input
	id      *inputID // nil for a checkpoint of an earlier pcupsert
	// target is where the records were settled; nil for a checkpoint of
	// an earlier pcupsert.
	target *checkpointTarget
	// reported is the line or row up to which the input's bad lines are
	// reported; 0 when the checkpoint does not say.
	reported int
}

// reportedPrefix starts the last line of a checkpoint.
const reportedPrefix = "reported-through "

// readCheckpoint reads the checkpoint file at path. A missing file is a
// fresh start: the zero savedCheckpoint.
func readCheckpoint(path string) (savedCheckpoint, error) {
	var c savedCheckpoint
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("reading the checkpoint: %w", err)
	}
	bad := fmt.Errorf("checkpoint %s: not a pcupsert checkpoint (a record count, the input's identity, "+
		"where it was settled, and how far its bad lines are reported): %q", path, b)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 4 {
		return c, bad
	}
	if c.settled, err = strconv.ParseInt(strings.TrimSpace(lines[0]), 10, 64); err != nil || c.settled < 0 {
		return savedCheckpoint{}, bad
	}
	if len(lines) == 1 {
		return c, nil
	}
	id, ok := parseInputID(lines[1])
	if !ok {
		return savedCheckpoint{}, bad
	}
	c.id = &id
	for _, line := range lines[2:] {
		if !c.readLine(line) {
			return savedCheckpoint{}, bad
		}
	}
	return c, nil
}

// readLine reads a line of a checkpoint after the second: the target or
// the reported line, each once at most.
func (c *savedCheckpoint) readLine(line string) bool {
	if strings.HasPrefix(line, targetPrefix) {
		t, ok := parseTarget(line)
		if !ok || c.target != nil {
			return false
		}
		c.target = &t
		return true
	}
	n, found := strings.CutPrefix(strings.TrimSpace(line), reportedPrefix)
	r, err := strconv.Atoi(n)
	if !found || err != nil || r < 0 || c.reported != 0 {
		return false
	}
	c.reported = r
	return true
}

// checkpointFile is the --checkpoint file, an upsert.Checkpoint: Load
// returns what openCheckpoint read, and Save writes the identity of the
// run's input with the count, where the run writes, and how far its bad
// lines are reported.
type checkpointFile struct {
	path           string
	loaded         int64
	loadedReported int               // the loaded checkpoint's reported line
	loadedID       *inputID          // the loaded identity, once checked against the input; nil if not
	loadedTarget   *checkpointTarget // the loaded target, which checkTarget checks; nil if none
	// target is where the run writes, once checkTarget has checked it; nil
	// before, and the saves write no target line.
	target *checkpointTarget
	head   *inputHead
	// reported returns the line or row up to which the run has handled
	// the input's bad lines (reported them, or skipped them as reported
	// by an earlier run); nil: none.
	reported func() int
	lock     *fileLock // held from openCheckpoint to close

	mu            sync.Mutex
	saved         int64 // what the file holds: the count
	savedReported int   // and the reported line
	// savedTarget: the file names the target (or settles nothing, and
	// need not): false for a checkpoint of an earlier pcupsert until a
	// save names it (see targetOwed).
	savedTarget bool
}

// fileLock is a lock held on a file (see lockFile, lockForWriting and
// lockForReading), until release.
type fileLock struct {
	f *os.File
	// remove is the lock file of lockFile, removed at release.
	remove string
	// removeIfEmpty is lockForWriting's file when it was empty (created,
	// or left so by a killed run), removed at release if still empty.
	removeIfEmpty string
	// unlock: f shares its open file with other descriptors (those of
	// lockForReading), which would hold the lock after f is closed:
	// release unlocks it first.
	unlock bool
}

// errLocked is the error of a lock that another process holds (for
// lockForWriting: exclusively, to write the file).
var errLocked = errors.New("locked by another process")

// errBeingRead is the error of a lock (lockAt) when other processes hold
// the file shared, to read it (lockForReading); it is an errLocked.
var errBeingRead = fmt.Errorf("%w reading it", errLocked)

// openCheckpoint opens the checkpoint at path for a run of the input
// named name, whose start is head: it locks it (a second pcupsert on it
// is refused), checks that the file can be written, reads it, and refuses
// a checkpoint that would skip records of another input; checkTarget
// checks it against the index, once opened. Its errors are
// *usageErrors but for a checkpoint that cannot be read. Checking reads
// the start of the input, which for stdin may wait until it comes: ctx
// ends the wait. The caller closes the checkpoint, which lets go of the
// lock.
func openCheckpoint(ctx context.Context, path, name string, head *inputHead, con io.Writer) (_ *checkpointFile, err error) {
	if err := checkWritable(path); err != nil {
		return nil, usagef("--checkpoint %s: cannot be saved there: %v", path, err)
	}
	lock, err := lockFile(path + lockSuffix)
	switch {
	case errors.Is(err, errLocked):
		return nil, usagef("--checkpoint %s: another pcupsert holds it (a lock on %s.lock): "+
			"wait for that run to end, or give another --checkpoint", path, path)
	case err != nil:
		return nil, usagef("--checkpoint %s: cannot be locked: %v", path, rootCause(err))
	}
	defer func() {
		if err != nil {
			lock.release()
		}
	}()
	saved, err := readCheckpoint(path)
	if err != nil {
		return nil, err
	}
	if err := checkInput(ctx, path, name, head, saved, con); err != nil {
		return nil, err
	}
	c := &checkpointFile{path: path, loaded: saved.settled, loadedReported: saved.reported, loadedTarget: saved.target,
		head: head, lock: lock, saved: saved.settled, savedReported: saved.reported,
		savedTarget: saved.target != nil || (saved.settled == 0 && saved.reported == 0)}
	if saved.settled > 0 || saved.reported > 0 {
		c.loadedID = saved.id // checked against the input
	}
	return c, nil
}

// readCheckpointOnly reads the checkpoint at path for a dry run of the
// input named name, whose start is head, writing to tgt, and checks it
// against the input and tgt as openCheckpoint and checkTarget do (the
// same *usageErrors), but takes no lock and
// writes nothing: a run on the checkpoint may be under way, and the dry
// run neither waits for it nor stands in its way. A missing file is a
// fresh start, as for a run.
func readCheckpointOnly(ctx context.Context, path, name string, head *inputHead, tgt checkpointTarget, con io.Writer) (savedCheckpoint, error) {
	if err := checkSavable(path); err != nil { // as a run would refuse it, writing nothing to find out
		return savedCheckpoint{}, usagef("--checkpoint %s: cannot be saved there: %v", path, err)
	}
	saved, err := readCheckpoint(path)
	if err != nil {
		return savedCheckpoint{}, err
	}
	if err := checkInput(ctx, path, name, head, saved, con); err != nil {
		return savedCheckpoint{}, err
	}
	if err := checkSettledTarget(path, name, saved, tgt, con); err != nil {
		return savedCheckpoint{}, err
	}
	return saved, nil
}

// checkTarget checks the checkpoint against tgt, where the run writes
// (checkSettledTarget), before anything is sent, and has the saves name
// tgt. It is apart from openCheckpoint because the host of --index is
// known only once looked up.
func (c *checkpointFile) checkTarget(tgt checkpointTarget, name string, con io.Writer) error {
	saved := savedCheckpoint{settled: c.loaded, reported: c.loadedReported, target: c.loadedTarget}
	if err := checkSettledTarget(c.path, name, saved, tgt, con); err != nil {
		return err
	}
	c.target = &tgt
	return nil
}

// checkSettledTarget returns a *usageError if the checkpoint saved at
// path, of the input named name, skips records (or bad lines) settled
// elsewhere than tgt: they never landed where the run writes. A
// checkpoint of an earlier pcupsert, which does not name its target, is
// taken with a warning on con, as one that does not name its input is
// (checkInput).
func checkSettledTarget(path, name string, saved savedCheckpoint, tgt checkpointTarget, con io.Writer) error {
	switch {
	case saved.settled == 0 && saved.reported == 0: // nothing to skip, wherever it goes
	case saved.target == nil:
		fmt.Fprintf(con, "pcupsert: the checkpoint %s does not say which index and namespace it was saved for (an earlier pcupsert wrote it): "+
			"skipping %s of %s as it says; if they were settled elsewhere than %s, stop and remove it to load %s from its start\n",
			path, skippedBy(saved), name, tgt.describe(), name)
	case !saved.target.holds(tgt):
		return usagef("the checkpoint %s was saved for another target: %s, and this run writes to %s; "+
			"resuming would skip %s of %s, which were never sent there: remove %s to load %s from its start, "+
			"or give the target it was saved for", path, saved.target.describe(), tgt.describe(), skippedBy(saved), name, path, name)
	}
	return nil
}

// frozenCheckpoint is the upsert.Checkpoint of a dry run: Load returns the
// count read, and Save does nothing, so that the library skips what a
// resumed run would and the file is left as it is.
type frozenCheckpoint int64

func (c frozenCheckpoint) Load(context.Context) (int64, error) { return int64(c), nil }

func (frozenCheckpoint) Save(context.Context, int64) error { return nil }

// checkInput returns a *usageError if the checkpoint saved at path is not
// that of the input named name, whose start is head; a checkpoint of an
// earlier pcupsert, which does not name its input, is taken with a
// warning on con.
func checkInput(ctx context.Context, path, name string, head *inputHead, saved savedCheckpoint, con io.Writer) error {
	id := saved.id
	switch {
	case saved.settled == 0 && saved.reported == 0: // nothing to skip, whatever the input
	case id == nil:
		fmt.Fprintf(con, "pcupsert: the checkpoint %s does not say which input it was saved for (an earlier pcupsert wrote it): "+
			"skipping the first %s of %s as it says; if it belongs to another input, stop and remove it to load %s from its start\n",
			path, quantity(int(saved.settled), "record"), name, name)
	default:
		got, err := peekHead(ctx, head, id.n)
		if err != nil {
			return fmt.Errorf("reading %s to check it against the checkpoint %s: %w", name, path, err)
		}
		if len(got) < id.n {
			return notTheInput(path, name, fmt.Sprintf("it has %d bytes, and the checkpoint names the first %d", len(got), id.n))
		}
		if start := idOf(got[:id.n]); start.sum != id.sum {
			return anotherInput(path, name, "does not start as that input did", saved)
		}
		return checkTail(path, name, head.tail, saved, con)
	}
	return nil
}

// checkTail returns a *usageError if the checkpoint saved at path names a
// Parquet file beyond its first bytes, and the input named name, whose
// identity beyond them is tail (none for NDJSON), is not that file. A
// checkpoint of an earlier pcupsert, which named a Parquet file by its
// first bytes alone, is taken with a warning on con rather than refused,
// as a checkpoint that names no input is (checkInput): the run that wrote
// it most likely read that very file, and refusing it would send the
// records it settled again; one that named the whole file (shorter than
// 64 KiB) is taken without. The run's saves then name the file in full.
func checkTail(path, name string, tail inputTail, saved savedCheckpoint, con io.Writer) error {
	switch {
	case saved.id.tail == tail:
	case saved.id.tail == (inputTail{}) && int64(saved.id.n) >= tail.size: // the whole file, matched
	case saved.id.tail == (inputTail{}):
		fmt.Fprintf(con, "pcupsert: the checkpoint %s names %s by its first 64 KiB only (an earlier pcupsert wrote it), "+
			"which a Parquet export regenerated with other values shares: skipping the first %s as it says; "+
			"if %s was regenerated since, stop and remove the checkpoint to load it from its start\n",
			path, name, quantity(int(saved.settled), "record"), name)
	default:
		return anotherInput(path, name, "is not that Parquet file, though it starts with the same bytes "+
			"(its size, its footer or the start of one of its columns differs: an export regenerated with other values)", saved)
	}
	return nil
}

// anotherInput is the *usageError of a checkpoint at path saved for
// another input than the one named name, whose identity differs as why
// says.
func anotherInput(path, name, why string, saved savedCheckpoint) error {
	return usagef("the checkpoint %s was saved for another input: %s %s, "+
		"and resuming would skip %s of it, which were never sent or reported; remove %s to load %s from its start, "+
		"or give the checkpoint of %s", path, name, why, skippedBy(saved), path, name, name)
}

// skippedBy says what a run resumed from saved skips: "3 records", and
// "and the bad lines up to line (or row) N" when it says.
func skippedBy(saved savedCheckpoint) string {
	skipped := quantity(int(saved.settled), "record")
	if saved.reported > 0 {
		skipped += fmt.Sprintf(" and the bad lines up to line (or row) %d", saved.reported)
	}
	return skipped
}

// notTheInput is the *usageError of a checkpoint at path that does not
// fit the input named name, shorter than the input it was saved for (or
// another one): why says how it is shorter.
func notTheInput(path, name, why string) error {
	return usagef("the checkpoint %s does not fit %s: %s; the input is shorter than, or differs from, the one the checkpoint "+
		"was saved for. Nothing was sent: remove %s to load %s from its start, or give the checkpoint of %s",
		path, name, why, path, name, name)
}

// close lets go of the lock; it does nothing for a nil checkpoint.
func (c *checkpointFile) close() {
	if c != nil {
		c.lock.release()
	}
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

// checkSavable is what checkWritable finds without writing: path is not
// a directory, and its directory exists.
func checkSavable(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return errors.New("it is a directory")
	}
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		return rootCause(err)
	}
	return nil
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

// reportedNow returns the line or row up to which the input's bad lines
// are reported, by this run or an earlier one.
func (c *checkpointFile) reportedNow() int {
	if c.reported == nil {
		return c.loadedReported
	}
	return max(c.loadedReported, c.reported())
}

// Save writes n, the identity of the input, the target and the line up
// to which its bad lines are reported, durably. The caller must have made
// the letters of those bad lines durable first (see durableCheckpoint).
func (c *checkpointFile) Save(_ context.Context, n int64) error {
	return c.save(n, c.reportedNow(), false)
}

// targetOwed reports whether the file, a checkpoint of an earlier
// pcupsert that settled records or bad lines, does not name the target yet
// though the run checked it (checkTarget), and the identity a save would
// write is of the input the run checked: the identity loaded, checked
// against the input, or, for a checkpoint without one, the input's head,
// read whole (64 KiB, or all of an input that ended: ended). A run that
// settles nothing new (a finished load run again) saves nothing else, and
// would leave it unnamed for good: every run after would skip the
// records wherever it writes, with a warning (durableCheckpoint.finish).
func (c *checkpointFile) targetOwed(ended bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.savedTarget || c.target == nil || c.target.host == embeddedHost {
		return false // the records it skips are in no embedded index: not its target
	}
	return c.loadedID != nil || ended || c.head.tail != (inputTail{}) || len(c.head.bytes()) >= headBytes
}

// save writes n and reported, unless the file holds them already and
// force is false. Its errors name the step and the cause, not the
// temporary file, so that the same cause is the same error.
func (c *checkpointFile) save(n int64, reported int, force bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n == c.saved && reported <= c.savedReported && !force {
		// The file holds it already. The library saves the loaded position
		// before any input is read, when the identity of the input read so
		// far would be that of nothing, which matches every input; the file
		// was checked writable when it was opened. A target line owed is
		// written once the input was read (targetOwed).
		return nil
	}
	id := idOfHead(c.head)
	if c.loadedID != nil && c.loadedID.n > id.n {
		// Checked against the input: a run that read less keeps it (the
		// tail, known from the start, is the input's own).
		id.n, id.sum = c.loadedID.n, c.loadedID.sum
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d\n%v\n", n, id)
	if c.target != nil {
		fmt.Fprintf(&b, "%v\n", *c.target)
	}
	if reported > 0 {
		fmt.Fprintf(&b, "%s%d\n", reportedPrefix, reported)
	}
	if err := replaceFile(c.path, b.Bytes()); err != nil {
		return err
	}
	c.saved, c.savedReported = n, reported
	c.savedTarget = c.savedTarget || c.target != nil
	return nil
}

// replaceFile replaces the file at path with one holding b, atomically
// and durably.
func replaceFile(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("creating a file in %s: %w", filepath.Dir(path), rootCause(err))
	}
	defer os.Remove(tmp.Name()) // after a successful rename, there is nothing to remove
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing a file in %s: %w", filepath.Dir(path), rootCause(err))
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, rootCause(err))
	}
	// The new name is on disk once its directory is.
	if err := dirsync.Sync(filepath.Dir(path)); err != nil {
		return fmt.Errorf("syncing %s: %w", filepath.Dir(path), rootCause(err))
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
