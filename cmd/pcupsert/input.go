package main

import (
	"context"
	"fmt"
	"io"
	"iter"
	"os"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"

	"github.com/upsertlib/upsert/ndjson"
)

// openInput opens the input: the file o.input, or stdin. It refuses the
// dead-letter file as input, since writing dead letters would truncate it
// while it is read. name names the input in messages.
func openInput(o options, stdin io.Reader, con io.Writer) (in io.Reader, name string, closeIn func(), err error) {
	if o.input == "" || o.input == "-" {
		if isTerminal(stdin) {
			fmt.Fprintln(con, "pcupsert: reading records from the terminal, one JSON object per line; end with Ctrl-D")
		}
		return stdin, "stdin", func() {}, nil
	}
	f, err := os.Open(o.input)
	if err != nil {
		return nil, "", nil, err
	}
	if same(f, o.deadLetter) {
		f.Close()
		return nil, "", nil, usagef("%s is the dead-letter file, which would be overwritten while it is read: pass another --dead-letter", o.input)
	}
	return f, o.input, func() { f.Close() }, nil
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

// input reads records, handing each bad line to a function, and counts.
type input struct {
	r     *ndjson.Reader
	onBad func(line int, raw []byte, err error)

	read    int   // records read
	bad     int   // bad lines
	err     error // a read error that stopped the input
	stopped bool  // the run stopped taking records before the end of the input
}

// newInput returns an input reading in, that calls onBad for each line that
// is not a record, with the line's bytes and a *ndjson.LineError.
func newInput(in io.Reader, onBad func(line int, raw []byte, err error)) *input {
	return &input{r: ndjson.NewReader(in), onBad: onBad}
}

// records returns the records of the input, in order. The sequence ends at
// the end of the input, on a read error (then in.err holds it), when ctx
// ends, or when its consumer stops (then in.stopped is set). It can be
// ranged over once.
func (in *input) records(ctx context.Context) iter.Seq[*pinecone.Vector] {
	return func(yield func(*pinecone.Vector) bool) {
		for ctx.Err() == nil {
			v, err := in.r.Next()
			switch err.(type) {
			case nil:
				in.read++
				if !yield(v) {
					in.stopped = true
					return
				}
			case *ndjson.LineError:
				in.bad++
				in.onBad(in.r.Line(), in.r.Raw(), err)
			default:
				if err != io.EOF {
					in.err = err
				}
				return
			}
		}
	}
}

// maxBadLinesShown bounds the bad lines reported on stderr; the dead-letter
// file has them all.
const maxBadLinesShown = 10

// badLineReporter returns a function that tells about a bad line on con,
// given its *ndjson.LineError: the line number and what is wrong, never the
// content. After maxBadLinesShown lines it says once that the others only
// go to the dead-letter file.
func badLineReporter(con io.Writer, deadLetter string) func(err error) {
	shown := 0
	return func(err error) {
		shown++
		switch {
		case shown <= maxBadLinesShown:
			fmt.Fprintf(con, "pcupsert: %v\n", err)
		case shown == maxBadLinesShown+1:
			fmt.Fprintf(con, "pcupsert: more bad lines: see %s\n", deadLetter)
		}
	}
}
