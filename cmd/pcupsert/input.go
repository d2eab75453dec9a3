package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"golang.org/x/term"

	"github.com/upsertlib/upsert/ndjson"
)

// source reads the records of an input, one at a time.
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

// openInput opens the input: the file o.input, or stdin. It refuses the
// dead-letter file as input, by path or as stdin, since writing dead
// letters would truncate it while it is read. name names the input in
// messages.
func openInput(o options, stdin io.Reader, con io.Writer) (src source, name string, closeIn func(), err error) {
	format := formatOf(o)
	if o.input == "" || o.input == "-" {
		if format == formatParquet {
			return nil, "", nil, usagef("Parquet input must be a file, not stdin")
		}
		if f, ok := stdin.(*os.File); ok && same(f, o.deadLetter) {
			return nil, "", nil, usagef("stdin is the dead-letter file %s, which would be overwritten while it is read: pass another --dead-letter", o.deadLetter)
		}
		if isTerminal(stdin) {
			fmt.Fprintln(con, "pcupsert: reading records from the terminal, one JSON object per line; end with Ctrl-D")
		}
		return newNDJSONSource(stdin, -1), "stdin", func() {}, nil
	}
	f, err := os.Open(o.input)
	if err != nil {
		return nil, "", nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, "", nil, err
	}
	if same(f, o.deadLetter) {
		f.Close()
		return nil, "", nil, usagef("%s is the dead-letter file, which would be overwritten while it is read: pass another --dead-letter", o.input)
	}
	if format == formatParquet {
		src, err := newParquetSource(f, fi.Size())
		if err != nil {
			f.Close()
			return nil, "", nil, fmt.Errorf("reading %s: %w", o.input, err)
		}
		return src, o.input, func() { f.Close() }, nil
	}
	size := fi.Size()
	if !fi.Mode().IsRegular() {
		size = -1 // a pipe or a device: its size says nothing
	}
	return newNDJSONSource(f, size), o.input, func() { f.Close() }, nil
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
}

func newNDJSONSource(r io.Reader, size int64) *ndjsonSource {
	c := &countingReader{r: r}
	return &ndjsonSource{r: ndjson.NewReader(c), read: c, size: size}
}

func (s *ndjsonSource) next() (*pinecone.Vector, *badEntry, error) {
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
	v, err = ndjson.NewReader(bytes.NewReader(content)).Next()
	if errors.As(err, &le) {
		return nil, &badEntry{pos: line, raw: content, err: &ndjson.LineError{Line: line, ID: le.ID, Err: le.Err}, replayed: true}, nil
	}
	if err != nil { // io.EOF: the line was not kept, or was blank
		return nil, &badEntry{pos: line, raw: content, err: &ndjson.LineError{Line: line, Err: lostLineRule(line, msg)}, replayed: true}, nil
	}
	return v, nil, nil
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
type input struct {
	src   source
	unit  string // "line" or "row"
	skip  int    // records an earlier run settled (--checkpoint)
	onBad func(*badEntry)
	// onRead is told of each record read, before it is handed on.
	onRead func()

	read        int   // records read
	bad         int   // bad entries reported
	skippedBad  int   // bad entries in the part skipped
	err         error // a read error that stopped the input
	stopped     bool  // the run stopped taking records before the end of the input
	ended       bool  // the input was read to its end
	positionsMu sync.Mutex
	positions   []position // where the record numbering jumps

	// For the progress display, which runs on other goroutines: read,
	// and the share of the input read, as float64 bits.
	progressRead     atomic.Int64
	progressConsumed atomic.Uint64
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
// ends, or when its consumer stops (then in.stopped is set). It can be
// ranged over once, and drain reads what it left.
func (in *input) records(ctx context.Context) iter.Seq[*pinecone.Vector] {
	return func(yield func(*pinecone.Vector) bool) {
		for ctx.Err() == nil {
			v, ok := in.next()
			if !ok {
				return
			}
			if in.onRead != nil && in.read > in.skip {
				in.onRead() // the checkpoint's records are skipped, not waited on
			}
			if !yield(v) {
				in.stopped = true
				return
			}
		}
	}
}

// next returns the next record, dealing with bad entries on the way; false
// at the end of the input or on a read error.
func (in *input) next() (*pinecone.Vector, bool) {
	for {
		v, bad, err := in.src.next()
		in.progressConsumed.Store(math.Float64bits(in.src.consumed()))
		switch {
		case bad != nil:
			if in.read < in.skip {
				in.skippedBad++ // the earlier run reported it
				continue
			}
			in.bad++
			in.onBad(bad)
		case err != nil:
			if err == io.EOF {
				in.ended = true
			} else {
				in.err = err
			}
			return nil, false
		default:
			in.note(in.read, in.src.pos())
			in.read++
			in.progressRead.Store(int64(in.read))
			return v, true
		}
	}
}

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
// go to the dead-letter file.
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
