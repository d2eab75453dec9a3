package upsert

import (
	"math"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
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
