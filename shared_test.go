package upsert

import (
	"context"
	"errors"
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
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// indexConn makes a connection to host the way a user does. Nothing is
// dialled until a request is sent.
func indexConn(t *testing.T, host, namespace string) *pinecone.IndexConnection {
	t.Helper()
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test-key"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: host, Namespace: namespace})
	require.NoError(t, err)
	t.Cleanup(func() { idx.Close() })
	return idx
}

// fakeIndexConn is an SDK connection to host whose upserts the interceptor
// answers without a network: down fails them all (UNAVAILABLE), otherwise
// each is confirmed in full. Nothing else is answered.
func fakeIndexConn(t *testing.T, host string, down bool) *pinecone.IndexConnection {
	t.Helper()
	answer := func(_ context.Context, method string, req, reply any, _ *grpc.ClientConn, _ grpc.UnaryInvoker, _ ...grpc.CallOption) error {
		if down || !strings.HasSuffix(method, "/Upsert") {
			return status.Error(codes.Unavailable, "down")
		}
		n := req.(proto.Message).ProtoReflect()
		vs := n.Get(n.Descriptor().Fields().ByName("vectors")).List().Len()
		m := reply.(proto.Message).ProtoReflect()
		m.Set(m.Descriptor().Fields().ByName("upserted_count"), protoreflect.ValueOfUint32(uint32(vs)))
		return nil
	}
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test-key"})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: host, Namespace: "ns"}, grpc.WithUnaryInterceptor(answer))
	require.NoError(t, err)
	t.Cleanup(func() { idx.Close() })
	return idx
}

// sharedCount is how many indexes have a shared Limiter now.
func sharedCount() int {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	return len(shared.limiters)
}

func TestShareLimiter(t *testing.T) {
	t.Run("connections made separately to one index share a Limiter while both are in use", func(t *testing.T) {
		a, releaseA := shareLimiter(indexConn(t, "http://127.0.0.1:1", "ns"))
		b, releaseB := shareLimiter(indexConn(t, "http://127.0.0.1:1", "ns"))
		assert.Same(t, a, b)
		releaseA()
		c, releaseC := shareLimiter(indexConn(t, "http://127.0.0.1:1", "ns"))
		assert.Same(t, a, c, "one user left is enough to keep it")
		releaseB()
		releaseC()
		assert.Zero(t, sharedCount())
	})
	t.Run("a connection to another namespace of the index shares it too, its lanes apart", func(t *testing.T) {
		idx := indexConn(t, "http://127.0.0.1:1", "ns")
		a, releaseA := shareLimiter(idx)
		defer releaseA()
		b, releaseB := shareLimiter(idx.WithNamespace("other"))
		defer releaseB()
		assert.Same(t, a, b)
	})
	t.Run("another index has its own", func(t *testing.T) {
		a, releaseA := shareLimiter(indexConn(t, "http://127.0.0.1:1", "ns"))
		defer releaseA()
		b, releaseB := shareLimiter(indexConn(t, "http://127.0.0.1:2", "ns"))
		defer releaseB()
		assert.NotSame(t, a, b)
	})
	t.Run("a call that starts after every other ended starts with nothing learned", func(t *testing.T) {
		a, release := shareLimiter(indexConn(t, "http://127.0.0.1:1", "ns"))
		release()
		release() // counted once
		b, release := shareLimiter(indexConn(t, "http://127.0.0.1:1", "ns"))
		defer release()
		assert.NotSame(t, a, b)
	})
	t.Run("one index's host spelled several ways is one key", func(t *testing.T) {
		want := "name.svc.pinecone.io"
		for _, host := range []string{"name.svc.pinecone.io", "https://name.svc.pinecone.io", "name.svc.pinecone.io:443",
			"https://Name.SVC.pinecone.io:443", "https://name.svc.pinecone.io/"} {
			assert.Equal(t, want, indexKey(indexConn(t, host, "ns")), host)
		}
		assert.Equal(t, "name.svc.pinecone.io:8443", indexKey(indexConn(t, "name.svc.pinecone.io:8443", "ns")), "another port is another server")
	})
	t.Run("the key is the host the SDK keeps, not the connection", func(t *testing.T) {
		// Fails if the SDK or gRPC renames the fields indexKey reads.
		assert.Equal(t, "127.0.0.1:1", indexKey(indexConn(t, "http://127.0.0.1:1", "ns")))
	})
}

func TestRunsShareTheLimiterOfTheirIndex(t *testing.T) {
	ctx := context.Background()
	t.Run("a Writer holds its index's Limiter until it is closed", func(t *testing.T) {
		w, err := NewWriter(ctx, WithIndex(indexConn(t, "http://127.0.0.1:1", "ns")))
		require.NoError(t, err)
		other, release := shareLimiter(indexConn(t, "http://127.0.0.1:1", "ns"))
		assert.Same(t, w.in.r.cfg.limiter, other)
		release()
		_, err = w.Close(ctx)
		require.NoError(t, err)
		assert.Zero(t, sharedCount())
	})
	t.Run("All and Stream leave nothing behind, whatever their end", func(t *testing.T) {
		idx := indexConn(t, "http://127.0.0.1:1", "ns")
		_, err := All(ctx, nil, WithIndex(idx))
		require.NoError(t, err)
		_, err = Stream(ctx, func(func(*pinecone.Vector) bool) {}, WithIndex(idx), WithCheckpoint(brokenCheckpoint{}))
		require.Error(t, err)
		assert.Zero(t, sharedCount())
	})
	t.Run("a call given a Limiter or a clock of its own keeps it", func(t *testing.T) {
		idx := indexConn(t, "http://127.0.0.1:1", "ns")
		own := NewLimiter()
		w, err := NewWriter(ctx, WithIndex(idx), WithLimiter(own))
		require.NoError(t, err)
		assert.Same(t, own, w.in.r.cfg.limiter)
		clk := newFakeClock()
		v, err := NewWriter(ctx, WithIndex(idx), withClock(clk))
		require.NoError(t, err)
		assert.Equal(t, clk, v.in.r.cfg.limiter.clock, "a test's virtual time reaches its limiter")
		assert.Zero(t, sharedCount())
		_, _ = w.Close(ctx)
		_, _ = v.Close(ctx)
	})
}

// brokenCheckpoint cannot be read.
type brokenCheckpoint struct{}

func (brokenCheckpoint) Load(context.Context) (int64, error) { return 0, errors.New("unreadable") }
func (brokenCheckpoint) Save(context.Context, int64) error   { return nil }

// A StartRun observer that panics does not keep the index's shared Limiter
// in the registry (later calls would inherit its state instead of starting
// with nothing learned).
func TestAPanickingStartRunLetsGoOfTheSharedLimiter(t *testing.T) {
	before := sharedCount()
	boom := Observer{StartRun: func(ctx context.Context, _ RunEvent) context.Context { panic("observer bug") }}
	assert.Panics(t, func() {
		_, _ = All(context.Background(), vectors(3, 2), WithIndex(indexConn(t, "http://127.0.0.1:7", "ns")), WithObserver(boom))
	})
	assert.Equal(t, before, sharedCount())
}

// A Limiter kept between calls (WithLimiter) whose namespace's record rate
// a 429 episode measured at 1000/s; the next call comes a minute later.
// While it runs, the cap stays near what it learned, not millions a second
// from its first answer on (TestAnIdleGapBetweenCallsDoesNotClimbTheRateCurve).
func TestANewCallOnAKeptLimiterStartsFromTheRateItLearned(t *testing.T) {
	clk := newFakeClock()
	lim := &Limiter{clock: clk}
	measuredLane(lim.lane("", MaxBatchSize), clk, 1000)
	clk.Advance(time.Minute)

	var mu sync.Mutex
	most := 0.0
	watch := Observer{RequestDone: func(RequestEvent) {
		ln := lim.lane("", MaxBatchSize)
		ln.mu.Lock()
		l := ln.dims[dimRecords].ctl.limit
		ln.mu.Unlock()
		mu.Lock()
		most = max(most, l)
		mu.Unlock()
	}}
	fi := newFakeIndex(nil)
	// The call's first request is answered once its second went out (it
	// has four slots at first): requests overlap, as they do on an index
	// whose round trip is longer than the tenth of a second the bucket
	// holds.
	var sends atomic.Int64
	second := make(chan struct{})
	send := func(ctx context.Context, ns string, b []*pinecone.Vector) error {
		switch sends.Add(1) {
		case 1:
			select {
			case <-second:
			case <-time.After(time.Second):
			}
		case 2:
			close(second)
		}
		return fi.Upsert(ctx, ns, b)
	}
	res, err := All(context.Background(), vectors(400, 2), WithUpsertFunc(send), WithLimiter(lim),
		withClock(clk), withRand(maxRand), WithObserver(watch))
	require.NoError(t, err)
	require.Equal(t, 400, res.Upserted)
	assert.Less(t, most, 2*1000.0, "the record rate the kept Limiter held during the next call")
}
