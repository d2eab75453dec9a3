package upserttest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
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
// processUpsert, as upsert does for gRPC. Before them, a body larger than
// WithMaxRequestBytes is answered 413, and a body that is not NDJSON of
// JSON objects 400; like requests that gRPC cannot decode, neither gets a
// Seq nor reaches the fault script.
func (g *generation) serveRecordsUpsert(w http.ResponseWriter, r *http.Request) {
	s := g.s
	arrival := s.cfg.now()
	if !g.enter() {
		// Restart or Close is closing the connection: answer nothing.
		s.countUnprocessed(codes.Unavailable, 0)
		panic(http.ErrAbortHandler)
	}
	defer g.leave()

	body, records, ok := s.readRecordsBody(w, r)
	if !ok {
		return
	}
	err := g.processUpsert(r.Context(), s.recordsUpsertCall(w, r, body, records, arrival))
	s.answerRecordsUpsert(w, r, err)
}

// readRecordsBody reads and parses the body of a records upsert. When it
// cannot, it counts the request, answers it (413 or 400) and returns ok
// false, or panics with http.ErrAbortHandler when nobody would hear an
// answer; it is called by the handler, so the panic aborts the handler.
func (s *Server) readRecordsBody(w http.ResponseWriter, r *http.Request) (body []byte, records []record, ok bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.cfg.maxRequestBytes)))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			s.countUnprocessed(codes.ResourceExhausted, http.StatusRequestEntityTooLarge)
			writeRESTError(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted,
				"Your request is larger than the maximum supported size - 2MB") // Pinecone's text (reference.md); its status is unpublished
			return nil, nil, false
		}
		// The client went away while sending, or Restart or Close cut the
		// connection: nobody hears an answer.
		s.countUnprocessed(codes.Canceled, httpStatusFromCode(codes.Canceled))
		panic(http.ErrAbortHandler)
	}
	records, err = parseRecords(body)
	if err != nil {
		s.countUnprocessed(codes.InvalidArgument, http.StatusBadRequest)
		writeStatusError(w, err)
		return nil, nil, false
	}
	return body, records, true
}

// recordsUpsertCall is the parsed records upsert r as processUpsert sees
// it. It counts the request's arrival, which gives it its Seq.
func (s *Server) recordsUpsertCall(w http.ResponseWriter, r *http.Request, body []byte, records []record, arrival time.Time) upsertCall {
	ns := r.PathValue("namespace")
	ids := make([]string, len(records))
	tokens := 0
	for i, rec := range records {
		ids[i] = rec.id()
		tokens += embedTokens(rec)
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
		tokens:    tokens,
		authorize: func() error { return s.checkAPIKey(r.Header.Values("Api-Key")) },
		retryAfter: func(d time.Duration) {
			sec, _ := retryAfterValues(d)
			w.Header().Set("Retry-After", sec)
		},
		validate: func() error {
			if err := validateNamespace(ns); err != nil {
				return err
			}
			return validateRecords(records)
		},
		write: func(k int) error { return s.applyRecords(ns, records[:k]) },
	}
}

// answerRecordsUpsert counts and answers a records upsert that processUpsert
// returned err for. A reset or an interrupted request panics with
// http.ErrAbortHandler, so it must run in the handler.
func (s *Server) answerRecordsUpsert(w http.ResponseWriter, r *http.Request, err error) {
	switch err {
	case nil:
		s.answered(nil, http.StatusCreated)
		w.WriteHeader(http.StatusCreated) // an empty body, as Pinecone's
	case errReset:
		s.answered(errReset, 0)
		// Close the connection with an RST, then abort the handler so that
		// the HTTP server neither answers nor logs.
		s.mux.reset(r.RemoteAddr)
		panic(http.ErrAbortHandler)
	case errStopped:
		// Restart or Close is closing the connection: a request it
		// interrupts gets no answer, as with a real restart, rather than a
		// 503 that could slip out before the connection is closed.
		s.answered(errStopped, 0)
		panic(http.ErrAbortHandler)
	default:
		s.answered(err, httpStatusFromCode(status.Code(err)))
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

// validateRecords checks the per-request limits of a records upsert.
func validateRecords(records []record) error {
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
		if err := validateRecordFields(rec); err != nil {
			return err
		}
	}
	return nil
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
// parsed for it, so the store takes them over.
func (s *Server) applyRecords(namespace string, records []record) error {
	if len(records) == 0 {
		return nil
	}
	namespace = namespaceKey(namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.records[namespace]
	if m == nil {
		m = make(map[string]map[string]any)
		s.records[namespace] = m
	}
	for _, rec := range records {
		id := rec.id()
		fields := rec.fields
		delete(fields, rec.idKey)
		m[id] = fields
	}
	s.stats.RecordsWritten += len(records)
	return nil
}

// restError is the body of an error answer, in the form of Pinecone's REST
// API:
//
//	{"error":{"code":"RESOURCE_EXHAUSTED","message":"..."},"status":429}
type restError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Status int `json:"status"`
}

// writeStatusError answers the gRPC status error err in HTTP. A quota's
// answer has the error code "QUOTA_EXCEEDED", as Pinecone's.
func writeStatusError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	name := codeName(st.Code())
	if isQuotaAnswer(err) && st.Code() == codes.PermissionDenied {
		name = "QUOTA_EXCEEDED"
	}
	writeREST(w, httpStatusFromCode(st.Code()), name, st.Message())
}

// writeRESTError answers httpStatus with Pinecone's JSON error body for
// code and message.
func writeRESTError(w http.ResponseWriter, httpStatus int, code codes.Code, message string) {
	writeREST(w, httpStatus, codeName(code), message)
}

// writeREST answers httpStatus with the JSON error body Pinecone's REST
// API sends: {"error": {"code", "message"}, "status"}.
func writeREST(w http.ResponseWriter, httpStatus int, codeName, message string) {
	var e restError
	e.Error.Code = codeName
	e.Error.Message = message
	e.Status = httpStatus
	body, _ := json.Marshal(e)
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

// codeName is the canonical name of a gRPC code, as in Pinecone's REST
// error bodies: "RESOURCE_EXHAUSTED", "INVALID_ARGUMENT", ...
func codeName(c codes.Code) string {
	switch c {
	case codes.OK:
		return "OK"
	case codes.Canceled:
		return "CANCELLED"
	case codes.Unknown:
		return "UNKNOWN"
	case codes.InvalidArgument:
		return "INVALID_ARGUMENT"
	case codes.DeadlineExceeded:
		return "DEADLINE_EXCEEDED"
	case codes.NotFound:
		return "NOT_FOUND"
	case codes.AlreadyExists:
		return "ALREADY_EXISTS"
	case codes.PermissionDenied:
		return "PERMISSION_DENIED"
	case codes.ResourceExhausted:
		return "RESOURCE_EXHAUSTED"
	case codes.FailedPrecondition:
		return "FAILED_PRECONDITION"
	case codes.Aborted:
		return "ABORTED"
	case codes.OutOfRange:
		return "OUT_OF_RANGE"
	case codes.Unimplemented:
		return "UNIMPLEMENTED"
	case codes.Internal:
		return "INTERNAL"
	case codes.Unavailable:
		return "UNAVAILABLE"
	case codes.DataLoss:
		return "DATA_LOSS"
	case codes.Unauthenticated:
		return "UNAUTHENTICATED"
	default:
		return "UNKNOWN"
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
