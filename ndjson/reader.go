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
// than the default (see [DeadLetters.Write]). Text that a JSON string
// cannot hold as it is (bytes that are not UTF-8) is never written
// altered: a record whose metadata holds such text is written with its id
// alone and "record_error", an id that is not UTF-8 as "id_base64" (its
// exact bytes, in base64) in place of "id", which a Reader then reports as
// missing ([ErrMissingID]), and a namespace as "namespace_base64". An
// input line that could not be read as a record has a letter of its own,
//
//	{"line":778,"raw":"<the line>","error":"line 778: invalid JSON at byte 61"}
//
// with, for a line that is not valid UTF-8, which a JSON string cannot
// hold, "raw_base64" (its exact bytes) and "raw_text" (for reading only)
// in place of "raw", and "raw_base64" alone for a letter that would be
// longer than MaxLineBytes (see [DeadLetters.WriteBad] and [BadLine]).
//
// Since a [Reader] ignores the fields it does not know, a dead-letter file
// can be fed back in unchanged to replay the records.
//
// A [DeadLetters] buffers its letters until [DeadLetters.Sync] or Close. A
// run resumable from a checkpoint cp (upsert.WithCheckpoint) is given
// dl.Checkpoint(cp) in its place ([DeadLetters.Checkpoint]): each save of
// cp then waits for the letters to be on disk, so that a crash loses none
// of the records the resumed run skips, and the file keeps only the
// failures for good, not the records that the resumed run sends again.
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
	"unicode/utf8"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// MaxLineBytes is the longest line a [Reader] accepts, in bytes, line
// ending excluded: 64 MiB. A longer line is a [LineError] wrapping
// [ErrLineTooLong], but for the dead letter of a bad line (see
// MaxBadLetterBytes).
const MaxLineBytes = 64 << 20

// MaxBadLetterBytes is the longest dead letter of a bad line
// ([DeadLetters.WriteBad]) that a [Reader] accepts, in bytes, line ending
// excluded: about 85.4 MiB, the base64 of a line of MaxLineBytes and room
// for the letter's other fields. The escapes of a line a Reader accepted
// can make its letter longer than MaxLineBytes, and it must read back: a
// longer line that begins with {"line": is read up to this length, and
// accepted when [BadLine] takes it for the letter of a line of at most
// MaxLineBytes; any other is a [LineError] wrapping [ErrLineTooLong].
const MaxBadLetterBytes = (MaxLineBytes+2)/3*4 + badLetterFields

// badLetterFields is the room left in MaxBadLetterBytes for the fields of
// the letter other than the line's base64: "line", "error" (at most
// maxLongLetterError bytes, 6 each once escaped) and the punctuation.
const badLetterFields = 32 << 10

// badLetterLimit is MaxBadLetterBytes for lines of at most maxLine bytes.
func badLetterLimit(maxLine int) int { return (maxLine+2)/3*4 + badLetterFields }

// The errors a [LineError] wraps, one per kind of bad line, for errors.Is.
var (
	// ErrSyntax: the line is not valid JSON.
	ErrSyntax = errors.New("invalid JSON")
	// ErrWrongType: a field has the wrong JSON type (a string for values, a
	// null among them, a negative sparse index, a number too large for a
	// float32), the line is not a JSON object (null included), its metadata
	// cannot be represented, it holds a string that is not valid Unicode
	// (a byte that is not UTF-8, or a \u escape of a lone UTF-16
	// surrogate), or it gives one of the record's fields twice (or
	// "indices" or "values" twice in its sparse values) or sparse values
	// under both names.
	ErrWrongType = errors.New("wrong type")
	// ErrMissingID: the object has no id, or an empty or null one.
	ErrMissingID = errors.New("missing or empty id")
	// ErrLineTooLong: the line is longer than MaxLineBytes, and is not
	// the dead letter of a bad line (see MaxBadLetterBytes).
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
		cut := maxIDInError
		for cut > 0 && !utf8.RuneStart(id[cut]) {
			cut-- // not within a character
		}
		id = id[:cut] + "…"
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
//
// A Reader holds one line at a time: at most MaxLineBytes, or
// MaxBadLetterBytes for the dead letter of a bad line, which it decodes
// to check it ([BadLine]). Reading a line that long allocates a few times
// its size, for a moment.
type Reader struct {
	br      *bufio.Reader
	line    int
	raw     []byte
	buf     []byte // holds a line that did not fit in br's buffer
	maxLine int    // MaxLineBytes; a test lowers it (export_test.go)
}

// NewReader returns a Reader that reads from r, buffered.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), maxLine: MaxLineBytes}
}

// Next returns the next record. At the end of the input it returns io.EOF.
// A line that is not a valid record (invalid JSON, a missing or empty id, a
// field of the wrong type, a line longer than MaxLineBytes) returns a
// [*LineError], and the next call goes on with the next line. An error
// reading the input is returned as is.
//
// Values decode into []float32 and metadata into a *structpb.Struct, its
// numbers as float64. The record's fields are matched by their exact names
// (a field "ID" is not the id); fields other than the record's are ignored.
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
// longer than MaxLineBytes, but the dead letter of a bad line (see
// MaxBadLetterBytes). The slice is valid only until the next call to
// Next.
func (r *Reader) Raw() []byte { return r.raw }

// readLine reads the next line, without its line ending, into r.raw.
func (r *Reader) readLine() ([]byte, error) {
	r.raw, r.buf = nil, r.buf[:0]
	n := 0    // bytes of the line read so far, line ending included
	room := 2 // for "\r\n"
	if r.line == 0 {
		room += len(utf8BOM) // not part of the line (Raw)
	}
	most, mostLetter := r.maxLine+room, badLetterLimit(r.maxLine)+room
	skip := false // the line is too long: its bytes are dropped
	for {
		chunk, err := r.br.ReadSlice('\n')
		n += len(chunk)
		if !skip && n > most {
			start := r.buf
			if len(start) == 0 {
				start = chunk
			}
			skip = n > mostLetter || !mayBeBadLetter(start, r.line == 0)
		}
		switch {
		case skip:
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
		if skip || (len(r.raw) > r.maxLine && !r.isBadLetter(r.raw)) {
			r.raw = nil
			return nil, &LineError{Line: r.line, Err: ErrLineTooLong}
		}
		return r.raw, nil
	}
}

// mayBeBadLetter reports whether start, the start of a line (the first
// of the input when first), is that of the dead letter of a bad line, as
// WriteBad writes it and BadLine reads it: {"line": after spaces, and the
// byte order mark of the input.
func mayBeBadLetter(start []byte, first bool) bool {
	if first {
		start = bytes.TrimPrefix(start, utf8BOM)
	}
	return bytes.HasPrefix(bytes.TrimLeft(start, " \t\r\n"), []byte(`{"line":`))
}

// isBadLetter reports whether raw, a line longer than r.maxLine, is a
// dead letter of a bad line that a Reader accepts: one that BadLine reads,
// at most badLetterLimit long, of a line of at most r.maxLine bytes, which
// a Reader accepted. Another letter, one edited by hand to hold a longer
// line for example, would give a line that does not read back.
func (r *Reader) isBadLetter(raw []byte) bool {
	if len(raw) > badLetterLimit(r.maxLine) || !mayBeBadLetter(raw, false) {
		return false
	}
	_, content, _, ok := BadLine(raw)
	return ok && len(content) <= r.maxLine
}

// utf8BOM is the UTF-8 byte order mark, which Windows tools write at the
// start of a file.
var utf8BOM = []byte("\xEF\xBB\xBF")

// The record's fields, in the order decode reads them, and their names in
// the format. The names are matched exactly: encoding/json would also take
// "ID" or "Values" for them, and a field of the line's own spelled so would
// replace the record's.
const (
	fieldID = iota
	fieldValues
	fieldSparse
	fieldSparseREST // sparse_values as the REST API spells it; read, never written
	fieldMetadata
	numFields
)

var fieldNames = [numFields]string{"id", "values", "sparse_values", "sparseValues", "metadata"}

// fieldOf returns the record field named key, a member name as the line
// spells it (quotes included), or -1 for a field that is not the record's;
// ok is false for a key that is not a valid JSON string.
func fieldOf(key []byte) (field int, ok bool) {
	name, ok := keyName(key)
	if !ok {
		return 0, false
	}
	switch string(name) {
	case "id":
		return fieldID, true
	case "values":
		return fieldValues, true
	case "sparse_values":
		return fieldSparse, true
	case "sparseValues":
		return fieldSparseREST, true
	case "metadata":
		return fieldMetadata, true
	}
	return -1, true
}

// keyName returns the name that key, a member name as the line spells it
// (quotes included), stands for, its escapes decoded; ok is false for a
// key that is not a valid JSON string.
func keyName(key []byte) (name []byte, ok bool) {
	name = key[1 : len(key)-1]
	if bytes.IndexByte(name, '\\') >= 0 || hasControl(name) {
		var s string // escapes, or control characters that make it invalid
		if json.Unmarshal(key, &s) != nil {
			return nil, false
		}
		name = []byte(s)
	}
	return name, true
}

// isPlainString reports whether b is a JSON string without escapes.
func isPlainString(b []byte) bool {
	return len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' &&
		bytes.IndexByte(b[1:len(b)-1], '\\') < 0 && bytes.IndexByte(b[1:len(b)-1], '"') < 0 && !hasControl(b)
}

func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

type sparseJSON struct {
	Indices []uint32  `json:"indices"`
	Values  []float32 `json:"values"`
}

// decode parses one line. It returns the id it could read, if any, even
// when the line is bad.
//
// The line is split into its members without decoding them (scanObject),
// each of the record's fields is then decoded from its own bytes, and the
// others are only checked to be valid JSON: the line is scanned about as
// often as by a single json.Unmarshal.
func decode(line []byte) (*pinecone.Vector, string, error) {
	if i := skipSpace(line, 0); i < len(line) && line[i] != '{' {
		return nil, "", notAnObject(line)
	}
	raw, dup, ok := splitFields(line)
	if !ok {
		return nil, "", syntaxError(line)
	}
	rec := new(recordJSON) // one allocation for all the fields
	typeErr, ok := rec.decodeFields(&raw)
	if !ok {
		return nil, "", syntaxError(line)
	}
	idStr := ""
	if rec.id != nil && dup != fieldID {
		idStr = *rec.id
	}
	if !validUnicode(line) {
		id, err := unicodeError(line, idStr)
		return nil, id, err
	}
	if dup >= 0 {
		return nil, idStr, fmt.Errorf("%w: field %q given twice; want it once", ErrWrongType, fieldNames[dup])
	}
	if err := sparseGivenTwice(&raw); err != nil {
		return nil, idStr, err
	}
	if typeErr != nil {
		return nil, idStr, typeErr
	}
	if idStr == "" {
		return nil, "", ErrMissingID
	}
	if err := rec.findNulls(&raw); err != nil {
		return nil, idStr, err
	}
	v, err := rec.vector(idStr)
	return v, idStr, err
}

// splitFields returns each record field's value as line spells it, and the
// first record field given twice (-1 if none); ok is false when line is not
// a valid JSON object.
func splitFields(line []byte) (raw [numFields][]byte, dup int, ok bool) {
	dup = -1
	ok = scanObject(line, func(key, value []byte) bool {
		f, ok := fieldOf(key)
		switch {
		case !ok:
			return false
		case f < 0:
			return json.Valid(value)
		case raw[f] != nil:
			if dup < 0 {
				dup = f
			}
			return json.Valid(value)
		}
		raw[f] = value
		return true
	})
	return raw, dup, ok
}

// recordJSON is a record's fields as decoded from a line.
type recordJSON struct {
	id                 *string
	values             *[]float32
	sparse, sparseREST *sparseJSON
	metadata           map[string]any
}

// decodeFields decodes the fields of raw into rec. It returns the first
// field's wrong type, if any; ok is false when a field is not valid JSON.
func (rec *recordJSON) decodeFields(raw *[numFields][]byte) (typeErr error, ok bool) {
	ok = true
	for f, dst := range [numFields]any{&rec.id, &rec.values, &rec.sparse, &rec.sparseREST, &rec.metadata} {
		if raw[f] == nil {
			continue
		}
		if f == fieldID && isPlainString(raw[f]) {
			s := string(raw[f][1 : len(raw[f])-1])
			rec.id = &s
			continue
		}
		err := json.Unmarshal(raw[f], dst)
		var typ *json.UnmarshalTypeError
		switch {
		case err == nil:
		case errors.As(err, &typ):
			if typeErr == nil {
				typeErr = describeJSONError(err, fieldNames[f])
			}
		default:
			ok = false
		}
	}
	return typeErr, ok
}

// findNulls reports a null among the numbers of rec, decoded from raw:
// encoding/json decodes it as 0, without an error.
func (rec *recordJSON) findNulls(raw *[numFields][]byte) error {
	// Having decoded, values hold only numbers and nulls, and only a null
	// has an "n".
	if i := bytes.IndexByte(raw[fieldValues], 'n'); rec.values != nil && i >= 0 {
		return fmt.Errorf("%w: field \"values\": null at index %d, want float32", ErrWrongType, bytes.Count(raw[fieldValues][:i], []byte(",")))
	}
	if err := findNull(raw[fieldSparse], "sparse_values"); err != nil {
		return err
	}
	return findNull(raw[fieldSparseREST], "sparseValues")
}

// vector returns the record rec holds, with id.
func (rec *recordJSON) vector(id string) (*pinecone.Vector, error) {
	sparse := rec.sparse
	if rec.sparseREST != nil {
		if sparse != nil {
			return nil, fmt.Errorf(`%w: fields "sparse_values" and "sparseValues" both given; want one`, ErrWrongType)
		}
		sparse = rec.sparseREST
	}
	v := &pinecone.Vector{Id: id, Values: rec.values}
	if sparse != nil {
		v.SparseValues = &pinecone.SparseValues{Indices: sparse.Indices, Values: sparse.Values}
	}
	m, err := metadataStruct(rec.metadata)
	if err != nil {
		return nil, err
	}
	v.Metadata = m
	return v, nil
}

// notAnObject returns the error for a line that does not start with "{".
func notAnObject(line []byte) error {
	err := json.Unmarshal(line, new(struct{}))
	if err == nil { // null is the one value besides an object a struct takes
		return fmt.Errorf("%w: the line is a JSON null, not an object", ErrWrongType)
	}
	return describeJSONError(err, "")
}

// syntaxError returns the error for a line that is not valid JSON, with
// the offset encoding/json gives.
func syntaxError(line []byte) error {
	var syn *json.SyntaxError
	if err := json.Unmarshal(line, new(struct{})); errors.As(err, &syn) {
		return describeJSONError(err, "")
	}
	return ErrSyntax
}

// skipSpace returns the index of the first byte of data at or after i that
// is not JSON whitespace, or len(data).
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanObject calls fn with each member of the JSON object that data holds,
// in order: its key, quotes included, and its value, each as data spells
// them. It checks the structure of the object itself, not its keys nor its
// values, which fn must check. It returns false at the first fault in that
// structure, or when fn does.
func scanObject(data []byte, fn func(key, value []byte) bool) bool {
	i := skipSpace(data, 0)
	if i == len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return skipSpace(data, i+1) == len(data)
	}
	for {
		if i == len(data) || data[i] != '"' {
			return false
		}
		end := endOfString(data, i)
		if end < 0 {
			return false
		}
		key := data[i:end]
		i = skipSpace(data, end)
		if i == len(data) || data[i] != ':' {
			return false
		}
		i = skipSpace(data, i+1)
		end = endOfValue(data, i)
		if end <= i || !fn(key, data[i:end]) {
			return false
		}
		i = skipSpace(data, end)
		if i == len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return skipSpace(data, i+1) == len(data)
		default:
			return false
		}
	}
}

// endOfString returns the index just past the string that starts with the
// quote at data[i], or -1 if it does not end.
func endOfString(data []byte, i int) int {
	for j := i + 1; ; {
		k := bytes.IndexByte(data[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		n := 0 // the backslashes before the quote
		for n < j-i-1 && data[j-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
}

// endOfValue returns the index just past the JSON value that starts at
// data[i], or -1, provided the value is valid: it does not check that.
func endOfValue(data []byte, i int) int {
	if i == len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		return endOfString(data, i)
	case '[', '{':
		if data[i] == '[' { // an array of numbers, as values are: no nesting
			if k := bytes.IndexByte(data[i:], ']'); k >= 0 {
				in := data[i+1 : i+k]
				if bytes.IndexByte(in, '"') < 0 && bytes.IndexByte(in, '[') < 0 && bytes.IndexByte(in, '{') < 0 {
					return i + k + 1
				}
			}
		}
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				end := endOfString(data, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '[', '{':
				depth++
			case ']', '}':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default: // a number, true, false or null
		j := i
		for j < len(data) {
			switch data[j] {
			case ' ', '\t', '\n', '\r', ',', '}', ']':
				return j
			}
			j++
		}
		return j
	}
}

// validUnicode reports whether b, valid JSON, is valid UTF-8 and has no
// \u escape of a lone UTF-16 surrogate: encoding/json decodes either into
// U+FFFD without an error.
func validUnicode(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for {
		i := bytes.IndexByte(b, '\\')
		if i < 0 || i+6 > len(b) {
			return true
		}
		b = b[i:]
		if b[1] != 'u' {
			b = b[2:] // \\ included
			continue
		}
		r := hex4(b[2:6])
		switch {
		case r >= 0xD800 && r < 0xDC00: // a high surrogate: a low one must follow
			if len(b) < 12 || b[6] != '\\' || b[7] != 'u' {
				return false
			}
			if r2 := hex4(b[8:12]); r2 < 0xDC00 || r2 >= 0xE000 {
				return false
			}
			b = b[12:]
		case r >= 0xDC00 && r < 0xE000:
			return false
		default:
			b = b[6:]
		}
	}
}

// hex4 returns the value of four hexadecimal digits, or -1.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// notUnicode is how a message names a string that is not valid Unicode.
const notUnicode = "a string that is not valid Unicode (a byte that is not UTF-8, or an unpaired UTF-16 surrogate escape)"

// unicodeError returns the error for a line, valid JSON, that is not valid
// Unicode (see validUnicode), naming the first field at fault, and the id
// unless that is where the fault is.
func unicodeError(line []byte, id string) (string, error) {
	name := ""
	scanObject(line, func(key, value []byte) bool {
		if validUnicode(key) && validUnicode(value) {
			return true
		}
		if f, _ := fieldOf(key); f >= 0 {
			name = fieldNames[f]
		}
		return false
	})
	switch name {
	case "":
		return id, fmt.Errorf("%w: a field other than the record's holds %s", ErrWrongType, notUnicode)
	case "id":
		return "", fmt.Errorf("%w: field \"id\" is %s", ErrWrongType, notUnicode)
	default:
		return id, fmt.Errorf("%w: field %q holds %s", ErrWrongType, name, notUnicode)
	}
}

// sparseMembers are the members of sparse values, as sparseJSON names them.
var sparseMembers = [...]string{"indices", "values"}

// sparseGivenTwice returns the error for sparse values, of a line whose
// fields are raw, that give one of their members twice, or nil.
func sparseGivenTwice(raw *[numFields][]byte) error {
	for _, f := range [...]int{fieldSparse, fieldSparseREST} {
		if member := sparseDup(raw[f]); member != "" {
			return fmt.Errorf("%w: field \"%s.%s\" given twice; want it once", ErrWrongType, fieldNames[f], member)
		}
	}
	return nil
}

// sparseDup returns the member of raw, sparse values as the line spells
// them (nil if absent), that it gives twice, or "". Two keys are the same
// member when encoding/json, which decodes raw and keeps the last one,
// takes them for the same field: when they are equal but for case
// (bytes.EqualFold).
func sparseDup(raw []byte) string {
	var seen [len(sparseMembers)]bool
	dup := ""
	scanObject(raw, func(key, _ []byte) bool {
		name, ok := keyName(key)
		if !ok {
			return false
		}
		for i, m := range sparseMembers {
			if !bytes.EqualFold(name, []byte(m)) {
				continue
			}
			if seen[i] {
				dup = m
				return false
			}
			seen[i] = true
		}
		return true
	})
	return dup
}

// sparseNumbersJSON is sparseJSON with an element type that can hold null:
// encoding/json decodes a null element of a []float32 as 0, without an
// error, and a vector exported with a missing value (a NaN written as null)
// would be upserted with a zero in its place.
type sparseNumbersJSON struct {
	Indices []*uint32  `json:"indices"`
	Values  []*float32 `json:"values"`
}

// findNull reports a null among the numbers of raw, the sparse values of a
// line that decoded as a record, given as field. Only an object with a
// null in it is decoded a second time.
func findNull(raw []byte, field string) error {
	if !hasNull(raw) {
		return nil
	}
	var sv sparseNumbersJSON
	if json.Unmarshal(raw, &sv) != nil {
		return nil // raw decoded as sparse values: nothing here can fail
	}
	if i := slices.Index(sv.Indices, nil); i >= 0 {
		return fmt.Errorf("%w: field \"%s.indices\": null at index %d, want uint32", ErrWrongType, field, i)
	}
	if i := slices.Index(sv.Values, nil); i >= 0 {
		return fmt.Errorf("%w: field \"%s.values\": null at index %d, want float32", ErrWrongType, field, i)
	}
	return nil
}

// hasNull reports whether data, valid JSON, holds a null other than data
// itself: an "n" outside strings.
func hasNull(data []byte) bool {
	if string(data) == "null" {
		return false
	}
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			if i = endOfString(data, i) - 1; i < 0 {
				return false
			}
		case 'n':
			return true
		}
	}
	return false
}

// describeJSONError turns a decoding error into one that says where and
// what, but quotes nothing of the line: encoding/json's own messages can
// quote a character or a number of it.
func describeJSONError(err error, field string) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("%w at byte %d", ErrSyntax, syn.Offset)
	case errors.As(err, &typ):
		switch {
		case field == "":
		case typ.Field == "":
			typ.Field = field
		default:
			typ.Field = field + "." + typ.Field
		}
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
