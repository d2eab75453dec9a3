package upsert

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Pinecone's per-minute limits of integrated records are the project's,
// not a call's or a namespace's: what a call learned of them stays in its
// Limiter, for the index's host, and a later call into another namespace
// of the index keeps to it (it was per call: the next call sent into the
// spent minute, and was refused one to six times where it now is at most
// once in most runs).
func TestACallOnAKeptLimiterKeepsToTheTokensPerMinuteItLearned(t *testing.T) {
	const tokensPerMinute = 6000
	clk, srv, idx := tokenLimitedIndex(t, tokensPerMinute)
	lim := NewLimiter()
	_, err := Records(context.Background(), slices.Values(tenTokenRecords(1500)), WithIndex(idx), WithLimiter(lim), withClock(clk), withRand(maxRand))
	require.NoError(t, err)
	first := srv.Stats().RateLimited
	require.Positive(t, first, "the first call met the limit")
	learned := lim.minuteGateOf(indexHost(idx), clk)
	learned.mu.Lock()
	limit := learned.tokens.limit
	learned.mu.Unlock()
	assert.Positive(t, limit, "the Limiter keeps the tokens per minute learned")
	// At most what a minute of a bucket that started full takes (twice the
	// limit), and a search's step above it, which the call may have begun.
	assert.LessOrEqual(t, float64(limit), 2*(1+minuteSearchStep)*tokensPerMinute)

	res, err := Records(context.Background(), slices.Values(tenTokenRecords(600)), WithIndex(idx.WithNamespace("other")), WithLimiter(lim), withClock(clk), withRand(maxRand))
	require.NoError(t, err)
	assert.Equal(t, 600, res.Upserted)
	t.Logf("refused: first call %d, second %d", first, srv.Stats().RateLimited-first)
	assert.Same(t, learned, lim.minuteGateOf(indexHost(idx), clk), "one gate for the index's namespaces")
}
