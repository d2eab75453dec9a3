package upsert

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/upsertlib/upsert/upserttest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func shapeIndex(t *testing.T, srv *upserttest.Server, ns string) *pinecone.IndexConnection {
	t.Helper()
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test-key"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: ns})
	require.NoError(t, err)
	t.Cleanup(func() { idx.Close() })
	return idx
}

// Through WithIndex the index's own answer takes precedence over
// WithDimension: a sparse index answers no dimension, and its sparse
// records land. They once failed before sending ("the index has dimension
// 3 and needs dense values").
func TestASparseIndexsAnswerTakesPrecedenceOverWithDimension(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithVectorType(upserttest.VectorTypeSparse))
	defer srv.Close()
	idx := shapeIndex(t, srv, "ns")
	recs := []*pinecone.Vector{
		{Id: "s1", SparseValues: &pinecone.SparseValues{Indices: []uint32{1, 5}, Values: []float32{0.5, 0.25}}},
		{Id: "s2", SparseValues: &pinecone.SparseValues{Indices: []uint32{2}, Values: []float32{1}}},
	}
	res, err := All(context.Background(), recs, WithIndex(idx), WithDimension(3), withClock(newFakeClock()), withRand(maxRand))
	require.NoError(t, err, "the sparse index takes sparse records: its answer says it has no dimension")
	assert.Equal(t, 2, res.Upserted)
	assert.Equal(t, 2, srv.Count("ns"))
}

// A sparse index (upserttest WithVectorType, through the SDK): the
// describe answer refuses dense and hybrid records before sending; the
// sparse ones land in one request.
func TestASparseIndexRefusesDenseRecordsBeforeSending(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithVectorType(upserttest.VectorTypeSparse))
	defer srv.Close()
	idx := shapeIndex(t, srv, "ns")
	recs := []*pinecone.Vector{
		{Id: "s1", SparseValues: &pinecone.SparseValues{Indices: []uint32{1, 5}, Values: []float32{0.5, 0.25}}},
		{Id: "d", Values: &[]float32{1, 2}},
		{Id: "h", Values: &[]float32{1, 2}, SparseValues: &pinecone.SparseValues{Indices: []uint32{1}, Values: []float32{1}}},
		{Id: "s2", SparseValues: &pinecone.SparseValues{Indices: []uint32{9, 2}, Values: []float32{1, 3}}},
	}
	res, err := All(context.Background(), recs, WithIndex(idx), withClock(newFakeClock()), withRand(maxRand))
	require.ErrorIs(t, err, ErrInvalid)
	require.Len(t, res.Failed, 2)
	for _, f := range res.Failed {
		assert.Zero(t, f.Attempts)
		assert.Contains(t, f.Err.Error(), "sparse")
	}
	assert.Equal(t, 2, srv.Count("ns"))
	assert.Equal(t, 1, srv.Stats().Requests, "one request: the dense and hybrid records were refused before sending")
}

// A 512-byte id and 40960 bytes of metadata (as compact JSON) pass both the library and upserttest.
func TestRecordsExactlyAtPineconesLimitsLand(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithDimension(2))
	defer srv.Close()
	idx := shapeIndex(t, srv, "ns")
	md := metadataOfJSONSize(t, MaxMetadataBytes, 3)
	recs := []*pinecone.Vector{
		{Id: strings.Repeat("a", 512), Values: &[]float32{1, 2}},
		{Id: "m", Values: &[]float32{1, 2}, Metadata: md},
	}
	res, err := All(context.Background(), recs, WithIndex(idx), withClock(newFakeClock()), withRand(maxRand))
	require.NoError(t, err)
	assert.Equal(t, 2, res.Upserted)
}

// A request of exactly MaxRequestBytes goes as one request and is accepted
// by upserttest's 2,000,000-byte limit; one byte more makes two requests.
func TestARequestExactlyAtTheByteLimitGoesWhole(t *testing.T) {
	const dim = 19000
	build := func(extra int) []*pinecone.Vector {
		vals := make([]float32, dim)
		for i := range vals {
			vals[i] = 1
		}
		recs := make([]*pinecone.Vector, 26)
		for i := range recs {
			recs[i] = &pinecone.Vector{Id: string(rune('a' + i)), Values: &vals}
		}
		// pad the last record's metadata until the request is exactly
		// 2,000,000+extra bytes.
		recs[25] = withMetadata(&pinecone.Vector{Id: "z", Values: &vals}, map[string]any{"p": ""})
		base := encodedRequestSize(t, recs, "ns")
		start := max(0, MaxRequestBytes+extra-base-8)
		for k := start; k < start+16; k++ {
			recs[25] = withMetadata(&pinecone.Vector{Id: "z", Values: &vals}, map[string]any{"p": strings.Repeat("x", k)})
			if n := encodedRequestSize(t, recs, "ns"); n == MaxRequestBytes+extra {
				return recs
			}
		}
		return nil
	}
	for _, extra := range []int{0, 1} {
		recs := build(extra)
		if recs == nil {
			t.Skipf("no padding gives %d bytes", MaxRequestBytes+extra)
		}
		srv := upserttest.NewServer(upserttest.WithDimension(dim))
		idx := shapeIndex(t, srv, "ns")
		res, err := All(context.Background(), recs, WithIndex(idx), WithBatchSize(26), withClock(newFakeClock()), withRand(maxRand))
		require.NoError(t, err)
		assert.Equal(t, 26, res.Upserted)
		assert.Equal(t, 1+extra, srv.Stats().Requests, "extra %d", extra)
		srv.Close()
	}
}

// A DescribeIndexStats that hangs is given up after the request timeout
// (at most 5 s): the run goes on and learns the dimension from the first
// accepted record.
func TestASlowDescribeDoesNotHoldTheRun(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithDimension(4))
	defer srv.Close()
	hang := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "/DescribeIndexStats") {
			<-ctx.Done()
			return ctx.Err()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "k"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "ns"}, grpc.WithChainUnaryInterceptor(hang))
	require.NoError(t, err)
	defer idx.Close()
	start := time.Now()
	recs := append(vectors(10, 4), &pinecone.Vector{Id: "short", Values: &[]float32{1, 2, 3}})
	res, err := All(context.Background(), recs, WithIndex(idx), WithRequestTimeout(50*time.Millisecond), WithBatchSize(5), WithConcurrency(1), withClock(newFakeClock()), withRand(maxRand))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Equal(t, 10, res.Upserted)
	require.Len(t, res.Failed, 1)
}

// The index's answer is kept a minute, not for the connection's life: an
// index deleted and created again under its host with another dimension
// (a re-index to another model) takes its records once the minute has
// passed, where every record failed as of the wrong dimension for as long
// as the process kept the connection. Within the minute the answer kept
// is used: calls through one connection do not ask each time.
func TestAnIndexCreatedAgainWithAnotherDimensionIsAskedAgainAfterAMinute(t *testing.T) {
	srv := upserttest.NewServer()
	defer srv.Close()
	idx := shapeIndex(t, srv, "ns")
	clk := newFakeClock()
	run := func(recs []*pinecone.Vector) (Result, error) {
		return All(context.Background(), recs, WithIndex(idx), withClock(clk), withRand(maxRand))
	}
	_, err := run(vectors(5, 4))
	require.NoError(t, err)
	_, err = run(vectors(5, 4)) // the server now says dimension 4
	require.NoError(t, err)

	srv.Reset() // the index deleted and created again, empty: any dimension
	res, err := run(vectors(5, 8))
	require.ErrorIs(t, err, ErrInvalid, "within the minute the answer kept holds")
	assert.Zero(t, res.Upserted)

	clk.Advance(describedFor)
	res, err = run(vectors(5, 8))
	require.NoError(t, err)
	assert.Equal(t, 5, res.Upserted)
	assert.Equal(t, 5, srv.Count("ns"))
}

// briefOutageIndex is a connection to srv whose DescribeIndexStats, while
// down is set, answers UNAVAILABLE, and whose upserts do too, as many as
// failUpserts says: a short outage of an index that answered before.
func briefOutageIndex(t *testing.T, srv *upserttest.Server, down *atomic.Bool, failUpserts *atomic.Int32) *pinecone.IndexConnection {
	t.Helper()
	ic := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if down.Load() {
			if strings.HasSuffix(method, "/DescribeIndexStats") {
				return status.Error(codes.Unavailable, "upstream connect error")
			}
			if strings.HasSuffix(method, "/Upsert") && failUpserts.Add(-1) >= 0 {
				return status.Error(codes.Unavailable, "upstream connect error")
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "k"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "ns"}, grpc.WithChainUnaryInterceptor(ic))
	require.NoError(t, err)
	t.Cleanup(func() { idx.Close() })
	return idx
}

// briefOutageRun answers a call through a connection whose index
// answered DescribeIndexStats, then, later by after, is in a short outage
// (its DescribeIndexStats and its next 8 upserts answer UNAVAILABLE).
func briefOutageRun(t *testing.T, after time.Duration) (Result, error) {
	srv := upserttest.NewServer(upserttest.WithDimension(4))
	t.Cleanup(srv.Close)
	var down atomic.Bool
	var fail atomic.Int32
	idx := briefOutageIndex(t, srv, &down, &fail)
	clk := newFakeClock()
	_, err := All(context.Background(), vectors(2, 4), WithIndex(idx), withClock(clk), withRand(maxRand))
	require.NoError(t, err)
	clk.Advance(after)
	down.Store(true)
	fail.Store(8)
	return All(context.Background(), vectors(5, 4), WithIndex(idx), WithBatchSize(5), WithConcurrency(1),
		withClock(clk), withRand(maxRand), WithLogger(slog.New(slog.DiscardHandler)))
}

// A call made more than a minute after the connection's index last
// answered, while the index is briefly down (its DescribeIndexStats fails
// too), still knows the index answered: the outage is waited out, as
// within the minute, where its breaker took the host for a wrong one and
// gave up at once ("the circuit breaker has given up on the index").
func TestAnOutageAMinuteAfterTheIndexAnsweredIsWaitedOut(t *testing.T) {
	res, err := briefOutageRun(t, 2*describedFor)
	assert.NoError(t, err, "the index answered this connection before: an outage to wait out, not a wrong host")
	assert.Equal(t, 5, res.Upserted)
}

// Within the minute the kept answer says the host is right, and the same
// outage is waited out.
func TestAnOutageWithinTheMinuteAfterTheIndexAnsweredIsWaitedOut(t *testing.T) {
	res, err := briefOutageRun(t, 0)
	assert.NoError(t, err)
	assert.Equal(t, 5, res.Upserted)
}

// describeDownIndex is a connection to srv whose DescribeIndexStats
// answers UNAVAILABLE while down is set; its upserts are untouched.
func describeDownIndex(t *testing.T, srv *upserttest.Server, down *atomic.Bool) *pinecone.IndexConnection {
	return briefOutageIndex(t, srv, down, new(atomic.Int32))
}

// A describe that fails after the kept answer expired keeps no dimension:
// the index may have been deleted and created again with another (a
// re-index), and its records would fail before sending for as long as
// describe failed. The dimension is learned as when the index cannot be
// asked, while the outage is still waited out (the index answered this
// connection).
func TestAFailedDescribeAfterTheMinuteKeepsNoExpiredDimension(t *testing.T) {
	srv := upserttest.NewServer()
	defer srv.Close()
	var down atomic.Bool
	idx := describeDownIndex(t, srv, &down)
	clk := newFakeClock()
	run := func(recs []*pinecone.Vector) (Result, error) {
		return All(context.Background(), recs, WithIndex(idx), withClock(clk), withRand(maxRand),
			WithLogger(slog.New(slog.DiscardHandler)))
	}
	_, err := run(vectors(5, 4))
	require.NoError(t, err)
	_, err = run(vectors(5, 4)) // the index says dimension 4: kept
	require.NoError(t, err)

	srv.Reset() // the index deleted and created again, empty: any dimension
	clk.Advance(10 * describedFor)
	down.Store(true) // …and it cannot be asked

	res, err := run(vectors(5, 8))
	assert.NoError(t, err, "ten minutes later, the answer of the index deleted since must not refuse the new index's records")
	assert.Equal(t, 5, res.Upserted)
	assert.Equal(t, 5, srv.Count("ns"))
}

// README, "Through WithIndex, a run asks the index its dimension and
// vector type first (DescribeIndexStats, once a minute per connection at
// most ..."): once the kept answer expired, a describe that fails is kept a
// minute as nothing known (an outage), so that each call does not ask
// again and wait for the failure (up to describeTimeout, 5 s, when it
// hangs). A failure kept nothing at first: ten calls within a second asked
// ten times. Then only one the caller's context outlived was kept, which a
// question cut off by the library's own timeout is not (its cause says it
// is the index's): five calls of a hanging index asked five times.
func TestDescribeIsAskedAtMostOnceAMinuteAlsoWhenItFails(t *testing.T) {
	for _, tt := range []struct {
		name string
		fail func(ctx context.Context) error
	}{
		{"it fails at once", func(context.Context) error { return status.Error(codes.Unavailable, "upstream connect error") }},
		{"it hangs until its timeout", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := upserttest.NewServer()
			defer srv.Close()
			var down atomic.Bool
			var asked atomic.Int32
			ic := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if strings.HasSuffix(method, "/DescribeIndexStats") {
					asked.Add(1)
					if down.Load() {
						return tt.fail(ctx)
					}
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "k"})
			require.NoError(t, err)
			idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "ns"}, grpc.WithChainUnaryInterceptor(ic))
			require.NoError(t, err)
			defer idx.Close()
			clk := newFakeClock()
			run := func() {
				t.Helper()
				// A short request timeout bounds describe (min(describeTimeout,
				// requestTimeout)), so that a hanging one is quick.
				_, err := All(context.Background(), vectors(2, 4), WithIndex(idx), withClock(clk), withRand(maxRand),
					WithRequestTimeout(300*time.Millisecond), WithLogger(slog.New(slog.DiscardHandler)))
				require.NoError(t, err)
			}
			run()
			run() // the server now says dimension 4: kept
			clk.Advance(2 * describedFor)
			down.Store(true)
			before := asked.Load()
			for range 5 {
				run()
				clk.Advance(100 * time.Millisecond)
			}
			assert.LessOrEqual(t, asked.Load()-before, int32(1), "five calls within half a second through one connection asked again")
		})
	}
}

// describeIndex's contract: a failed re-ask is kept a minute as "nothing
// known" because it is an outage ("When asking again fails (an outage) ...
// that is kept a minute too, so that an outage makes each call wait for no
// failing question"), and the README promises the index's dimension and
// vector type are checked (asked "once a minute per connection at most").
// A run whose own context was already canceled (a service's request
// abandoned by its client) is no outage of the index: yet its describe
// fails with context.Canceled and that failure replaced
// the expired real answer for a minute. Every other run through the
// connection in that minute, with a live context and an index that
// answers, knows nothing of the index: here a sparse index's dense and
// hybrid records are sent (and refused by the index) instead of being
// refused before sending, as TestASparseIndexRefusesDenseRecordsBeforeSending
// shows they are.
func TestACanceledCallersDescribeIsNoOutageKeptAMinute(t *testing.T) {
	srv := upserttest.NewServer(upserttest.WithVectorType(upserttest.VectorTypeSparse))
	defer srv.Close()
	idx := shapeIndex(t, srv, "ns")
	clk := newFakeClock()
	sparse := func(id string) *pinecone.Vector {
		return &pinecone.Vector{Id: id, SparseValues: &pinecone.SparseValues{Indices: []uint32{1, 5}, Values: []float32{0.5, 0.25}}}
	}
	run := func(ctx context.Context, recs []*pinecone.Vector) (Result, error) {
		return All(ctx, recs, WithIndex(idx), withClock(clk), withRand(maxRand), WithLogger(slog.New(slog.DiscardHandler)))
	}
	_, err := run(context.Background(), []*pinecone.Vector{sparse("s0")})
	require.NoError(t, err) // the index said it is sparse: kept a minute
	clk.Advance(2 * describedFor)

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = run(canceled, []*pinecone.Vector{sparse("s1")}) // the caller gave up before the run began

	clk.Advance(time.Second)
	before := srv.Stats().Requests
	recs := []*pinecone.Vector{
		sparse("s2"),
		{Id: "d", Values: &[]float32{1, 2}},
		{Id: "h", Values: &[]float32{1, 2}, SparseValues: &pinecone.SparseValues{Indices: []uint32{1}, Values: []float32{1}}},
		sparse("s3"),
	}
	res, err := run(context.Background(), recs)
	require.ErrorIs(t, err, ErrInvalid)
	require.Len(t, res.Failed, 2)
	for _, f := range res.Failed {
		assert.Zero(t, f.Attempts, "record %s sent to a sparse index that answers: its shape was forgotten for a canceled caller", f.ID)
	}
	assert.Equal(t, 1, srv.Stats().Requests-before, "one request: the dense and hybrid records refused before sending")
}
