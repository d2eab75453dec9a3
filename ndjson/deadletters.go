package ndjson

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/internal/dirsync"
	"github.com/upsertlib/upsert/internal/jsontext"
)

// DeadLetters is a dead-letter file: one line per record that did not land
// (or that landed but may be stale: [DeadLetters.WriteStale]), holding the
// record itself (values, sparse values and metadata, so that it can be
// replayed) and what happened to it, and one line per input line that
// could not be read. A [Reader] reads the records back; see the package
// documentation for the format.
//
// Create one with [CreateDeadLetters] (or [AppendDeadLetters]); the zero
// value is not usable. Its methods are safe for concurrent use. Writes are
// buffered: a letter may wait in a 256 KiB buffer, which a process killed
// loses, and is sure to be in the file, on disk, only once a
// [DeadLetters.Sync] or [DeadLetters.Close] called after it has returned
// nil. A run resumed from a checkpoint skips the records the checkpoint
// passed, letters lost or not: give such a run [DeadLetters.Checkpoint],
// which syncs the letters before every save of the checkpoint.
type DeadLetters struct {
	path string
	// regular reports that f is a regular file. A device or a pipe
	// (/dev/null, /dev/stdout) is not synced: Linux answers EINVAL, and a
	// letter written to one is delivered already.
	regular bool
	// resumable is set by Checkpoint: Write then skips the failures that
	// the resumed run sends again.
	resumable atomic.Bool
	// maxLine is MaxLineBytes, the longest line a letter of WriteBad
	// holds as "raw"; a test lowers it (export_test.go).
	maxLine int

	// syncMu is held by Sync and Close, and taken before mu: Sync syncs
	// the file without holding mu, so that Write does not wait for the
	// disk, and Close cannot close the file under it.
	syncMu    sync.Mutex
	dirSynced bool // under syncMu: Sync has synced the file's directory

	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	n      int
	err    error // the first error, for Sync and Close; after an I/O error, w takes no more letters
	closed bool
}

// CreateDeadLetters creates the dead-letter file at path, or truncates it
// if it exists, readable and writable by its owner only (mode 0600), since
// the letters hold the records: the mode is also applied to an existing
// regular file, whose mode may be wider. A path that names a device or a
// named pipe (/dev/null, /dev/stdout) is written to as it is: its mode is
// left untouched, and [DeadLetters.Sync] has nothing to sync there. It
// returns the error of os.OpenFile, Stat or Chmod, having closed the file.
func CreateDeadLetters(path string) (*DeadLetters, error) {
	return openDeadLetters(path, os.O_WRONLY|os.O_TRUNC)
}

// AppendDeadLetters opens the dead-letter file at path to add letters
// after those it holds, creating it if it does not exist, as
// [CreateDeadLetters] does otherwise: for a run that resumes an
// interrupted one, whose letters the file keeps. A regular file whose
// last line has no "\n" (a run killed while writing, a file edited by
// hand) gets one first, which is not counted as a letter.
//
// The file is opened for writing only, as by CreateDeadLetters: on a
// named pipe whose reader goes away, writes fail (EPIPE), and the error is
// kept for Sync and Close, rather than block for ever. Its last byte is
// read through a second, read-only descriptor, for a regular file only.
func AppendDeadLetters(path string) (*DeadLetters, error) {
	d, err := openDeadLetters(path, os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return nil, err
	}
	if err := d.endLastLine(); err != nil {
		d.f.Close()
		return nil, err
	}
	return d, nil
}

func openDeadLetters(path string, mode int) (*DeadLetters, error) {
	f, err := os.OpenFile(path, os.O_CREATE|mode, 0o600)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && fi.Mode().IsRegular() {
		err = f.Chmod(0o600)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &DeadLetters{path: path, f: f, regular: fi.Mode().IsRegular(), w: bufio.NewWriterSize(f, 256<<10), maxLine: MaxLineBytes}, nil
}

// endLastLine writes a "\n" to the file if it is a regular file whose last
// byte is not one: the first letter appended would otherwise be glued to
// its last line, and neither would read back.
func (d *DeadLetters) endLastLine() error {
	if !d.regular {
		return nil
	}
	last, err := lastByte(d.f, d.path)
	if err != nil || last == -1 || last == '\n' {
		return err
	}
	_, err = d.f.Write([]byte("\n"))
	return err
}

// lastByte returns the last byte of f, a regular file opened for writing
// only from path, or -1 when it is empty. It reads it through a read-only
// descriptor of its own, and fails if path no longer names f.
func lastByte(f *os.File, path string) (int, error) {
	r, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	wi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	ri, err := r.Stat()
	if err != nil {
		return 0, err
	}
	if !os.SameFile(wi, ri) {
		return 0, fmt.Errorf("ndjson: %s was replaced while it was opened", path)
	}
	if ri.Size() == 0 {
		return -1, nil
	}
	b := make([]byte, 1)
	if _, err := r.ReadAt(b, ri.Size()-1); err != nil {
		return 0, err
	}
	return int(b[0]), nil
}

// letterOut is a dead letter of a record: the record's fields, then the
// failure's.
type letterOut struct {
	// recordOut is the record, or its id alone (idOnly); nil when the id
	// is not valid UTF-8, which IDBase64 then holds.
	*recordOut
	IDBase64      string `json:"id_base64,omitempty"`
	Class         string `json:"class"`
	Error         string `json:"error"`
	Attempts      int    `json:"attempts"`
	MayHaveLanded bool   `json:"may_have_landed"`
	Index         int    `json:"index"`
	// RecordError says why the record's values and metadata are missing:
	// JSON cannot hold them as they are (see Encode).
	RecordError string `json:"record_error,omitempty"`
	namespaceOut
}

// integratedLetter is a dead letter of an integrated record (upsert.Records).
type integratedLetter struct {
	Record pinecone.IntegratedRecord `json:"integrated_record"`
	// IDBase64 holds the id when the record holds nothing (integratedIDOnly).
	IDBase64      string `json:"id_base64,omitempty"`
	Class         string `json:"class"`
	Error         string `json:"error"`
	Attempts      int    `json:"attempts"`
	MayHaveLanded bool   `json:"may_have_landed"`
	Index         int    `json:"index"`
	// RecordError says why the record holds its id alone: JSON cannot
	// hold its fields as they are.
	RecordError string `json:"record_error,omitempty"`
	namespaceOut
}

// nilRecordLetter is the dead letter of a failure without a record.
type nilRecordLetter struct {
	Index int    `json:"index"`
	Error string `json:"error"`
	namespaceOut
}

// namespaceOut is the namespace of a letter, last (see letterNamespace).
type namespaceOut struct {
	Namespace       string `json:"namespace,omitempty"`
	NamespaceBase64 string `json:"namespace_base64,omitempty"`
}

// Write writes the dead letter of f: its record's fields, then "class",
// "error" (f.Err's message), "attempts", "may_have_landed" and "index" (the
// record's position in the input). A failure with a nil Record is written
// as {"index":N,"error":"…"} alone. A record that JSON cannot hold as it
// is (as for [Encode]: a NaN or infinite value or metadata number, an id
// or metadata that is not valid UTF-8) is written with its id and the
// failure only, plus "record_error" saying why.
//
// An id that is not valid UTF-8, which a JSON string cannot hold as it is
// (encoding/json writes U+FFFD for each byte that is not UTF-8), is not
// written as "id": the letter holds "id_base64" in its place, the id's
// exact bytes (standard base64, with padding), as [DeadLetters.WriteBad]
// keeps a line in "raw_base64". A [Reader] reads such a letter as a line
// without an id ([ErrMissingID]), rather than as a record of an id the
// input never had.
//
// Every letter ends with "namespace", f.Namespace (the record's namespace,
// as routed: upsert.WithNamespaceOf's answer, or the index connection's),
// when it is not "": a program that replays the letters of a run over
// several namespaces reads it to send each record back where it belongs.
// It is absent for the default namespace, whether named "" or
// "__default__" (Pinecone's other name for it), and for a record that the
// run failed before it looked at it (see upsert.Failure.Namespace). A
// namespace that is not valid UTF-8 is written as "namespace_base64", its
// exact bytes, in place of "namespace", for the same reason as the id. A
// [Reader] ignores both, as it does every field that is not the record's:
// replaying the file through a Reader alone sends every record to the one
// namespace of the replay.
//
// The failure of an integrated record (upsert.Records) is written as
// {"integrated_record":{…},"class":…,"error":…,"attempts":…,
// "may_have_landed":…,"index":…}, the record's fields as given, then
// "namespace" as above; a Reader does not read it back (it reports a line
// without an id). One that JSON cannot hold as it is (a NaN, a value it
// cannot encode, a key or text that is not valid UTF-8, a json.RawMessage
// that is not UTF-8) is written with {"integrated_record":{"_id":<f.ID>}}
// and "record_error", as a record is; with "integrated_record":{} and
// "id_base64" when f.ID is not valid UTF-8.
//
// Write has the signature of upsert.Observer.Failure:
//
//	upsert.WithObserver(upsert.Observer{Failure: dl.Write})
//
// Once [DeadLetters.Checkpoint] has been called, Write skips a failure
// with Resend set: it writes no letter and counts nothing, since the run
// resumed from that checkpoint sends the record again. Before, and
// without a checkpoint, it writes every failure: nothing else sends the
// record again.
//
// It encodes before taking the lock and only copies into a buffer under it,
// so it never blocks for long. An error writing or syncing the file is
// kept and returned by Sync and Close. After an error writing (or
// flushing) the file, and after Close, letters are dropped and not
// counted; after a failed sync they are still buffered and counted, but
// Sync and Close keep failing.
func (d *DeadLetters) Write(f upsert.Failure) {
	if f.Resend && d.resumable.Load() {
		return
	}
	msg := f.Class.String()
	if f.Err != nil {
		msg = f.Err.Error()
	}
	var line []byte
	var err error
	switch {
	case f.Record == nil && f.Integrated != nil:
		line, err = marshalIntegratedLetter(f, msg)
	case f.Record == nil:
		line, err = marshalLine(nilRecordLetter{Index: f.Index, Error: msg, namespaceOut: letterNamespace(f.Namespace)})
	default:
		line, err = marshalRecordLetter(f, msg)
	}
	if err != nil { // cannot happen: the fallbacks hold only strings and numbers
		d.fail(fmt.Errorf("ndjson: encoding the dead letter of record %d: %w", f.Index, err))
		return
	}
	d.write(line)
}

// defaultNamespace is Pinecone's other name of the default namespace, ""
// (go-pinecone v5 sends it for "").
const defaultNamespace = "__default__"

// letterNamespace is the namespace of a letter of a record of namespace ns:
// none for the default namespace, whichever name it was given;
// "namespace_base64", ns's exact bytes, for a namespace that is not valid
// UTF-8, which a JSON string cannot hold as it is; "namespace" otherwise.
func letterNamespace(ns string) namespaceOut {
	switch {
	case ns == defaultNamespace:
		return namespaceOut{}
	case !utf8.ValidString(ns):
		return namespaceOut{NamespaceBase64: base64.StdEncoding.EncodeToString([]byte(ns))}
	}
	return namespaceOut{Namespace: ns}
}

// idOnly returns the record part of a letter that holds the record's id
// alone: {"id":id}; or, for an id that is not valid UTF-8, which a JSON
// string cannot hold as it is, no "id" (a nil *recordOut) and the id's
// exact bytes, for "id_base64". A [Reader] then reads the letter as a line
// without an id, rather than as a record of an id the input never had.
func idOnly(id string) (*recordOut, string) {
	if !utf8.ValidString(id) {
		return nil, base64.StdEncoding.EncodeToString([]byte(id))
	}
	return &recordOut{ID: id}, ""
}

// integratedIDOnly is idOnly for an integrated record: {"_id":id}, or {}
// and the id's bytes for "id_base64".
func integratedIDOnly(id string) (pinecone.IntegratedRecord, string) {
	if !utf8.ValidString(id) {
		return pinecone.IntegratedRecord{}, base64.StdEncoding.EncodeToString([]byte(id))
	}
	return pinecone.IntegratedRecord{"_id": id}, ""
}

// marshalRecordLetter encodes the letter of f, a failure of a record, with
// error msg; with the record's id alone (idOnly) and "record_error" when
// JSON cannot hold the record as it is.
func marshalRecordLetter(f upsert.Failure, msg string) ([]byte, error) {
	l := letterOut{Class: f.Class.String(), Error: msg, Attempts: f.Attempts, MayHaveLanded: f.MayHaveLanded, Index: f.Index, namespaceOut: letterNamespace(f.Namespace)}
	out, err := newRecordOut(f.Record)
	if err == nil {
		l.recordOut = &out
		var line []byte
		if line, err = marshalLine(l); err == nil {
			return line, nil
		}
	}
	l.recordOut, l.IDBase64 = idOnly(f.Record.Id)
	l.RecordError = err.Error()
	return marshalLine(l)
}

// marshalIntegratedLetter is marshalRecordLetter for the failure of an
// integrated record: with {"_id":f.ID} alone (integratedIDOnly) when JSON
// cannot hold it as it is.
func marshalIntegratedLetter(f upsert.Failure, msg string) ([]byte, error) {
	l := integratedLetter{Record: *f.Integrated, Class: f.Class.String(), Error: msg, Attempts: f.Attempts, MayHaveLanded: f.MayHaveLanded, Index: f.Index, namespaceOut: letterNamespace(f.Namespace)}
	line, err := marshalIntegrated(l, *f.Integrated)
	if err == nil {
		return line, nil
	}
	l.Record, l.IDBase64 = integratedIDOnly(f.ID)
	l.RecordError = err.Error()
	return marshalLine(l)
}

// marshalIntegrated encodes l, a letter that holds the integrated record
// r. It fails when JSON cannot hold r as it is: json.Marshal's error (a
// NaN, a type it cannot encode), or text of r that is not valid UTF-8,
// which encoding/json would write altered, without an error (jsontext.Check).
func marshalIntegrated(l any, r pinecone.IntegratedRecord) ([]byte, error) {
	line, err := marshalLine(l)
	if err == nil {
		err = jsontext.Check(r, line)
	}
	if err != nil {
		return nil, err
	}
	return line, nil
}

// StaleClass is the "class" of the dead letter of a record that may be
// stale, as [DeadLetters.WriteStale] writes it.
const StaleClass = "may-be-stale"

// staleLetter is the dead letter of a record that may be stale.
type staleLetter struct {
	// recordOut and IDBase64 are as in letterOut.
	*recordOut
	IDBase64 string `json:"id_base64,omitempty"`
	staleFields
}

// staleIntegratedLetter is that of an integrated record.
type staleIntegratedLetter struct {
	Record   pinecone.IntegratedRecord `json:"integrated_record"`
	IDBase64 string                    `json:"id_base64,omitempty"`
	staleFields
}

type staleFields struct {
	Class         string `json:"class"`
	Error         string `json:"error"`
	MayHaveLanded bool   `json:"may_have_landed"`
	Index         int    `json:"index"`
	Earlier       int    `json:"earlier"`
	RecordError   string `json:"record_error,omitempty"`
	namespaceOut
}

// WriteStale writes the dead letter of s, a record that landed while a
// request carrying an earlier record of its id had ended without an
// answer, so that the index may still apply that request and keep the
// earlier record (see upsert.Stale). Replaying the file upserts the record
// again, which is the remedy once the index is quiet. The letter holds the
// record's fields, then "class":"may-be-stale" ([StaleClass]), "error"
// (msg, or a sentence saying the above when msg is ""),
// "may_have_landed":true (it landed), "index" (s.Index) and "earlier"
// (s.Earlier, the earlier record's position), and "namespace" as by Write
// (s.Namespace); it has no "attempts". An integrated record is written
// under "integrated_record", as by Write.
// A record that JSON cannot hold as it is is written with its id alone
// and "record_error", and an id that is not valid UTF-8 as "id_base64",
// as by Write. Errors are handled as by Write.
func (d *DeadLetters) WriteStale(s upsert.Stale, msg string) {
	if msg == "" {
		msg = fmt.Sprintf("landed while a request carrying record %d, of the same id, had ended without an answer: "+
			"the index may still apply it and keep that earlier record; upsert this one again once the index is quiet", s.Earlier)
	}
	f := staleFields{Class: StaleClass, Error: msg, MayHaveLanded: true, Index: s.Index, Earlier: s.Earlier, namespaceOut: letterNamespace(s.Namespace)}
	var line []byte
	var err error
	if s.Record == nil && s.Integrated != nil {
		line, err = marshalStaleIntegratedLetter(s, f)
	} else {
		line, err = marshalStaleLetter(s, f)
	}
	if err != nil { // cannot happen: the fallbacks hold only strings and numbers
		d.fail(fmt.Errorf("ndjson: encoding the dead letter of record %d: %w", s.Index, err))
		return
	}
	d.write(line)
}

// marshalStaleLetter encodes the letter of s, a record that may be stale,
// with the fields f; with the record's id alone (idOnly) and
// "record_error" when JSON cannot hold the record as it is, and with s.ID
// alone for a nil record.
func marshalStaleLetter(s upsert.Stale, f staleFields) ([]byte, error) {
	l := staleLetter{staleFields: f}
	if s.Record == nil {
		l.recordOut, l.IDBase64 = idOnly(s.ID)
		return marshalLine(l)
	}
	out, err := newRecordOut(s.Record)
	if err == nil {
		l.recordOut = &out
		var line []byte
		if line, err = marshalLine(l); err == nil {
			return line, nil
		}
	}
	l.recordOut, l.IDBase64 = idOnly(s.Record.Id)
	l.RecordError = err.Error()
	return marshalLine(l)
}

// marshalStaleIntegratedLetter is marshalStaleLetter for an integrated
// record, with {"_id":s.ID} alone (integratedIDOnly) when JSON cannot hold
// it as it is.
func marshalStaleIntegratedLetter(s upsert.Stale, f staleFields) ([]byte, error) {
	l := staleIntegratedLetter{Record: *s.Integrated, staleFields: f}
	line, err := marshalIntegrated(l, *s.Integrated)
	if err == nil {
		return line, nil
	}
	l.Record, l.IDBase64 = integratedIDOnly(s.ID)
	l.RecordError = err.Error()
	return marshalLine(l)
}

// WriteBad writes an input line that could not be read as a record:
// {"line":N,"raw":"<the line>","error":"…"}, raw holding the line's bytes
// as a JSON string, and error err's message ("" for a nil err).
//
// A line that is not valid UTF-8, which a JSON string cannot hold as it is
// (encoding/json writes U+FFFD for each byte that is not UTF-8), is written
// instead as {"line":N,"raw_base64":"…","raw_text":"…","error":"…"}:
// "raw_base64" holds the line's exact bytes (standard base64, with
// padding), and "raw_text" the line as a string with U+FFFD in place of
// those bytes, for a human to read; it is not the line. Such a letter has
// no "raw", so that a reader that knows only "raw" (an earlier pcupsert,
// and [BadLine] before it read "raw_base64") does not take the altered
// text for the line: it finds no letter of a bad line there. To fix such a
// line in the file, replace "raw_base64" with a "raw" holding the fixed
// line.
//
// A letter that could be longer than MaxLineBytes (a line close to it,
// whose quotes take 2 bytes once escaped, and control characters up to 6)
// is written as {"line":N,"raw_base64":"…","error":"…"}, without
// "raw_text", its error message cut to its first 1 KiB: at most
// MaxBadLetterBytes for a line of at most MaxLineBytes, which a [Reader]
// accepts and [BadLine] reads back as the line. A longer line, which a
// Reader never returns, gets a letter too long for a Reader.
//
// Errors are handled as by Write.
func (d *DeadLetters) WriteBad(line int, raw []byte, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	b, encErr := badLetter(line, raw, msg, d.maxLine)
	if encErr != nil { // cannot happen: only strings and numbers
		d.fail(fmt.Errorf("ndjson: encoding the dead letter of line %d: %w", line, encErr))
		return
	}
	d.write(b)
}

// maxLongLetterError is the most of its error message that a letter
// longer than MaxLineBytes keeps, in bytes (a LineError's is far shorter):
// what MaxBadLetterBytes leaves room for.
const maxLongLetterError = 1 << 10

// badLetter returns the letter of WriteBad, its "\n" included, for lines
// of at most maxLine bytes. Its length is bounded before it is encoded:
// a line of control characters would take 6 times its size to encode,
// only to be found too long.
func badLetter(line int, raw []byte, msg string, maxLine int) ([]byte, error) {
	type base64Letter struct {
		Line      int     `json:"line"`
		RawBase64 string  `json:"raw_base64"`
		RawText   *string `json:"raw_text,omitempty"`
		Error     string  `json:"error"`
	}
	fields := len(`{"line":,"raw":"","error":""}`) + len(strconv.Itoa(line)) + jsonStringBound([]byte(msg))
	valid := utf8.Valid(raw)
	switch {
	case valid && fields+jsonStringBound(raw) <= maxLine:
		return marshalLine(struct {
			Line  int    `json:"line"`
			Raw   string `json:"raw"`
			Error string `json:"error"`
		}{line, string(raw), msg})
	case !valid && fields+len(`_base64,"raw_text":""`)+base64.StdEncoding.EncodedLen(len(raw))+jsonStringBound(raw) <= maxLine:
		text := string(raw)
		return marshalLine(base64Letter{line, base64.StdEncoding.EncodeToString(raw), &text, msg})
	}
	// Base64 is the shortest form that a JSON string holds any bytes in,
	// and a Reader takes it up to badLetterLimit.
	return marshalLine(base64Letter{Line: line, RawBase64: base64.StdEncoding.EncodeToString(raw), Error: truncate(msg, maxLongLetterError)})
}

// jsonStringBound returns the most bytes that s takes in a JSON string
// as marshalLine writes it, quotes excluded: 6 for a control character
// (encoding/json writes some in 2), a byte that is not UTF-8 (\ufffd) and
// U+2028 or U+2029; 2 for a quote or a backslash; the others as they are.
func jsonStringBound(s []byte) int {
	n := 0
	for len(s) > 0 {
		r, size := utf8.DecodeRune(s)
		switch {
		case r < 0x20, r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			n += 6
		case r == '"', r == '\\':
			n += 2
		default:
			n += size
		}
		s = s[size:]
	}
	return n
}

// truncate returns s cut to at most n bytes, not within a character, with
// "…" after it when it was cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// BadLine reports whether raw, a line of input, is the dead letter of a
// bad line as [DeadLetters.WriteBad] writes it, and returns the line
// number, the content and the error message it holds: a run that replays
// a dead-letter file then deals with the original line (which may have
// been fixed since) instead of taking the letter for a record without an
// id. The content is "raw", or else the bytes "raw_base64" holds (the
// letter of a line that is not valid UTF-8); "raw_text" is not read. A
// letter with neither, or whose "raw_base64" is not base64, is none. The
// content is empty for a line that was not kept, such as one longer than
// MaxLineBytes; msg then says what was wrong with it.
func BadLine(raw []byte) (line int, content []byte, msg string, ok bool) {
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte(`{"line":`)) {
		return 0, nil, "", false
	}
	var l struct {
		Line      *int    `json:"line"`
		Raw       *string `json:"raw"`
		RawBase64 *string `json:"raw_base64"`
		Error     *string `json:"error"`
		ID        any     `json:"id"`
	}
	if json.Unmarshal(raw, &l) != nil || l.Line == nil || (l.Raw == nil && l.RawBase64 == nil) || l.Error == nil || l.ID != nil {
		return 0, nil, "", false
	}
	if l.Raw != nil { // a line fixed by hand in the letter of one that was not UTF-8 included
		return *l.Line, []byte(*l.Raw), *l.Error, true
	}
	b, err := base64.StdEncoding.DecodeString(*l.RawBase64)
	if err != nil {
		return 0, nil, "", false
	}
	return *l.Line, b, *l.Error, true
}

func (d *DeadLetters) write(line []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		d.failLocked(fmt.Errorf("ndjson: dead letter written after Close of %s: %w", d.path, os.ErrClosed))
		return
	}
	// After an I/O error, w writes nothing and returns that error again.
	if _, err := d.w.Write(line); err != nil {
		d.failLocked(err)
		return
	}
	d.n++
}

func (d *DeadLetters) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failLocked(err)
}

func (d *DeadLetters) failLocked(err error) {
	if d.err == nil {
		d.err = err
	}
}

// Count returns how many dead letters were written (to the buffer, if
// neither Sync nor Close has flushed them yet), bad lines and letters of
// WriteStale included. A failure that Write skips (one with Resend set,
// once Checkpoint has been called) is not a letter and is not counted,
// nor is a letter dropped after an error or after Close.
func (d *DeadLetters) Count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n
}

// Close flushes the buffer, syncs the file to disk (and its directory,
// unless Sync did) and closes it; a device or a pipe is not synced (see
// Sync). It returns the first error met since the
// file was created: writing, flushing, syncing or closing. Close may be
// called more than once; later
// calls do nothing and return the same error, or a later one if a letter
// was written after Close. It waits for a Sync under way.
func (d *DeadLetters) Close() error {
	d.syncMu.Lock()
	defer d.syncMu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return d.err
	}
	d.closed = true
	d.failLocked(d.w.Flush()) // after an I/O error, that error again
	d.failLocked(d.syncFile())
	d.failLocked(d.f.Close())
	return d.err
}

// Sync writes the letters in the buffer to the file and syncs the file to
// disk (fsync), and, the first time, the directory that holds it, so that
// a file just created is found after a crash: once Sync has returned nil,
// every letter written before the call is on disk, and neither a process
// killed nor a machine that loses power loses it. Letters written while
// Sync runs may or may not be. Write does not wait for the disk meanwhile;
// Close waits for a Sync under way. [DeadLetters.Checkpoint] calls Sync
// before every save of a checkpoint.
//
// On a device or a named pipe (/dev/null, /dev/stdout), Sync only flushes
// the buffer: a letter written to one is delivered, and there is no disk
// to sync it to. Nil then means that every letter written before the call
// was written to it.
//
// Sync returns the first error met since the file was created, as Close
// does: writing, flushing, syncing the file or its directory. A
// DeadLetters that failed keeps failing: every later Sync returns that
// error, and so does Close. After Close, Sync does nothing and returns
// what Close returned, or the error of a letter written after Close: nil
// then too means that every letter is on disk.
func (d *DeadLetters) Sync() error {
	d.syncMu.Lock()
	defer d.syncMu.Unlock()
	d.mu.Lock()
	if d.closed {
		defer d.mu.Unlock()
		return d.err
	}
	d.failLocked(d.w.Flush()) // after an I/O error, that error again
	d.mu.Unlock()

	// Without mu, so that Write goes on filling the buffer while the disk
	// works; syncMu keeps Close from closing the file meanwhile.
	err := d.syncFile()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failLocked(err)
	return d.err
}

// syncFile syncs a regular file to disk, and its directory once; it does
// nothing for a device or a pipe, which has no disk to sync to (Linux
// answers EINVAL): a letter flushed to one is delivered. The caller holds
// syncMu.
func (d *DeadLetters) syncFile() error {
	if !d.regular {
		return nil
	}
	if err := d.f.Sync(); err != nil {
		return err
	}
	return d.syncDir()
}

// syncDir syncs the directory of the file, once: the file's own sync does
// not make its name durable. The caller holds syncMu.
func (d *DeadLetters) syncDir() error {
	if d.dirSynced {
		return nil
	}
	if err := dirsync.Sync(filepath.Dir(d.path)); err != nil {
		return err
	}
	d.dirSynced = true
	return nil
}
