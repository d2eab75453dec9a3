package upsert_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upserttest"
)

const e2eNamespace = "e2e"

// connect opens an SDK index connection to srv, the way a user would.
func connect(t testing.TB, srv *upserttest.Server, dialOpts ...grpc.DialOption) *pinecone.IndexConnection {
	t.Helper()
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test-key"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: e2eNamespace}, append(dialOpts, upsert.PushbackDialOption())...)
	require.NoError(t, err)
	t.Cleanup(func() { idx.Close() })
	return idx
}

// e2eRecords makes n records of dimension 8, every third with metadata and
// every fifth hybrid, so that every field of a vector crosses the wire.
func e2eRecords(n int) []*pinecone.Vector {
	recs := make([]*pinecone.Vector, n)
	for i := range recs {
		vals := make([]float32, 8)
		for j := range vals {
			vals[j] = float32(i) + float32(j)/10
		}
		v := &pinecone.Vector{Id: fmt.Sprintf("rec-%05d", i), Values: &vals}
		if i%3 == 0 {
			v.Metadata, _ = structpb.NewStruct(map[string]any{"n": float64(i), "tags": []any{"a", "b"}, "title": fmt.Sprint("doc ", i)})
		}
		if i%5 == 0 {
			v.SparseValues = &pinecone.SparseValues{Indices: []uint32{uint32(i), uint32(i) + 7}, Values: []float32{0.5, 0.25}}
		}
		recs[i] = v
	}
	return recs
}

// requireEveryRecordAccounted asserts the library's promise against what
// the server stored: each record is stored with exactly the values sent,
// or is in res.Failed with one of the allowed classes (and, unless it may
// have landed, is not stored).
func requireEveryRecordAccounted(t *testing.T, srv *upserttest.Server, recs []*pinecone.Vector, res upsert.Result, allowed ...upsert.Class) {
	t.Helper()
	failed := make(map[string]upsert.Failure)
	for _, f := range res.Failed {
		failed[f.ID] = f
	}
	stored := srv.Vectors(e2eNamespace)
	missing := 0
	for _, want := range recs {
		got, ok := stored[want.Id]
		if f, isFailed := failed[want.Id]; isFailed {
			assert.Contains(t, allowed, f.Class, "record %s failed with an unexpected class: %v", want.Id, f.Err)
			if ok && !f.MayHaveLanded {
				t.Errorf("record %s is stored but reported failed with %v and not as maybe landed", want.Id, f.Class)
			}
			continue
		}
		if !ok {
			missing++
			t.Errorf("record %s is neither stored nor reported failed", want.Id)
			continue
		}
		assert.Equal(t, *want.Values, *got.Values, "values of %s", want.Id)
		assert.True(t, proto.Equal(want.Metadata, got.Metadata), "metadata of %s", want.Id)
		assert.Equal(t, want.SparseValues, got.SparseValues, "sparse values of %s", want.Id)
	}
	require.Zero(t, missing, "records silently lost")
	assert.Equal(t, len(recs), res.Upserted+len(res.Failed)+res.Duplicates)
}

func TestEndToEndThroughTheSDK(t *testing.T) {
	fast := []upsert.Option{upsert.WithBackoff(time.Millisecond, 20*time.Millisecond)}
	tests := []struct {
		name     string
		server   []upserttest.Option
		opts     []upsert.Option
		n        int
		allowed  []upsert.Class // classes records may fail with
		minRetry map[upsert.Class]int
		check    func(t *testing.T, srv *upserttest.Server, res upsert.Result)
	}{
		{
			name: "a healthy index stores every record",
			n:    3000,
		},
		{
			name:     "a burst of 429s is retried until every record lands",
			server:   []upserttest.Option{upserttest.WithFaults(upserttest.RateLimitBurst(2, 6))},
			n:        2000,
			minRetry: map[upsert.Class]int{upsert.ClassRateLimited: 1},
		},
		{
			name:   "an admission rate limit is met without losing a record",
			server: []upserttest.Option{upserttest.WithRate(5_000, 500)},
			n:      4000,
			check: func(t *testing.T, srv *upserttest.Server, res upsert.Result) {
				// Whether the refusals start an episode (and a learned rate)
				// depends on their order under load: the controllers' tests
				// and the simulation judge that.
				assert.Positive(t, srv.Stats().RateLimited, "the index pushed back")
			},
		},
		{
			name:     "503s and 500s are retried",
			server:   []upserttest.Option{upserttest.WithFaults(upserttest.Chain(upserttest.ErrorRate(codes.Unavailable, 0.2, 1), upserttest.ErrorRate(codes.Internal, 0.1, 2)))},
			n:        3000,
			allowed:  []upsert.Class{upsert.ClassServer},
			minRetry: map[upsert.Class]int{upsert.ClassServer: 1},
		},
		{
			name:    "partial writes are retried whole",
			server:  []upserttest.Option{upserttest.WithFaults(upserttest.PartialWrites(0.2, 3))},
			n:       2000,
			allowed: []upsert.Class{upsert.ClassServer},
		},
		{
			name:    "connection resets are retried",
			server:  []upserttest.Option{upserttest.WithFaults(upserttest.ConnectionResets(0.1, 4))},
			n:       2000,
			allowed: []upsert.Class{upsert.ClassServer},
		},
		{
			name:   "writes slower than the request timeout are split and land",
			server: []upserttest.Option{upserttest.WithLatency(time.Millisecond, 0), upserttest.WithSlowAbove(50, 200)},
			opts:   []upsert.Option{upsert.WithRequestTimeout(100 * time.Millisecond)},
			// Enough records that batches of the start size time out
			// after slow start's probe has taken its share: with 600,
			// the first batch and the probe could carry them all.
			n: 3000,
			check: func(t *testing.T, srv *upserttest.Server, res upsert.Result) {
				assert.Positive(t, res.Stats.Splits, "timed-out batches were split")
				assert.LessOrEqual(t, res.Stats.Limiter.BatchSize, 50, "the limiter keeps batches below the slow size")
			},
		},
		{
			name:    "ambiguous timeouts land once, whatever the client saw",
			server:  []upserttest.Option{upserttest.WithFaults(upserttest.AmbiguousTimeouts(0.1, 300*time.Millisecond, 5))},
			opts:    []upsert.Option{upsert.WithRequestTimeout(100 * time.Millisecond)},
			n:       1500,
			allowed: []upsert.Class{upsert.ClassTimeout},
		},
		{
			name:    "records the index rejects fail alone and the rest land",
			server:  []upserttest.Option{upserttest.WithFaults(upserttest.RejectIDs("rec-00017", "rec-01234"))},
			n:       2000,
			allowed: []upsert.Class{upsert.ClassInvalid},
			check: func(t *testing.T, srv *upserttest.Server, res upsert.Result) {
				require.Len(t, res.Failed, 2)
				assert.Equal(t, "rec-00017", res.Failed[0].ID)
				assert.Equal(t, "rec-01234", res.Failed[1].ID)
				assert.Equal(t, 1998, srv.Count(e2eNamespace))
			},
		},
		{
			name:   "requests over the transport's size limit are split, not retried as 429s",
			server: []upserttest.Option{upserttest.WithMaxRequestBytes(4 << 10)},
			n:      1000,
			check: func(t *testing.T, srv *upserttest.Server, res upsert.Result) {
				assert.Positive(t, res.Stats.ErrorsByClass[upsert.ClassTooLarge])
				assert.Zero(t, res.Stats.ErrorsByClass[upsert.ClassRateLimited])
			},
		},
		{
			name:    "a wrong API key stops the run with every record reported",
			server:  []upserttest.Option{upserttest.WithAPIKey("the-right-key")},
			n:       5000,
			allowed: []upsert.Class{upsert.ClassDenied},
			check: func(t *testing.T, srv *upserttest.Server, res upsert.Result) {
				assert.Len(t, res.Failed, 5000)
				assert.Less(t, srv.Stats().Requests, 20, "the run stopped instead of trying every batch")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := upserttest.NewServer(tt.server...)
			defer srv.Close()
			recs := e2eRecords(tt.n)
			opts := append([]upsert.Option{upsert.WithIndex(connect(t, srv))}, fast...)
			res, err := upsert.All(context.Background(), recs, append(opts, tt.opts...)...)
			if len(res.Failed) == 0 {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				for _, f := range res.Failed {
					require.ErrorIs(t, err, f.Class.Err(), "the error matches the class of every failure")
				}
			}
			if len(tt.allowed) == 0 {
				require.Empty(t, res.Failed, "no record may fail here; first: %+v", res.Stats.FailureSamples)
			}
			requireEveryRecordAccounted(t, srv, recs, res, tt.allowed...)
			for c, n := range tt.minRetry {
				assert.GreaterOrEqual(t, res.Stats.RetriesByClass[c], n, "retries of class %v", c)
			}
			if tt.check != nil {
				tt.check(t, srv, res)
			}
		})
	}
}

func TestEndToEndHonoursRetryAfter(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		if r.Seq == 1 {
			return upserttest.Fault{Code: codes.ResourceExhausted, RetryAfter: 200 * time.Millisecond}
		}
		return upserttest.Fault{}
	}))
	defer srv.Close()
	var waits []time.Duration
	obs := upsert.Observer{Retry: func(e upsert.RetryEvent) { waits = append(waits, e.Wait) }}
	res, err := upsert.All(context.Background(), e2eRecords(10), upsert.WithIndex(connect(t, srv)),
		upsert.WithBackoff(time.Millisecond, 10*time.Millisecond), upsert.WithObserver(obs))
	require.NoError(t, err)
	assert.Equal(t, 10, res.Upserted)
	require.Len(t, waits, 1)
	assert.GreaterOrEqual(t, waits[0], 200*time.Millisecond, "the wait the index asked for beats the backoff")
}

func TestEndToEndRecordsThroughREST(t *testing.T) {
	mk := func(n int) []*pinecone.IntegratedRecord {
		out := make([]*pinecone.IntegratedRecord, n)
		for i := range out {
			out[i] = &pinecone.IntegratedRecord{"_id": fmt.Sprintf("rec-%04d", i), "chunk_text": fmt.Sprint("text ", i), "n": float64(i)}
		}
		return out
	}
	connectREST := func(t *testing.T, srv *upserttest.Server, withTransport bool) *pinecone.IndexConnection {
		params := pinecone.NewClientParams{ApiKey: "test-key", RestClient: srv.Client()}
		newClient := upsert.NewClient
		if !withTransport {
			newClient = pinecone.NewClient
		}
		pc, err := newClient(params)
		require.NoError(t, err)
		idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: e2eNamespace})
		require.NoError(t, err)
		t.Cleanup(func() { idx.Close() })
		return idx
	}
	fast := upsert.WithBackoff(time.Millisecond, 20*time.Millisecond)
	tests := []struct {
		name    string
		faults  upserttest.FaultFunc
		allowed []upsert.Class
		failed  int
	}{
		{"a healthy index stores every record", nil, nil, 0},
		{"429s are retried, never lost", upserttest.RateLimitBurst(2, 5), nil, 0},
		{"500s and 503s are retried", upserttest.Chain(upserttest.ErrorRate(codes.Internal, 0.1, 1), upserttest.ErrorRate(codes.Unavailable, 0.1, 2)), []upsert.Class{upsert.ClassServer}, -1},
		{"a 400 fails only the records it names", upserttest.RejectIDs("rec-0007", "rec-0500"), []upsert.Class{upsert.ClassInvalid}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := upserttest.NewServer(upserttest.WithFaults(tt.faults))
			defer srv.Close()
			recs := mk(1000)
			res, err := upsert.Records(context.Background(), slices.Values(recs), upsert.WithIndex(connectREST(t, srv, true)), fast)
			if tt.failed >= 0 {
				assert.Len(t, res.Failed, tt.failed)
			}
			if len(res.Failed) == 0 {
				require.NoError(t, err)
			}
			stored := srv.Records(e2eNamespace)
			failed := make(map[string]upsert.Failure)
			for _, f := range res.Failed {
				failed[f.ID] = f
				assert.Contains(t, tt.allowed, f.Class)
			}
			for _, r := range recs {
				id := (*r)["_id"].(string)
				got, ok := stored[id]
				if _, isFailed := failed[id]; isFailed {
					continue
				}
				require.True(t, ok, "record %s is neither stored nor reported failed", id)
				assert.Equal(t, (*r)["chunk_text"], got["chunk_text"])
			}
			assert.Equal(t, len(recs), res.Upserted+len(res.Failed)+res.Duplicates)
		})
	}
	t.Run("a client without the library's transport sees the index's answers through the SDK", func(t *testing.T) {
		srv := upserttest.NewServer(upserttest.WithFaults(upserttest.RateLimitBurst(1, 2)))
		defer srv.Close()
		res, err := upsert.Records(context.Background(), slices.Values(mk(50)), upsert.WithIndex(connectREST(t, srv, false)), fast)
		require.NoError(t, err)
		assert.Equal(t, 50, res.Upserted)
		assert.Equal(t, 50, srv.RecordCount(e2eNamespace))
		assert.Positive(t, res.Stats.RetriesByClass[upsert.ClassRateLimited], "the 429s reached the library as 429s")
	})
}

func TestTheAPIKeyNeverLeaks(t *testing.T) {
	const key = "pcsk_PLANTED_SECRET_KEY_123"
	const planted = "PLANTED-METADATA-VALUE"
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	recs := e2eRecords(500)
	for _, r := range recs {
		r.Metadata, _ = structpb.NewStruct(map[string]any{"secret": planted})
		(*r.Values)[0] = 0.7654321 // a value to look for
	}
	collect := func(res upsert.Result, err error) string {
		var b strings.Builder
		if err != nil {
			b.WriteString(err.Error())
		}
		for _, f := range res.Failed {
			b.WriteString(f.Err.Error())
			fmt.Fprintf(&b, "%+v", f.Err)
		}
		return b.String()
	}
	t.Run("when the key is refused", func(t *testing.T) {
		srv := upserttest.NewServer(upserttest.WithAPIKey("another-key"))
		defer srv.Close()
		pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: key})
		require.NoError(t, err)
		idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: e2eNamespace})
		require.NoError(t, err)
		defer idx.Close()
		res, err := upsert.All(context.Background(), recs, upsert.WithIndex(idx), upsert.WithLogger(logger))
		require.ErrorIs(t, err, upsert.ErrDenied)
		out := collect(res, err) + logs.String()
		assert.NotContains(t, out, key)
		assert.NotContains(t, out, planted)
	})
	t.Run("when requests fail and are retried and logged", func(t *testing.T) {
		srv := upserttest.NewServer(upserttest.WithAPIKey(key), upserttest.WithFaults(upserttest.Chain(
			upserttest.RateLimitBurst(1, 3), upserttest.RejectIDs("rec-00042"), upserttest.ErrorRate(codes.Unavailable, 0.2, 9))))
		defer srv.Close()
		pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: key})
		require.NoError(t, err)
		idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: e2eNamespace})
		require.NoError(t, err)
		defer idx.Close()
		res, err := upsert.All(context.Background(), recs, upsert.WithIndex(idx), upsert.WithLogger(logger),
			upsert.WithBackoff(time.Millisecond, 10*time.Millisecond))
		require.Error(t, err)
		require.Contains(t, logs.String(), `"class":"rate-limited"`, "the run logged its retries")
		out := collect(res, err) + logs.String()
		assert.NotContains(t, out, key)
		assert.NotContains(t, out, planted)
		assert.NotContains(t, out, "0.765432", "no vector value is logged")
	})
}

// A request that never reached the index cannot have landed: a host that
// does not resolve or refuses the connection is named in the failure, and
// no record is flagged as maybe landed.
func TestAnUnreachableHostIsNamedAndNothingMayHaveLanded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedPort := ln.Addr().String()
	ln.Close()
	for _, tt := range []struct{ name, host, named string }{
		// Go's resolver refuses .onion names without asking DNS (RFC 7686),
		// so the test stays on loopback.
		{"a host that does not resolve", "http://nohost.onion:443", "nohost.onion:443"},
		{"a refused connection", "http://" + closedPort, closedPort},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pc, err := upsert.NewClient(pinecone.NewClientParams{ApiKey: "k"})
			require.NoError(t, err)
			idx, err := pc.Index(pinecone.NewIndexConnParams{Host: tt.host})
			require.NoError(t, err)
			defer idx.Close()
			fast := upsert.WithBackoff(time.Millisecond, 5*time.Millisecond)
			res, err := upsert.All(context.Background(), e2eRecords(300), upsert.WithIndex(idx), fast)
			require.ErrorIs(t, err, upsert.ErrServer)
			require.Len(t, res.Failed, 300)
			for _, f := range res.Failed {
				require.Contains(t, f.Err.Error(), "cannot reach "+tt.named, "record %s", f.ID)
				require.False(t, f.MayHaveLanded, "record %s was never sent", f.ID)
			}
			recs := []*pinecone.IntegratedRecord{{"_id": "a", "chunk_text": "x"}}
			res, err = upsert.Records(context.Background(), slices.Values(recs), upsert.WithIndex(idx), fast)
			require.ErrorIs(t, err, upsert.ErrServer)
			require.Len(t, res.Failed, 1)
			assert.Contains(t, res.Failed[0].Err.Error(), "cannot reach "+tt.named)
			assert.False(t, res.Failed[0].MayHaveLanded)
		})
	}
}

// The index says its dimension before anything is sent, once per
// connection: a wrong first record fails alone, unsent.
func TestTheIndexIsAskedItsDimensionOncePerConnection(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithDimension(8))
	defer srv.Close()
	var describes atomic.Int32
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "/DescribeIndexStats") {
			describes.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "k"})
	require.NoError(t, err)
	open := func() *pinecone.IndexConnection {
		idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: e2eNamespace}, grpc.WithChainUnaryInterceptor(count))
		require.NoError(t, err)
		t.Cleanup(func() { idx.Close() })
		return idx
	}
	idx := open()
	recs := append([]*pinecone.Vector{{Id: "short", Values: &[]float32{1, 2, 3}}}, e2eRecords(100)...)
	for range 3 {
		res, err := upsert.All(context.Background(), recs, upsert.WithIndex(idx))
		require.ErrorIs(t, err, upsert.ErrInvalid)
		require.Len(t, res.Failed, 1)
		assert.Zero(t, res.Failed[0].Attempts, "refused before sending")
		assert.Contains(t, res.Failed[0].Err.Error(), "the index's dimension is 8")
		assert.Equal(t, 100, res.Upserted)
	}
	assert.Equal(t, int32(1), describes.Load(), "three calls through one connection ask once")
	_, err = upsert.All(context.Background(), recs, upsert.WithIndex(open()))
	require.ErrorIs(t, err, upsert.ErrInvalid)
	assert.Equal(t, int32(2), describes.Load(), "a new connection asks again")
}

// A project that spends its monthly write units mid-run: the run stops at
// the first quota answer, every record is stored or reported with the
// quota class, and none is retried; with pinned concurrency and with the
// adaptive defaults.
func TestAMonthlyQuotaStopsTheRunInSeconds(t *testing.T) {
	for _, tt := range []struct {
		name     string
		opts     []upsert.Option
		inFlight int // the most requests in flight
	}{
		{"four in flight, batches of 100", []upsert.Option{upsert.WithConcurrency(4), upsert.WithBatchSize(100)}, 4},
		{"the adaptive defaults", nil, 64},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := upserttest.NewServer(upserttest.WithMonthlyWriteUnits(300))
			defer srv.Close()
			var mu sync.Mutex
			var firstQuota time.Time
			watch := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				err := invoker(ctx, method, req, reply, cc, opts...)
				if upsert.Classify(err) == upsert.ClassQuotaExceeded {
					mu.Lock()
					if firstQuota.IsZero() {
						firstQuota = time.Now()
					}
					mu.Unlock()
				}
				return err
			}
			recs := e2eRecords(30_000)
			opts := append([]upsert.Option{upsert.WithIndex(connect(t, srv, grpc.WithChainUnaryInterceptor(watch)))}, tt.opts...)
			res, err := upsert.All(context.Background(), recs, opts...)
			ended := time.Now()
			require.ErrorIs(t, err, upsert.ErrQuotaExceeded)
			assert.ErrorIs(t, err, upsert.ErrDenied)
			require.False(t, firstQuota.IsZero())
			assert.Less(t, ended.Sub(firstQuota), 5*time.Second, "the run ends within seconds of the first quota answer")
			requireEveryRecordAccounted(t, srv, recs, res, upsert.ClassQuotaExceeded)
			assert.Positive(t, res.Upserted, "what the quota allowed landed")
			assert.Zero(t, res.Stats.Retries, "nothing is retried past the first quota answer")
			// The library counts the quota answers it got; a request the
			// stop cut off before its answer arrived counts as canceled
			// (its records still fail with the quota), though the server
			// may have answered it too.
			quotaAnswers := srv.Stats().QuotaExceeded
			quota, cutOff := res.Stats.ErrorsByClass[upsert.ClassQuotaExceeded], res.Stats.ErrorsByClass[upsert.ClassCanceled]
			assert.Positive(t, quota)
			assert.LessOrEqual(t, quota, quotaAnswers, "no quota answer is counted that the server did not give")
			assert.GreaterOrEqual(t, quota+cutOff, quotaAnswers)
			assert.LessOrEqual(t, quota+cutOff, tt.inFlight, "only the requests already in flight meet the quota: no request is sent after it")
		})
	}
}

// A string that is not valid UTF-8 cannot be encoded by gRPC at all: the
// SDK's marshal fails on the client for the whole request. Such a record
// must fail alone, as invalid and before sending; the others land.
func TestEndToEndInvalidUTF8FailsOnlyItsRecord(t *testing.T) {
	srv := upserttest.NewServer()
	defer srv.Close()
	idx := connect(t, srv)
	t.Run("in metadata", func(t *testing.T) {
		recs := e2eRecords(300)
		bad := recs[150]
		bad.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{"title": structpb.NewStringValue("caf\xe9")}} // Latin-1, not UTF-8
		res, err := upsert.All(context.Background(), recs, upsert.WithIndex(idx))
		require.ErrorIs(t, err, upsert.ErrInvalid)
		require.Len(t, res.Failed, 1, "only the bad record fails")
		f := res.Failed[0]
		assert.Equal(t, bad.Id, f.ID)
		assert.Equal(t, upsert.ClassInvalid, f.Class)
		assert.Zero(t, f.Attempts, "refused before sending")
		assert.Contains(t, f.Err.Error(), "UTF-8")
		assert.Equal(t, 299, res.Upserted)
		assert.Zero(t, res.Stats.Retries)
	})
	t.Run("in a namespace", func(t *testing.T) {
		recs := e2eRecords(20)
		nsOf := func(v *pinecone.Vector) string {
			if v.Id == recs[3].Id {
				return "tenant-\xff"
			}
			return e2eNamespace
		}
		res, err := upsert.All(context.Background(), recs, upsert.WithIndex(idx), upsert.WithNamespaceOf(nsOf))
		require.ErrorIs(t, err, upsert.ErrInvalid)
		require.Len(t, res.Failed, 1)
		assert.Equal(t, recs[3].Id, res.Failed[0].ID)
		assert.Zero(t, res.Failed[0].Attempts)
		assert.Contains(t, res.Failed[0].Err.Error(), "namespace")
		assert.Equal(t, 19, res.Upserted)
	})
	t.Run("a namespace longer than Pinecone allows", func(t *testing.T) {
		recs := e2eRecords(20)
		long := strings.Repeat("n", upsert.MaxNamespaceChars)
		nsOf := func(v *pinecone.Vector) string {
			switch v.Id {
			case recs[3].Id:
				return long + "x"
			case recs[4].Id:
				return long
			}
			return e2eNamespace
		}
		res, err := upsert.All(context.Background(), recs, upsert.WithIndex(idx), upsert.WithNamespaceOf(nsOf))
		require.ErrorIs(t, err, upsert.ErrInvalid)
		require.Len(t, res.Failed, 1)
		assert.Equal(t, recs[3].Id, res.Failed[0].ID)
		assert.Zero(t, res.Failed[0].Attempts, "refused before sending")
		assert.Contains(t, res.Failed[0].Err.Error(), "513 bytes long: at most 512")
		assert.Equal(t, 19, res.Upserted)
		assert.Equal(t, 1, srv.Count(long), "512 characters land")
	})
}

// tenantVec is record i of tenant, with an id that names the tenant.
func tenantVec(tenant string, i int) *pinecone.Vector {
	vals := []float32{float32(i) + 1, 0.5, 0.25, 0.125}
	return &pinecone.Vector{Id: fmt.Sprintf("%s-%d", tenant, i), Values: &vals, Metadata: nil}
}

// tenantOf routes a tenantVec to its tenant's namespace.
func tenantOf(v *pinecone.Vector) string {
	for i := range len(v.Id) {
		if v.Id[i] == '-' {
			return v.Id[:i]
		}
	}
	return v.Id
}

// A consumer restarted into a blip of the index (its first eight upserts
// answered UNAVAILABLE) loses nothing: the index answered the run's
// DescribeIndexStats, so the host is right and the blip is an outage to
// wait out, not a wrong host to give up on at once (which failed 1,900 of
// the 2,000 records).
func TestABlipOfErrorsAtTheStartIsWaitedOutOnAHostThatAnswered(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithDimension(4), upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
		if r.Seq <= 8 { // a blip: eight refused requests, then a healthy index
			return upserttest.Fault{Code: codes.Unavailable}
		}
		return upserttest.Fault{}
	}))
	defer srv.Close()
	idx := connect(t, srv)
	var mu sync.Mutex
	resend := 0
	w, err := upsert.NewWriter(context.Background(), upsert.WithIndex(idx), upsert.WithNamespaceOf(tenantOf),
		upsert.WithAcks(func(acks []upsert.Ack) {
			mu.Lock()
			defer mu.Unlock()
			for _, a := range acks {
				if a.Resend {
					resend++
				}
			}
		}))
	require.NoError(t, err)
	const n = 2000
	for i := range n {
		require.NoError(t, w.AddTagged(context.Background(), tenantVec("t0", i), i))
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	res, err := w.Close(cctx)
	mu.Lock()
	defer mu.Unlock()
	assert.NoError(t, err, "a blip of eight 503s at start is a short outage; it should fail nothing")
	assert.Equal(t, n, res.Upserted, "records upserted")
	assert.Zero(t, resend, "records acked Resend after an 8-request blip")
}

// Under WithNamespaceOf the "upsert finished" line says the namespaces
// are the records' own, not the connection's, which received nothing.
func TestTheSummaryLogLineDoesNotNameTheConnectionsNamespaceForRoutedRecords(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithDimension(4))
	defer srv.Close()
	idx := connect(t, srv) // the connection's namespace is "e2e"
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	w, err := upsert.NewWriter(context.Background(), upsert.WithIndex(idx), upsert.WithNamespaceOf(tenantOf), upsert.WithLogger(logger))
	require.NoError(t, err)
	for i := range 40 {
		require.NoError(t, w.Add(context.Background(), tenantVec(fmt.Sprintf("t%d", i%2), i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := w.Close(ctx)
	require.NoError(t, err)
	require.Equal(t, 40, res.Upserted)
	require.Zero(t, srv.Count(e2eNamespace), "nothing went to the connection's namespace")
	var summary map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		if m["msg"] == "upsert finished" {
			summary = m
		}
	}
	require.NotNil(t, summary, "no summary line")
	assert.Equal(t, "(per record)", summary["namespace"],
		"the summary attributes %v upserted records to the connection's namespace, which received none", summary["upserted"])
}
