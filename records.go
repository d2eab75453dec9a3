package upsert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/upsertlib/upsert/internal/jsontext"
	"google.golang.org/protobuf/types/known/structpb"
)

// MaxRecordsBatchSize is the most integrated-embedding records Pinecone
// accepts in one upsert request.
const MaxRecordsBatchSize = 96

// RecordsFunc sends one batch of integrated-embedding records to a
// namespace; see [WithRecordsFunc]. It must return an error the classifier
// understands when the batch was not written. A panic in it fails the
// batch at once with a [*PanicError]; the process survives.
type RecordsFunc func(ctx context.Context, namespace string, batch []*pinecone.IntegratedRecord) error

// WithRecordsFunc sends integrated-embedding records with f instead of an
// index connection: for other transports and for tests.
func WithRecordsFunc(f RecordsFunc) Option {
	return func(c *config) {
		c.sources++
		if f == nil {
			c.bad("WithRecordsFunc: nil function")
			return
		}
		c.sendRecords = f
	}
}

// Records upserts integrated-embedding records, whose text the index
// embeds itself, through [pinecone.IndexConnection.UpsertRecords], at most
// [MaxRecordsBatchSize] per request, with the classes, retries, splitting,
// pacing and reporting of [Stream], whose rules apply (each record is
// copied, down through its maps and lists, as it is pulled; a function of
// [WithNamespaceOf] sees the caller's record itself, just before). Each
// record needs an "_id" or "id" field holding a string (of any string
// type but json.Number, which JSON sends as a number, or a non-nil pointer
// to one), and a string field for the index to
// embed (the one its field_map names, which the library does not know: a
// record with no string field fails). Its other fields are its metadata on
// Pinecone, and follow metadata's rules: strings, numbers, booleans and
// lists of strings, no null, no text that is not valid UTF-8, at most
// [MaxMetadataBytes] as JSON; a record that breaks one fails alone before
// anything is sent. [Failure].Integrated is the copy, which holds text of
// the caller's string types as strings, as it is sent.
//
// Any client works: the SDK (since v5.4.1) returns every answer but 201 as
// a *pinecone.PineconeError with the HTTP status. A client made by
// [NewClient] (or with [HTTPClient] as its RestClient) also shows the
// library the index's Retry-After, which the SDK's error does not carry.
//
// For a slice, pass slices.Values(records).
func Records(ctx context.Context, seq iter.Seq[*pinecone.IntegratedRecord], opts ...Option) (Result, error) {
	// The intake copies each record (cloneRecord) once the namespace
	// function has seen the caller's own (intake.own).
	return streamOf(ctx, seq, recordKind, func(r *pinecone.IntegratedRecord) item { return item{rec: r} }, opts)
}

// checkRecord returns an integrated record's id and its size in an NDJSON
// request, or the rule it breaks.
func checkRecord(r *pinecone.IntegratedRecord) (id string, size int, err error) {
	if r == nil {
		return "", 0, fmt.Errorf("record is nil")
	}
	idKey := "_id"
	raw, ok := (*r)[idKey]
	if !ok {
		idKey = "id"
		raw, ok = (*r)[idKey]
	}
	if !ok {
		return "", 0, fmt.Errorf(`has no "_id" or "id" field`)
	}
	if id, err = recordID(raw); err != nil {
		return "", 0, err
	}
	if err := checkID(id); err != nil {
		return id, 0, err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return id, 0, fmt.Errorf("cannot be encoded as JSON: %w", err)
	}
	if err := checkUTF8(r, b); err != nil {
		return id, 0, err
	}
	if err := checkRecordFields(b, idKey); err != nil {
		return id, 0, err
	}
	return id, len(b) + 1, nil
}

// recordID returns the id a record's id field holds: a string, or a value
// that JSON sends as one (see stringOf: a named string type, a non-nil
// *string). Otherwise its error names the field's type.
func recordID(raw any) (string, error) {
	if id, ok := raw.(string); ok {
		return id, nil
	}
	if id, ok := stringOf(raw); ok {
		return id, nil
	}
	rv := reflect.ValueOf(raw)
	switch {
	case raw == nil:
		return "", fmt.Errorf("id is null; it must be a string")
	case rv.Kind() == reflect.Pointer && rv.IsNil():
		return "", fmt.Errorf("id is a nil %T; it must be a string", raw)
	case encodesItself(raw):
		return "", fmt.Errorf("id is a %T, which encodes itself as JSON; it must be a string", raw)
	case rv.Kind() == reflect.String || rv.Kind() == reflect.Pointer && rv.Elem().Kind() == reflect.String:
		return "", fmt.Errorf("id is a %T, which JSON sends as a number; it must be a string", raw)
	}
	return "", fmt.Errorf("id is a %T; it must be a string", raw)
}

// checkUTF8 refuses a record, encoded as JSON, whose encoding altered text
// that is not valid UTF-8 or carries such text as it is (from a
// json.RawMessage or a MarshalJSON), whatever the Go type that holds it:
// Pinecone would store the first altered, and refuse the whole request of
// the second.
func checkUTF8(r *pinecone.IntegratedRecord, encoded []byte) error {
	if err := jsontext.Check(map[string]any(*r), encoded); err != nil {
		return fmt.Errorf("%w; it cannot be sent as it is", err)
	}
	return nil
}

// checkRecordFields checks an integrated record's fields other than its
// id, whose key is idKey, by the rules of metadata, since Pinecone stores
// them as the record's metadata; encoded is the record as JSON.
func checkRecordFields(encoded []byte, idKey string) error {
	var fields map[string]any
	if err := json.Unmarshal(encoded, &fields); err != nil {
		return fmt.Errorf("cannot be encoded as JSON: %w", err)
	}
	delete(fields, idKey)
	if !hasText(fields) {
		return fmt.Errorf("has no text to embed: every integrated index embeds a string field (its field_map), and this record has none but its id")
	}
	md, err := structpb.NewStruct(fields)
	if err != nil { // cannot happen: decoded JSON has JSON's types only
		return fmt.Errorf("fields cannot be read as metadata: %w", err)
	}
	if _, err := checkMetadata(md); err != nil {
		return fmt.Errorf("its fields but the id are its metadata: %w", err)
	}
	return nil
}

// hasText reports whether a record's fields (its id taken out) hold a
// string, which an index's field_map can name as the text to embed:
// Pinecone refuses a record without that field.
func hasText(fields map[string]any) bool {
	for k, v := range fields {
		if _, ok := v.(string); ok && k != "_id" && k != "id" {
			return true
		}
	}
	return false
}

// NewClient returns a Pinecone client whose REST calls go through
// [HTTPClient], so that [Records] sees the index's Retry-After. The params
// are used as given otherwise.
func NewClient(params pinecone.NewClientParams) (*pinecone.Client, error) {
	params.RestClient = HTTPClient(params.RestClient)
	return pinecone.NewClient(params)
}

// HTTPClient returns a copy of c (of http.DefaultClient when nil) whose
// transport is [Transport] over c's.
func HTTPClient(c *http.Client) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	cp := *c
	cp.Transport = Transport(c.Transport)
	return &cp
}

// Transport returns an http.RoundTripper over base that turns a 4xx or
// 5xx answer of Pinecone's records upsert endpoint into an [*Error] with
// the HTTP status and the Retry-After wait, which the SDK's own error for
// it does not carry. Every other request and answer passes through
// untouched. When base is nil, it is a clone of http.DefaultTransport that
// keeps up to 256 idle connections per host rather than 2, since a run has
// up to 64 requests in flight to one host (256 with WithConcurrency); or
// http.DefaultTransport itself, if a program replaced it with a
// RoundTripper of another type.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = defaultTransport()
	}
	if t, ok := base.(*transport); ok {
		return t
	}
	return &transport{base: base}
}

// defaultTransport is the base of Transport(nil): one clone of
// http.DefaultTransport for the process, as http.DefaultTransport is one,
// keeping 256 idle connections per host and no cap over all hosts; or
// http.DefaultTransport itself when a program replaced it with another
// type. It is made at its first use.
var defaultTransport = sync.OnceValue(newDefaultTransport)

func newDefaultTransport() http.RoundTripper {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return http.DefaultTransport
	}
	t = t.Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 0, 256
	return t
}

type transport struct{ base http.RoundTripper }

// CloseIdleConnections closes the idle connections of the base transport,
// if it can, as http.Client.CloseIdleConnections asks.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip answers a records upsert that failed with an [*Error] instead
// of the response: the SDK wraps the error it gets (since v5.4.1), so the
// library finds it, Retry-After included, with errors.As.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || !isRecordsUpsert(req) || passes(resp.StatusCode) {
		return resp, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return nil, httpError(resp.StatusCode, parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), body)
}

// passes reports whether an answer to a records upsert goes to the
// http.Client as it is: a success, or a redirect that keeps the POST (307,
// 308) for it to follow; a 301-303 would be followed as a GET.
func passes(code int) bool {
	return code < 300 || code == http.StatusTemporaryRedirect || code == http.StatusPermanentRedirect
}

func isRecordsUpsert(req *http.Request) bool {
	return req.Method == http.MethodPost && strings.HasPrefix(req.URL.Path, "/records/namespaces/") &&
		strings.HasSuffix(req.URL.Path, "/upsert")
}

// httpError is the library's error for an HTTP answer with status code,
// the wait it asked for and its body.
func httpError(code int, retryAfter time.Duration, body []byte) *Error {
	e := &Error{
		Class:      classOfHTTP(code, string(body)),
		StatusCode: code,
		RetryAfter: retryAfter,
		Err:        bodyError(body), // the code is the Error's: not said twice
	}
	if e.Class == ClassRateLimited {
		e.Limit = limitNamed(string(body))
	}
	return e
}

// bodyError is the error an answer's body says, cut for a message.
func bodyError(body []byte) error {
	if s := snippet(body); s != "" {
		return errors.New(s)
	}
	return errors.New("the answer has no body")
}

// snippet returns the start of an error body, on one line, cut at a
// character's start (the error's text goes to logs and dead letters).
func snippet(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 300 {
		cut := 300
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
