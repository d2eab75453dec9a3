package upsert

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nilIndex is an index connection that is never used.
func nilIndex() *pinecone.IndexConnection { return &pinecone.IndexConnection{} }

func TestWithIndexLimits(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cfg   config
		want  IndexLimits
		isBad bool
	}{
		{name: "Pinecone's serverless limits with an index connection", cfg: config{index: nilIndex()}, want: ServerlessLimits},
		{name: "none known with a send function", cfg: config{}, want: IndexLimits{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.cfg.indexLimits())
		})
	}
	t.Run("given limits, the zero value among them, win", func(t *testing.T) {
		for _, l := range []IndexLimits{{}, {RequestsPerSecond: 500}, {RequestsPerSecond: 200, BytesPerSecond: 1e8}} {
			c := config{index: nilIndex()}
			WithIndexLimits(l)(&c)
			assert.Equal(t, l, c.indexLimits())
		}
	})
	t.Run("a negative, NaN or infinite limit is a bad option", func(t *testing.T) {
		for _, v := range []float64{-1, math.NaN(), math.Inf(1)} {
			var c config
			WithIndexLimits(IndexLimits{BytesPerSecond: v})(&c)
			assert.Len(t, c.errs, 1, "%v", v)
		}
	})
}

// A known limit is a prior, not a ceiling, however small: one under the
// least rate the Limiter ever sets starts at that rate and is probed
// above. A run given 1e-9 requests a second sent one request in 14
// minutes.
func TestAKnownLimitUnderTheFloorStartsAtTheFloor(t *testing.T) {
	clk := newEventClock()
	fi := newFakeIndex(nil)
	res, err := All(context.Background(), vectors(100, 4), WithUpsertFunc(fi.Upsert), withClock(clk), withRand(maxRand),
		WithBatchSize(10), WithIndexLimits(IndexLimits{RequestsPerSecond: 1e-9, BytesPerSecond: 1e-9}))
	require.NoError(t, err)
	assert.Equal(t, 100, res.Upserted)
	assert.Less(t, clk.Now().Sub(clk.start), 15*time.Second, "ten requests at a rate of 1 a second or more")
}
