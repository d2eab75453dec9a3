package upserttest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/upsertlib/upsert/upserttest"
)

// upsertN upserts n vectors of one value through idx and returns the
// answer's code.
func upsertN(t *testing.T, idx *pinecone.IndexConnection, prefix string, n int) codes.Code {
	t.Helper()
	vs := make([]*pinecone.Vector, n)
	for i := range vs {
		vs[i] = dense(fmt.Sprintf("%s-%d", prefix, i), 1)
	}
	_, err := idx.UpsertVectors(bg(t), vs)
	return code(err)
}

func TestCapacityChangeTakesEffectAtItsTime(t *testing.T) {
	clk := newVirtualClock()
	srv := start(t, upserttest.WithClock(clk.Now), upserttest.WithRate(100, 100),
		upserttest.WithCapacityChange(20*time.Second, 0.25), // given out of order
		upserttest.WithCapacityChange(10*time.Second, 4))
	idx := connect(t, srv)

	require.Equal(t, codes.OK, upsertN(t, idx, "a", 100), "the bucket starts full")
	require.Equal(t, codes.ResourceExhausted, upsertN(t, idx, "b", 1))

	clk.Advance(9750 * time.Millisecond) // 9.75 s: full again
	require.Equal(t, codes.OK, upsertN(t, idx, "c", 100))
	clk.Advance(250 * time.Millisecond) // 10 s: 25 tokens at 100/s
	assert.Equal(t, codes.ResourceExhausted, upsertN(t, idx, "d", 30), "before the change, the configured rate")
	clk.Advance(100 * time.Millisecond) // 10.1 s: 25 + 0.1 × 400 tokens
	assert.Equal(t, codes.OK, upsertN(t, idx, "e", 60), "from the change on, 4 × the rate, keeping the tokens held")

	clk.Advance(9900 * time.Millisecond) // 20 s: full
	require.Equal(t, codes.OK, upsertN(t, idx, "f", 100))
	clk.Advance(time.Second) // 21 s: 25 tokens at 100 × 0.25/s
	assert.Equal(t, codes.ResourceExhausted, upsertN(t, idx, "g", 30), "a factor is relative to the configured rate, not to the last change")
	assert.Equal(t, codes.OK, upsertN(t, idx, "h", 25))
}

func TestCapacityChangeScalesTheIndexLimits(t *testing.T) {
	t.Run("the request rate, whose message says the rate in force", func(t *testing.T) {
		clk := newVirtualClock()
		srv := start(t, upserttest.WithClock(clk.Now), upserttest.WithRequestRate(10, 1), upserttest.WithCapacityChange(time.Second, 4))
		idx := connect(t, srv)
		clk.Advance(time.Second)
		require.Equal(t, codes.OK, upsertN(t, idx, "a", 1))
		clk.Advance(250 * time.Millisecond) // one token at 40/s, 0.4 at 10/s
		require.Equal(t, codes.OK, upsertN(t, idx, "b", 1))
		_, err := idx.UpsertVectors(bg(t), []*pinecone.Vector{dense("c", 1)})
		require.Equal(t, codes.ResourceExhausted, code(err))
		assert.Contains(t, status.Convert(err).Message(), "upsert QPS limit for namespace ns (40 QPS)")
	})
	t.Run("the write units per second", func(t *testing.T) {
		clk := newVirtualClock()
		srv := start(t, upserttest.WithClock(clk.Now), upserttest.WithWriteUnitRate(10, 5), upserttest.WithCapacityChange(0, 2))
		idx := connect(t, srv)
		require.Equal(t, codes.OK, upsertN(t, idx, "a", 1)) // 5 units
		clk.Advance(250 * time.Millisecond)                 // 5 units at 20/s
		assert.Equal(t, codes.OK, upsertN(t, idx, "b", 1))
	})
	t.Run("not the embedding tokens, which are the project's", func(t *testing.T) {
		clk := newVirtualClock()
		srv := start(t, upserttest.WithClock(clk.Now), upserttest.WithEmbedTokensPerMinute(60), upserttest.WithCapacityChange(0, 4))
		idx, _ := connectREST(t, srv, "test", ns)
		rec := record("r1", "chunk_text", strings.Repeat("x", 240)) // 60 tokens: the whole minute
		require.NoError(t, idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{rec}))
		clk.Advance(15 * time.Second) // 15 tokens at 1/s; 60 if they followed the change
		err := idx.UpsertRecords(bg(t), []*pinecone.IntegratedRecord{record("r2", "chunk_text", strings.Repeat("x", 80))})
		code, _ := restStatus(t, err)
		assert.Equal(t, 429, code)
	})
}

func TestWithCapacityChangePanicsOnNonsense(t *testing.T) {
	for _, tt := range []struct {
		at     time.Duration
		factor float64
	}{{-time.Second, 1}, {time.Second, 0}, {time.Second, -1}} {
		assert.Panics(t, func() { upserttest.WithCapacityChange(tt.at, tt.factor) }, "%v, %v", tt.at, tt.factor)
	}
}
