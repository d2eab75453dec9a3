package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/parquet-go/parquet-go/format"
	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"golang.org/x/term"

	"github.com/upsertlib/upsert/ndjson"
)

// source reads the records of an input, one at a time. Its methods are
// called on the goroutine that reads the input (see input), one after the
// other; what next returns is used by the run while the source reads on,
// so a later call must not change it.
type source interface {
	// next returns the next record, or the next line or row that is not
	// one (bad), or an error: io.EOF at the end of the input.
	next() (v *pinecone.Vector, bad *badEntry, err error)
	// pos returns the line or row number, from 1, of the record next
	// returned last.
	pos() int
	// consumed returns the share of the input read so far, 0 to 1, or -1
	// when the input's size is unknown (stdin).
	consumed() float64
}

// badEntry is a line or row of the input that is not a record.
type badEntry struct {
	pos int    // its line or row number, which err names
	raw []byte // its content, for the dead-letter file
	err error
	// replayed: the entry is a dead letter of a bad line, replayed as the
	// line it holds.
	replayed bool
}

// Input formats.
const (
	formatNDJSON  = "ndjson"
	formatParquet = "parquet"
)

// formatOf returns the format of o's input: --format, else the file's
// extension.
func formatOf(o options) string {
	if o.format != "" {
		return o.format
	}
	if strings.EqualFold(filepath.Ext(o.input), ".parquet") {
		return formatParquet
	}
	return formatNDJSON
}

// openedInput is an input opened for a run.
type openedInput struct {
	src  source
	name string // names the input in messages
	// close closes what openInput opened, and lets go of the input's
	// lock; stdin is left open.
	close func()
	// stdin: the input is stdin, which the run does not close, so that a
	// read of it may outlast the run (see input.stopReading).
	stdin bool
	// head is the start of the input, which identifies it to a
	// checkpoint.
	head *inputHead
}

// openInput opens the input: the file o.input, or stdin. It refuses the
// dead-letter file and the checkpoint as input, by path or as stdin,
// since writing them would replace the input while it is read, and a
// gzip-compressed NDJSON file. But for --dry-run, a file input (stdin
// redirected from one included) is locked shared to the run's end
// (lockInput): one that another pcupsert writes its dead letters to is
// refused. Those and a file that does not exist are *usageErrors (exit
// status 2): the command line must change.
func openInput(o options, stdin io.Reader, con io.Writer) (*openedInput, error) {
	format := formatOf(o)
	if o.input == "" || o.input == "-" {
		return openStdin(o, stdin, con)
	}
	f, err := os.Open(o.input)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &usageError{err.Error()} // a wrong path on the command line
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := notWrittenByTheRun(f, o.input, o); err != nil {
		f.Close()
		return nil, err
	}
	var lock *fileLock
	if !o.dryRun { // it writes no letter, and takes no lock
		if lock, err = lockInput(f, o.input, con); err != nil {
			f.Close()
			return nil, err
		}
	}
	closeIn := func() { f.Close(); lock.release() }
	if format == formatParquet {
		src, err := newParquetSource(f, fi.Size())
		if err == nil {
			var head *inputHead
			if head, err = fileHead(f, fi.Size()); err == nil {
				if head.tail, err = parquetTail(f, fi.Size(), src.firstGroup); err == nil {
					return &openedInput{src: src, name: o.input, close: closeIn, head: head}, nil
				}
			}
		}
		closeIn()
		return nil, fmt.Errorf("reading %s: %w", o.input, err)
	}
	size := fi.Size()
	if !fi.Mode().IsRegular() {
		size = -1 // a pipe or a device: its size says nothing
	}
	r, head := newHeadReader(f)
	src := newNDJSONSource(r, size)
	if size < 0 {
		src.sniff = head.peek // a pipe: its start may not have come yet
	} else if b, _ := head.peek(len(gzipMagic)); bytes.Equal(b, gzipMagic) {
		closeIn()
		return nil, usagef("%s: %v", o.input, errGzipInput)
	}
	return &openedInput{src: src, name: o.input, close: closeIn, head: head}, nil
}

// openStdin is openInput for stdin.
func openStdin(o options, stdin io.Reader, con io.Writer) (*openedInput, error) {
	if formatOf(o) == formatParquet {
		return nil, usagef("Parquet input must be a file, not stdin")
	}
	var lock *fileLock
	if f, ok := stdin.(*os.File); ok {
		if err := notWrittenByTheRun(f, "stdin", o); err != nil {
			return nil, err
		}
		if !o.dryRun { // a file redirected to stdin is locked as a file input is
			var err error
			if lock, err = lockInput(f, "stdin", con); err != nil {
				return nil, err
			}
		}
	}
	if isTerminal(stdin) {
		fmt.Fprintln(con, "pcupsert: reading records from the terminal, one JSON object per line; end with Ctrl-D")
	}
	r, head := newHeadReader(stdin)
	src := newNDJSONSource(r, -1)
	src.sniff = head.peek // stdin may not have come yet: sniffed as it is read
	return &openedInput{src: src, name: "stdin", close: lock.release, stdin: true, head: head}, nil
}

// notWrittenByTheRun returns a *usageError if the input f, named name, is
// the dead-letter file or the checkpoint of the run, which would replace
// it while it is read, or the lock file of the checkpoint, which the run
// removes.
func notWrittenByTheRun(f *os.File, name string, o options) error {
	switch {
	case same(f, o.deadLetter):
		if name == "stdin" {
			return usagef("stdin is the dead-letter file %s, which would be overwritten while it is read: pass another --dead-letter", o.deadLetter)
		}
		return usagef("%s is the dead-letter file, which would be overwritten while it is read: pass another --dead-letter", name)
	case o.checkpoint != "" && same(f, o.checkpoint):
		if name == "stdin" {
			return usagef("stdin is the checkpoint %s, which would be replaced while it is read: pass another --checkpoint", o.checkpoint)
		}
		return usagef("%s is the checkpoint, which would be replaced while it is read: pass another --checkpoint", name)
	case o.checkpoint != "" && same(f, o.checkpoint+lockSuffix):
		return usagef("%s is the lock file of --checkpoint %s, which the run removes at its end: pass another --checkpoint", name, o.checkpoint)
	}
	return nil
}

// gzipMagic starts every gzip stream.
var gzipMagic = []byte{0x1f, 0x8b}

// errGzipInput is the error of a gzip-compressed input: pcupsert reads it
// as it is, and would take each of its lines for a bad one.
var errGzipInput = errors.New("the input is gzip-compressed; pcupsert reads NDJSON, not compressed, or Parquet: " +
	"decompress it first, as in gunzip -c FILE.gz | pcupsert …")

// headBytes is how much of the start of an input identifies it to a
// checkpoint.
const headBytes = 64 << 10

// inputHead is the start of an input, which identifies it to a checkpoint,
// with the rest of a Parquet file's identity.
type inputHead struct {
	// peek returns the first n bytes of the input, n <= headBytes, or all
	// of it if it is shorter; it is called before the input is read, and
	// may block until the bytes come (on stdin).
	peek func(n int) ([]byte, error)

	// tail is the rest of a Parquet file's identity (parquetTail), known
	// when it is opened; the zero inputTail for NDJSON.
	tail inputTail

	mu   sync.Mutex
	read []byte // the first bytes read, up to headBytes
}

// bytes returns the first bytes of the input read so far, up to
// headBytes. It is safe for concurrent use.
func (h *inputHead) bytes() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.read
}

// record keeps p, read from the input after what was read so far, as far
// as it falls within the head.
func (h *inputHead) record(p []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := headBytes - len(h.read); n > 0 {
		// append writes past what bytes returned: a hash of that is
		// unaffected.
		h.read = append(h.read, p[:min(len(p), n)]...)
	}
}

// fileHead returns the head of a file of the given size, read at once.
func fileHead(f io.ReaderAt, size int64) (*inputHead, error) {
	b := make([]byte, min(size, headBytes))
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return &inputHead{peek: func(n int) ([]byte, error) { return b[:min(n, len(b))], nil }, read: b}, nil
}

// parquetTail returns the identity of the Parquet file f of the given
// size beyond its first bytes, once parquet.OpenFile has read it: its size
// and the SHA-256 of its footer (its last 8+n bytes: the FileMetaData, n
// as 4 bytes little-endian, and the magic "PAR1"), then of the first
// headBytes of each column chunk of its first row group (firstGroup).
// The footer holds the row counts, the offsets and sizes of the column
// chunks and their statistics; the starts of the column chunks are the
// first rows' values, metadata and all, as the first bytes of an NDJSON
// input are its first records': an export regenerated with other values
// of the same sizes and within the same bounds (new embeddings) has the
// footer of the old one, and other column starts. What is hashed is read
// as it is, not held.
func parquetTail(f io.ReaderAt, size int64, firstGroup []format.ColumnChunk) (inputTail, error) {
	var end [8]byte
	if size < 12 {
		return inputTail{}, errors.New("not a Parquet file: too short")
	}
	if _, err := f.ReadAt(end[:], size-8); err != nil {
		return inputTail{}, err
	}
	n := int64(binary.LittleEndian.Uint32(end[:4]))
	if string(end[4:]) != "PAR1" || n > size-12 {
		return inputTail{}, errors.New("not a Parquet file: no footer at its end")
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, size-8-n, 8+n)); err != nil {
		return inputTail{}, err
	}
	for _, c := range firstGroup {
		if _, err := io.Copy(h, columnStart(f, c.MetaData, size-8-n)); err != nil {
			return inputTail{}, err
		}
	}
	t := inputTail{size: size}
	h.Sum(t.sum[:0])
	return t, nil
}

// columnStart returns a reader of the first headBytes of the column chunk
// that md describes (its dictionary page, if it has one, then its data
// pages), within the file's data, which ends at limit.
func columnStart(f io.ReaderAt, md format.ColumnMetaData, limit int64) io.Reader {
	start := md.DataPageOffset
	if md.DictionaryPageOffset > 0 && md.DictionaryPageOffset < start {
		start = md.DictionaryPageOffset
	}
	start = min(max(start, 0), limit)
	n := min(max(md.TotalCompressedSize, 0), headBytes, limit-start)
	return io.NewSectionReader(f, start, n)
}

// headReader reads an input and keeps its head.
type headReader struct {
	br   *bufio.Reader
	head *inputHead
}

// newHeadReader returns a reader of r that keeps its head, and the head,
// whose peek reads ahead in the reader's buffer.
func newHeadReader(r io.Reader) (*headReader, *inputHead) {
	br := bufio.NewReaderSize(r, headBytes)
	h := &inputHead{peek: func(n int) ([]byte, error) {
		b, err := br.Peek(n)
		if err == io.EOF {
			err = nil // the input is shorter
		}
		return b, err
	}}
	return &headReader{br: br, head: h}, h
}

func (r *headReader) Read(p []byte) (int, error) {
	n, err := r.br.Read(p)
	r.head.record(p[:n])
	return n, err
}

// same reports whether f is the file at path.
func same(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// isTerminal reports whether f is a terminal.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

// ndjsonSource reads NDJSON, recognising the dead letters of bad lines
// (ndjson.BadLine) so that a dead-letter file replays as its original
// lines.
type ndjsonSource struct {
	r    *ndjson.Reader
	read *countingReader
	size int64 // -1 when unknown
	// sniff, when not nil, returns the first bytes of the input, which
	// the first call of next checks are not gzip's (errGzipInput).
	sniff func(n int) ([]byte, error)
}

func newNDJSONSource(r io.Reader, size int64) *ndjsonSource {
	c := &countingReader{r: r}
	return &ndjsonSource{r: ndjson.NewReader(c), read: c, size: size}
}

func (s *ndjsonSource) next() (*pinecone.Vector, *badEntry, error) {
	if s.sniff != nil {
		b, _ := s.sniff(len(gzipMagic))
		if s.sniff = nil; bytes.Equal(b, gzipMagic) {
			return nil, nil, errGzipInput
		}
	}
	v, err := s.r.Next()
	var le *ndjson.LineError
	if !errors.As(err, &le) {
		return v, nil, err
	}
	line, content, msg, ok := ndjson.BadLine(s.r.Raw())
	if !ok {
		return nil, &badEntry{pos: le.Line, raw: bytes.Clone(s.r.Raw()), err: le}, nil
	}
	// A letter of a bad line: the line it holds is read again, in case it
	// was fixed, and is otherwise the same bad line as before.
	if n := nonBlankLines(content); n > 1 {
		return nil, &badEntry{pos: line, raw: content, err: &ndjson.LineError{Line: line, Err: letterOfLines(n)}, replayed: true}, nil
	}
	v, err = ndjson.NewReader(bytes.NewReader(content)).Next()
	if errors.As(err, &le) {
		return nil, &badEntry{pos: line, raw: content, err: &ndjson.LineError{Line: line, ID: le.ID, Err: le.Err}, replayed: true}, nil
	}
	if err != nil { // io.EOF: the line was not kept, or was blank
		return nil, &badEntry{pos: line, raw: content, err: &ndjson.LineError{Line: line, Err: lostLineRule(line, msg)}, replayed: true}, nil
	}
	return v, nil, nil
}

// nonBlankLines returns how many lines of b are not blank.
func nonBlankLines(b []byte) int {
	n := 0
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) > 0 {
			n++
		}
	}
	return n
}

// letterOfLines is the rule broken by the letter of a bad line whose
// content holds n > 1 lines that are not blank (a line of two records
// glued together, "fixed" in its letter by a newline between them): a
// letter stands for one line of the input, and is one record at most. It
// is a bad line again rather than its records: they would share the one
// line number, in messages, letters and the checkpoint's positions; put
// each on a line of its own in the file to replay them.
func letterOfLines(n int) error {
	return fmt.Errorf("a dead letter's line holds %d lines; want one record: put each on a line of its own in the file", n)
}

// lostLineRule returns the rule broken by bad line number line, whose dead
// letter kept nothing of it (a line longer than ndjson.MaxLineBytes): the
// letter's error message msg, less its "line N: ", which the LineError
// holding the rule adds back. A letter without a message is that of a
// blank line.
func lostLineRule(line int, msg string) error {
	if msg == "" {
		return ndjson.ErrMissingID // a blank line
	}
	return errors.New(strings.TrimPrefix(msg, fmt.Sprintf("line %d: ", line)))
}

func (s *ndjsonSource) pos() int { return s.r.Line() }

func (s *ndjsonSource) consumed() float64 {
	if s.size <= 0 {
		return -1
	}
	return min(1, float64(s.read.n)/float64(s.size))
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// input reads the records of a source for a run: it counts them, hands
// each bad entry to a function, skips the bad entries of the part of the
// input a checkpoint says an earlier run settled, and remembers where each
// record was, to name it in messages.
//
// The source is read on a goroutine of its own, which hands what it reads
// over a channel: a run waiting for input (a pipe whose producer is idle)
// still ends at once with its context. What that goroutine read but did
// not hand over when the run ended is not the run's: it is not counted,
// reported or written anywhere, as if it had not been read, and a
// resumed run reads it again.
type input struct {
	src  source
	unit string // "line" or "row"
	skip int    // records an earlier run settled (--checkpoint)
	// skipBadThrough is the line or row up to which an earlier run
	// reported the bad lines (--checkpoint): those are skipped, as are the
	// bad lines among the skip records.
	skipBadThrough int
	onBad          func(*badEntry)
	// refuse, when not nil, is the refusal of a run that would send a
	// record or write a letter (mixedNamespaces): it stops the run, nothing
	// sent or written, just before the first record past the skipped ones
	// is handed on and before the first bad line is reported, and goes to
	// refusal. A run that meets neither is not refused.
	refuse  error
	refusal error
	// onRead is told of each record read, before it is handed on.
	onRead func()
	// take, when not nil, is told of each record handed to the run, with
	// its position (the checkpoint's records are not).
	take func(index int, v *pinecone.Vector)
	// ids, when not nil, collects the ids of the records handed to the
	// run, and repeated counts those whose id came before: for the check
	// of what the embedded index holds.
	ids      map[string]struct{}
	repeated int

	read       int   // records read
	bad        int   // bad entries reported
	skippedBad int   // bad entries in the part skipped
	pos        int   // the line or row of the last entry read
	err        error // a read error that stopped the input
	stopped    bool  // the run stopped taking records before the end of the input
	// halted is closed (halt) when the run stops for a refusal no retry
	// can fix: next then returns at once, though the input is idle (a
	// pipe whose producer waits), rather than wait for a record the run
	// would refuse. Nil: never.
	halted      chan struct{}
	haltOnce    sync.Once
	ended       bool // the input was read to its end
	positionsMu sync.Mutex
	positions   []position // where the record numbering jumps

	// The reading goroutine: it sends on items until it sends the end of
	// the input or a read error, or done is closed; it closes exited when
	// it returns.
	items  chan entry
	done   chan struct{}
	exited chan struct{}

	// For the progress display, which runs on other goroutines: read,
	// and the share of the input read, as float64 bits.
	progressRead     atomic.Int64
	progressConsumed atomic.Uint64
	// handled is the line or row of the last bad entry handled (reported,
	// its letter written, or skipped), and so of every one before it: for
	// the checkpoint, whose saves run on other goroutines.
	handled atomic.Int64
}

// entry is what the reading goroutine hands over: what source.next
// returned, and where the source then was.
type entry struct {
	v        *pinecone.Vector
	bad      *badEntry
	err      error
	pos      int
	consumed float64
}

// readAhead is how many entries the reading goroutine may read ahead of
// the run.
const readAhead = 64

// startReading starts the goroutine that reads the source, unless it runs.
func (in *input) startReading() {
	if in.items != nil {
		return
	}
	in.items, in.done, in.exited = make(chan entry, readAhead), make(chan struct{}), make(chan struct{})
	go readSource(in.src, in.items, in.done, in.exited)
}

// readSource reads src and sends what it reads on items, until the end of
// the input, a read error, or done. A panic of the source (a corrupt file
// that its library does not handle) is a read error.
func readSource(src source, items chan<- entry, done <-chan struct{}, exited chan<- struct{}) {
	defer close(exited)
	for {
		e := func() (e entry) {
			defer func() {
				if r := recover(); r != nil {
					e = entry{err: fmt.Errorf("the input could not be read: panic: %v", r)}
				}
			}()
			e.v, e.bad, e.err = src.next()
			e.pos, e.consumed = src.pos(), src.consumed()
			return e
		}()
		select {
		case items <- e:
		case <-done:
			return
		}
		if e.err != nil {
			return
		}
	}
}

// stopReading ends the reading goroutine, if it runs: at once when it is
// waiting to hand an entry over, or else when its read returns, handing
// nothing over. wait waits for it to return, which is bounded once the
// input is closed (a read of a file, even a named pipe, then returns). The
// run does not close stdin, and does not wait for a read of it, which may
// block until more input comes or the input ends: that goroutine is the
// only one a run leaves behind, and in the command the process exits
// first.
func (in *input) stopReading(wait bool) {
	if in.items == nil {
		return
	}
	select {
	case <-in.done:
	default:
		close(in.done)
	}
	if wait {
		<-in.exited
	}
}

// progress returns how many records were read and the share of the input
// read (-1 when its size is unknown); it is safe for concurrent use.
func (in *input) progress() (read int, consumed float64) {
	return int(in.progressRead.Load()), math.Float64frombits(in.progressConsumed.Load())
}

// position says that record index is at line or row pos, and those after
// it at the next ones, up to the next position.
type position struct{ index, pos int }

// records returns the records of the input, in order. The sequence ends at
// the end of the input, on a read error (then in.err holds it), when ctx
// ends, when its consumer stops (then in.stopped is set), or when the run
// is refused before it would send or write (then in.refusal holds it). It can be
// ranged over once, and drain reads what it left.
func (in *input) records(ctx context.Context) iter.Seq[*pinecone.Vector] {
	return func(yield func(*pinecone.Vector) bool) {
		for ctx.Err() == nil {
			v, ok := in.next(ctx)
			if !ok {
				return
			}
			if in.read > in.skip { // the checkpoint's records are skipped, not sent
				if !in.mayWrite() {
					return
				}
				if in.onRead != nil {
					in.onRead()
				}
				if in.take != nil {
					in.take(in.read-1, v)
				}
				if in.ids != nil {
					if _, ok := in.ids[v.Id]; ok {
						in.repeated++
					} else {
						in.ids[v.Id] = struct{}{}
					}
				}
			}
			if !yield(v) {
				in.stopped = true
				return
			}
		}
	}
}

// halt stops the reading of records: the run stopped for a refusal no
// retry can fix (a key the index refuses, a spent quota). Safe for
// concurrent use; in.halted must have been made.
func (in *input) halt() { in.haltOnce.Do(func() { close(in.halted) }) }

// wasHalted reports whether the run halted the input (halt).
func (in *input) wasHalted() bool {
	select {
	case <-in.halted:
		return true
	default:
		return false // a nil halted too
	}
}

// next returns the next record, dealing with bad entries on the way; false
// at the end of the input, on a read error, when ctx ends first, or once
// the run halted.
func (in *input) next(ctx context.Context) (*pinecone.Vector, bool) {
	in.startReading()
	for !in.ended && in.err == nil && in.refusal == nil && ctx.Err() == nil {
		var e entry
		select {
		case e = <-in.items:
		case <-ctx.Done():
			return nil, false
		case <-in.halted:
			in.stopped = true
			return nil, false
		}
		if e.err == nil || e.err == io.EOF { // a read error may come from a panic, with no position
			in.pos = e.pos
			in.progressConsumed.Store(math.Float64bits(e.consumed))
		}
		switch {
		case e.bad != nil:
			if in.read < in.skip || e.pos <= in.skipBadThrough {
				in.skippedBad++ // the earlier run reported it
			} else if !in.mayWrite() {
				return nil, false
			} else {
				in.bad++
				in.onBad(e.bad)
			}
			in.handled.Store(int64(e.pos))
		case e.err != nil:
			if e.err == io.EOF {
				in.ended = true
			} else {
				in.err = e.err
			}
		default:
			in.note(in.read, e.pos)
			in.read++
			in.progressRead.Store(int64(in.read))
			return e.v, true
		}
	}
	return nil, false
}

// mayWrite reports whether the run may go on to send a record or write a
// letter: false once refuse, the refusal of a run that would, is set, which
// then goes to refusal.
func (in *input) mayWrite() bool {
	if in.refuse == nil {
		return true
	}
	in.refusal = in.refuse
	return false
}

// reportedThrough returns the line or row up to which every bad entry
// was handled: reported, with its letter written, or skipped as reported
// by an earlier run; 0 before the first. It is safe for concurrent use.
func (in *input) reportedThrough() int { return int(in.handled.Load()) }

// note records that record index is at pos.
func (in *input) note(index, pos int) {
	in.positionsMu.Lock()
	defer in.positionsMu.Unlock()
	if n := len(in.positions); n > 0 {
		last := in.positions[n-1]
		if last.pos+index-last.index == pos {
			return // where the numbering says
		}
	}
	in.positions = append(in.positions, position{index, pos})
}

// position returns the line or row of record index; 0 if unknown.
func (in *input) position(index int) int {
	in.positionsMu.Lock()
	defer in.positionsMu.Unlock()
	i := sort.Search(len(in.positions), func(i int) bool { return in.positions[i].index > index }) - 1
	if i < 0 {
		return 0
	}
	p := in.positions[i]
	return p.pos + index - p.index
}

// where names record index and its id: `line 12 (id "a")`.
func (in *input) where(index int, id string) string {
	return fmt.Sprintf("%s %d (id %q)", in.unit, in.position(index), id)
}

// maxNoticesShown bounds the bad lines and invalid records reported on
// stderr; the dead-letter file has them all.
const maxNoticesShown = 10

// noticeReporter returns a function that tells about a bad line or an
// invalid record on con, by its position and what is wrong, never its
// content. After maxNoticesShown of them it says once that the others only
// go to the dead-letter file, at deadLetter. It is a run's: a dry run
// writes no dead-letter file, and tells of every one (everyNotice).
func noticeReporter(con io.Writer, deadLetter string) func(msg string) {
	var mu sync.Mutex
	shown := 0
	return func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		shown++
		switch {
		case shown <= maxNoticesShown:
			fmt.Fprintf(con, "pcupsert: %s\n", msg)
		case shown == maxNoticesShown+1:
			fmt.Fprintf(con, "pcupsert: more bad lines and invalid records: see %s\n", deadLetter)
		}
	}
}

// everyNotice returns a function that tells about a bad line or an
// invalid record on con, as noticeReporter does, but about every one: it
// is a dry run's, which writes no dead-letter file, so that stderr is the
// only place that names them, and finding them is what it is run for.
func everyNotice(con io.Writer) func(msg string) {
	var mu sync.Mutex
	return func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(con, "pcupsert: %s\n", msg)
	}
}
