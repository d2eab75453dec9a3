// Package ndjson reads and writes records as newline-delimited JSON, one
// object per line, with the field names of Pinecone's bulk import:
//
//	{"id":"a","values":[0.1,0.2],"sparse_values":{"indices":[1,5],"values":[0.5,0.25]},"metadata":{"genre":"x"}}
//
// values, sparse_values and metadata are optional. A [Reader] also takes
// sparse values as "sparseValues", the REST API's spelling (a line with
// both is a bad line); records are always written with "sparse_values".
//
// The same format holds dead letters (see [DeadLetters]): a record that did
// not land, followed by what happened to it,
//
//	{"id":"a","values":[0.1,0.2],"class":"rate-limited","error":"…","attempts":3,"may_have_landed":true,"index":17}
//
// plus, last, the record's "namespace" when it was routed to one other
// than the default (see [DeadLetters.Write]).
//
// Since a [Reader] ignores the fields it does not know, a dead-letter file
// can be fed back in unchanged to replay the records.
package ndjson

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/protobuf/types/known/structpb"
)

// MaxLineBytes is the longest line a [Reader] accepts, in bytes, line
// ending excluded: 64 MiB. A longer line is a [LineError] wrapping
// [ErrLineTooLong].
const MaxLineBytes = 64 << 20

// The errors a [LineError] wraps, one per kind of bad line, for errors.Is.
var (
	// ErrSyntax: the line is not valid JSON.
	ErrSyntax = errors.New("invalid JSON")
	// ErrWrongType: a field has the wrong JSON type (a string for values, a
	// null among them, a negative sparse index, a number too large for a
	// float32), the line is not a JSON object, its metadata cannot be
	// represented, or it holds sparse values under both names.
	ErrWrongType = errors.New("wrong type")
	// ErrMissingID: the object has no id, or an empty or null one.
	ErrMissingID = errors.New("missing or empty id")
	// ErrLineTooLong: the line is longer than MaxLineBytes.
	ErrLineTooLong = errors.New("line longer than 64 MiB")
)

// A LineError reports a line that is not a valid record. Its message names
// the line, the record's id when the line has one, and what is wrong, but
// never the rest of the line's content, so it can be logged safely.
type LineError struct {
	// Line is the 1-based line number in the input.
	Line int
	// ID is the record's id if the line has a readable one, else "".
	ID string
	// Err wraps one of ErrSyntax, ErrWrongType, ErrMissingID and
	// ErrLineTooLong.
	Err error
}

// maxIDInError bounds how much of an id a LineError message shows.
const maxIDInError = 80

func (e *LineError) Error() string {
	if e.ID == "" {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	id := e.ID
	if len(id) > maxIDInError {
		id = id[:maxIDInError] + "…"
	}
	return fmt.Sprintf("line %d (id %q): %v", e.Line, id, e.Err)
}

// Unwrap returns e.Err.
func (e *LineError) Unwrap() error { return e.Err }

// A Reader reads records from NDJSON input, one object per line. Empty and
// blank lines are skipped (but counted in line numbers); lines may end in
// "\n" or "\r\n", and the last one needs no line ending. A UTF-8 byte
// order mark at the start of the input is skipped. A Reader is not safe
// for concurrent use.
type Reader struct {
	br   *bufio.Reader
	line int
	raw  []byte
	buf  []byte // holds a line that did not fit in br's buffer
}

// NewReader returns a Reader that reads from r, buffered.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the next record. At the end of the input it returns io.EOF.
// A line that is not a valid record (invalid JSON, a missing or empty id, a
// field of the wrong type, a line longer than MaxLineBytes) returns a
// [*LineError], and the next call goes on with the next line. An error
// reading the input is returned as is.
//
// Values decode into []float32 and metadata into a *structpb.Struct, its
// numbers as float64. Fields other than the record's are ignored.
func (r *Reader) Next() (*pinecone.Vector, error) {
	for {
		line, err := r.readLine()
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		v, id, err := decode(line)
		if err != nil {
			return nil, &LineError{Line: r.line, ID: id, Err: err}
		}
		return v, nil
	}
}

// Line returns the 1-based number of the line Next read last, or 0 before
// the first call.
func (r *Reader) Line() int { return r.line }

// Raw returns the bytes of the line Next read last, without its line
// ending (nor the byte order mark of the first line), so that a bad line
// can be kept as is (see [DeadLetters.WriteBad]). It is nil for a line
// longer than MaxLineBytes. The slice is valid only until the next call to
// Next.
func (r *Reader) Raw() []byte { return r.raw }

// readLine reads the next line, without its line ending, into r.raw.
func (r *Reader) readLine() ([]byte, error) {
	r.raw, r.buf = nil, r.buf[:0]
	n := 0 // bytes of the line read so far, line ending included
	for {
		chunk, err := r.br.ReadSlice('\n')
		n += len(chunk)
		switch {
		case n > MaxLineBytes+2: // room for "\r\n"
			r.raw, r.buf = nil, nil // skip the rest of the line
		case len(r.buf) == 0 && err != bufio.ErrBufferFull:
			r.raw = chunk // the whole line is in br's buffer: no copy
		default:
			r.buf = append(r.buf, chunk...)
			r.raw = r.buf
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && n == 0:
			return nil, io.EOF
		case err != nil && err != io.EOF:
			r.raw = nil
			return nil, err
		}
		r.line++
		r.raw = bytes.TrimSuffix(r.raw, []byte("\n"))
		r.raw = bytes.TrimSuffix(r.raw, []byte("\r"))
		if r.line == 1 {
			r.raw = bytes.TrimPrefix(r.raw, utf8BOM)
		}
		if n > MaxLineBytes+2 || len(r.raw) > MaxLineBytes {
			r.raw = nil
			return nil, &LineError{Line: r.line, Err: ErrLineTooLong}
		}
		return r.raw, nil
	}
}

// utf8BOM is the UTF-8 byte order mark, which Windows tools write at the
// start of a file.
var utf8BOM = []byte("\xEF\xBB\xBF")

// recordJSON is a record as the format spells it. Pointers tell an absent
// or null field from an empty one.
type recordJSON struct {
	ID           *string        `json:"id"`
	Values       *[]float32     `json:"values,omitempty"`
	SparseValues *sparseJSON    `json:"sparse_values,omitempty"`
	Metadata     map[string]any `json:"metadata,omitempty"`
	// SparseValuesREST is sparse_values as the REST API spells it; read,
	// never written.
	SparseValuesREST *sparseJSON `json:"sparseValues,omitempty"`
}

type sparseJSON struct {
	Indices []uint32  `json:"indices"`
	Values  []float32 `json:"values"`
}

// decode parses one line. It returns the id it could read, if any, even
// when the line is bad.
func decode(line []byte) (*pinecone.Vector, string, error) {
	var rec recordJSON
	err := json.Unmarshal(line, &rec)
	id := ""
	if rec.ID != nil {
		id = *rec.ID
	}
	if err != nil {
		return nil, id, describeJSONError(err)
	}
	if id == "" {
		return nil, "", ErrMissingID
	}
	if bytes.Contains(line, []byte("null")) {
		if err := findNull(line); err != nil {
			return nil, id, err
		}
	}
	sparse := rec.SparseValues
	if rec.SparseValuesREST != nil {
		if sparse != nil {
			return nil, id, fmt.Errorf(`%w: fields "sparse_values" and "sparseValues" both given; want one`, ErrWrongType)
		}
		sparse = rec.SparseValuesREST
	}
	v := &pinecone.Vector{Id: id, Values: rec.Values}
	if sparse != nil {
		v.SparseValues = &pinecone.SparseValues{Indices: sparse.Indices, Values: sparse.Values}
	}
	if rec.Metadata != nil {
		m, err := structpb.NewStruct(rec.Metadata)
		if err != nil {
			// structpb's message may quote a value: leave it out.
			return nil, id, fmt.Errorf("%w: metadata cannot be represented as a protobuf Struct", ErrWrongType)
		}
		v.Metadata = m
	}
	return v, id, nil
}

// numbersJSON is the numeric arrays of a record with an element type that
// can hold null: encoding/json decodes a null element of a []float32 as 0,
// without an error, and a vector exported with a missing value (a NaN
// written as null) would be upserted with a zero in its place.
type numbersJSON struct {
	Values           []*float32         `json:"values"`
	SparseValues     *sparseNumbersJSON `json:"sparse_values"`
	SparseValuesREST *sparseNumbersJSON `json:"sparseValues"`
}

type sparseNumbersJSON struct {
	Indices []*uint32  `json:"indices"`
	Values  []*float32 `json:"values"`
}

// findNull reports a null among the numbers of a line that decoded as a
// record. Only lines with "null" somewhere are decoded a second time.
func findNull(line []byte) error {
	var n numbersJSON
	if json.Unmarshal(line, &n) != nil {
		return nil // the line decoded as a record: nothing here can fail
	}
	if i := slices.Index(n.Values, nil); i >= 0 {
		return fmt.Errorf("%w: field \"values\": null at index %d, want float32", ErrWrongType, i)
	}
	if err := n.SparseValues.findNull("sparse_values"); err != nil {
		return err
	}
	return n.SparseValuesREST.findNull("sparseValues")
}

// findNull reports a null among sv's numbers, sv being the field named
// field; sv may be nil.
func (sv *sparseNumbersJSON) findNull(field string) error {
	if sv == nil {
		return nil
	}
	if i := slices.Index(sv.Indices, nil); i >= 0 {
		return fmt.Errorf("%w: field \"%s.indices\": null at index %d, want uint32", ErrWrongType, field, i)
	}
	if i := slices.Index(sv.Values, nil); i >= 0 {
		return fmt.Errorf("%w: field \"%s.values\": null at index %d, want float32", ErrWrongType, field, i)
	}
	return nil
}

// describeJSONError turns a decoding error into one that says where and
// what, but quotes nothing of the line: encoding/json's own messages can
// quote a character or a number of it.
func describeJSONError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("%w at byte %d", ErrSyntax, syn.Offset)
	case errors.As(err, &typ):
		got, _, _ := strings.Cut(typ.Value, " ") // "number 1e300" -> "number"
		if typ.Field == "" {
			return fmt.Errorf("%w: the line is a JSON %s, not an object", ErrWrongType, got)
		}
		want := kindName(typ.Type)
		if got == "number" && want != "string" && want != "object" && want != "array" {
			return fmt.Errorf("%w: field %q: a number not representable as %s", ErrWrongType, typ.Field, want)
		}
		return fmt.Errorf("%w: field %q: got JSON %s, want %s", ErrWrongType, typ.Field, got, want)
	default:
		return ErrSyntax
	}
}

func kindName(t reflect.Type) string {
	if t == nil {
		return "value"
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Pointer:
		return kindName(t.Elem())
	default:
		return t.Kind().String() // string, float32, uint32
	}
}
