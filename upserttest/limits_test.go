package upserttest_test

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/upsertlib/upsert/upserttest"
)

// virtualClock is time that moves only when the test says.
type virtualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newVirtualClock() *virtualClock { return &virtualClock{now: time.Unix(1_700_000_000, 0)} }

func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *virtualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// restStatus returns the HTTP status and the error of a failed SDK call.
func restStatus(t *testing.T, err error) (int, string) {
	t.Helper()
	var pe *pinecone.PineconeError
	require.True(t, errors.As(err, &pe), "a *pinecone.PineconeError: %v", err)
	return pe.Code, pe.Error()
}

func TestRateLimitsAnswerPineconesMessages(t *testing.T) {
	t.Run("the request rate names the namespace and its rate", func(t *testing.T) {
		// A clock that stands still: at 100/s, a busy machine could
		// otherwise refill the bucket between the two requests.
		clk := newVirtualClock()
		srv := start(t, upserttest.WithRequestRate(100, 1), upserttest.WithClock(clk.Now))
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
		require.NoError(t, err)
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("b", 1)})
		require.Equal(t, codes.ResourceExhausted, code(err))
		assert.Contains(t, status.Convert(err).Message(), "You've reached the upsert QPS limit for namespace ns (100 QPS)")
		assert.Equal(t, 1, srv.Stats().RateLimited)
	})
	t.Run("the upsert size names the index", func(t *testing.T) {
		srv := start(t, upserttest.WithByteRate(100, 100))
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{denseN("a", 30)})
		require.NoError(t, err, "the first request may run the bucket into debt")
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{denseN("b", 30)})
		require.Equal(t, codes.ResourceExhausted, code(err))
		assert.Contains(t, status.Convert(err).Message(), "You've reached the max upsert size limit per second for index upserttest")
	})
	t.Run("write units per second are shared by every namespace of the index", func(t *testing.T) {
		srv := start(t, upserttest.WithWriteUnitRate(10, 10)) // two small requests: 5 units each
		_, err := connectAs(t, srv, "test", "a", nil...).UpsertVectors(bg(t), []*pinecone.Vector{dense("x", 1)})
		require.NoError(t, err)
		_, err = connectAs(t, srv, "test", "b", nil...).UpsertVectors(bg(t), []*pinecone.Vector{dense("x", 1)})
		require.NoError(t, err)
		_, err = connectAs(t, srv, "test", "c", nil...).UpsertVectors(bg(t), []*pinecone.Vector{dense("x", 1)})
		require.Equal(t, codes.ResourceExhausted, code(err))
		assert.Contains(t, status.Convert(err).Message(), "max write units per second for index upserttest")
		assert.Equal(t, int64(10), srv.Stats().WriteUnits)
	})
	t.Run("a request costs a write unit per KB, at least 5", func(t *testing.T) {
		srv := start(t)
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("x", 1)})
		require.NoError(t, err)
		assert.Equal(t, int64(5), srv.Stats().WriteUnits)
		srv = start(t)
		_, err = connect(t, srv).UpsertVectors(bg(t), batch("big", 10, 1000)) // 10 vectors of 4,000 bytes and more
		require.NoError(t, err)
		assert.Equal(t, int64(41), srv.Stats().WriteUnits, "40,2xx bytes: 41 units")
	})
}

func TestQuotasAnswerPineconesMessages(t *testing.T) {
	t.Run("the monthly write units, over gRPC and REST", func(t *testing.T) {
		srv := start(t, upserttest.WithMonthlyWriteUnits(10))
		idx := connect(t, srv)
		for _, id := range []string{"a", "b"} {
			_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense(id, 1)})
			require.NoError(t, err)
		}
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("c", 1)})
		require.Equal(t, codes.ResourceExhausted, code(err))
		assert.Equal(t, "Request failed. You've reached your write unit limit for the current month. To continue writing data, upgrade your plan.", status.Convert(err).Message())

		rest, _ := connectREST(t, srv, "test", ns)
		code, msg := restStatus(t, rest.UpsertRecords(bg(t), records("r", 1)))
		assert.Equal(t, http.StatusTooManyRequests, code)
		assert.Contains(t, msg, "write unit limit for the current month")
		assert.Equal(t, 2, srv.Stats().QuotaExceeded)
		assert.Zero(t, srv.Stats().RateLimited)

		srv.Reset()
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("c", 1)})
		assert.NoError(t, err, "Reset gives the month back")
	})
	t.Run("the namespaces of an index, as 403 QUOTA_EXCEEDED", func(t *testing.T) {
		srv := start(t, upserttest.WithMaxNamespaces(1))
		_, err := connectAs(t, srv, "test", "a", nil...).UpsertVectors(bg(t), []*pinecone.Vector{dense("x", 1)})
		require.NoError(t, err)
		_, err = connectAs(t, srv, "test", "a", nil...).UpsertVectors(bg(t), []*pinecone.Vector{dense("y", 1)})
		require.NoError(t, err, "the namespace exists")
		_, err = connectAs(t, srv, "test", "b", nil...).UpsertVectors(bg(t), []*pinecone.Vector{dense("x", 1)})
		require.Equal(t, codes.PermissionDenied, code(err))
		assert.Contains(t, status.Convert(err).Message(), "You've reached the max namespaces allowed in serverless index upserttest")

		status, _, body := post(t, srv, "/records/namespaces/c/upsert", "", `{"_id":"r","chunk_text":"t"}`)
		assert.Equal(t, http.StatusForbidden, status)
		got, message := decodeError(t, body)
		assert.Equal(t, codes.PermissionDenied, got, "the data plane's body has no QUOTA_EXCEEDED name: its code and message tell")
		assert.Contains(t, message, "max namespaces")
	})
}

func TestEmbedTokensPerMinute(t *testing.T) {
	clk := newVirtualClock()
	srv := start(t, upserttest.WithEmbedTokensPerMinute(100), upserttest.WithClock(clk.Now))
	idx, _ := connectREST(t, srv, "test", ns)
	text := strings.Repeat("word ", 16) // 80 bytes: 20 tokens
	rec := func(id string) *pinecone.IntegratedRecord { return record(id, "chunk_text", text) }

	require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{rec("a"), rec("b"), rec("c"), rec("d"), rec("e")}), "a minute's worth")
	code, msg := restStatus(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{rec("f")}))
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, msg, "You've reached the max embedding tokens per minute (100) model 'llama-text-embed-v2'")
	assert.Equal(t, 1, srv.Stats().RateLimited)

	clk.Advance(12 * time.Second) // 20 tokens come back
	require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{rec("f")}))
	code, _ = restStatus(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{rec("g")}))
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Equal(t, 6, srv.RecordCount(ns))
}

// Pinecone embeds only the field_map field of a record, so only its text
// counts against the embedding tokens per minute: a record's metadata,
// such as an 8 KB url, costs nothing when WithFieldMap names the field.
func TestWithFieldMapOnlyTheFieldMapTextCostsEmbeddingTokens(t *testing.T) {
	clk := newVirtualClock()
	// "hello world" is 11 bytes: 3 tokens. The url alone would be over 2,000.
	srv := start(t, upserttest.WithFieldMap("chunk_text"), upserttest.WithEmbedTokensPerMinute(6), upserttest.WithClock(clk.Now))
	idx, _ := connectREST(t, srv, "test", ns)
	url := "https://example.com/" + strings.Repeat("a", 8000)
	rec := func(id string) *pinecone.IntegratedRecord {
		return record(id, "chunk_text", "hello world", "url", url, "title", strings.Repeat("t", 400))
	}

	require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{rec("a")}), "3 tokens of 6")
	require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{rec("b")}), "3 tokens of the 3 left")
	code, msg := restStatus(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{rec("c")}))
	assert.Equal(t, http.StatusTooManyRequests, code, "the minute's 6 tokens are spent by the two texts: %s", msg)
	assert.Contains(t, msg, "max embedding tokens per minute (6)")
	assert.Equal(t, 2, srv.RecordCount(ns))
	assert.Equal(t, 1, srv.Stats().RateLimited)
}

// Without WithFieldMap the server cannot tell the text from the metadata:
// every string field but the id costs embedding tokens, an estimate that
// may charge more than Pinecone would.
func TestWithoutFieldMapEveryStringFieldButTheIDCostsEmbeddingTokens(t *testing.T) {
	clk := newVirtualClock()
	srv := start(t, upserttest.WithEmbedTokensPerMinute(6), upserttest.WithClock(clk.Now))
	idx, _ := connectREST(t, srv, "test", ns)
	text := func(id string) []*pinecone.IntegratedRecord {
		return []*pinecone.IntegratedRecord{record(id, "chunk_text", "hello world")} // 3 tokens
	}

	// A full bucket admits a request larger than its burst, which leaves it
	// in debt: the url's 2,000 tokens are charged, so 3 more are refused.
	url := "https://example.com/" + strings.Repeat("a", 8000)
	require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("a", "chunk_text", "hello world", "url", url)}))
	code, msg := restStatus(t, idx.UpsertRecords(bg(t), text("b")))
	assert.Equal(t, http.StatusTooManyRequests, code, "the url was charged")
	assert.Contains(t, msg, "max embedding tokens per minute (6)")

	// The id is never counted: 11 bytes of text and a 400-byte id cost 3.
	clk.Advance(24 * time.Hour) // the debt is repaid, the bucket full
	id := strings.Repeat("i", 400)
	require.NoError(t, idx.UpsertRecords(bg(t), text(id+"1")))
	require.NoError(t, idx.UpsertRecords(bg(t), text(id+"2")))
	code, _ = restStatus(t, idx.UpsertRecords(bg(t), text(id+"3")))
	assert.Equal(t, http.StatusTooManyRequests, code, "the minute's 6 tokens are spent")
	assert.Equal(t, 3, srv.RecordCount(ns))
}

func TestValidationAsPinecone(t *testing.T) {
	tests := []struct {
		name    string
		opts    []upserttest.Option
		vec     *pinecone.Vector
		message string
	}{
		{"a non-ASCII id", nil, dense("café", 1), "Vector ID must be ASCII, but got 'café'"},
		{"an id with NUL", nil, dense("a\x00b", 1), "NUL"},
		{"all-zero dense values", nil, dense("z", 0, 0), "Dense vectors must contain at least one non-zero value"},
		{"dense values in a sparse index", []upserttest.Option{upserttest.WithVectorType(upserttest.VectorTypeSparse)}, dense("d", 1), "Sparse index"},
		{"sparse values only in a dense index", []upserttest.Option{upserttest.WithVectorType(upserttest.VectorTypeDense)},
			&pinecone.Vector{Id: "s", SparseValues: &pinecone.SparseValues{Indices: []uint32{1}, Values: []float32{1}}}, "Dense index"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is refused", func(t *testing.T) {
			srv := start(t, tt.opts...)
			_, err := connect(t, srv).UpsertVectors(bg(t), []*pinecone.Vector{dense("ok", 1), tt.vec})
			require.Equal(t, codes.InvalidArgument, code(err))
			assert.Contains(t, status.Convert(err).Message(), tt.message)
			assert.Zero(t, srv.Count(ns), "the whole request is refused")
		})
	}
	t.Run("a namespace longer than 512 characters is refused, one of 512 is not", func(t *testing.T) {
		srv := start(t)
		long := strings.Repeat("n", upserttest.MaxNamespaceChars)
		_, err := connectAs(t, srv, "test", long).UpsertVectors(bg(t), []*pinecone.Vector{dense("ok", 1)})
		require.NoError(t, err)
		_, err = connectAs(t, srv, "test", long+"x").UpsertVectors(bg(t), []*pinecone.Vector{dense("ok", 1)})
		require.Equal(t, codes.InvalidArgument, code(err))
		assert.Contains(t, status.Convert(err).Message(), "Namespace name is 513 bytes long")
		idx, _ := connectREST(t, srv, "test", long+"x")
		code, _ := restStatus(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("r", "chunk_text", "t")}))
		assert.Equal(t, http.StatusBadRequest, code)
	})
	t.Run("a non-ASCII record id is refused", func(t *testing.T) {
		srv := start(t)
		idx, _ := connectREST(t, srv, "test", ns)
		code, _ := restStatus(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("café", "chunk_text", "t")}))
		assert.Equal(t, http.StatusBadRequest, code)
	})
	t.Run("a bad key is Unauthorized", func(t *testing.T) {
		srv := start(t, upserttest.WithAPIKey("right"))
		_, err := connectAs(t, srv, "wrong", ns).UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
		require.Equal(t, codes.Unauthenticated, code(err))
		assert.Equal(t, "Unauthorized", status.Convert(err).Message())
	})
	t.Run("DescribeIndexStats says the vector type", func(t *testing.T) {
		srv := start(t, upserttest.WithVectorType(upserttest.VectorTypeSparse))
		st, err := connect(t, srv).DescribeIndexStats(bg(t))
		require.NoError(t, err)
		require.NotNil(t, st.VectorType)
		assert.Equal(t, "sparse", *st.VectorType)
	})
}

func TestTheDefaultNamespaceHasTwoNames(t *testing.T) {
	srv := start(t, upserttest.WithRequestRate(1, 1))
	def := connectAs(t, srv, "test", "") // the SDK sends "__default__"
	_, err := def.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
	require.NoError(t, err)
	_, err = def.WithNamespace("").UpsertVectors(bg(t), []*pinecone.Vector{dense("b", 1)}) // sends ""
	require.Equal(t, codes.ResourceExhausted, code(err), "one namespace, one request bucket")
	assert.Contains(t, status.Convert(err).Message(), "namespace __default__")

	srv = start(t)
	def = connectAs(t, srv, "test", "")
	_, err = def.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
	require.NoError(t, err)
	_, err = def.WithNamespace("").UpsertVectors(bg(t), []*pinecone.Vector{dense("b", 1)})
	require.NoError(t, err)
	assert.Equal(t, 2, srv.Count(""))
	assert.Equal(t, 2, srv.Count("__default__"))
	assert.Equal(t, []string{"__default__"}, srv.Namespaces())
	st, err := def.DescribeIndexStats(bg(t))
	require.NoError(t, err)
	assert.Len(t, st.Namespaces, 1)
	assert.Equal(t, uint32(2), st.TotalVectorCount)
}

func TestStatsLag(t *testing.T) {
	clk := newVirtualClock()
	srv := start(t, upserttest.WithStatsLag(10*time.Second), upserttest.WithClock(clk.Now))
	idx := connect(t, srv)
	_, err := idx.UpsertVectors(bg(t), batch("v", 5, 2))
	require.NoError(t, err)
	count := func() uint32 {
		st, err := idx.DescribeIndexStats(bg(t))
		require.NoError(t, err)
		return st.TotalVectorCount
	}
	assert.Zero(t, count(), "new vectors are not counted at once")
	assert.Equal(t, 5, srv.Count(ns), "the accessors are not delayed")
	clk.Advance(5 * time.Second)
	_, err = idx.UpsertVectors(bg(t), batch("w", 3, 2))
	require.NoError(t, err)
	clk.Advance(5 * time.Second)
	assert.Equal(t, uint32(5), count(), "the first write counts after the lag")
	clk.Advance(5 * time.Second)
	assert.Equal(t, uint32(8), count())
}

// Pinecone meters 1 WU per KB of request, at least 5 per request, "plus
// the size of any record an upsert overwrites" (docs, understanding cost):
// a retry of a batch that had landed costs double. The overwrite units
// count in Stats.WriteUnits, the monthly quota and WithWriteUnitRate's
// bucket, for vectors and records alike.
func TestWriteUnitsIncludeTheSizeOfOverwrittenRecords(t *testing.T) {
	srv := start(t)
	idx := connect(t, srv)
	vectors := batch("ow", 100, 1000) // about 400 KB: about 400 write units

	_, err := idx.UpsertVectors(bg(t), vectors)
	require.NoError(t, err)
	first := srv.Stats().WriteUnits
	require.Greater(t, first, int64(300))

	_, err = idx.UpsertVectors(bg(t), vectors) // the same 100 ids: overwrites
	require.NoError(t, err)
	second := srv.Stats().WriteUnits - first
	assert.Greater(t, second, first+first/2,
		"overwriting ~400 KB of records costs the request's ~%d WU plus the ~%d WU of the records replaced; got %d", first, first, second)
}

func TestOverwriteWriteUnitsCountEverywhere(t *testing.T) {
	t.Run("a new id costs the request alone", func(t *testing.T) {
		srv := start(t)
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
		require.NoError(t, err)
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("b", 1)})
		require.NoError(t, err)
		assert.EqualValues(t, 10, srv.Stats().WriteUnits)
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 2)})
		require.NoError(t, err)
		assert.EqualValues(t, 16, srv.Stats().WriteUnits, "5 for the request, 1 for the few bytes of a, rounded up")
	})

	t.Run("records too", func(t *testing.T) {
		srv := start(t)
		idx, _ := connectREST(t, srv, "test", ns)
		big := strings.Repeat("x", 3000)
		require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("r", "chunk_text", big)}))
		assert.EqualValues(t, 5, srv.Stats().WriteUnits, "a body of about 3 KB: at least 5")
		require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("r", "chunk_text", big)}))
		assert.EqualValues(t, 5+5+4, srv.Stats().WriteUnits, "the record of about 3 KB it replaced costs 4 more")
	})

	t.Run("the monthly quota", func(t *testing.T) {
		srv := start(t, upserttest.WithMonthlyWriteUnits(1000))
		idx := connect(t, srv)
		vectors := batch("q", 100, 1000) // about 400 write units: 800 for two requests, 1200 with the overwrites
		_, err := idx.UpsertVectors(bg(t), vectors)
		require.NoError(t, err)
		_, err = idx.UpsertVectors(bg(t), vectors)
		require.NoError(t, err, "admitted: the quota is not yet spent")
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{denseN("new", 1000)})
		require.Equal(t, codes.ResourceExhausted, code(err), "the overwrites spent the rest of the month")
		assert.Contains(t, status.Convert(err).Message(), "for the current month")
	})

	t.Run("the write-unit bucket, in debt after the write", func(t *testing.T) {
		clk := newVirtualClock()
		srv := start(t, upserttest.WithClock(clk.Now), upserttest.WithWriteUnitRate(100, 500))
		idx := connect(t, srv)
		vectors := batch("w", 100, 1000) // about 400 write units
		_, err := idx.UpsertVectors(bg(t), vectors)
		require.NoError(t, err)
		clk.Advance(5 * time.Second) // full again
		_, err = idx.UpsertVectors(bg(t), vectors)
		require.NoError(t, err, "admitted on its request's units")
		clk.Advance(2 * time.Second) // 200 back: not enough to repay ~300 of debt
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{denseN("small", 1000)})
		require.Equal(t, codes.ResourceExhausted, code(err))
		assert.Contains(t, status.Convert(err).Message(), "write units per second")
	})
}

// firstWrites upserts vector(i) into each namespace names[i] at once, one
// connection each, and returns their errors.
func firstWrites(t *testing.T, srv *upserttest.Server, names []string, vector func(i int) *pinecone.Vector) []error {
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		idx := connectAs(t, srv, "test", n)
		wg.Go(func() { _, errs[i] = idx.UpsertVectors(bg(t), []*pinecone.Vector{vector(i)}) })
	}
	wg.Wait()
	return errs
}

// WithMaxNamespaces(1) must refuse the second namespace even when the first
// writes into new namespaces arrive together, all still in their write
// latency when the others are admitted: a namespace counts from the
// admission of its first upsert.
func TestMaxNamespacesHoldsUnderConcurrentFirstWrites(t *testing.T) {
	srv := start(t, upserttest.WithMaxNamespaces(1), upserttest.WithLatency(200*time.Millisecond, 0))
	errs := firstWrites(t, srv, []string{"a", "b", "c"}, func(int) *pinecone.Vector { return dense("x", 1) })

	denied := 0
	for _, err := range errs {
		if code(err) == codes.PermissionDenied {
			denied++
		}
	}
	assert.Len(t, srv.Namespaces(), 1, "WithMaxNamespaces(1) let %v be created", srv.Namespaces())
	assert.Equal(t, 2, denied, "answers: %v", errs)
	assert.Equal(t, 2, srv.Stats().QuotaExceeded)
}

// An upsert admitted into a new namespace that writes nothing gives the
// namespace back: it does not count against WithMaxNamespaces. Here two
// first writes of different dimensions are both admitted, and the one that
// lands second is refused when it writes, the first having set the index's
// dimension.
func TestMaxNamespacesCountsNoNamespaceLeftEmpty(t *testing.T) {
	srv := start(t, upserttest.WithMaxNamespaces(2), upserttest.WithLatency(100*time.Millisecond, 0))
	errs := firstWrites(t, srv, []string{"a", "b"}, func(i int) *pinecone.Vector { return denseN("x", i+2) })
	require.Len(t, srv.Namespaces(), 1, "answers: %v", errs)
	dim := 2
	if errs[0] != nil {
		dim = 3
	}
	for _, err := range errs {
		if err != nil {
			require.Equal(t, codes.InvalidArgument, code(err))
		}
	}

	_, err := connectAs(t, srv, "test", "c").UpsertVectors(bg(t), []*pinecone.Vector{denseN("x", dim)})
	require.NoError(t, err, "the namespace left empty still counts")
	_, err = connectAs(t, srv, "test", "d").UpsertVectors(bg(t), []*pinecone.Vector{denseN("x", dim)})
	assert.Equal(t, codes.PermissionDenied, code(err))
	assert.Len(t, srv.Namespaces(), 2)
}

// A gRPC Upsert with a wrong API key, like a REST records upsert with one,
// gets no Request.Seq and its bytes are not counted, so the first request
// the fault script sees has Seq 1.
func TestUnauthenticatedGRPCUpsertTakesNoSeq(t *testing.T) {
	srv := start(t, upserttest.WithAPIKey("good"), upserttest.WithFaults(upserttest.RateLimitBurst(1, 1)))

	_, err := connectAs(t, srv, "bad", ns).UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
	require.Equal(t, codes.Unauthenticated, code(err))
	st := srv.Stats()
	assert.Equal(t, 1, st.Requests)
	assert.Equal(t, int64(0), st.BytesReceived)

	_, err = connectAs(t, srv, "good", ns).UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
	assert.Equal(t, codes.ResourceExhausted, code(err),
		"the first request the fault script sees should have Seq 1, as with REST")
	st = srv.Stats()
	assert.Equal(t, 2, st.Requests)
	assert.Equal(t, map[codes.Code]int{codes.Unauthenticated: 1, codes.ResourceExhausted: 1}, st.Codes)
	assert.Positive(t, st.BytesReceived)
}
