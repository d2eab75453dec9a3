package upserttest_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/upsertlib/upsert/upserttest"
)

// restExchange is one HTTP exchange seen by a restRecorder.
type restExchange struct {
	method, path string
	reqHeader    http.Header
	reqBody      string

	status     int
	respHeader http.Header
	respBody   string
	err        error
}

// restRecorder is an http.RoundTripper that wraps the transport of
// srv.Client() and records every exchange, to observe what the SDK sends and
// what it is answered, which UpsertRecords does not tell. It reads the whole
// response body and hands the SDK a copy.
type restRecorder struct {
	base http.RoundTripper

	mu        sync.Mutex
	exchanges []restExchange
}

func (r *restRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	x := restExchange{method: req.Method, path: req.URL.Path, reqHeader: req.Header.Clone()}
	if req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			body, _ := io.ReadAll(b)
			x.reqBody = string(body)
		}
	}
	resp, err := r.base.RoundTrip(req)
	if err == nil {
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		x.status, x.respHeader, x.respBody, x.err = resp.StatusCode, resp.Header.Clone(), string(body), rerr
	} else {
		x.err = err
	}
	r.mu.Lock()
	r.exchanges = append(r.exchanges, x)
	r.mu.Unlock()
	return resp, err
}

func (r *restRecorder) all() []restExchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]restExchange(nil), r.exchanges...)
}

// last returns the last exchange; the test fails if there is none.
func (r *restRecorder) last(t *testing.T) restExchange {
	t.Helper()
	all := r.all()
	require.NotEmpty(t, all, "no HTTP exchange")
	return all[len(all)-1]
}

// connectREST opens an SDK index connection to srv, in namespace, whose REST
// calls go through srv.Client() wrapped in a restRecorder.
func connectREST(t *testing.T, srv *upserttest.Server, apiKey, namespace string) (*pinecone.IndexConnection, *restRecorder) {
	t.Helper()
	rec := &restRecorder{base: srv.Client().Transport}
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: apiKey, RestClient: &http.Client{Transport: rec}})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: namespace})
	require.NoError(t, err)
	t.Cleanup(func() { idx.Close() })
	return idx, rec
}

func record(id string, fields ...any) *pinecone.IntegratedRecord {
	r := pinecone.IntegratedRecord{"_id": id}
	for i := 0; i+1 < len(fields); i += 2 {
		r[fields[i].(string)] = fields[i+1]
	}
	return &r
}

func records(prefix string, n int) []*pinecone.IntegratedRecord {
	out := make([]*pinecone.IntegratedRecord, n)
	for i := range out {
		out[i] = record(fmt.Sprintf("%s-%d", prefix, i), "chunk_text", "text")
	}
	return out
}

// rpcStatus decodes an error body of the server: Pinecone's data-plane
// google.rpc.Status, {"code":<numeric gRPC code>,"message":"...","details":[]}.
type rpcStatus struct {
	Code    *int32  `json:"code"`
	Message *string `json:"message"`
	Details []any   `json:"details"`
}

// decodeError decodes body as an rpcStatus, and fails the test unless it
// has a code, a message and a list of details, and nothing else.
func decodeError(t *testing.T, body string) (code codes.Code, message string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	var e rpcStatus
	require.NoError(t, dec.Decode(&e), "body %q", body)
	require.NotNil(t, e.Code, "no code in %q", body)
	require.NotNil(t, e.Message, "no message in %q", body)
	require.NotNil(t, e.Details, "no details in %q", body)
	return codes.Code(*e.Code), *e.Message
}

// post sends body to path of srv's HTTPS endpoint with srv.Client(),
// without the SDK, and returns the status, the headers and the body.
func post(t *testing.T, srv *upserttest.Server, path, apiKey, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(bg(t), http.MethodPost, srv.RESTHost()+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-ndjson")
	if apiKey != "" {
		req.Header.Set("Api-Key", apiKey)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

func TestRecordsUpsertThroughTheSDK(t *testing.T) {
	srv := start(t)
	idx, rec := connectREST(t, srv, "test", ns)

	err := idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{
		record("rec1", "chunk_text", "Apples are a great source of fiber.", "category", "nutrition", "year", 2020, "tags", []string{"a", "b"}),
		{"id": "rec2", "chunk_text": "Line\nbreaks and \"quotes\" survive.", "flag": true},
	})
	require.NoError(t, err)

	assert.Equal(t, map[string]map[string]any{
		"rec1": {"chunk_text": "Apples are a great source of fiber.", "category": "nutrition", "year": float64(2020), "tags": []any{"a", "b"}},
		"rec2": {"chunk_text": "Line\nbreaks and \"quotes\" survive.", "flag": true},
	}, srv.Records(ns))
	assert.Equal(t, 2, srv.RecordCount(ns))
	got, ok := srv.Record(ns, "rec2")
	require.True(t, ok)
	assert.Equal(t, true, got["flag"])
	_, ok = srv.Record(ns, "missing")
	assert.False(t, ok)
	assert.Zero(t, srv.Count(ns), "records are not vectors")
	assert.Empty(t, srv.Namespaces())

	t.Run("the SDK sends one NDJSON POST with its headers", func(t *testing.T) {
		x := rec.last(t)
		assert.Equal(t, http.MethodPost, x.method)
		assert.Equal(t, "/records/namespaces/"+ns+"/upsert", x.path)
		assert.Equal(t, "application/x-ndjson", x.reqHeader.Get("Content-Type"))
		assert.Equal(t, "test", x.reqHeader.Get("Api-Key"))
		assert.Equal(t, "2025-10", x.reqHeader.Get("X-Pinecone-Api-Version"))
		lines := strings.Split(strings.TrimSuffix(x.reqBody, "\n"), "\n")
		require.Len(t, lines, 2)
		for _, l := range lines {
			var m map[string]any
			assert.NoError(t, json.Unmarshal([]byte(l), &m), "line %q", l)
		}
	})

	t.Run("the server answers 201 with an empty body", func(t *testing.T) {
		x := rec.last(t)
		assert.Equal(t, http.StatusCreated, x.status)
		assert.Empty(t, x.respBody)
	})

	t.Run("stats count the REST request", func(t *testing.T) {
		st := srv.Stats()
		assert.Equal(t, 1, st.Requests)
		assert.Equal(t, 1, st.RESTRequests)
		assert.Equal(t, map[codes.Code]int{codes.OK: 1}, st.Codes)
		assert.Equal(t, map[int]int{http.StatusCreated: 1}, st.HTTPCodes)
		assert.Equal(t, 2, st.RecordsWritten)
		assert.Zero(t, st.VectorsWritten)
		assert.EqualValues(t, len(rec.last(t).reqBody), st.BytesReceived)
	})

	t.Run("accessors return deep copies", func(t *testing.T) {
		all := srv.Records(ns)
		all["rec1"]["category"] = "changed"
		all["rec1"]["tags"].([]any)[0] = "changed"
		one, _ := srv.Record(ns, "rec1")
		assert.Equal(t, "nutrition", one["category"])
		assert.Equal(t, []any{"a", "b"}, one["tags"])
	})

	t.Run("a later upsert overwrites a record", func(t *testing.T) {
		require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("rec1", "chunk_text", "new")}))
		got, _ := srv.Record(ns, "rec1")
		assert.Equal(t, map[string]any{"chunk_text": "new"}, got)
		assert.Equal(t, 3, srv.Stats().RecordsWritten)
	})

	t.Run("Reset forgets records", func(t *testing.T) {
		srv.Reset()
		assert.Zero(t, srv.RecordCount(ns))
		assert.Equal(t, upserttest.Stats{Codes: map[codes.Code]int{}}, srv.Stats())
	})
}

func TestRecordsNamespaces(t *testing.T) {
	srv := start(t)
	for _, namespace := range []string{"", "with space", "a/b", "q?x=1#f%20"} {
		idx, rec := connectREST(t, srv, "test", namespace)
		require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("r", "chunk_text", namespace)}))
		require.Equal(t, http.StatusCreated, rec.last(t).status)
		want := namespace
		if want == "" {
			want = "__default__" // the SDK's name for the default namespace
		}
		got, ok := srv.Record(want, "r")
		require.True(t, ok, "namespace %q", want)
		assert.Equal(t, namespace, got["chunk_text"])
	}
}

// The SDK's UpsertRecords returns an error for an answer other than 201
// since v5.4.1 (v5.2.0 returned nil, and the records were silently lost): a
// *pinecone.PineconeError with the HTTP status as its Code.
func TestSDKUpsertRecordsReturnsErrorStatus(t *testing.T) {
	t.Run("429 with Retry-After", func(t *testing.T) {
		srv := start(t, upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
			return upserttest.Fault{Code: codes.ResourceExhausted, RetryAfter: 1500 * time.Millisecond}
		}))
		idx, rec := connectREST(t, srv, "test", ns)

		err := idx.UpsertRecords(bg(t), records("r", 3))

		var pe *pinecone.PineconeError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, http.StatusTooManyRequests, pe.Code)
		assert.Zero(t, srv.RecordCount(ns), "nothing was stored")
		x := rec.last(t)
		assert.Equal(t, http.StatusTooManyRequests, x.status)
		assert.Equal(t, "2", x.respHeader.Get("Retry-After"), "whole seconds, rounded up")
		assert.Equal(t, "application/json", x.respHeader.Get("Content-Type"))
		got, message := decodeError(t, x.respBody)
		assert.Equal(t, codes.ResourceExhausted, got)
		assert.Contains(t, message, "max upsert size limit per second")
		st := srv.Stats()
		assert.Equal(t, map[int]int{http.StatusTooManyRequests: 1}, st.HTTPCodes)
		assert.Equal(t, map[codes.Code]int{codes.ResourceExhausted: 1}, st.Codes)
	})

	t.Run("400", func(t *testing.T) {
		srv := start(t, upserttest.WithFaults(upserttest.RejectIDs("poison")))
		idx, rec := connectREST(t, srv, "test", ns)
		err := idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("ok"), record("poison")})
		var pe *pinecone.PineconeError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, http.StatusBadRequest, pe.Code)
		assert.Zero(t, srv.RecordCount(ns))
		assert.Equal(t, http.StatusBadRequest, rec.last(t).status)
		got, _ := decodeError(t, rec.last(t).respBody)
		assert.Equal(t, codes.InvalidArgument, got)
	})
}

func TestRecordsValidation(t *testing.T) {
	t.Run("the SDK itself rejects a record without id, sending nothing", func(t *testing.T) {
		srv := start(t)
		idx, rec := connectREST(t, srv, "test", ns)
		err := idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{{"chunk_text": "no id"}})
		require.Error(t, err)
		assert.Empty(t, rec.all())
		assert.Zero(t, srv.Stats().Requests)
	})

	// Each case goes through the SDK, which returns an error for any status
	// but 201; the status and body are read from the recorder.
	tests := []struct {
		name    string
		records []*pinecone.IntegratedRecord
		status  int
	}{
		{"96 records are accepted", records("r", upserttest.MaxRecordsPerRequest), http.StatusCreated},
		{"97 records are rejected", records("r", upserttest.MaxRecordsPerRequest+1), http.StatusBadRequest},
		{"an empty id is rejected", []*pinecone.IntegratedRecord{record("ok"), record("")}, http.StatusBadRequest},
		{"an id of 512 bytes is accepted", []*pinecone.IntegratedRecord{record(strings.Repeat("x", upserttest.MaxIDBytes), "chunk_text", "t")}, http.StatusCreated},
		{"an id over 512 bytes is rejected", []*pinecone.IntegratedRecord{record(strings.Repeat("x", upserttest.MaxIDBytes+1))}, http.StatusBadRequest},
		{"a non-string id is rejected", []*pinecone.IntegratedRecord{{"_id": 7, "chunk_text": "t"}}, http.StatusBadRequest},
		{"a nil record, sent by the SDK as null, is rejected", []*pinecone.IntegratedRecord{record("ok"), nil}, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t)
			idx, rec := connectREST(t, srv, "test", ns)
			err := idx.UpsertRecords(bg(t), tt.records)
			x := rec.last(t)
			if tt.status == http.StatusCreated {
				require.NoError(t, err)
			} else {
				var pe *pinecone.PineconeError
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, tt.status, pe.Code)
			}
			require.Equal(t, tt.status, x.status, "body %s", x.respBody)
			if tt.status == http.StatusCreated {
				assert.Equal(t, len(tt.records), srv.RecordCount(ns))
				return
			}
			assert.Zero(t, srv.RecordCount(ns), "the whole request is rejected")
			got, message := decodeError(t, x.respBody)
			assert.Equal(t, codes.InvalidArgument, got)
			assert.NotEmpty(t, message)
			assert.Equal(t, map[int]int{http.StatusBadRequest: 1}, srv.Stats().HTTPCodes)
		})
	}

	t.Run("a line that is not JSON is rejected before the fault script", func(t *testing.T) {
		var calls int
		var mu sync.Mutex
		srv := start(t, upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
			mu.Lock()
			calls++
			mu.Unlock()
			return upserttest.Fault{}
		}))
		status, _, body := post(t, srv, "/records/namespaces/ns/upsert", "k", "{\"_id\":\"a\"}\nnot json\n")
		assert.Equal(t, http.StatusBadRequest, status)
		got, _ := decodeError(t, body)
		assert.Equal(t, codes.InvalidArgument, got)
		assert.Zero(t, srv.RecordCount(ns))
		mu.Lock()
		assert.Zero(t, calls)
		mu.Unlock()
		st := srv.Stats()
		assert.Equal(t, 1, st.Requests)
		assert.Equal(t, 1, st.RESTRequests)
		assert.Zero(t, st.BytesReceived)
	})

	t.Run("a body over WithMaxRequestBytes is answered 400", func(t *testing.T) {
		srv := start(t, upserttest.WithMaxRequestBytes(100))
		status, _, body := post(t, srv, "/records/namespaces/ns/upsert", "k", fmt.Sprintf(`{"_id":"a","chunk_text":%q}`, strings.Repeat("x", 200)))
		assert.Equal(t, http.StatusBadRequest, status)
		got, msg := decodeError(t, body)
		assert.Equal(t, codes.InvalidArgument, got)
		assert.Equal(t, "Your request is larger than the maximum supported size - 100 bytes (upserttest.WithMaxRequestBytes). "+
			"Please try to reduce your batch size.", msg,
			"the message names the configured limit, not Pinecone's 2MB")
		st := srv.Stats()
		assert.Equal(t, map[codes.Code]int{codes.InvalidArgument: 1}, st.Codes)
		assert.Equal(t, map[int]int{http.StatusBadRequest: 1}, st.HTTPCodes)
		assert.Zero(t, st.RateLimited)
	})

	t.Run("any other path is answered 404", func(t *testing.T) {
		srv := start(t)
		status, _, body := post(t, srv, "/vectors/upsert", "k", "{}")
		assert.Equal(t, http.StatusNotFound, status)
		got, _ := decodeError(t, body)
		assert.Equal(t, codes.NotFound, got)
		resp, err := srv.Client().Get(srv.RESTHost() + "/records/namespaces/ns/upsert")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, "GET")
		assert.Zero(t, srv.Stats().Requests)
	})
}

func TestRecordsAPIKey(t *testing.T) {
	srv := start(t, upserttest.WithAPIKey("secret"))

	idx, rec := connectREST(t, srv, "wrong", ns)
	require.Error(t, idx.UpsertRecords(bg(t), records("r", 1)), "the SDK returns the 401")
	x := rec.last(t)
	assert.Equal(t, http.StatusUnauthorized, x.status)
	got, _ := decodeError(t, x.respBody)
	assert.Equal(t, codes.Unauthenticated, got)
	assert.Zero(t, srv.RecordCount(ns))

	status, _, _ := post(t, srv, "/records/namespaces/ns/upsert", "", `{"_id":"a"}`)
	assert.Equal(t, http.StatusUnauthorized, status, "no key")

	idx, rec = connectREST(t, srv, "secret", ns)
	require.NoError(t, idx.UpsertRecords(bg(t), records("r", 1)))
	assert.Equal(t, http.StatusCreated, rec.last(t).status)
	assert.Equal(t, 1, srv.RecordCount(ns))
	assert.Equal(t, map[int]int{http.StatusUnauthorized: 2, http.StatusCreated: 1}, srv.Stats().HTTPCodes)
}

func TestRecordsFaults(t *testing.T) {
	t.Run("the script sees the request", func(t *testing.T) {
		var mu sync.Mutex
		var seen []upserttest.Request
		srv := start(t, upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
			mu.Lock()
			seen = append(seen, r)
			mu.Unlock()
			return upserttest.Fault{}
		}))
		idx, rec := connectREST(t, srv, "test", ns)
		require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("x", "chunk_text", "t"), {"id": "y", "chunk_text": "t"}}))
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, seen, 1)
		r := seen[0]
		assert.True(t, r.REST)
		assert.Equal(t, 1, r.Seq)
		assert.Equal(t, ns, r.Namespace)
		assert.Equal(t, []string{"x", "y"}, r.IDs)
		assert.Equal(t, len(rec.last(t).reqBody), r.Bytes)
		assert.False(t, r.Time.IsZero())
	})

	t.Run("codes map to HTTP statuses", func(t *testing.T) {
		tests := []struct {
			code   codes.Code
			status int
		}{
			{codes.ResourceExhausted, 429},
			{codes.Unavailable, 503},
			{codes.Internal, 500},
			{codes.InvalidArgument, 400},
			{codes.Unauthenticated, 401},
			{codes.DeadlineExceeded, 504},
			{codes.PermissionDenied, 403},
		}
		for _, tt := range tests {
			srv := start(t, upserttest.WithFaults(upserttest.ErrorRate(tt.code, 1, 0)))
			status, header, body := post(t, srv, "/records/namespaces/ns/upsert", "k", `{"_id":"a"}`)
			assert.Equal(t, tt.status, status, "%v", tt.code)
			assert.Empty(t, header.Get("Retry-After"))
			got, _ := decodeError(t, body)
			assert.Equal(t, tt.code, got)
			assert.Zero(t, srv.RecordCount(ns))
			assert.Equal(t, map[int]int{tt.status: 1}, srv.Stats().HTTPCodes)
			assert.Equal(t, map[codes.Code]int{tt.code: 1}, srv.Stats().Codes)
		}
	})

	t.Run("a partial write stores the first records and answers 500", func(t *testing.T) {
		srv := start(t, upserttest.WithFaults(upserttest.PartialWrites(1, 3)))
		idx, rec := connectREST(t, srv, "test", ns)
		require.Error(t, idx.UpsertRecords(bg(t), records("r", 4)))
		assert.Equal(t, http.StatusInternalServerError, rec.last(t).status)
		assert.Equal(t, 2, srv.RecordCount(ns))
		_, ok := srv.Record(ns, "r-0")
		assert.True(t, ok)
	})

	t.Run("Retry-After is sent with an OK answer too", func(t *testing.T) {
		srv := start(t, upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
			return upserttest.Fault{RetryAfter: time.Second}
		}))
		status, header, _ := post(t, srv, "/records/namespaces/ns/upsert", "k", `{"_id":"a","chunk_text":"t"}`)
		assert.Equal(t, http.StatusCreated, status)
		assert.Equal(t, "1", header.Get("Retry-After"))
	})

	t.Run("a reset fails the call, which the SDK does report, and the next call works", func(t *testing.T) {
		srv := start(t, upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
			return upserttest.Fault{Reset: r.Seq == 1, Write: upserttest.WriteAll}
		}))
		idx, rec := connectREST(t, srv, "test", ns)
		err := idx.UpsertRecords(bg(t), records("a", 2))
		require.Error(t, err, "a transport error reaches the caller")
		assert.Error(t, rec.last(t).err)
		assert.Equal(t, 2, srv.RecordCount(ns), "written before the reset")
		require.NoError(t, idx.UpsertRecords(bg(t), records("b", 1)))
		assert.Equal(t, http.StatusCreated, rec.last(t).status)
		assert.Equal(t, map[int]int{0: 1, http.StatusCreated: 1}, srv.Stats().HTTPCodes)
		assert.Equal(t, 1, srv.Stats().Codes[codes.Unavailable])
	})

	t.Run("a delayed answer times out a write that landed", func(t *testing.T) {
		srv := start(t, upserttest.WithFaults(upserttest.AmbiguousTimeouts(1, 300*time.Millisecond, 1)))
		idx, _ := connectREST(t, srv, "test", ns)
		err := idx.UpsertRecords(ctxTimeout(t, 30*time.Millisecond), records("r", 1))
		require.ErrorContains(t, err, "deadline exceeded")
		assert.Equal(t, 1, srv.RecordCount(ns))
	})
}

func TestRecordsCapacity(t *testing.T) {
	t.Run("a record counts as a vector for WithRate, shared with gRPC", func(t *testing.T) {
		srv := start(t, upserttest.WithRate(0.001, 3))
		vidx := connect(t, srv)
		_, err := vidx.UpsertVectors(bg(t), []*pinecone.Vector{dense("v", 1)})
		require.NoError(t, err)
		idx, rec := connectREST(t, srv, "test", ns)
		require.NoError(t, idx.UpsertRecords(bg(t), records("a", 2)))
		assert.Equal(t, http.StatusCreated, rec.last(t).status)
		require.Error(t, idx.UpsertRecords(bg(t), records("b", 1)))
		x := rec.last(t)
		assert.Equal(t, http.StatusTooManyRequests, x.status)
		_, message := decodeError(t, x.respBody)
		assert.Contains(t, message, "max upsert size limit per second")
		assert.Equal(t, 1, srv.Stats().RateLimited)
		assert.Equal(t, 2, srv.RecordCount(ns))
	})

	t.Run("the body size counts for WithByteRate", func(t *testing.T) {
		srv := start(t, upserttest.WithByteRate(0.001, 100))
		status, _, _ := post(t, srv, "/records/namespaces/ns/upsert", "k", fmt.Sprintf(`{"_id":"a","t":%q}`, strings.Repeat("x", 60)))
		assert.Equal(t, http.StatusCreated, status)
		status, _, _ = post(t, srv, "/records/namespaces/ns/upsert", "k", fmt.Sprintf(`{"_id":"b","t":%q}`, strings.Repeat("x", 60)))
		assert.Equal(t, http.StatusTooManyRequests, status)
	})

	t.Run("slots and latency apply", func(t *testing.T) {
		srv := start(t, upserttest.WithSlots(1), upserttest.WithLatency(30*time.Millisecond, 0))
		idx, _ := connectREST(t, srv, "test", ns)
		began := time.Now()
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				assert.NoError(t, idx.UpsertRecords(bg(t), records(fmt.Sprint(i), 1)))
			}()
		}
		wg.Wait()
		assert.GreaterOrEqual(t, time.Since(began), 90*time.Millisecond)
		st := srv.Stats()
		assert.Equal(t, 1, st.MaxInFlight)
		assert.Positive(t, st.MaxQueued)
		assert.Equal(t, 3, srv.RecordCount(ns))
	})
}

func TestRESTAndGRPCShareThePort(t *testing.T) {
	srv := start(t)
	vidx := connect(t, srv)
	idx, _ := connectREST(t, srv, "test", ns)
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := vidx.UpsertVectors(bg(t), []*pinecone.Vector{dense(fmt.Sprint("v", i), 1)})
			assert.NoError(t, err)
		}()
		go func() {
			defer wg.Done()
			assert.NoError(t, idx.UpsertRecords(bg(t), records(fmt.Sprint("r", i), 2)))
		}()
	}
	wg.Wait()
	assert.Equal(t, n, srv.Count(ns))
	assert.Equal(t, 2*n, srv.RecordCount(ns))
	st := srv.Stats()
	assert.Equal(t, 2*n, st.Requests)
	assert.Equal(t, n, st.RESTRequests)
	assert.Equal(t, map[codes.Code]int{codes.OK: 2 * n}, st.Codes)
	assert.Equal(t, map[int]int{http.StatusCreated: n}, st.HTTPCodes)
}

func TestRESTRestart(t *testing.T) {
	srv := start(t)
	idx, _ := connectREST(t, srv, "test", ns)
	require.NoError(t, idx.UpsertRecords(bg(t), records("before", 1)))

	srv.Restart()

	assert.Equal(t, 1, srv.RecordCount(ns), "records survive a restart")
	// The HTTP client may try its closed kept-alive connection once.
	require.Eventually(t, func() bool {
		return idx.UpsertRecords(bg(t), records("after", 1)) == nil
	}, 2*time.Second, 5*time.Millisecond)
	assert.Equal(t, 2, srv.RecordCount(ns))

	t.Run("a REST write in progress is abandoned", func(t *testing.T) {
		srv := start(t, upserttest.WithLatency(time.Minute, 0))
		idx, _ := connectREST(t, srv, "test", ns)
		done := make(chan error, 1)
		go func() { done <- idx.UpsertRecords(bg(t), records("lost", 1)) }()
		require.Eventually(t, func() bool { return srv.Stats().MaxInFlight == 1 }, time.Second, time.Millisecond)
		srv.Restart()
		assert.Error(t, <-done, "a transport error")
		assert.Zero(t, srv.RecordCount(ns))
	})

	t.Run("Close ends a REST write in progress", func(t *testing.T) {
		srv := upserttest.NewServer(upserttest.WithLatency(time.Minute, 0))
		idx, _ := connectREST(t, srv, "test", ns)
		done := make(chan error, 1)
		go func() { done <- idx.UpsertRecords(bg(t), records("lost", 1)) }()
		require.Eventually(t, func() bool { return srv.Stats().MaxInFlight == 1 }, time.Second, time.Millisecond)
		srv.Close()
		assert.Error(t, <-done)
		assert.Zero(t, srv.RecordCount(ns))
	})
}

func TestCertificateAndClient(t *testing.T) {
	srv := start(t)
	cert := srv.Certificate()
	require.NotNil(t, cert)
	assert.NoError(t, cert.VerifyHostname("127.0.0.1"))
	assert.NoError(t, cert.VerifyHostname("localhost"))
	assert.True(t, time.Now().Before(cert.NotAfter))
	assert.Equal(t, "https://"+srv.Addr(), srv.RESTHost())
	assert.Same(t, srv.Client(), srv.Client())

	t.Run("a client that does not trust it fails", func(t *testing.T) {
		c := &http.Client{Transport: &http.Transport{}}
		defer c.CloseIdleConnections()
		_, err := c.Post(srv.RESTHost()+"/records/namespaces/ns/upsert", "application/x-ndjson", strings.NewReader(`{"_id":"a"}`))
		var unknown x509.UnknownAuthorityError
		assert.ErrorAs(t, err, &unknown)
		assert.Zero(t, srv.RecordCount(ns))
	})

	t.Run("another server's client does not trust it", func(t *testing.T) {
		other := start(t)
		_, err := other.Client().Post(srv.RESTHost()+"/x", "text/plain", nil)
		assert.Error(t, err)
	})

	t.Run("a connection that sends nothing does not block others", func(t *testing.T) {
		c, err := net.Dial("tcp", srv.Addr())
		require.NoError(t, err)
		defer c.Close()
		status, _, _ := post(t, srv, "/records/namespaces/ns/upsert", "k", `{"_id":"a","chunk_text":"t"}`)
		assert.Equal(t, http.StatusCreated, status)
	})
}

// A record's fields but its id are its metadata, and follow metadata's
// rules, as for vectors: Pinecone refuses a records request holding one
// over 40 KB, or a null, and stores none of its records.
func TestUpserttestRefusesARecordWhoseFieldsBreakTheMetadataRules(t *testing.T) {
	srv := upserttest.NewServer()
	defer srv.Close()
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test-key", RestClient: srv.Client()})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "ns"})
	require.NoError(t, err)
	defer idx.Close()
	for _, rec := range []*pinecone.IntegratedRecord{
		{"_id": "big", "chunk_text": "x", "body": strings.Repeat("y", 41_000)},
		{"_id": "null", "chunk_text": "x", "author": nil},
	} {
		ok := &pinecone.IntegratedRecord{"_id": "ok", "chunk_text": "y"}
		err = idx.UpsertRecords(context.Background(), []*pinecone.IntegratedRecord{ok, rec})
		require.Error(t, err, "record %s", (*rec)["_id"])
		var pe *pinecone.PineconeError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, 400, pe.Code)
		assert.Empty(t, srv.Records("ns"))
	}
}

// A data-plane REST error has the body of Pinecone's OpenAPI spec for the
// records upsert (2025-10, every 4xx and 5xx: schema rpcStatus), which the
// SDK's generated client decodes, and a real answer shows
// (probots-io/pinecone-php#15): {"code":3,"message":"...","details":[]},
// the numeric gRPC code, not the control plane's
// {"error":{"code":"INVALID_ARGUMENT",...},"status":400}. The messages
// and HTTP statuses are unchanged.
func TestRecordsUpsertErrorBodyIsAnRPCStatus(t *testing.T) {
	srv := start(t)
	// 97 records: over the 96 records a request may hold, a plain 400.
	status, header, body := post(t, srv, "/records/namespaces/ns/upsert", "k", recordsNDJSON(upserttest.MaxRecordsPerRequest+1, ""))
	require.Equal(t, http.StatusBadRequest, status, body)
	assert.Equal(t, "application/json", header.Get("Content-Type"))

	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &got), body)
	assert.Equal(t, map[string]any{
		"code":    float64(codes.InvalidArgument),
		"message": "Request contains 97 records, which exceeds the limit of 96 records per upsert request",
		"details": []any{},
	}, got)

	t.Run("for every answer the endpoint sends", func(t *testing.T) {
		srv := start(t, upserttest.WithRate(0.001, 1))
		post(t, srv, "/records/namespaces/ns/upsert", "k", recordsNDJSON(1, ""))
		status, _, body := post(t, srv, "/records/namespaces/ns/upsert", "k", recordsNDJSON(1, ""))
		require.Equal(t, http.StatusTooManyRequests, status)
		got, message := decodeError(t, body)
		assert.Equal(t, codes.ResourceExhausted, got)
		assert.Contains(t, message, "max upsert size limit per second", "the message the library's classifier reads")

		status, _, body = post(t, srv, "/no/such/path", "k", "")
		require.Equal(t, http.StatusNotFound, status)
		got, _ = decodeError(t, body)
		assert.Equal(t, codes.NotFound, got)
	})
}

// Records are vectors once embedded ("Pinecone converts the text to dense
// vectors automatically ... and then upserts them", docs: upsert data), and
// DescribeIndexStats, the documented way to check data freshness, counts
// them, with the same lag as vectors. An id written as a record and then
// as a vector is one record of the index.
func TestDescribeIndexStatsCountsRecordsUpsertedThroughREST(t *testing.T) {
	srv := start(t)
	idx, _ := connectREST(t, srv, "test", ns)
	require.NoError(t, idx.UpsertRecords(bg(t), records("r", 3)))
	require.Equal(t, 3, srv.RecordCount(ns))

	st, err := idx.DescribeIndexStats(bg(t))
	require.NoError(t, err)
	assert.Equal(t, uint32(3), st.TotalVectorCount, "the 3 records are 3 vectors of the index")
	if assert.Contains(t, st.Namespaces, ns) {
		assert.Equal(t, uint32(3), st.Namespaces[ns].VectorCount)
	}
	assert.Zero(t, st.Dimension, "records alone fix no dimension: the server embeds nothing")

	t.Run("with vectors, an id counted once", func(t *testing.T) {
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("r-0", 1), dense("v", 1)})
		require.NoError(t, err)
		st, err := idx.DescribeIndexStats(bg(t))
		require.NoError(t, err)
		assert.Equal(t, uint32(4), st.TotalVectorCount, "r-0, r-1, r-2 and v")
	})

	t.Run("with the stats lag", func(t *testing.T) {
		clk := newVirtualClock()
		srv := start(t, upserttest.WithStatsLag(10*time.Second), upserttest.WithClock(clk.Now))
		idx, _ := connectREST(t, srv, "test", ns)
		require.NoError(t, idx.UpsertRecords(bg(t), records("r", 2)))
		count := func() uint32 {
			st, err := idx.DescribeIndexStats(bg(t))
			require.NoError(t, err)
			return st.TotalVectorCount
		}
		assert.Zero(t, count(), "new records are not counted at once")
		require.NoError(t, idx.UpsertRecords(bg(t), records("r", 2)))
		clk.Advance(10 * time.Second)
		assert.Equal(t, uint32(2), count(), "overwrites add nothing")
	})
}

// Stats.HTTPCodes: "A request that got no status, its connection being
// reset by a fault or closed by Restart or Close, counts as 0 (and as
// codes.Unavailable in Codes)". That holds for a records upsert whose body
// is still being read when Close or Restart cuts its connection; one whose
// client goes away while sending counts as 499 and codes.Canceled.
func TestARecordsUpsertCutByCloseOrRestartWhileSendingCountsAsNoStatus(t *testing.T) {
	tests := []struct {
		name     string
		cut      func(srv *upserttest.Server, conn net.Conn)
		httpCode int
		code     codes.Code
	}{
		{"Close: no status", func(srv *upserttest.Server, _ net.Conn) { srv.Close() }, 0, codes.Unavailable},
		{"Restart: no status", func(srv *upserttest.Server, _ net.Conn) { srv.Restart() }, 0, codes.Unavailable},
		{"its client goes away: 499", func(_ *upserttest.Server, conn net.Conn) { conn.Close() }, 499, codes.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t)
			conn, br := startSendingRecords(t, srv)
			tt.cut(srv, conn)
			if tt.httpCode == 0 {
				// Close and Restart return once the handler has.
				rest, _ := io.ReadAll(br)
				require.NotContains(t, string(rest), "HTTP/1.1 4", "no status was sent")
			} else {
				require.Eventually(t, func() bool { return srv.Stats().RESTRequests == 1 }, 5*time.Second, time.Millisecond)
			}
			st := srv.Stats()
			assert.Equal(t, 1, st.RESTRequests)
			assert.Equal(t, map[int]int{tt.httpCode: 1}, st.HTTPCodes)
			assert.Equal(t, map[codes.Code]int{tt.code: 1}, st.Codes)
		})
	}
}

// startSendingRecords opens a TLS connection to srv and sends a records
// upsert whose body it leaves unfinished, once the handler has begun to
// read it: Expect: 100-continue makes the server say so. It returns the
// connection, closed at the end of the test, and a reader of what the
// server sends after its 100 Continue.
func startSendingRecords(t *testing.T, srv *upserttest.Server) (net.Conn, *bufio.Reader) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	conn, err := tls.Dial("tcp", srv.Addr(), &tls.Config{RootCAs: pool})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = fmt.Fprint(conn, "POST /records/namespaces/ns/upsert HTTP/1.1\r\nHost: upserttest\r\n"+
		"Api-Key: test\r\nContent-Type: application/x-ndjson\r\nExpect: 100-continue\r\nContent-Length: 1000\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "100 Continue")
	_, err = conn.Write([]byte(`{"_id":"a","chunk_text":`))
	require.NoError(t, err)
	return conn, br
}

// An id holds one record of the index, as on Pinecone, whichever API wrote
// it (storedSizeLocked: "on Pinecone both are records of the index, one per
// id, which an upsert of the id overwrites"). A records upsert replaces a
// vector stored under its id, so a later records upsert of the id is
// charged for the small record it overwrites (WithWriteUnitRate), not for
// the vector, and the vector is gone.
func TestARecordThatReplacedAVectorIsChargedItsOwnSizeWhenOverwritten(t *testing.T) {
	srv := start(t)
	idx, _ := connectREST(t, srv, "test", ns)
	big := dense("a", 1, 2)
	big.Metadata = meta(t, map[string]any{"blob": strings.Repeat("x", 20_000)}) // about 20 KB
	_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{big})
	require.NoError(t, err)
	small := []*pinecone.IntegratedRecord{record("a", "chunk_text", "t")}
	require.NoError(t, idx.UpsertRecords(bg(t), small)) // overwrites the 20 KB vector
	before := srv.Stats().WriteUnits
	require.NoError(t, idx.UpsertRecords(bg(t), small)) // overwrites a record of about 30 bytes
	// 5 for the request (at least 5), 1 for the small record it overwrote.
	assert.EqualValues(t, 5+1, srv.Stats().WriteUnits-before)
	_, stale := srv.Vector(ns, "a")
	assert.False(t, stale, "the vector was overwritten by the record under its id")
}

// Whichever API writes an id last holds it alone: the accessors, Fetch and
// DescribeIndexStats see one record of the kind written last, the
// overwrite is charged, and a namespace whose vectors were all replaced by
// records is counted as it would be had it only ever held records.
func TestAnIDHoldsOneRecordWhicheverAPIWroteItLast(t *testing.T) {
	tests := []struct {
		name          string
		vectorFirst   bool
		vectors       int // what the accessors see at the end
		records       int
		vectorWrites  int
		recordWrites  int
		namespaces    []string
		fetched       int
		overwriteCost int64
	}{
		{"a record replaces a vector", true, 0, 1, 1, 1, []string{}, 0, 1},
		{"a vector replaces a record", false, 1, 0, 1, 1, []string{ns}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t)
			idx, _ := connectREST(t, srv, "test", ns)
			writeVector := func() {
				_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1, 2)})
				require.NoError(t, err)
			}
			writeRecord := func() {
				require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("a", "chunk_text", "t")}))
			}
			first, second := writeRecord, writeVector
			if tt.vectorFirst {
				first, second = writeVector, writeRecord
			}
			first()
			before := srv.Stats().WriteUnits
			second()

			assert.Equal(t, tt.vectors, srv.Count(ns))
			assert.Len(t, srv.Vectors(ns), tt.vectors)
			assert.Equal(t, tt.records, srv.RecordCount(ns))
			assert.Len(t, srv.Records(ns), tt.records)
			assert.Equal(t, tt.namespaces, srv.Namespaces(), "Namespaces lists those holding vectors")
			st := srv.Stats()
			assert.Equal(t, tt.vectorWrites, st.VectorsWritten)
			assert.Equal(t, tt.recordWrites, st.RecordsWritten)
			assert.EqualValues(t, 5+tt.overwriteCost, st.WriteUnits-before, "the request, and the few bytes it overwrote")

			f, err := idx.FetchVectors(bg(t), []string{"a"})
			require.NoError(t, err)
			assert.Len(t, f.Vectors, tt.fetched)
			stats, err := idx.DescribeIndexStats(bg(t))
			require.NoError(t, err)
			assert.EqualValues(t, 1, stats.TotalVectorCount, "one id, one record of the index")
			if assert.Contains(t, stats.Namespaces, ns) {
				assert.EqualValues(t, 1, stats.Namespaces[ns].VectorCount)
			}
		})
	}

	t.Run("with the stats lag, a replacement adds nothing", func(t *testing.T) {
		clk := newVirtualClock()
		srv := start(t, upserttest.WithStatsLag(10*time.Second), upserttest.WithClock(clk.Now))
		idx, _ := connectREST(t, srv, "test", ns)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1, 2)})
		require.NoError(t, err)
		clk.Advance(10 * time.Second)
		require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("a", "chunk_text", "t")}))
		st, err := idx.DescribeIndexStats(bg(t))
		require.NoError(t, err)
		assert.EqualValues(t, 1, st.TotalVectorCount, "the id was counted already")
	})
}

// A record must hold the text the index embeds: "a field that matches your
// index's field_map configuration" (OpenAPI spec 2025-10, records upsert).
// Without WithFieldMap, a record with no string field but its id is
// refused, since no field map could name one; with it, a record whose
// field is missing, empty or not a string. The whole request is refused.
func TestRecordWithoutTextToEmbedIsRefused(t *testing.T) {
	srv := start(t)
	idx, _ := connectREST(t, srv, "test", ns)
	err := idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("ok", "chunk_text", "t"), record("r1", "year", 2020.0)})
	require.Error(t, err, "a record with nothing to embed is refused")
	code, _ := restStatus(t, err)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Zero(t, srv.RecordCount(ns), "nothing written")

	t.Run("WithFieldMap names the field", func(t *testing.T) {
		srv := start(t, upserttest.WithFieldMap("chunk_text"))
		idx, rec := connectREST(t, srv, "test", ns)
		for _, bad := range []*pinecone.IntegratedRecord{
			record("r", "text", "the wrong field"),
			record("r", "chunk_text", ""),
			record("r", "chunk_text", 7.0),
		} {
			err := idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("ok", "chunk_text", "t"), bad})
			require.Error(t, err, "%v", *bad)
			got, message := decodeError(t, rec.last(t).respBody)
			assert.Equal(t, codes.InvalidArgument, got)
			assert.Contains(t, message, "chunk_text")
			assert.Zero(t, srv.RecordCount(ns))
		}
		require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("ok", "chunk_text", "t")}))
	})
}

// Pinecone authenticates a request before reading it: a wrong or missing
// key is answered 401 UNAUTHENTICATED whatever the body (WithAPIKey).
func TestRecordsAPIKeyIsCheckedBeforeTheBody(t *testing.T) {
	srv := start(t, upserttest.WithAPIKey("right"), upserttest.WithMaxRequestBytes(100))
	for _, body := range []string{"this is not NDJSON\n", strings.Repeat("x", 200)} {
		status, _, resp := post(t, srv, "/records/namespaces/ns/upsert", "wrong", body)
		assert.Equal(t, http.StatusUnauthorized, status, "a wrong key is answered 401 whatever the body: %s", strings.TrimSpace(resp))
		got, message := decodeError(t, resp)
		assert.Equal(t, codes.Unauthenticated, got)
		assert.Equal(t, "Unauthorized", message)
	}
	st := srv.Stats()
	assert.Equal(t, 2, st.Requests)
	assert.Equal(t, map[int]int{http.StatusUnauthorized: 2}, st.HTTPCodes)
	assert.Zero(t, st.BytesReceived, "the body is not read")
}
