package upsert

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/upsertlib/upsert/upserttest"
	"google.golang.org/grpc/codes"
)

// textRecords makes n integrated records "t0".. with a short text.
func textRecords(n int) []*pinecone.IntegratedRecord {
	out := make([]*pinecone.IntegratedRecord, n)
	for i := range out {
		out[i] = &pinecone.IntegratedRecord{"_id": fmt.Sprint("t", i), "chunk_text": fmt.Sprint("text ", i)}
	}
	return out
}

// Pinecone takes at most 96 integrated records per request: Records
// refuses a batch size above that before sending anything (it once sent
// requests of 200, each refused whole and bisected until it fit).
func TestRecordsRefuseABatchSizeOver96(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	send := func(_ context.Context, _ string, b []*pinecone.IntegratedRecord) error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(b))
		return nil
	}
	res, err := Records(context.Background(), slices.Values(textRecords(400)),
		WithRecordsFunc(send), WithBatchSize(200), withClock(newFakeClock()), withRand(maxRand))
	require.ErrorIs(t, err, ErrBadOption)
	assert.ErrorContains(t, err, "WithBatchSize(200)")
	assert.Empty(t, sizes, "nothing is sent")
	assert.Zero(t, res.Upserted)

	res, err = Records(context.Background(), slices.Values(textRecords(400)),
		WithRecordsFunc(send), WithBatchSize(MaxRecordsBatchSize), withClock(newFakeClock()), withRand(maxRand))
	require.NoError(t, err)
	assert.Equal(t, 400, res.Upserted)
}

// Every field of an integrated record but its id is stored as the record's
// metadata, under the rules of metadata (40 KB per record; strings,
// numbers, booleans or lists of strings), and one of them is the text the
// index embeds: a record that breaks one fails alone before sending,
// instead of taking its request of up to 96 down.
func TestIntegratedRecordFieldsFollowTheMetadataRules(t *testing.T) {
	tests := []struct {
		name string
		rec  *pinecone.IntegratedRecord
	}{
		{"a nested object", &pinecone.IntegratedRecord{"_id": "bad", "chunk_text": "x", "meta": map[string]any{"a": "b"}}},
		{"a null", &pinecone.IntegratedRecord{"_id": "bad", "chunk_text": "x", "author": nil}},
		{"a list of numbers", &pinecone.IntegratedRecord{"_id": "bad", "chunk_text": "x", "scores": []any{1.0, 2.0}}},
		{"over 40 KB of fields", &pinecone.IntegratedRecord{"_id": "bad", "chunk_text": "x", "body": strings.Repeat("y", 41_000)}},
		// Pinecone refuses a record without its field_map's field, a string.
		{"no text to embed", &pinecone.IntegratedRecord{"_id": "bad", "year": 2020, "id": "also-an-id"}},
	}
	for _, tt := range tests {
		t.Run("a record with "+tt.name+" is refused before sending", func(t *testing.T) {
			var mu sync.Mutex
			var sent []string
			send := func(_ context.Context, _ string, b []*pinecone.IntegratedRecord) error {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range b {
					sent = append(sent, (*r)["_id"].(string))
				}
				return nil
			}
			recs := []*pinecone.IntegratedRecord{{"_id": "ok-1", "chunk_text": "a"}, tt.rec, {"_id": "ok-2", "chunk_text": "b"}}
			res, err := Records(context.Background(), slices.Values(recs), WithRecordsFunc(send), withClock(newFakeClock()), withRand(maxRand))
			require.ErrorIs(t, err, ErrInvalid)
			require.Len(t, res.Failed, 1)
			assert.Equal(t, "bad", res.Failed[0].ID)
			assert.Zero(t, res.Failed[0].Attempts, "refused before sending")
			assert.Contains(t, res.Failed[0].Err.Error(), "record 1")
			assert.NotContains(t, sent, "bad")
			assert.Equal(t, 2, res.Upserted)
		})
	}
}

// Records copies each record as it is pulled, so that a producer may reuse
// its buffers once the iterator resumes: a field holding a json.RawMessage
// (a decoder's pre-encoded value) once kept sharing the producer's buffer,
// and what was sent was what the buffer held later.
func TestRecordsCopyARawMessageField(t *testing.T) {
	buf := []byte(`["a","b"]`)
	seq := func(yield func(*pinecone.IntegratedRecord) bool) {
		rec := &pinecone.IntegratedRecord{"_id": "r0", "chunk_text": "x", "tags": json.RawMessage(buf)}
		if !yield(rec) {
			return
		}
		copy(buf, `["x","y"]`) // the decoder reuses its buffer
	}
	var mu sync.Mutex
	var sent []string
	send := func(_ context.Context, _ string, b []*pinecone.IntegratedRecord) error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range b {
			j, err := json.Marshal(r)
			if err != nil {
				return err
			}
			sent = append(sent, string(j))
		}
		return nil
	}
	res, err := Records(context.Background(), iter.Seq[*pinecone.IntegratedRecord](seq), WithRecordsFunc(send), withClock(newFakeClock()), withRand(maxRand))
	require.NoError(t, err)
	assert.Equal(t, 1, res.Upserted)
	require.Len(t, sent, 1)
	assert.Contains(t, sent[0], `"tags":["a","b"]`, "the record as it was pulled")
}

// textRecordsOf makes n integrated records "rec-0000".. with a short text.
func textRecordsOf(n int) []*pinecone.IntegratedRecord {
	out := make([]*pinecone.IntegratedRecord, n)
	for i := range out {
		out[i] = &pinecone.IntegratedRecord{"_id": fmt.Sprintf("rec-%04d", i), "chunk_text": fmt.Sprint("text ", i)}
	}
	return out
}

// recordsConn opens an index connection to srv in namespace "docs" whose
// REST calls go through rest, with the library's transport (upsert.NewClient)
// or without it (pinecone.NewClient).
func recordsConn(t *testing.T, srv *upserttest.Server, rest *http.Client, withTransport bool) *pinecone.IndexConnection {
	t.Helper()
	newClient := pinecone.NewClient
	if withTransport {
		newClient = NewClient
	}
	pc, err := newClient(pinecone.NewClientParams{ApiKey: "k", RestClient: rest})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"})
	require.NoError(t, err)
	t.Cleanup(func() { idx.Close() })
	return idx
}

// Pinecone's REST API maps gRPC codes to HTTP statuses as grpc-gateway
// does: ABORTED (a transient conflict, which the library retries as a
// server error over gRPC) comes back as 409 with "code":"ABORTED" in the
// body: retried as over gRPC (every 409 was once read as invalid input,
// the batch bisected down to single records that failed for good).
func TestRecordsRetryARESTAbortedConflictLikeTheGRPCOne(t *testing.T) {
	for _, withTransport := range []bool{true, false} {
		t.Run(fmt.Sprintf("library transport %v", withTransport), func(t *testing.T) {
			srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
				if r.Seq <= 3 {
					return upserttest.Fault{Code: codes.Aborted}
				}
				return upserttest.Fault{}
			}))
			defer srv.Close()
			res, err := Records(context.Background(), slices.Values(textRecordsOf(50)),
				WithIndex(recordsConn(t, srv, srv.Client(), withTransport)), withClock(newFakeClock()), withRand(maxRand))
			require.NotZero(t, srv.Stats().HTTPCodes[http.StatusConflict], "the index answered 409 ABORTED")
			assert.NoError(t, err)
			assert.Empty(t, res.Failed, "a transient conflict is retried, not blamed on the records")
			assert.Equal(t, 50, srv.RecordCount("docs"))
		})
	}
	// The same answer over gRPC is a server error: retried.
	assert.Equal(t, ClassServer, classOfGRPC(codes.Aborted, "aborted"))
	assert.Equal(t, ClassServer, classOfHTTP(http.StatusConflict,
		`{"error":{"code":"ABORTED","message":"transaction aborted"},"status":409}`))
	// Pinecone's data plane answers a google.rpc.Status, the code a number.
	assert.Equal(t, ClassServer, classOfHTTP(http.StatusConflict, `{"code":10,"message":"transaction aborted","details":[]}`))
	assert.Equal(t, ClassInvalid, classOfHTTP(http.StatusConflict, `{"code":6,"message":"already exists","details":[]}`))
	assert.Equal(t, ClassInvalid, classOfHTTP(http.StatusConflict, `{"code":100,"message":"?"}`))
}

// A 429 over REST reaches RequestDone as over gRPC: its status and the
// limit its message names (the request rate here), for the limiter to cut
// that rate; through the library's transport, also the index's
// Retry-After, which the run waits out.
func TestRecordsOverRESTReadTheStatusLimitAndRetryAfterOfA429(t *testing.T) {
	for _, withTransport := range []bool{true, false} {
		t.Run(fmt.Sprintf("library transport %v", withTransport), func(t *testing.T) {
			srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
				if r.Seq == 1 {
					return upserttest.Fault{Code: codes.ResourceExhausted, RetryAfter: 7 * time.Second,
						Message: "Request failed. You've reached the upsert QPS limit for namespace docs (100 QPS). Pace your upsert requests."}
				}
				return upserttest.Fault{}
			}))
			defer srv.Close()
			clk := newFakeClock()
			start := clk.Now()
			var mu sync.Mutex
			var errs []*Error
			res, err := Records(context.Background(), slices.Values(textRecordsOf(10)),
				WithIndex(recordsConn(t, srv, srv.Client(), withTransport)), withClock(clk), withRand(maxRand),
				WithObserver(Observer{RequestDone: func(e RequestEvent) {
					mu.Lock()
					defer mu.Unlock()
					errs = append(errs, e.Err)
				}}))
			require.NoError(t, err)
			assert.Equal(t, 10, res.Upserted)
			mu.Lock()
			defer mu.Unlock()
			require.NotEmpty(t, errs)
			require.NotNil(t, errs[0])
			assert.Equal(t, LimitRequests, errs[0].Limit)
			assert.Equal(t, http.StatusTooManyRequests, errs[0].StatusCode)
			if withTransport {
				assert.Equal(t, 1, strings.Count(errs[0].Error(), "429"), "the code said once: %v", errs[0])
				assert.Equal(t, 7*time.Second, errs[0].RetryAfter)
				assert.GreaterOrEqual(t, clk.Now().Sub(start), 7*time.Second, "the Retry-After was waited out")
			}
		})
	}
}

// http.Client follows a 307/308 of a POST whose body it can replay, as
// the SDK's request body is: a client made by pinecone.NewClient writes
// through a gateway that redirects, and so does one made by
// upsert.NewClient (whose Transport once turned the redirect into an
// error, and lost every record).
func TestNewClientFollowsRedirectsLikeTheSDKsOwnClient(t *testing.T) {
	for _, withTransport := range []bool{false, true} {
		t.Run(fmt.Sprintf("library transport %v", withTransport), func(t *testing.T) {
			srv := upserttest.NewServer()
			defer srv.Close()
			base := srv.Client().Transport
			gateway := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.URL.Query().Get("moved") == "" {
					u := *r.URL
					u.RawQuery = "moved=1"
					return &http.Response{StatusCode: http.StatusTemporaryRedirect, Header: http.Header{"Location": {u.String()}},
						Body: http.NoBody, Request: r}, nil
				}
				return base.RoundTrip(r)
			})
			idx := recordsConn(t, srv, &http.Client{Transport: gateway}, withTransport)
			res, err := Records(context.Background(), slices.Values(textRecordsOf(50)), WithIndex(idx),
				withClock(newFakeClock()), withRand(maxRand))
			assert.NoError(t, err)
			assert.Equal(t, 50, res.Upserted)
			assert.Equal(t, 50, srv.RecordCount("docs"))
		})
	}
}

// http.Client.CloseIdleConnections reaches its Transport only through the
// optional CloseIdleConnections method: the library's wrapper forwards it
// to the user's transport (without it, the call did nothing).
func TestHTTPClientForwardsCloseIdleConnections(t *testing.T) {
	closedAfter := func(c *http.Client) int32 {
		var closed atomic.Int32
		ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
		ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed {
				closed.Add(1)
			}
		}
		ts.Start()
		defer ts.Close()
		resp, err := c.Get(ts.URL)
		require.NoError(t, err)
		resp.Body.Close()
		c.CloseIdleConnections()
		for deadline := time.Now().Add(50 * time.Millisecond); closed.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond / 2)
		}
		return closed.Load()
	}
	assert.EqualValues(t, 1, closedAfter(&http.Client{Transport: &http.Transport{}}), "the user's own client closes it")
	assert.EqualValues(t, 1, closedAfter(HTTPClient(&http.Client{Transport: &http.Transport{}})), "the same client through HTTPClient")
}

// The library sends up to 64 records requests at once to one host:
// HTTPClient(nil) (and so NewClient without a RestClient) keeps as many
// idle connections, where http.DefaultTransport keeps 2 per host and every
// request above 2 in flight opened, and threw away, a new TLS connection.
func TestHTTPClientReusesConnectionsAtTheLibrarysConcurrency(t *testing.T) {
	const inFlight = 16
	var dials, inside atomic.Int32
	release := make(chan struct{})
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusCreated)
	}))
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	ts.Start()
	defer func() {
		ts.Close()
		if tr, ok := http.DefaultTransport.(*http.Transport); ok {
			tr.CloseIdleConnections()
		}
	}()
	c := HTTPClient(nil)
	wave := func() {
		done := make(chan struct{}, inFlight)
		for range inFlight {
			go func() {
				defer func() { done <- struct{}{} }()
				resp, err := c.Post(ts.URL+"/records/namespaces/docs/upsert", "application/x-ndjson", strings.NewReader("{}\n"))
				if err == nil {
					resp.Body.Close()
				}
			}()
		}
		require.Eventually(t, func() bool { return inside.Load() == inFlight }, 5*time.Second, time.Millisecond)
		inside.Store(0)
		for range inFlight {
			release <- struct{}{}
		}
		for range inFlight {
			<-done
		}
	}
	wave()
	wave()
	assert.LessOrEqual(t, dials.Load(), int32(inFlight+2), "the second wave reuses the first wave's connections")
}

// A program may replace http.DefaultTransport with a RoundTripper of
// another type (an instrumented one): Transport(nil)'s base is then that
// one as it is, where it once assumed an *http.Transport and panicked.
func TestTransportOfNilUsesAReplacedDefaultTransport(t *testing.T) {
	called := false
	replaced := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		called = true
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	})
	saved := http.DefaultTransport
	http.DefaultTransport = replaced
	defer func() { http.DefaultTransport = saved }()
	var tr http.RoundTripper
	require.NotPanics(t, func() { tr = &transport{base: newDefaultTransport()} })
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/describe_index_stats", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.True(t, called, "the replaced default transport carried the request")
}

// Transport(nil) keeps an idle connection for each request in flight, up
// to 256 to one host and with no cap over all hosts: with
// http.DefaultTransport's MaxIdleConns of 100 kept, every wave of 150
// requests threw away 50 connections and opened (over TLS, to Pinecone)
// 50 new ones.
func TestTransportOfNilKeepsAnIdleConnectionForEachRequestInFlightUpTo256(t *testing.T) {
	const inFlight = 150
	s := newCountingServer(t, true)
	c := HTTPClient(nil)
	defer c.CloseIdleConnections()
	wave := func() {
		done := make(chan struct{}, inFlight)
		for range inFlight {
			go func() {
				defer func() { done <- struct{}{} }()
				postRecords(c, s.URL)
			}()
		}
		require.Eventually(t, func() bool { return s.inside.Load() == inFlight }, 10*time.Second, time.Millisecond)
		s.inside.Store(0)
		for range inFlight {
			s.release <- struct{}{}
		}
		for range inFlight {
			<-done
		}
	}
	wave()
	wave()
	assert.LessOrEqual(t, s.dials.Load(), int32(inFlight+2),
		"the second wave of %d requests reuses the first wave's connections (MaxIdleConns of the clone: %d)", inFlight,
		c.Transport.(*transport).base.(*http.Transport).MaxIdleConns)
}

// HTTPClient(nil) (and so NewClient without a RestClient) shares one
// connection pool for the whole process, as http.DefaultTransport does: a
// transport of its own per call made a program that makes a client per
// job open a new connection (a new TLS handshake) for each, and leave each
// dropped client's idle connections open for IdleConnTimeout.
func TestHTTPClientsOfNilShareOneConnectionPoolAsTheDefaultTransportDid(t *testing.T) {
	s := newCountingServer(t, false)
	const clients = 5
	for range clients {
		c := HTTPClient(nil) // a client per job, dropped after it
		postRecords(c, s.URL)
	}
	assert.EqualValues(t, 1, s.dials.Load(),
		"%d clients made one after the other reuse one idle connection, as with http.DefaultTransport", clients)
	// Let the connections go (the clients are gone: only the server can).
	s.CloseClientConnections()
}

// countingServer is a loopback server that answers records upserts with
// 201 once release lets each request go, and counts the connections it
// was opened and the requests inside its handler.
type countingServer struct {
	*httptest.Server
	dials, inside atomic.Int32
	release       chan struct{}
}

func newCountingServer(t *testing.T, hold bool) *countingServer {
	s := &countingServer{release: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inside.Add(1)
		if hold {
			select {
			case <-s.release:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusCreated)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.dials.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func postRecords(c *http.Client, url string) {
	resp, err := c.Post(url+"/records/namespaces/docs/upsert", "application/x-ndjson", strings.NewReader("{}\n"))
	if err == nil {
		resp.Body.Close()
	}
}

// A REST 409 whose google.rpc.Status code is 10 (ABORTED) is retried
// whichever client reports it: the SDK's own error, without the library's
// Transport, quotes the body as an escaped JSON string.
func TestARESTAbortedThroughAPlainSDKClientIsRetriedAsAServerError(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
		return upserttest.Fault{Code: codes.Aborted, Message: "transaction aborted"}
	}))
	defer srv.Close()
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test-key", RestClient: srv.Client()}) // no upsert.Transport
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "docs"})
	require.NoError(t, err)
	defer idx.Close()

	err = idx.UpsertRecords(context.Background(), []*pinecone.IntegratedRecord{{"_id": "a", "chunk_text": "hello"}})
	require.Error(t, err)
	require.Equal(t, 409, httpStatus(err), "upserttest answers ABORTED with 409: %v", err)
	assert.Equal(t, ClassServer, Classify(err), "a 409 with code 10 (ABORTED) is worth another try, whichever client reports it: %v", err)
}

// Named types of a caller's own, as its domain types would be.
type (
	titleText  string // a named string type
	tenantName string
	docID      string
	docNumber  int
	// markdownText encodes itself through MarshalText, as is.
	markdownText string
	// rawJSONText encodes itself through MarshalJSON, its bytes as they are.
	rawJSONText string
)

func (m markdownText) MarshalText() ([]byte, error) { return []byte(m), nil }
func (r rawJSONText) MarshalJSON() ([]byte, error)  { return []byte(`"` + string(r) + `"`), nil }

// recordsSink is a RecordsFunc that keeps, for each record sent, its
// namespace and its JSON as the SDK encodes it.
type recordsSink struct {
	mu   sync.Mutex
	sent map[string]string // _id -> JSON
	ns   map[string]string // _id -> namespace
}

func newRecordsSink() *recordsSink {
	return &recordsSink{sent: map[string]string{}, ns: map[string]string{}}
}

func (s *recordsSink) send(_ context.Context, namespace string, b []*pinecone.IntegratedRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range b {
		j, err := json.Marshal(r)
		if err != nil {
			return err
		}
		var probe struct {
			ID    string `json:"_id"`
			Alias string `json:"id"`
		}
		if err := json.Unmarshal(j, &probe); err != nil {
			return err
		}
		id := cmp.Or(probe.ID, probe.Alias)
		s.sent[id], s.ns[id] = string(j), namespace
	}
	return nil
}

// recordsInto runs Records over recs into sink, on a fake clock.
func recordsInto(sink *recordsSink, recs []*pinecone.IntegratedRecord, opts ...Option) (Result, error) {
	opts = append([]Option{WithRecordsFunc(sink.send), withClock(newFakeClock()), withRand(maxRand)}, opts...)
	return Records(context.Background(), slices.Values(recs), opts...)
}

// A field that is not valid UTF-8 is refused before sending, whatever Go
// type holds it (README: JSON would send it altered): encoding/json writes
// \ufffd for such bytes in a string of any string type, or in the output
// of a MarshalText, and passes those of a json.RawMessage or a MarshalJSON
// as they are. The check once looked into string, map[string]any, []any and
// []string only, after the copy had turned every other type into a
// json.RawMessage, so that a *string, a named string type or a
// json.RawMessage was sent altered or as bytes that are not UTF-8.
func TestRecordsRefuseTextThatIsNotUTF8WhateverItsGoType(t *testing.T) {
	bad := "caf\xe9" // Latin-1 "café"
	tests := []struct {
		name  string
		key   string
		value any
		field string // as the error names it
	}{
		{"a *string", "title", &bad, `field "title"`},
		{"a named string type", "title", titleText(bad), `field "title"`},
		{"a json.RawMessage", "title", json.RawMessage(`"` + bad + `"`), `field "title"`},
		{"a list of a named string type", "tags", []titleText{"ok", titleText(bad)}, `field "tags"[1]`},
		{"a type with its own MarshalText", "title", markdownText(bad), `field "title"`},
		{"a type with its own MarshalJSON", "title", rawJSONText(bad), `field "title"`},
		{"a list of them", "tags", []any{"ok", &bad}, `field "tags"[1]`},
		{"the field's name", bad, "x", `field key "caf\xe9"`},
	}
	for _, tt := range tests {
		t.Run(tt.name+" holding bytes that are not UTF-8 is refused before sending", func(t *testing.T) {
			sink := newRecordsSink()
			recs := []*pinecone.IntegratedRecord{
				{"_id": "ok-1", "chunk_text": "a"},
				{"_id": "bad", "chunk_text": "b", tt.key: tt.value},
				{"_id": "ok-2", "chunk_text": "c"},
			}
			res, err := recordsInto(sink, recs)
			require.ErrorIs(t, err, ErrInvalid, "the record was sent as %s", sink.sent["bad"])
			require.Len(t, res.Failed, 1)
			f := res.Failed[0]
			assert.Equal(t, "bad", f.ID)
			assert.Zero(t, f.Attempts, "refused before sending")
			assert.ErrorContains(t, f.Err, `record 1 (id "bad")`)
			assert.ErrorContains(t, f.Err, tt.field+" is not valid UTF-8")
			assert.NotContains(t, sink.sent, "bad")
			assert.Equal(t, 2, res.Upserted)
		})
	}

	t.Run("valid text is sent whatever its type, U+FFFD and the text \\ufffd included", func(t *testing.T) {
		sink := newRecordsSink()
		recs := []*pinecone.IntegratedRecord{
			{"_id": "rune", "chunk_text": "caf\ufffd"},
			{"_id": "escape", "chunk_text": json.RawMessage(`"caf\ufffd"`)},
			{"_id": "text", "chunk_text": `caf\ufffd`},
			{"_id": "named", "chunk_text": titleText("café")},
		}
		res, err := recordsInto(sink, recs)
		require.NoError(t, err)
		assert.Equal(t, 4, res.Upserted)
		assert.Contains(t, sink.sent["escape"], `"chunk_text":"caf\ufffd"`, "the caller's own JSON, as it was given")
	})
}

// An id of a named string type, or a non-nil *string, is a string to the
// SDK, which encodes it as "_id":"r1", and to Pinecone. The copy once made
// it a json.RawMessage, refused as "id is a json.RawMessage", a type the
// caller never used, with an empty Failure.ID. An id that is not text is
// refused, and the error names the caller's type.
func TestRecordsTakeAnIDOfANamedStringType(t *testing.T) {
	id := "r2"
	sink := newRecordsSink()
	recs := []*pinecone.IntegratedRecord{
		{"_id": docID("r1"), "chunk_text": "a"},
		{"_id": &id, "chunk_text": "b"},
		{"id": docID("r3"), "chunk_text": "c"},
	}
	res, err := recordsInto(sink, recs)
	require.NoError(t, err)
	assert.Equal(t, 3, res.Upserted)
	assert.Contains(t, sink.sent["r1"], `"_id":"r1"`)
	assert.Contains(t, sink.sent["r2"], `"_id":"r2"`)
	assert.Contains(t, sink.sent, "r3")

	var nilID *string
	refused := []struct {
		name string
		id   any
		want string
	}{
		{"a number of the caller's type", docNumber(7), "id is a upsert.docNumber; it must be a string"},
		{"a nil *string", nilID, "id is a nil *string; it must be a string"},
		{"a []byte", []byte("r"), "id is a []uint8; it must be a string"},
		{"a string type that encodes itself", markdownText("r"), "id is a upsert.markdownText, which encodes itself as JSON; it must be a string"},
		{"null", nil, "id is null; it must be a string"},
	}
	for _, tt := range refused {
		t.Run("an id of "+tt.name+" is refused, naming its type", func(t *testing.T) {
			res, err := recordsInto(newRecordsSink(), []*pinecone.IntegratedRecord{{"_id": tt.id, "chunk_text": "a"}})
			require.ErrorIs(t, err, ErrInvalid)
			require.Len(t, res.Failed, 1)
			assert.ErrorContains(t, res.Failed[0].Err, tt.want)
			assert.NotContains(t, res.Failed[0].Err.Error(), "json.RawMessage", "the caller never gave a json.RawMessage")
		})
	}
}

// WithNamespaceOf routes each record to the namespace its function
// returns. Records once handed the function its copy, in which a field of
// the caller's own type had become a json.RawMessage: a function reading
// the caller's type found nothing, and the record landed silently in the
// default namespace. The function sees the caller's own record; the copy
// is made next, and is what is sent and reported (Failure.Integrated),
// with text held as plain strings.
func TestRecordsNamespaceFunctionSeesTheCallersRecord(t *testing.T) {
	sink := newRecordsSink()
	recs := []*pinecone.IntegratedRecord{
		{"_id": "a", "chunk_text": "a", "tenant": tenantName("acme")},
		{"_id": "b", "chunk_text": "b", "tenant": tenantName("globex")},
		{"_id": "c", "chunk_text": "c", "tenant": tenantName("acme"), "year": docNumber(2020), "author": nil},
	}
	var seen []string
	var given []*pinecone.IntegratedRecord
	nsOf := func(r *pinecone.IntegratedRecord) string {
		given = append(given, r)
		v := (*r)["tenant"]
		tenant, ok := v.(tenantName)
		if !ok {
			seen = append(seen, fmt.Sprintf("%T", v))
		}
		return string(tenant)
	}
	res, err := recordsInto(sink, recs, WithNamespaceOf(nsOf))
	require.ErrorIs(t, err, ErrInvalid, "c has a null field")
	assert.Equal(t, 2, res.Upserted)
	assert.Empty(t, seen, "the namespace function was not given the caller's field values")
	assert.Equal(t, recs, given, "the caller's own records")
	assert.Equal(t, map[string]string{"a": "acme", "b": "globex"}, sink.ns, "each record lands in its tenant's namespace")

	require.Len(t, res.Failed, 1)
	f := res.Failed[0]
	assert.Equal(t, "acme", f.Namespace)
	require.NotNil(t, f.Integrated)
	assert.NotSame(t, recs[2], f.Integrated, "the run's copy, which the caller's later changes do not reach")
	assert.Equal(t, pinecone.IntegratedRecord{"_id": "c", "chunk_text": "c", "tenant": "acme", "year": docNumber(2020), "author": nil}, *f.Integrated,
		"the caller's values: text as a string, as it is sent; a number of the caller's type as it is")
}

// benchRecords makes n integrated records of a typical shape: an id, a
// text of about 300 bytes and four fields of metadata.
func benchRecords(n int) []*pinecone.IntegratedRecord {
	text := strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 5)
	out := make([]*pinecone.IntegratedRecord, n)
	for i := range out {
		out[i] = &pinecone.IntegratedRecord{
			"_id": fmt.Sprintf("doc-%06d#chunk-%d", i/10, i%10), "chunk_text": text,
			"title": "A title of a document", "year": 2020 + i%5, "public": i%2 == 0, "tags": []string{"a", "b", "c"},
		}
	}
	return out
}

// BenchmarkRecords measures Records on a no-op sink: the library's own
// cost per record (copying, checking, batching).
//
//	go test -run '^$' -bench BenchmarkRecords -benchmem .
func BenchmarkRecords(b *testing.B) {
	recs := benchRecords(20_000)
	sink := func(context.Context, string, []*pinecone.IntegratedRecord) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		res, err := Records(context.Background(), slices.Values(recs), WithRecordsFunc(sink))
		if err != nil || res.Upserted != len(recs) {
			b.Fatalf("upserted %d: %v", res.Upserted, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}

// BenchmarkCheckRecord measures what Records does to each record as it
// takes it in: copy it, then check it; for records of Go's JSON types, and
// for records with fields of the caller's own types.
func BenchmarkCheckRecord(b *testing.B) {
	type title string
	plain := benchRecords(1000)
	typed := benchRecords(1000)
	for _, r := range typed {
		s := (*r)["chunk_text"].(string)
		(*r)["chunk_text"], (*r)["title"] = &s, title((*r)["title"].(string))
	}
	for name, recs := range map[string][]*pinecone.IntegratedRecord{"JSON types": plain, "caller types": typed} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, _, err := checkRecord(cloneRecord(recs[i%len(recs)])); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// panickyMarshaler is a caller's type whose MarshalJSON panics (a
// bug in the caller's code).
type panickyMarshaler struct{}

func (panickyMarshaler) MarshalJSON() ([]byte, error) { panic("caller's MarshalJSON bug") }

// A record pulled and refused (the context ended) is copied before it
// counts as taken: the copy runs the caller's MarshalJSON, and had it
// panicked after the record was taken, the call would have waited for its
// ack for ever. The panic reaches the caller.
func TestRecordsRefusedRecordWhoseCopyPanicsStillReturns(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the record pulled is refused: push fails at once with ctx's error
	rec := &pinecone.IntegratedRecord{"_id": "a", "chunk_text": "hello", "meta": panickyMarshaler{}}
	type outcome struct{ panic any }
	done := make(chan outcome, 1)
	go func() {
		var o outcome
		defer func() { o.panic = recover(); done <- o }()
		_, _ = Records(ctx, slices.Values([]*pinecone.IntegratedRecord{rec}),
			WithRecordsFunc(func(context.Context, string, []*pinecone.IntegratedRecord) error { return nil }),
			WithAcks(func([]Ack) {}))
	}()
	select {
	case o := <-done:
		assert.Equal(t, "caller's MarshalJSON bug", o.panic, "the caller's panic reaches it, once everything stopped")
	case <-time.After(3 * time.Second):
		t.Fatal("Records never returned: a record taken before its copy panicked waits for its ack for ever")
	}
}

// selfEmbedding embeds a pointer to its own type: encoding/json encodes
// only Name (the embedded Name is shadowed, the embedded type visited
// once), so json.Marshal takes a value that points to itself.
type selfEmbedding struct {
	*selfEmbedding
	Name string
}

// The search for the field that is not UTF-8 walks a value as
// encoding/json does, but JSON's shadowing let it follow an embedded
// pointer to itself until the stack overflowed, a fatal error that killed
// the process: the walk stops at a depth no metadata reaches.
func TestRecordsWithASelfEmbeddingValueFailAlone(t *testing.T) {
	n := &selfEmbedding{Name: "caf\xe9"} // Latin-1: not UTF-8
	n.selfEmbedding = n
	rec := &pinecone.IntegratedRecord{"_id": "a", "chunk_text": "hello", "meta": n}
	res, err := Records(context.Background(), slices.Values([]*pinecone.IntegratedRecord{rec}),
		WithRecordsFunc(func(context.Context, string, []*pinecone.IntegratedRecord) error { return nil }))
	require.ErrorIs(t, err, ErrInvalid)
	require.Len(t, res.Failed, 1, "refused alone (a nested object, whose text is not UTF-8)")
}

// A records namespace of "." or ".." fails its records as invalid before
// sending: in the REST path the SDK builds, a dot segment is resolved
// away, and the records would go to another endpoint, whose 404 stops the
// run as denied. The records of other namespaces land.
func TestADotNamespaceFailsItsRecordsBeforeSending(t *testing.T) {
	for _, ns := range []string{"..", "."} {
		t.Run(fmt.Sprintf("namespace %q", ns), func(t *testing.T) {
			srv := upserttest.NewServer()
			defer srv.Close()
			idx := recordsConn(t, srv, srv.Client(), true)
			recs := textRecordsOf(300)
			bad := recs[0]
			res, err := Records(context.Background(), slices.Values(recs), WithIndex(idx), WithBatchSize(1),
				WithNamespaceOf(func(r *pinecone.IntegratedRecord) string {
					if r == bad {
						return ns
					}
					return "docs"
				}), withClock(newFakeClock()), withRand(maxRand))
			require.ErrorIs(t, err, ErrInvalid)
			assert.NotErrorIs(t, err, ErrDenied, "one record's namespace must not stop the run")
			require.Len(t, res.Failed, 1, "only that record fails")
			f := res.Failed[0]
			assert.Equal(t, "rec-0000", f.ID)
			assert.Equal(t, ClassInvalid, f.Class)
			assert.Zero(t, f.Attempts, "never sent")
			assert.ErrorContains(t, f.Err, fmt.Sprintf("namespace %q", ns))
			assert.Equal(t, 299, srv.RecordCount("docs"), "every record of namespace docs lands")
		})
	}
}

// An error body cut for the error's text is cut at a character's start:
// the text goes to logs and dead letters, which would alter a split
// character.
func TestAnErrorBodyIsCutAtACharactersStart(t *testing.T) {
	for pad := range 4 {
		body := strings.Repeat("a", 299-pad) + strings.Repeat("é", 10)
		got := snippet([]byte(body))
		assert.True(t, utf8.ValidString(got), "pad %d: %q", pad, got)
		assert.True(t, strings.HasSuffix(got, "…"))
		assert.LessOrEqual(t, len(got), 300+len("…"))
	}
	assert.Equal(t, "a b", snippet([]byte("a\n  b")), "on one line")
}

// Records through a connection named "" (idx.WithNamespace(""), the name
// go-pinecone v6 uses) land in the default namespace: the REST path had
// an empty segment, which the index answers 404 (vectors over gRPC
// landed).
func TestRecordsThroughAConnectionNamedEmptyLandInTheDefaultNamespace(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithFieldMap("chunk_text"))
	defer srv.Close()
	idx := recordsConn(t, srv, srv.Client(), true).WithNamespace("")
	for _, ns := range []string{"", "__default__", "docs"} {
		t.Run(fmt.Sprintf("routed to %q", ns), func(t *testing.T) {
			srv.Reset()
			res, err := Records(context.Background(), slices.Values(textRecordsOf(5)), WithIndex(idx),
				WithNamespaceOf(func(*pinecone.IntegratedRecord) string { return ns }), withClock(newFakeClock()), withRand(maxRand))
			require.NoError(t, err)
			assert.Equal(t, 5, res.Upserted)
			want := ns
			if ns == "" {
				want = "__default__"
			}
			assert.Equal(t, 5, srv.RecordCount(want))
		})
	}
}

// Records' doc: "Each record needs an "_id" or "id" field holding a string
// (of any string type, or a non-nil pointer to one) ... a record that
// breaks one fails alone before anything is sent". json.Number is a Go
// string type, but encoding/json sends it as a JSON number (`"_id":12`),
// which Pinecone refuses ("Record ID must be a string"). A decoder with
// UseNumber() produces exactly that for an input whose id is a number.
// checkRecord (recordID → stringOf) accepted it as the id "12", so the
// record was sent and its whole request refused with a 400, bisected
// down to it. It fails alone, as invalid, before anything is sent, and
// the index sees no 400.
func TestRecordsRefuseAJSONNumberIDBeforeSending(t *testing.T) {
	twelve := json.Number("12")
	for _, tt := range []struct {
		name string
		id   any
	}{
		{"a json.Number", json.Number("12")},
		{"a *json.Number, sent as a number too", &twelve},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := upserttest.NewServer()
			defer srv.Close()
			recs := textRecordsOf(10)
			recs[4] = &pinecone.IntegratedRecord{"_id": tt.id, "chunk_text": "some text"}
			res, err := Records(context.Background(), slices.Values(recs),
				WithIndex(recordsConn(t, srv, srv.Client(), true)), withClock(newFakeClock()), withRand(maxRand))
			require.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, 9, res.Upserted)
			require.Len(t, res.Failed, 1)
			assert.Equal(t, 4, res.Failed[0].Index)
			assert.Zero(t, res.Failed[0].Attempts, "refused before sending, as a record whose id is not a string")
			assert.Contains(t, res.Failed[0].Err.Error(), "record 4")
			assert.Zero(t, srv.Stats().HTTPCodes[http.StatusBadRequest], "no request was refused by the index (the others' batch was refused and bisected)")
			assert.Equal(t, 9, srv.RecordCount("docs"))
		})
	}
}

// An integrated record's fields but its id are its metadata, and follow
// its rules: a field starting with "$" fails its record before sending.
func TestARecordFieldStartingWithDollarFailsItsRecordBeforeSending(t *testing.T) {
	srv := upserttest.NewServer()
	defer srv.Close()
	recs := make([]*pinecone.IntegratedRecord, 16)
	for i := range recs {
		recs[i] = &pinecone.IntegratedRecord{"_id": fmt.Sprintf("r%d", i), "chunk_text": "text"}
	}
	(*recs[5])["$genre"] = "drama"

	res, err := Records(context.Background(), slices.Values(recs), WithIndex(recordsConn(t, srv, srv.Client(), true)), WithBatchSize(16), WithConcurrency(1))
	require.Error(t, err)
	require.Len(t, res.Failed, 1)
	assert.Equal(t, "r5", res.Failed[0].ID)
	assert.Equal(t, ClassInvalid, res.Failed[0].Class)
	assert.Equal(t, 15, srv.RecordCount("docs"))
	assert.Zero(t, srv.Stats().Codes[codes.InvalidArgument], "nothing refused by the index")
}
