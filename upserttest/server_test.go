package upserttest_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/upsertlib/upsert/upserttest"
)

func TestMain(m *testing.M) {
	// A REST body over WithMaxRequestBytes is answered unread: net/http then
	// lingers 500 ms on its connection (closeWriteAndWait) before closing
	// it, after Close. That goroutine ends by itself.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}

const ns = "ns"

// start starts a server closed at the end of the test.
func start(t *testing.T, opts ...upserttest.Option) *upserttest.Server {
	t.Helper()
	srv := upserttest.NewServer(opts...)
	t.Cleanup(srv.Close)
	return srv
}

// connect opens an SDK index connection to srv in namespace ns with API key
// "test", closed at the end of the test (before the server).
func connect(t *testing.T, srv *upserttest.Server, dialOpts ...grpc.DialOption) *pinecone.IndexConnection {
	t.Helper()
	return connectAs(t, srv, "test", ns, dialOpts...)
}

func connectAs(t *testing.T, srv *upserttest.Server, apiKey, namespace string, dialOpts ...grpc.DialOption) *pinecone.IndexConnection {
	t.Helper()
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: apiKey})
	require.NoError(t, err)
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: namespace}, dialOpts...)
	require.NoError(t, err)
	t.Cleanup(func() { idx.Close() })
	return idx
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func bg(t *testing.T) context.Context { return ctxTimeout(t, 5*time.Second) }

func dense(id string, values ...float32) *pinecone.Vector {
	return &pinecone.Vector{Id: id, Values: &values}
}

func denseN(id string, dim int) *pinecone.Vector {
	values := make([]float32, dim)
	for i := range values {
		values[i] = float32(i) / float32(dim)
	}
	return &pinecone.Vector{Id: id, Values: &values}
}

func batch(prefix string, n, dim int) []*pinecone.Vector {
	out := make([]*pinecone.Vector, n)
	for i := range out {
		out[i] = denseN(prefix+"-"+string(rune('a'+i%26))+strings.Repeat("x", i/26), dim)
	}
	return out
}

func meta(t *testing.T, m map[string]any) *pinecone.Metadata {
	t.Helper()
	s, err := structpb.NewStruct(m)
	require.NoError(t, err)
	return s
}

func assertVectorEqual(t *testing.T, want, got *pinecone.Vector) {
	t.Helper()
	require.NotNil(t, got)
	assert.Equal(t, want.Id, got.Id)
	assert.Equal(t, want.Values, got.Values)
	assert.Equal(t, want.SparseValues, got.SparseValues)
	if want.Metadata == nil {
		assert.Nil(t, got.Metadata)
	} else {
		assert.True(t, proto.Equal(want.Metadata, got.Metadata), "metadata: want %v, got %v", want.Metadata, got.Metadata)
	}
}

func code(err error) codes.Code { return status.Code(err) }

func TestUpsertStoresWhatWasSent(t *testing.T) {
	tests := []struct {
		name   string
		vector func(t *testing.T) *pinecone.Vector
	}{
		{"a dense vector is stored as sent", func(t *testing.T) *pinecone.Vector {
			return dense("dense", 0.5, -1.25, 3)
		}},
		{"a sparse vector is stored as sent", func(t *testing.T) *pinecone.Vector {
			return &pinecone.Vector{Id: "sparse", SparseValues: &pinecone.SparseValues{Indices: []uint32{1, 7, 4000000000}, Values: []float32{0.5, 0.25, 2}}}
		}},
		{"a hybrid vector with metadata is stored as sent", func(t *testing.T) *pinecone.Vector {
			v := dense("hybrid", 1, 2, 3)
			v.SparseValues = &pinecone.SparseValues{Indices: []uint32{3}, Values: []float32{9}}
			v.Metadata = meta(t, map[string]any{"title": "Hello", "year": 2024.0, "draft": false, "tags": []any{"a", "b"}})
			return v
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t)
			idx := connect(t, srv)
			v := tt.vector(t)

			n, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{v})
			require.NoError(t, err)
			assert.EqualValues(t, 1, n)

			got, ok := srv.Vector(ns, v.Id)
			require.True(t, ok)
			assertVectorEqual(t, v, got)

			fetched, err := idx.FetchVectors(bg(t), []string{v.Id, "missing"})
			require.NoError(t, err)
			require.Len(t, fetched.Vectors, 1)
			assertVectorEqual(t, v, fetched.Vectors[v.Id])
		})
	}
}

func TestStoredVectorsAreCopies(t *testing.T) {
	srv := start(t)
	idx := connect(t, srv)
	_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1, 2)})
	require.NoError(t, err)

	got, _ := srv.Vector(ns, "a")
	(*got.Values)[0] = 99
	again, _ := srv.Vector(ns, "a")
	assert.Equal(t, float32(1), (*again.Values)[0], "modifying a returned vector must not change the store")

	all := srv.Vectors(ns)
	(*all["a"].Values)[0] = 99
	again, _ = srv.Vector(ns, "a")
	assert.Equal(t, float32(1), (*again.Values)[0])
}

func TestNamespacesAreKeptApart(t *testing.T) {
	srv := start(t)
	_, err := connectAs(t, srv, "test", "one", nil...).UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1), dense("b", 1)})
	require.NoError(t, err)
	_, err = connectAs(t, srv, "test", "two", nil...).UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 2)})
	require.NoError(t, err)

	assert.Equal(t, []string{"one", "two"}, srv.Namespaces())
	assert.Equal(t, 2, srv.Count("one"))
	assert.Equal(t, 1, srv.Count("two"))
	assert.Equal(t, 0, srv.Count("three"))
	assert.Empty(t, srv.Vectors("three"))
	v, _ := srv.Vector("two", "a")
	assert.Equal(t, []float32{2}, *v.Values)

	t.Run("the SDK's default namespace is stored as __default__", func(t *testing.T) {
		_, err := connectAs(t, srv, "test", "").UpsertVectors(bg(t), []*pinecone.Vector{dense("z", 1)})
		require.NoError(t, err)
		assert.Equal(t, 1, srv.Count("__default__"))
	})

	t.Run("DescribeIndexStats counts vectors per namespace", func(t *testing.T) {
		st, err := connect(t, srv).DescribeIndexStats(bg(t))
		require.NoError(t, err)
		require.NotNil(t, st.Dimension)
		assert.EqualValues(t, 1, *st.Dimension)
		assert.EqualValues(t, 4, st.TotalVectorCount)
		require.Len(t, st.Namespaces, 3)
		assert.EqualValues(t, 2, st.Namespaces["one"].VectorCount)
		assert.EqualValues(t, 1, st.Namespaces["two"].VectorCount)
	})
}

func TestValidationRejectsTheWholeRequest(t *testing.T) {
	const secret = "secret-id"
	long := strings.Repeat("x", 513)
	bigText := strings.Repeat("y", 41*1024)
	tests := []struct {
		name    string
		vectors func(t *testing.T) []*pinecone.Vector
		message string
	}{
		{"more than 1000 vectors are rejected", func(t *testing.T) []*pinecone.Vector {
			return append(batch(secret, 1000, 2), dense("one-too-many", 1, 2))
		}, "exceeds the limit of 1000 vectors"},
		{"an empty id is rejected", func(t *testing.T) []*pinecone.Vector {
			return []*pinecone.Vector{dense(secret, 1, 2), dense("", 1, 2)}
		}, "must not be empty"},
		{"an id over 512 bytes is rejected", func(t *testing.T) []*pinecone.Vector {
			return []*pinecone.Vector{dense(secret, 1, 2), dense(long, 1, 2)}
		}, "maximum length of 512 bytes"},
		{"metadata over 40 KB is rejected", func(t *testing.T) []*pinecone.Vector {
			v := dense(secret, 1, 2)
			v.Metadata = meta(t, map[string]any{"text": bigText})
			return []*pinecone.Vector{v}
		}, "exceeds the limit of 40960 bytes per vector"},
		{"a nested metadata object is rejected", func(t *testing.T) []*pinecone.Vector {
			v := dense(secret, 1, 2)
			v.Metadata = meta(t, map[string]any{"nested": map[string]any{"a": "b"}})
			return []*pinecone.Vector{v}
		}, "got 'object' for field 'nested'"},
		{"a metadata list of numbers is rejected", func(t *testing.T) []*pinecone.Vector {
			v := dense(secret, 1, 2)
			v.Metadata = meta(t, map[string]any{"nums": []any{1.0, 2.0}})
			return []*pinecone.Vector{v}
		}, "got 'list' for field 'nums'"},
		{"a null metadata value is rejected", func(t *testing.T) []*pinecone.Vector {
			v := dense(secret, 1, 2)
			v.Metadata = meta(t, map[string]any{"nothing": nil})
			return []*pinecone.Vector{v}
		}, "Metadata value must be a string, number, boolean or list of strings, got 'null' for field 'nothing'"},
		{"a dense vector over 20000 dimensions is rejected", func(t *testing.T) []*pinecone.Vector {
			return []*pinecone.Vector{denseN(secret, 20001)}
		}, "exceeds the maximum dimension of 20000"},
		{"sparse indices and values of different lengths are rejected", func(t *testing.T) []*pinecone.Vector {
			return []*pinecone.Vector{{Id: secret, SparseValues: &pinecone.SparseValues{Indices: []uint32{1, 2}, Values: []float32{1}}}}
		}, "must have the same length"},
		{"a sparse vector over 2048 non-zeros is rejected", func(t *testing.T) []*pinecone.Vector {
			sv := &pinecone.SparseValues{}
			for i := range 2049 {
				sv.Indices = append(sv.Indices, uint32(i))
				sv.Values = append(sv.Values, 1)
			}
			return []*pinecone.Vector{{Id: secret, SparseValues: sv}}
		}, "exceeds the limit of 2048"},
		{"a vector with no values is rejected", func(t *testing.T) []*pinecone.Vector {
			return []*pinecone.Vector{{Id: secret}}
		}, "must have dense values, sparse values, or both"},
		{"a NaN dense value is rejected", func(t *testing.T) []*pinecone.Vector {
			return []*pinecone.Vector{dense(secret, 1, float32(math.NaN()))}
		}, "NaN or Inf"},
		{"an infinite sparse value is rejected", func(t *testing.T) []*pinecone.Vector {
			return []*pinecone.Vector{{Id: secret, SparseValues: &pinecone.SparseValues{Indices: []uint32{1}, Values: []float32{float32(math.Inf(-1))}}}}
		}, "NaN or Inf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t)
			idx := connect(t, srv)

			_, err := idx.UpsertVectors(bg(t), tt.vectors(t))
			require.Error(t, err)
			assert.Equal(t, codes.InvalidArgument, code(err), err.Error())
			msg := status.Convert(err).Message()
			assert.Contains(t, msg, tt.message)
			assert.NotContains(t, msg, secret, "the message must name no record")
			assert.Zero(t, srv.Count(ns), "nothing of the request may be written")
			assert.Equal(t, 1, srv.Stats().Codes[codes.InvalidArgument])
		})
	}

	t.Run("values at the limits are accepted", func(t *testing.T) {
		srv := start(t)
		v := denseN(strings.Repeat("i", 512), 20000)
		v.Metadata = meta(t, map[string]any{"tags": []any{"x", "y"}, "n": 1.5, "ok": true, "text": strings.Repeat("z", 40*1024-100)})
		_, err := connect(t, srv).UpsertVectors(bg(t), []*pinecone.Vector{v})
		require.NoError(t, err)
	})

	t.Run("1000 vectors in a request are accepted", func(t *testing.T) {
		srv := start(t)
		_, err := connect(t, srv).UpsertVectors(bg(t), batch("max", 1000, 2))
		require.NoError(t, err)
		assert.Equal(t, 1000, srv.Count(ns))
	})
}

func TestDimension(t *testing.T) {
	t.Run("WithDimension rejects other dimensions with the real message", func(t *testing.T) {
		srv := start(t, upserttest.WithDimension(4))
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1, 2, 3)})
		require.Equal(t, codes.InvalidArgument, code(err))
		assert.Equal(t, "Vector dimension 3 does not match the dimension of the index 4", status.Convert(err).Message())
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1, 2, 3, 4)})
		require.NoError(t, err)
	})

	t.Run("an index with a dimension refuses sparse values alone as dimension 0", func(t *testing.T) {
		// Pinecone: "Records with sparse vector values must also contain
		// dense vector values" (docs, limits); a user's capture of the
		// answer: "Vector dimension 0 does not match the dimension of the
		// index 1536".
		srv := start(t, upserttest.WithDimension(4))
		idx := connect(t, srv)
		sparseOnly := &pinecone.Vector{Id: "s", SparseValues: &pinecone.SparseValues{Indices: []uint32{1}, Values: []float32{0.5}}}
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{sparseOnly})
		require.Equal(t, codes.InvalidArgument, code(err))
		assert.Equal(t, "Vector dimension 0 does not match the dimension of the index 4", status.Convert(err).Message())
	})

	t.Run("the first dense vector fixes the dimension by default", func(t *testing.T) {
		srv := start(t)
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1, 2, 3)})
		require.NoError(t, err)
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("b", 1, 2, 3, 4)})
		require.Equal(t, codes.InvalidArgument, code(err))
		assert.Equal(t, "Vector dimension 4 does not match the dimension of the index 3", status.Convert(err).Message())

		t.Run("and Reset forgets it", func(t *testing.T) {
			srv.Reset()
			_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("b", 1, 2, 3, 4)})
			require.NoError(t, err)
		})
	})

	t.Run("a request whose vectors disagree is rejected whole", func(t *testing.T) {
		srv := start(t)
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1, 2), dense("b", 1, 2, 3)})
		require.Equal(t, codes.InvalidArgument, code(err))
		assert.Zero(t, srv.Count(ns))
	})
}

func TestAPIKey(t *testing.T) {
	srv := start(t, upserttest.WithAPIKey("secret"))

	t.Run("a wrong key is answered Unauthenticated", func(t *testing.T) {
		idx := connectAs(t, srv, "test", ns)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
		assert.Equal(t, codes.Unauthenticated, code(err))
		_, err = idx.FetchVectors(bg(t), []string{"a"})
		assert.Equal(t, codes.Unauthenticated, code(err))
		assert.Zero(t, srv.Count(ns))
	})

	t.Run("the right key is accepted", func(t *testing.T) {
		idx := connectAs(t, srv, "secret", ns)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
		require.NoError(t, err)
		assert.Equal(t, 1, srv.Count(ns))
	})
}

func TestOversizedRequest(t *testing.T) {
	tests := []struct {
		name    string
		opts    []upserttest.Option
		vectors []*pinecone.Vector
	}{
		{"a request well over the default 2 MB gets gRPC's own error", nil, batch("big", 1000, 600)},
		// 26 vectors of 20,000 dimensions encode to about 2,080,000 bytes:
		// over 2 MB read as 10^6 bytes, under 2 MiB (2,097,152).
		{"a request between 2 MB and 2 MiB gets gRPC's own error: a MB is 10^6 bytes", nil, batch("mib", 26, upserttest.MaxDimension)},
		{"a request over WithMaxRequestBytes gets gRPC's own error", []upserttest.Option{upserttest.WithMaxRequestBytes(1000)}, batch("small", 10, 30)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t, tt.opts...)
			idx := connect(t, srv)
			_, err := idx.UpsertVectors(bg(t), tt.vectors)
			require.Equal(t, codes.ResourceExhausted, code(err))
			assert.Contains(t, status.Convert(err).Message(), "grpc: received message larger than max")
			assert.Zero(t, srv.Count(ns))
			// gRPC answers such requests itself; they are counted as it ends them.
			assert.Eventually(t, func() bool {
				st := srv.Stats()
				return st.Requests == 1 && st.Codes[codes.ResourceExhausted] == 1
			}, time.Second, time.Millisecond)
			assert.Zero(t, srv.Stats().RateLimited)
		})
	}
	t.Run("a request just under 2,000,000 bytes is accepted", func(t *testing.T) {
		srv := start(t)
		_, err := connect(t, srv).UpsertVectors(bg(t), batch("under", 24, upserttest.MaxDimension)) // about 1,920,000 bytes
		require.NoError(t, err)
		assert.Equal(t, 24, srv.Count(ns))
	})
}

func TestRateLimits(t *testing.T) {
	t.Run("a request over the vector bucket is rejected and writes nothing", func(t *testing.T) {
		srv := start(t, upserttest.WithRate(1, 10))
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), batch("a", 10, 2))
		require.NoError(t, err)
		_, err = idx.UpsertVectors(bg(t), batch("b", 5, 2))
		require.Equal(t, codes.ResourceExhausted, code(err))
		assert.Contains(t, status.Convert(err).Message(), "You've reached the max upsert size limit per second for index upserttest")
		assert.Equal(t, 10, srv.Count(ns))
		st := srv.Stats()
		assert.Equal(t, 1, st.RateLimited)
		assert.Equal(t, 10, st.VectorsWritten)
	})

	t.Run("a request larger than the burst is admitted when the bucket is full", func(t *testing.T) {
		srv := start(t, upserttest.WithRate(1, 5))
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), batch("a", 8, 2))
		require.NoError(t, err)
		_, err = idx.UpsertVectors(bg(t), batch("b", 1, 2))
		require.Equal(t, codes.ResourceExhausted, code(err), "the large request emptied the bucket")
	})

	t.Run("buckets are per namespace", func(t *testing.T) {
		srv := start(t, upserttest.WithRate(1, 2))
		_, err := connectAs(t, srv, "test", "one").UpsertVectors(bg(t), batch("a", 2, 2))
		require.NoError(t, err)
		_, err = connectAs(t, srv, "test", "two").UpsertVectors(bg(t), batch("a", 2, 2))
		require.NoError(t, err)
	})

	t.Run("the request bucket counts requests", func(t *testing.T) {
		srv := start(t, upserttest.WithRequestRate(1, 2))
		idx := connect(t, srv)
		for i := range 2 {
			_, err := idx.UpsertVectors(bg(t), batch(string(rune('a'+i)), 3, 2))
			require.NoError(t, err)
		}
		_, err := idx.UpsertVectors(bg(t), batch("c", 1, 2))
		require.Equal(t, codes.ResourceExhausted, code(err))
	})

	t.Run("the byte bucket counts request bytes", func(t *testing.T) {
		srv := start(t, upserttest.WithByteRate(1, 100))
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{denseN("a", 10)})
		require.NoError(t, err)
		size := srv.Stats().BytesReceived
		require.True(t, size > 50 && size <= 100, "request size %d", size)
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{denseN("b", 10)})
		require.Equal(t, codes.ResourceExhausted, code(err))
	})

}

func TestSlots(t *testing.T) {
	t.Run("slots bound concurrent writes and the rest queue", func(t *testing.T) {
		const latency = 50 * time.Millisecond
		srv := start(t, upserttest.WithSlots(2), upserttest.WithLatency(latency, 0))
		idx := connect(t, srv)

		began := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, 6)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense(string(rune('a'+i)), 1)})
			}()
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		assert.GreaterOrEqual(t, time.Since(began), 3*latency, "6 writes through 2 slots take 3 latencies")
		st := srv.Stats()
		assert.Equal(t, 2, st.MaxInFlight)
		assert.GreaterOrEqual(t, st.MaxQueued, 1)
		assert.Equal(t, 6, srv.Count(ns))
	})

	t.Run("a request whose client gives up while queued is dropped", func(t *testing.T) {
		srv := start(t, upserttest.WithSlots(1), upserttest.WithLatency(150*time.Millisecond, 0))
		idx := connect(t, srv)

		done := make(chan error, 1)
		go func() {
			_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("holder", 1)})
			done <- err
		}()
		require.Eventually(t, func() bool { return srv.Stats().MaxInFlight == 1 }, time.Second, time.Millisecond)
		assert.Equal(t, 1, srv.Stats().InFlight, "the holder is being written")

		_, err := idx.UpsertVectors(ctxTimeout(t, 30*time.Millisecond), []*pinecone.Vector{dense("quitter", 1)})
		assert.Equal(t, codes.DeadlineExceeded, code(err))
		require.NoError(t, <-done)

		assert.Equal(t, 1, srv.Count(ns))
		_, ok := srv.Vector(ns, "quitter")
		assert.False(t, ok, "a queued request whose client gave up must not be written")
		st := srv.Stats()
		assert.Equal(t, 1, st.MaxQueued)
		assert.Equal(t, [2]int{0, 0}, [2]int{st.InFlight, st.Queued}, "nothing left being written or waiting")
		assert.Zero(t, st.LateWrites, "a request dropped from the queue is not written")
	})
}

func TestLatency(t *testing.T) {
	tests := []struct {
		name    string
		opts    []upserttest.Option
		vectors []*pinecone.Vector
		atLeast time.Duration
	}{
		{"base latency delays the answer", []upserttest.Option{upserttest.WithLatency(20*time.Millisecond, 0)}, batch("a", 1, 2), 20 * time.Millisecond},
		{"per-vector latency adds up", []upserttest.Option{upserttest.WithLatency(5*time.Millisecond, 2*time.Millisecond)}, batch("a", 10, 2), 25 * time.Millisecond},
		{"byte latency is pro rata of MiB", []upserttest.Option{upserttest.WithByteLatency(time.Second)}, batch("a", 50, 256), 45 * time.Millisecond},
		{"large requests are slowed by WithSlowAbove", []upserttest.Option{upserttest.WithLatency(10*time.Millisecond, 0), upserttest.WithSlowAbove(5, 4)}, batch("a", 6, 2), 40 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t, tt.opts...)
			idx := connect(t, srv)
			began := time.Now()
			_, err := idx.UpsertVectors(bg(t), tt.vectors)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, time.Since(began), tt.atLeast)
		})
	}
}

func TestAmbiguousTimeout(t *testing.T) {
	tests := []struct {
		name string
		opts []upserttest.Option
		late int // Stats.LateWrites: written after the client gave up
	}{
		{"a write holding a slot lands after its client timed out", []upserttest.Option{upserttest.WithLatency(80*time.Millisecond, 0)}, 1},
		{"a delayed answer times out a write that already landed", []upserttest.Option{upserttest.WithFaults(upserttest.AmbiguousTimeouts(1, 500*time.Millisecond, 1))}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t, tt.opts...)
			idx := connect(t, srv)
			_, err := idx.UpsertVectors(ctxTimeout(t, 20*time.Millisecond), []*pinecone.Vector{dense("a", 1)})
			require.Equal(t, codes.DeadlineExceeded, code(err))
			assert.Eventually(t, func() bool { return srv.Count(ns) == 1 && srv.Stats().LateWrites == tt.late }, 2*time.Second, time.Millisecond)
		})
	}
}

// headerCapture records the header and trailer metadata of the last call.
type headerCapture struct {
	mu              sync.Mutex
	header, trailer metadata.MD
}

func (h *headerCapture) option() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var hd, tr metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&hd), grpc.Trailer(&tr))...)
		h.mu.Lock()
		h.header, h.trailer = hd, tr
		h.mu.Unlock()
		return err
	})
}

func TestFaultsThroughTheSDK(t *testing.T) {
	t.Run("a partial write stores the first half and answers Internal", func(t *testing.T) {
		srv := start(t, upserttest.WithFaults(upserttest.PartialWrites(1, 7)))
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1), dense("b", 1), dense("c", 1), dense("d", 1)})
		require.Equal(t, codes.Internal, code(err))
		assert.Equal(t, 2, srv.Count(ns))
		_, okA := srv.Vector(ns, "a")
		_, okB := srv.Vector(ns, "b")
		assert.True(t, okA && okB, "the first half is written")
		assert.Equal(t, 2, srv.Stats().VectorsWritten)
	})

	t.Run("a write answered with an error still lands with WriteAll", func(t *testing.T) {
		srv := start(t, upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
			return upserttest.Fault{Code: codes.Unavailable, Write: upserttest.WriteAll, Message: "503"}
		}))
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1), dense("b", 1)})
		require.Equal(t, codes.Unavailable, code(err))
		assert.Equal(t, "503", status.Convert(err).Message())
		assert.Equal(t, 2, srv.Count(ns))
	})

	t.Run("a connection reset fails the call and the next call reconnects", func(t *testing.T) {
		srv := start(t, upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
			return upserttest.Fault{Reset: r.Seq == 1}
		}))
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
		require.Equal(t, codes.Unavailable, code(err), "%v", err)
		assert.Zero(t, srv.Count(ns))

		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("b", 1)})
		require.NoError(t, err)
		assert.Equal(t, 1, srv.Count(ns))
		assert.Equal(t, 1, srv.Stats().Codes[codes.Unavailable])
	})

	t.Run("a reset after writing leaves the write in place", func(t *testing.T) {
		srv := start(t, upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
			return upserttest.Fault{Reset: r.Seq == 1, Write: upserttest.WriteAll}
		}))
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1), dense("b", 1)})
		require.Equal(t, codes.Unavailable, code(err), "%v", err)
		assert.Equal(t, 2, srv.Count(ns))
	})

	t.Run("RetryAfter is sent as header metadata", func(t *testing.T) {
		srv := start(t, upserttest.WithFaults(func(upserttest.Request) upserttest.Fault {
			return upserttest.Fault{Code: codes.ResourceExhausted, RetryAfter: 1500 * time.Millisecond}
		}))
		var hc headerCapture
		idx := connect(t, srv, hc.option())
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
		require.Equal(t, codes.ResourceExhausted, code(err))
		assert.Contains(t, status.Convert(err).Message(), "max upsert size limit per second")
		hc.mu.Lock()
		defer hc.mu.Unlock()
		assert.Equal(t, []string{"2"}, hc.header.Get("retry-after"))
		assert.Equal(t, []string{"1500"}, hc.header.Get("grpc-retry-pushback-ms"))
		assert.Equal(t, []string{"2"}, hc.trailer.Get("retry-after"))
	})

	t.Run("RejectIDs rejects a whole request without naming the id", func(t *testing.T) {
		srv := start(t, upserttest.WithFaults(upserttest.RejectIDs("poison")))
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("ok", 1), dense("poison", 1)})
		require.Equal(t, codes.InvalidArgument, code(err))
		assert.NotContains(t, status.Convert(err).Message(), "poison")
		assert.Zero(t, srv.Count(ns))
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("ok", 1)})
		require.NoError(t, err)
	})

	t.Run("RateLimitBurst rejects the scripted requests only", func(t *testing.T) {
		srv := start(t, upserttest.WithFaults(upserttest.RateLimitBurst(2, 2)))
		idx := connect(t, srv)
		var got []codes.Code
		for i := range 4 {
			_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense(string(rune('a'+i)), 1)})
			got = append(got, code(err))
		}
		assert.Equal(t, []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted, codes.OK}, got)
		st := srv.Stats()
		assert.Equal(t, 2, st.Codes[codes.OK])
		assert.Equal(t, 2, st.Codes[codes.ResourceExhausted])
		assert.Zero(t, st.RateLimited, "faults are not admission rejections")
	})

	t.Run("SetFaults replaces the script at run time", func(t *testing.T) {
		srv := start(t)
		idx := connect(t, srv)
		srv.SetFaults(upserttest.ErrorRate(codes.Unavailable, 1, 1))
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
		require.Equal(t, codes.Unavailable, code(err))
		srv.SetFaults(nil)
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
		require.NoError(t, err)
	})

	t.Run("the script sees the request", func(t *testing.T) {
		var mu sync.Mutex
		var seen []upserttest.Request
		srv := start(t, upserttest.WithFaults(func(r upserttest.Request) upserttest.Fault {
			mu.Lock()
			seen = append(seen, r)
			mu.Unlock()
			return upserttest.Fault{}
		}))
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("x", 1), dense("y", 1)})
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, seen, 1)
		r := seen[0]
		assert.Equal(t, 1, r.Seq)
		assert.Equal(t, ns, r.Namespace)
		assert.Equal(t, []string{"x", "y"}, r.IDs)
		assert.EqualValues(t, srv.Stats().BytesReceived, r.Bytes)
		assert.Positive(t, r.Elapsed)
		assert.False(t, r.Time.IsZero())
	})
}

func TestRestart(t *testing.T) {
	srv := start(t)
	idx := connect(t, srv)
	_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("before", 1)})
	require.NoError(t, err)
	addr := srv.Addr()

	srv.Restart()

	assert.Equal(t, addr, srv.Addr())
	assert.Equal(t, 1, srv.Count(ns), "stored data survives a restart")
	// The client may use its dropped connection once before noticing.
	require.Eventually(t, func() bool {
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("after", 1)})
		return err == nil
	}, 2*time.Second, 5*time.Millisecond, "the same SDK connection works again after reconnecting")
	assert.Equal(t, 2, srv.Count(ns))

	t.Run("a write in progress is abandoned by a restart", func(t *testing.T) {
		srv := start(t, upserttest.WithLatency(time.Minute, 0))
		idx := connect(t, srv)
		done := make(chan error, 1)
		go func() {
			_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("lost", 1)})
			done <- err
		}()
		require.Eventually(t, func() bool { return srv.Stats().MaxInFlight == 1 }, time.Second, time.Millisecond)
		srv.Restart()
		assert.Equal(t, codes.Unavailable, code(<-done))
		assert.Zero(t, srv.Count(ns))
	})
}

func TestClose(t *testing.T) {
	t.Run("Close is idempotent and safe concurrently", func(t *testing.T) {
		srv := upserttest.NewServer()
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				srv.Close()
			}()
		}
		wg.Wait()
		srv.Close()
		srv.Restart() // does nothing on a closed server
	})

	t.Run("Close ends waits for slots and delays at once", func(t *testing.T) {
		srv := upserttest.NewServer(upserttest.WithSlots(1), upserttest.WithLatency(time.Minute, 0))
		idx := connect(t, srv)
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense(string(rune('a'+i)), 1)})
			}()
		}
		require.Eventually(t, func() bool { return srv.Stats().MaxQueued == 2 }, time.Second, time.Millisecond)
		began := time.Now()
		srv.Close()
		wg.Wait()
		assert.Less(t, time.Since(began), 5*time.Second)
		assert.Zero(t, srv.Count(ns))
	})

	t.Run("stored vectors stay readable after Close", func(t *testing.T) {
		srv := upserttest.NewServer()
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
		require.NoError(t, err)
		srv.Close()
		assert.Equal(t, 1, srv.Count(ns))
	})
}

func TestStatsAndReset(t *testing.T) {
	srv := start(t, upserttest.WithDimension(2))
	idx := connect(t, srv)
	_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1, 2), dense("b", 1, 2)})
	require.NoError(t, err)
	_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 3, 4)})
	require.NoError(t, err)
	_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("c", 1)})
	require.Error(t, err)

	st := srv.Stats()
	assert.Equal(t, 3, st.Requests)
	assert.Equal(t, map[codes.Code]int{codes.OK: 2, codes.InvalidArgument: 1}, st.Codes)
	assert.Equal(t, 3, st.VectorsWritten, "overwrites count as writes")
	assert.Positive(t, st.BytesReceived)
	assert.Equal(t, 1, st.MaxInFlight)
	assert.Zero(t, st.MaxQueued)

	st.Codes[codes.OK] = 100
	assert.Equal(t, 2, srv.Stats().Codes[codes.OK], "Stats returns a snapshot")

	srv.Reset()
	assert.Zero(t, srv.Count(ns))
	assert.Empty(t, srv.Namespaces())
	assert.Equal(t, upserttest.Stats{Codes: map[codes.Code]int{}}, srv.Stats())
	_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("c", 1)})
	assert.Equal(t, codes.InvalidArgument, code(err), "a dimension set by WithDimension survives Reset")
}

func TestUnimplementedMethods(t *testing.T) {
	srv := start(t)
	idx := connect(t, srv)
	_, err := idx.QueryByVectorValues(bg(t), &pinecone.QueryByVectorValuesRequest{Vector: []float32{1}, TopK: 1})
	assert.Equal(t, codes.Unimplemented, code(err))
	err = idx.DeleteVectorsById(bg(t), []string{"a"})
	assert.Equal(t, codes.Unimplemented, code(err))
}

// A serverless index refuses a DescribeIndexStats request with a filter
// (OpenAPI spec 2025-10, DescribeIndexStatsRequest.filter: "Serverless
// indexes do not support filtering `describe_index_stats` by metadata";
// go-pinecone's DescribeIndexStatsFiltered: "only available on pods-based
// indexes"), with codes.InvalidArgument, rather than answer the
// unfiltered counts.
func TestDescribeIndexStatsFilterIsNotIgnored(t *testing.T) {
	srv := start(t)
	idx := connect(t, srv)
	vectors := batch("f", 5, 2)
	for _, v := range vectors {
		v.Metadata = meta(t, map[string]any{"genre": "drama"})
	}
	_, err := idx.UpsertVectors(bg(t), vectors)
	require.NoError(t, err)

	filter := meta(t, map[string]any{"genre": map[string]any{"$eq": "comedy"}})
	_, err = idx.DescribeIndexStatsFiltered(bg(t), filter)
	require.Equal(t, codes.InvalidArgument, code(err), "a serverless index refuses the filter")

	st, err := idx.DescribeIndexStatsFiltered(bg(t), nil)
	require.NoError(t, err, "no filter: the plain DescribeIndexStats")
	assert.Equal(t, uint32(5), st.TotalVectorCount)
}

// A Pinecone index is dense or sparse ("Dense and sparse indexes are
// separate index types"): by default the first write decides. After a
// sparse-only vector, dense values are refused; after a dense one, sparse
// values alone are a dimension mismatch (TestDimension). Reset forgets it.
func TestAnIndexIsEitherDenseOrSparse(t *testing.T) {
	sparseOnly := func(id string) *pinecone.Vector {
		return &pinecone.Vector{Id: id, SparseValues: &pinecone.SparseValues{Indices: []uint32{1, 7}, Values: []float32{0.5, 0.25}}}
	}
	hybrid := dense("h", 1, 2, 3)
	hybrid.SparseValues = &pinecone.SparseValues{Indices: []uint32{1}, Values: []float32{0.5}}

	t.Run("sparse first", func(t *testing.T) {
		srv := start(t)
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{sparseOnly("s")})
		require.NoError(t, err)
		for _, v := range []*pinecone.Vector{dense("d", 1, 2, 3), hybrid} {
			_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{v})
			require.Equal(t, codes.InvalidArgument, code(err), v.Id)
			assert.Equal(t, "Sparse index does not support dense values", status.Convert(err).Message())
		}
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{sparseOnly("s2")})
		assert.NoError(t, err)

		srv.Reset()
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("d", 1, 2, 3)})
		assert.NoError(t, err, "Reset forgets the type")
	})

	t.Run("dense first", func(t *testing.T) {
		srv := start(t)
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{hybrid})
		require.NoError(t, err)
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{sparseOnly("s")})
		require.Equal(t, codes.InvalidArgument, code(err))
		assert.Equal(t, "Vector dimension 0 does not match the dimension of the index 3", status.Convert(err).Message())
	})

	t.Run("within one request, the first vector decides", func(t *testing.T) {
		srv := start(t)
		idx := connect(t, srv)
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{sparseOnly("s"), dense("d", 1, 2, 3)})
		require.Equal(t, codes.InvalidArgument, code(err))
		assert.Zero(t, srv.Count(ns), "the whole request is refused")
		_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("d", 1, 2, 3), sparseOnly("s")})
		require.Equal(t, codes.InvalidArgument, code(err))
		assert.Zero(t, srv.Count(ns))
	})
}

// A vector without dense values in an index with a dimension is answered
// with the dimension error, before the other rules it breaks, as a real
// answer shows (probots-io/pinecone-php#15: 400 {"code":3,"message":"Vector
// dimension 0 does not match the dimension of the index 1536"}).
func TestVectorWithoutDenseValuesInADenseIndexIsADimensionMismatch(t *testing.T) {
	tests := []struct {
		name string
		opts []upserttest.Option
		vec  *pinecone.Vector
	}{
		{"a vector with no values", []upserttest.Option{upserttest.WithDimension(4)}, &pinecone.Vector{Id: "empty"}},
		{"a sparse-only vector in an index declared dense", []upserttest.Option{upserttest.WithDimension(4), upserttest.WithVectorType(upserttest.VectorTypeDense)},
			&pinecone.Vector{Id: "s", SparseValues: &pinecone.SparseValues{Indices: []uint32{1}, Values: []float32{0.5}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t, tt.opts...)
			_, err := connect(t, srv).UpsertVectors(bg(t), []*pinecone.Vector{tt.vec})
			require.Equal(t, codes.InvalidArgument, code(err))
			assert.Equal(t, "Vector dimension 0 does not match the dimension of the index 4", status.Convert(err).Message())
		})
	}
}

// Pinecone refuses sparse values whose indices repeat: the official Python
// SDK's integration test (pinecone-python-client,
// tests/integration/data_asyncio/test_upsert_sparse.py, "sparse - upsert
// with duplicate indices") expects a PineconeApiException, an answer of
// the service, for indices [1, 2, 1]; the library's validator refuses them
// too. The server once took and stored them, so that a test of a client
// against it could not see what Pinecone would answer.
func TestDuplicateSparseIndicesAreRefusedAsByPinecone(t *testing.T) {
	tests := []struct {
		name string
		opts []upserttest.Option
		vec  *pinecone.Vector
		dup  string
	}{
		{"in a sparse index", []upserttest.Option{upserttest.WithVectorType(upserttest.VectorTypeSparse)},
			&pinecone.Vector{Id: "dup", SparseValues: &pinecone.SparseValues{Indices: []uint32{1, 2, 1}, Values: []float32{0.1, 0.2, 0.3}}}, "1"},
		{"in a hybrid vector of a dense index", []upserttest.Option{upserttest.WithDimension(2)},
			&pinecone.Vector{Id: "dup", Values: &[]float32{1, 2}, SparseValues: &pinecone.SparseValues{Indices: []uint32{7, 7}, Values: []float32{0.5, 0.25}}}, "7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t, tt.opts...)
			ok := &pinecone.Vector{Id: "ok", Values: &[]float32{1, 2}, SparseValues: &pinecone.SparseValues{Indices: []uint32{3, 1}, Values: []float32{1, 1}}}
			if tt.vec.Values == nil {
				ok.Values = nil
			}
			_, err := connect(t, srv).UpsertVectors(bg(t), []*pinecone.Vector{ok, tt.vec})
			require.Equal(t, codes.InvalidArgument, code(err), "repeated sparse indices are refused: %v", err)
			assert.Equal(t, "Sparse vector indices must be unique, found index "+tt.dup+" more than once", status.Convert(err).Message(),
				"named as the other refusals are, without the record's id")
			assert.Zero(t, srv.Count(ns), "nothing of the request is written")
		})
	}

	t.Run("unsorted indices that do not repeat are taken", func(t *testing.T) {
		srv := start(t, upserttest.WithVectorType(upserttest.VectorTypeSparse))
		v := &pinecone.Vector{Id: "ok", SparseValues: &pinecone.SparseValues{Indices: []uint32{9, 2, 5}, Values: []float32{1, 2, 3}}}
		_, err := connect(t, srv).UpsertVectors(bg(t), []*pinecone.Vector{v})
		require.NoError(t, err)
		assert.Equal(t, 1, srv.Count(ns))
	})
}

// Stats.Codes add up to Requests, and Reset counts the requests in
// progress in the new stats: a request in flight across a Reset counts in
// the new Requests and BytesReceived as well as in the new Codes.
func TestResetWithRequestInFlightKeepsCodesAddingUpToRequests(t *testing.T) {
	srv := start(t, upserttest.WithLatency(200*time.Millisecond, 0))
	idx := connect(t, srv)
	done := make(chan error, 1)
	go func() {
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1)})
		done <- err
	}()
	require.Eventually(t, func() bool { return srv.Stats().InFlight == 1 }, 2*time.Second, time.Millisecond)
	before := srv.Stats().BytesReceived
	srv.Reset()
	st := srv.Stats()
	assert.Equal(t, 1, st.Requests, "the request in progress counts in the new stats")
	assert.Equal(t, before, st.BytesReceived)
	assert.Empty(t, st.Codes)
	require.NoError(t, <-done)

	st = srv.Stats()
	sum := 0
	for _, n := range st.Codes {
		sum += n
	}
	assert.Equal(t, st.Requests, sum, "Codes %v do not add up to Requests %d", st.Codes, st.Requests)
	assert.Equal(t, 1, st.VectorsWritten)
	assert.Equal(t, 1, srv.Count(ns))
}

// WaitIdle returns once every request the server received has been
// answered, a write its client gave up on included, so that a test can
// assert on what landed; at once on an idle server; with ctx's error when
// ctx ends first.
func TestWaitIdleWaitsForWritesTheClientGaveUpOn(t *testing.T) {
	srv := start(t, upserttest.WithLatency(300*time.Millisecond, 0))
	require.NoError(t, srv.WaitIdle(bg(t)), "idle from the start")
	idx := connect(t, srv)
	// The client gives up once the server has the request (a deadline
	// could run out before it is sent, on a loaded machine).
	ctx, giveUp := context.WithCancel(bg(t))
	go func() {
		defer giveUp()
		for srv.Stats().Requests == 0 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
	}()
	_, err := idx.UpsertVectors(ctx, []*pinecone.Vector{dense("a", 1, 2)})
	require.Error(t, err, "the client gives up before the write")

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, srv.WaitIdle(ended), context.Canceled, "a write is in progress")
	require.NoError(t, srv.WaitIdle(bg(t)))
	assert.Equal(t, 1, srv.Count(ns), "the write its client gave up on landed")
	assert.Equal(t, 0, srv.Stats().InFlight)
}

// DescribeIndexStats says the vector type of the index, as Pinecone's
// answer always does (docs.pinecone.io, data plane, describe_index_stats,
// API 2025-10: {..., "dimension":1024, "metric":"cosine",
// "vectorType":"dense"}), which go-pinecone v5.4.1 returns as
// DescribeIndexStatsResponse.VectorType: user code may read *st.VectorType.
// An index with WithDimension is dense.
func TestDescribeIndexStatsOfADenseIndexSaysDense(t *testing.T) {
	srv := start(t, upserttest.WithDimension(2))
	idx := connect(t, srv)
	_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1, 2)})
	require.NoError(t, err)
	st, err := idx.DescribeIndexStats(bg(t))
	require.NoError(t, err)
	require.NotNil(t, st.Dimension)
	assert.EqualValues(t, 2, *st.Dimension)
	if assert.NotNil(t, st.VectorType, "Pinecone says the type of a dense index") {
		assert.Equal(t, upserttest.VectorTypeDense, *st.VectorType)
	}
}

// DescribeIndexStats says the type as soon as it is known, whatever fixed
// it (an option, or the first vector written), and none only while nothing
// has; Reset forgets a type a write decided.
func TestDescribeIndexStatsSaysTheVectorTypeOnceKnown(t *testing.T) {
	sparse := &pinecone.Vector{Id: "s", SparseValues: &pinecone.SparseValues{Indices: []uint32{1}, Values: []float32{0.5}}}
	tests := []struct {
		name    string
		opts    []upserttest.Option
		vectors []*pinecone.Vector
		want    string // "": none
	}{
		{"no option, no write: none", nil, nil, ""},
		{"WithDimension, before any write: dense", []upserttest.Option{upserttest.WithDimension(2)}, nil, upserttest.VectorTypeDense},
		{"WithVectorType dense", []upserttest.Option{upserttest.WithVectorType(upserttest.VectorTypeDense)}, nil, upserttest.VectorTypeDense},
		{"WithVectorType sparse", []upserttest.Option{upserttest.WithVectorType(upserttest.VectorTypeSparse)}, nil, upserttest.VectorTypeSparse},
		{"a first dense vector: dense", nil, []*pinecone.Vector{dense("a", 1, 2)}, upserttest.VectorTypeDense},
		{"a first sparse vector: sparse", nil, []*pinecone.Vector{sparse}, upserttest.VectorTypeSparse},
	}
	vectorType := func(t *testing.T, idx *pinecone.IndexConnection) string {
		st, err := idx.DescribeIndexStats(bg(t))
		require.NoError(t, err)
		if st.VectorType == nil {
			return ""
		}
		return *st.VectorType
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t, tt.opts...)
			idx := connect(t, srv)
			if tt.vectors != nil {
				_, err := idx.UpsertVectors(bg(t), tt.vectors)
				require.NoError(t, err)
			}
			assert.Equal(t, tt.want, vectorType(t, idx))
		})
	}

	t.Run("records decide nothing, and Reset forgets a type a write decided", func(t *testing.T) {
		srv := start(t)
		idx, _ := connectREST(t, srv, "test", ns)
		require.NoError(t, idx.UpsertRecords(bg(t), records("r", 1)))
		assert.Empty(t, vectorType(t, idx), "the server embeds nothing")
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1, 2)})
		require.NoError(t, err)
		assert.Equal(t, upserttest.VectorTypeDense, vectorType(t, idx))
		srv.Reset()
		assert.Empty(t, vectorType(t, idx))
	})
}

// A sparse index has no dimension: WithVectorType(VectorTypeSparse) with
// WithDimension(d > 0) describes no index, and every write would fail, so
// NewServer refuses it as a bug in the test, naming both options.
func TestNewServerPanicsOnASparseIndexWithADimension(t *testing.T) {
	for _, opts := range [][]upserttest.Option{
		{upserttest.WithVectorType(upserttest.VectorTypeSparse), upserttest.WithDimension(4)},
		{upserttest.WithDimension(4), upserttest.WithVectorType(upserttest.VectorTypeSparse)},
	} {
		assert.PanicsWithValue(t, `upserttest: NewServer: WithVectorType("sparse") with WithDimension(4): a sparse index has no dimension`,
			func() { upserttest.NewServer(opts...).Close() })
	}
	assert.NotPanics(t, func() {
		upserttest.NewServer(upserttest.WithVectorType(upserttest.VectorTypeSparse), upserttest.WithDimension(0)).Close()
		upserttest.NewServer(upserttest.WithVectorType(upserttest.VectorTypeDense), upserttest.WithDimension(4)).Close()
	}, "no dimension, or a dense index")
}

// An id upserted twice (in two requests, and twice in one request) keeps
// the last value; Count, DescribeIndexStats and Fetch count it once,
// VectorsWritten counts every write; the limits hold at their boundaries.
func TestLastWriteWinsAndTheLimitsHoldThroughTheSDK(t *testing.T) {
	srv := start(t)
	idx := connect(t, srv)
	_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 1, 2), dense("b", 1, 2)})
	require.NoError(t, err)
	_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("a", 3, 4), dense("a", 5, 6)})
	require.NoError(t, err)
	v, ok := srv.Vector(ns, "a")
	require.True(t, ok)
	assert.Equal(t, []float32{5, 6}, *v.Values)
	assert.Equal(t, 2, srv.Count(ns))
	assert.Equal(t, 4, srv.Stats().VectorsWritten)
	st, err := idx.DescribeIndexStats(bg(t))
	require.NoError(t, err)
	assert.EqualValues(t, 2, st.TotalVectorCount)
	assert.EqualValues(t, 2, st.Namespaces[ns].VectorCount)
	f, err := idx.FetchVectors(bg(t), []string{"a", "missing"})
	require.NoError(t, err)
	require.Len(t, f.Vectors, 1)
	assert.Equal(t, []float32{5, 6}, *f.Vectors["a"].Values)

	_, err = idx.UpsertVectors(bg(t), batch("x", 1000, 2))
	require.NoError(t, err)
	_, err = idx.UpsertVectors(bg(t), batch("y", 1001, 2))
	require.Equal(t, codes.InvalidArgument, code(err))
	_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense(strings.Repeat("i", 512), 1, 2)})
	require.NoError(t, err)
	_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{dense(strings.Repeat("i", 513), 1, 2)})
	require.Equal(t, codes.InvalidArgument, code(err))
	withMeta := func(n int) *pinecone.Vector { // {"k":"…"} is n bytes
		v := dense("m", 1, 2)
		v.Metadata = meta(t, map[string]any{"k": strings.Repeat("z", n-8)})
		return v
	}
	_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{withMeta(40960)})
	require.NoError(t, err)
	_, err = idx.UpsertVectors(bg(t), []*pinecone.Vector{withMeta(40961)})
	require.Equal(t, codes.InvalidArgument, code(err))
	assert.Equal(t, "Metadata size is 40961 bytes, which exceeds the limit of 40960 bytes per vector", status.Convert(err).Message())
}

// Close (and Restart then Close) while both APIs are upserting ends every
// request, WaitIdle returns, Codes and HTTPCodes add up to Requests and
// RESTRequests, and what was written is what is stored. The cut falls
// after a number of answers that varies with the iteration.
func TestCloseAndRestartUnderLoadKeepTheStatsConsistent(t *testing.T) {
	for i := range 10 {
		srv := upserttest.NewServer(upserttest.WithLatency(time.Duration(i%3)*time.Millisecond, 0))
		idx := connect(t, srv)
		rest, _ := connectREST(t, srv, "test", ns)
		answered := make(chan struct{}, 4*20)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for j := range 20 {
					if g%2 == 0 {
						_, _ = idx.UpsertVectors(ctxTimeout(t, time.Second), []*pinecone.Vector{dense(fmt.Sprint(g, j), 1)})
					} else {
						_ = rest.UpsertRecords(ctxTimeout(t, time.Second), records(fmt.Sprint(g, j), 1))
					}
					answered <- struct{}{}
				}
			})
		}
		for range 3 * (i % 4) {
			<-answered
		}
		if i%2 == 0 {
			srv.Restart()
		}
		srv.Close()
		wg.Wait()
		require.NoError(t, srv.WaitIdle(bg(t)))
		st := srv.Stats()
		sum, hsum := 0, 0
		for _, n := range st.Codes {
			sum += n
		}
		for _, n := range st.HTTPCodes {
			hsum += n
		}
		assert.Equal(t, st.Requests, sum, "iteration %d %+v", i, st)
		assert.Equal(t, st.RESTRequests, hsum, "iteration %d %+v", i, st)
		assert.Equal(t, st.VectorsWritten, srv.Count(ns), "iteration %d", i)
		assert.Equal(t, st.RecordsWritten, srv.RecordCount(ns), "iteration %d", i)
	}
}
