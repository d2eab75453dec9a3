package upsert

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Places are served in the order they were taken; a place whose holder
// stopped waiting (passed before its time) is skipped when its time comes,
// and nil or passed turns never wait.
func TestTurnsServePlacesInOrderAndSkipThoseGivenUp(t *testing.T) {
	tests := []struct {
		name   string
		passes []int // the places passed, in this order, before the check
		ready  []int // the places whose wait returns at once after them
	}{
		{name: "the first place goes first", passes: nil, ready: []int{0}},
		{name: "each pass lets the next go", passes: []int{0, 1}, ready: []int{2}},
		{name: "a place given up ahead is skipped", passes: []int{1, 0}, ready: []int{2}},
		{name: "places given up in a row are all skipped", passes: []int{2, 1, 0}, ready: []int{3}},
		{name: "a place given up behind does not let it go early", passes: []int{2}, ready: []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q turns
			places := make([]*turn, 4)
			for i := range places {
				places[i] = q.take()
			}
			for _, i := range tt.passes {
				places[i].pass()
			}
			done, cancel := context.WithCancel(context.Background())
			cancel()
			for i, p := range places {
				err := p.wait(done)
				if slices.Contains(tt.passes, i) || slices.Contains(tt.ready, i) {
					assert.NoError(t, err, "place %d", i)
				} else {
					assert.ErrorIs(t, err, context.Canceled, "place %d must wait", i)
				}
			}
			assert.False(t, q.idle(), "a place is still held")
		})
	}
	var nothing *turn
	assert.NoError(t, nothing.wait(context.Background()))
	nothing.pass()
}

// A place passed twice moves the line once.
func TestTurnPassedTwiceMovesTheLineOnce(t *testing.T) {
	var q turns
	a, b := q.take(), q.take()
	a.pass()
	a.pass()
	assert.False(t, q.idle(), "b holds its place")
	b.pass()
	assert.True(t, q.idle())
}

// A call with one request in flight sends its batches in the order it cut
// them: the goroutines that send them start in any order, and a stream's
// checkpoint is left behind every record a later batch landed first.
// Repeated, since without the line most runs sent a later batch first.
func TestOneRequestInFlightSendsTheBatchesInInputOrder(t *testing.T) {
	const n, size = 60, 10
	vectors := func() []*pinecone.Vector {
		out := make([]*pinecone.Vector, n)
		for i := range out {
			out[i] = &pinecone.Vector{Id: strconv.Itoa(i), Values: &[]float32{1}}
		}
		return out
	}
	calls := map[string]func(ctx context.Context, opts ...Option) error{
		"All": func(ctx context.Context, opts ...Option) error {
			_, err := All(ctx, vectors(), opts...)
			return err
		},
		"Stream": func(ctx context.Context, opts ...Option) error {
			_, err := Stream(ctx, slices.Values(vectors()), opts...)
			return err
		},
		"Writer": func(ctx context.Context, opts ...Option) error {
			w, err := NewWriter(ctx, opts...)
			if err != nil {
				return err
			}
			for _, v := range vectors() {
				if err := w.Add(ctx, v); err != nil {
					return err
				}
			}
			_, err = w.Close(ctx)
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			for range 20 {
				var mu sync.Mutex
				var firsts []string
				send := func(_ context.Context, _ string, b []*pinecone.Vector) error {
					mu.Lock()
					defer mu.Unlock()
					firsts = append(firsts, b[0].Id)
					return nil
				}
				require.NoError(t, call(context.Background(), WithUpsertFunc(send), WithConcurrency(1), WithBatchSize(size)))
				want := make([]string, 0, n/size)
				for i := 0; i < n; i += size {
					want = append(want, fmt.Sprint(i))
				}
				require.Equal(t, want, firsts, "the first record of each request")
			}
		})
	}
}
