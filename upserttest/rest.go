package upserttest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// This file holds the REST records endpoint of the HTTPS side of a Server:
// POST /records/namespaces/{namespace}/upsert, which the Pinecone SDK's
// IndexConnection.UpsertRecords calls for indexes with integrated
// embedding, with a body of NDJSON records.

// MaxRecordsPerRequest is the most records a REST records upsert may hold,
// Pinecone's limit for indexes with integrated embedding. Record ids have the
// limits of vector ids ([MaxIDBytes], not empty).
const MaxRecordsPerRequest = 96

// recordsUpsertPattern is the route of the records upsert endpoint, as the
// SDK's generated REST client builds it (UpsertRecordsNamespaceWithBody).
const recordsUpsertPattern = "POST /records/namespaces/{namespace}/upsert"

func (g *generation) restHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(recordsUpsertPattern, g.serveRecordsUpsert)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeRESTError(w, http.StatusNotFound, codes.NotFound, "upserttest: no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// A record is one parsed line of a records upsert.
type record struct {
	fields map[string]any // the whole JSON object, the id included
	idKey  string         // "_id" or "id", whichever holds the id; "" if none
}

// id returns the record's id, or "" if it has none or a non-string one.
func (r record) id() string {
	s, _ := r.fields[r.idKey].(string)
	return s
}

// serveRecordsUpsert handles a records upsert through the steps of
// processUpsert, as upsert does for gRPC. Before them, the API key is
// checked (WithAPIKey) before the body is read: a request with a wrong or
// missing key is answered 401 whatever its body, as Pinecone authenticates
// a request before reading it. Then a body larger than WithMaxRequestBytes
// is answered 400 (see tooLargeMessage), and a body that is not NDJSON of
// JSON objects 400 too. Like requests that gRPC cannot decode, none of
// these gets a Seq or reaches the fault script, and their bytes are not
// counted.
func (g *generation) serveRecordsUpsert(w http.ResponseWriter, r *http.Request) {
	s := g.s
	arrival := s.cfg.now()
	if !g.enter() {
		// Restart or Close is closing the connection: answer nothing.
		s.countUnprocessed(codes.Unavailable, 0)
		panic(http.ErrAbortHandler)
	}
	defer g.leave()

	if err := s.checkAPIKey(r.Header.Values("Api-Key")); err != nil {
		s.countUnprocessed(codes.Unauthenticated, http.StatusUnauthorized)
		writeStatusError(w, err)
		return
	}
	body, records, ok := g.readRecordsBody(w, r)
	if !ok {
		return
	}
	err := g.processUpsert(r.Context(), s.recordsUpsertCall(w, r, body, records, arrival))
	s.answerRecordsUpsert(w, r, len(body), err)
}

// readRecordsBody reads and parses the body of a records upsert. When it
// cannot, it counts the request, answers it (400) and returns ok
// false, or panics with http.ErrAbortHandler when nobody would hear an
// answer; it is called by the handler, so the panic aborts the handler.
//
// A read that fails once g is stopping was cut by Restart or Close, which
// stop g before closing its connections: the request got no status, and
// counts as 0 in Stats.HTTPCodes and codes.Unavailable in Stats.Codes.
// Otherwise its client went away while sending: 499 and codes.Canceled.
func (g *generation) readRecordsBody(w http.ResponseWriter, r *http.Request) (body []byte, records []record, ok bool) {
	s := g.s
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.cfg.maxRequestBytes)))
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			s.countUnprocessed(codes.InvalidArgument, http.StatusBadRequest)
			writeRESTError(w, http.StatusBadRequest, codes.InvalidArgument, tooLargeMessage(s.cfg.maxRequestBytes))
			return nil, nil, false
		case g.stopped():
			s.countUnprocessed(codes.Unavailable, 0)
		default:
			s.countUnprocessed(codes.Canceled, httpStatusFromCode(codes.Canceled))
		}
		panic(http.ErrAbortHandler) // nobody hears an answer
	}
	records, err = parseRecords(body)
	if err != nil {
		s.countUnprocessed(codes.InvalidArgument, http.StatusBadRequest)
		writeStatusError(w, err)
		return nil, nil, false
	}
	return body, records, true
}

// tooLargeMessage is the message of the answer, 400 INVALID_ARGUMENT, to
// a records upsert whose body is over limit bytes (WithMaxRequestBytes):
// Pinecone's text for the default limit, which is Pinecone's 2 MB, and the
// same text naming the limit in bytes otherwise. Evidence of the status
// and text: pinecone-ts-client issue #23 (2023) quotes this message, and
// pinecone-vercel-starter PR #28 (Dec 2023) shows the TypeScript client's
// PineconeBadRequestError, its class for 400, for a 3 MB request.
func tooLargeMessage(limit int) string {
	if limit == DefaultMaxRequestBytes {
		return "Your request is larger than the maximum supported size - 2MB. Please try to reduce your batch size."
	}
	return fmt.Sprintf("Your request is larger than the maximum supported size - %d bytes (upserttest.WithMaxRequestBytes). "+
		"Please try to reduce your batch size.", limit)
}

// recordsUpsertCall is the parsed records upsert r as processUpsert sees
// it. It counts the request's arrival, which gives it its Seq.
func (s *Server) recordsUpsertCall(w http.ResponseWriter, r *http.Request, body []byte, records []record, arrival time.Time) upsertCall {
	ns := r.PathValue("namespace")
	ids := make([]string, len(records))
	tokens := 0
	for i, rec := range records {
		ids[i] = rec.id()
		tokens += embedTokens(rec, s.cfg.fieldMap)
	}
	seq := s.arrive(len(body), true)
	return upsertCall{
		req: Request{
			Seq:       seq,
			Namespace: ns,
			IDs:       ids,
			Bytes:     len(body),
			Time:      arrival,
			Elapsed:   arrival.Sub(s.start),
			REST:      true,
		},
		tokens: tokens,
		retryAfter: func(d time.Duration) {
			sec, _ := retryAfterValues(d)
			w.Header().Set("Retry-After", sec)
		},
		validate: func() error {
			if err := validateNamespace(ns); err != nil {
				return err
			}
			return validateRecords(records, s.cfg.fieldMap)
		},
		write: func(k int) error { return s.applyRecords(ns, records[:k]) },
	}
}

// answerRecordsUpsert counts and answers a records upsert of size bytes
// that processUpsert returned err for. A reset or an interrupted request
// panics with http.ErrAbortHandler, so it must run in the handler.
func (s *Server) answerRecordsUpsert(w http.ResponseWriter, r *http.Request, size int, err error) {
	answered := func(err error, httpStatus int) { s.answered(err, httpStatus, size) }
	switch err {
	case nil:
		answered(nil, http.StatusCreated)
		w.WriteHeader(http.StatusCreated) // an empty body, as Pinecone's
	case errReset:
		answered(errReset, 0)
		// Close the connection with an RST, then abort the handler so that
		// the HTTP server neither answers nor logs.
		s.mux.reset(r.RemoteAddr)
		panic(http.ErrAbortHandler)
	case errStopped:
		// Restart or Close is closing the connection: a request it
		// interrupts gets no answer, as with a real restart, rather than a
		// 503 that could slip out before the connection is closed.
		answered(errStopped, 0)
		panic(http.ErrAbortHandler)
	default:
		answered(err, httpStatusFromCode(status.Code(err)))
		writeStatusError(w, err)
	}
}

// parseRecords reads an NDJSON body: one JSON object per line; blank lines
// are skipped. It fails, with codes.InvalidArgument, on the first line that
// is not a JSON object.
func parseRecords(body []byte) ([]record, error) {
	var out []record
	for i, line := range bytes.Split(body, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			return nil, invalid("Invalid request body: line %d is not valid JSON", i+1)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, invalid("Invalid request body: line %d is not a JSON object", i+1)
		}
		rec := record{fields: obj}
		if _, ok := obj["_id"]; ok {
			rec.idKey = "_id"
		} else if _, ok := obj["id"]; ok {
			rec.idKey = "id"
		}
		out = append(out, rec)
	}
	return out, nil
}

// validateRecords checks the per-request limits of a records upsert, and
// that each record holds the text the index embeds (see textToEmbed);
// fieldMap is WithFieldMap's field, "" if unset.
func validateRecords(records []record, fieldMap string) error {
	if len(records) > MaxRecordsPerRequest {
		return invalid("Request contains %d records, which exceeds the limit of %d records per upsert request", len(records), MaxRecordsPerRequest)
	}
	for _, rec := range records {
		if rec.idKey == "" {
			return invalid("Record must have an '_id' or 'id' field")
		}
		id, ok := rec.fields[rec.idKey].(string)
		if !ok {
			return invalid("Record ID must be a string")
		}
		if err := validID("Record", id); err != nil {
			return err
		}
		if err := textToEmbed(rec, fieldMap); err != nil {
			return err
		}
		if err := validateRecordFields(rec); err != nil {
			return err
		}
	}
	return nil
}

// textToEmbed refuses a record that holds no text for the index to embed:
// with WithFieldMap, one whose field of that name is missing, not a string
// or empty; without it, one with no string field besides its id, which no
// field map could name. Pinecone refuses such records (its OpenAPI spec:
// each record must include "a field that matches your index's field_map
// configuration"), but the wording of its answer is not published: these
// messages are this server's.
func textToEmbed(rec record, fieldMap string) error {
	if fieldMap != "" {
		if text, _ := rec.fields[fieldMap].(string); text == "" {
			return invalid("Record must have the field '%s' of the index's field_map, a non-empty string to embed", fieldMap)
		}
		return nil
	}
	for k, v := range rec.fields {
		if _, ok := v.(string); ok && k != "_id" && k != "id" {
			return nil
		}
	}
	return invalid("Record must have a string field to embed, named by the index's field_map")
}

// validateRecordFields checks a record's fields but its id as metadata,
// which Pinecone stores them as.
func validateRecordFields(rec record) error {
	fields := make(map[string]any, len(rec.fields))
	for k, v := range rec.fields {
		if k != rec.idKey {
			fields[k] = v
		}
	}
	md, err := structpb.NewStruct(fields)
	if err != nil { // cannot happen: the fields were decoded from JSON
		return invalid("Record fields cannot be read as metadata")
	}
	return validateMetadata(md)
}

// applyRecords stores records into namespace: under its id, each record's
// fields but the one that held the id. The records are the request's own,
// parsed for it, so the store takes them over. Then it meters the records
// they overwrote (chargeOverwrites).
func (s *Server) applyRecords(namespace string, records []record) error {
	if len(records) == 0 {
		return nil
	}
	s.chargeOverwrites(s.storeRecords(namespaceKey(namespace), records))
	return nil
}

// storeRecords does applyRecords' write, and returns the size of the
// records it overwrote. A record replaces what namespace holds under its
// id, a vector included: one record per id, as on Pinecone.
func (s *Server) storeRecords(namespace string, records []record) (overwritten int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.records[namespace]
	if m == nil {
		m = make(map[string]map[string]any)
		s.records[namespace] = m
	}
	added := 0
	for _, rec := range records {
		id := rec.id()
		if n, ok := s.storedSizeLocked(namespace, id); ok {
			overwritten += n
		} else {
			added++
		}
		delete(s.store[namespace], id)
		fields := rec.fields
		delete(fields, rec.idKey)
		m[id] = fields
	}
	s.noteNewVectors(namespace, added)
	s.stats.RecordsWritten += len(records)
	return overwritten
}

// recordSize is the size of a stored record as a line of a records
// upsert: its fields and its id as "_id", in JSON, and a newline.
func recordSize(id string, fields map[string]any) int {
	line := maps.Clone(fields)
	line["_id"] = id
	b, err := json.Marshal(line)
	if err != nil { // cannot happen: the fields were decoded from JSON
		return 0
	}
	return len(b) + 1
}

// rpcStatus is the body of an error answer, in the form of Pinecone's
// data-plane REST API: a google.rpc.Status, as its OpenAPI spec declares
// for every 4xx and 5xx of the records upsert (schema rpcStatus) and as
// real answers show, with the numeric gRPC code:
//
//	{"code":3,"message":"Vector dimension 0 does not match the dimension of the index 1536","details":[]}
//
// It is not the control plane's {"error":{"code":"...","message":"..."},
// "status":N}. The SDK's generated client decodes every error body of the
// data plane as this shape.
type rpcStatus struct {
	Code    int32  `json:"code"`
	Message string `json:"message"`
	Details []any  `json:"details"`
}

// writeStatusError answers the gRPC status error err in HTTP: the status
// of its code (httpStatusFromCode) and an rpcStatus body with its code and
// message. A quota's answer is no exception: the body has no room for a
// "QUOTA_EXCEEDED" name, only its numeric code and its message.
func writeStatusError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	writeRESTError(w, httpStatusFromCode(st.Code()), st.Code(), st.Message())
}

// writeRESTError answers httpStatus with Pinecone's data-plane JSON error
// body (rpcStatus) for code and message.
func writeRESTError(w http.ResponseWriter, httpStatus int, code codes.Code, message string) {
	body, _ := json.Marshal(rpcStatus{Code: int32(code), Message: message, Details: []any{}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_, _ = w.Write(body)
}

// httpStatusFromCode maps a gRPC code to the HTTP status of its answer, as
// grpc-gateway (and Pinecone) do. codes.OK maps to 201 Created, the answer
// to a records upsert.
func httpStatusFromCode(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusCreated
	case codes.Canceled:
		return 499 // client closed request
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	default: // Unknown, Internal, DataLoss and codes out of range
		return http.StatusInternalServerError
	}
}

// cloneJSON returns a deep copy of a value decoded by encoding/json into
// an any.
func cloneJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return cloneFields(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cloneJSON(e)
		}
		return out
	default: // string, float64, bool, nil
		return v
	}
}

func cloneFields(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, e := range m {
		out[k] = cloneJSON(e)
	}
	return out
}
