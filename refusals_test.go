package upsert

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRefusalsRememberTheLatestNamespacesRefused(t *testing.T) {
	e := func(i int) *Error { return &Error{Class: ClassQuotaExceeded, Err: fmt.Errorf("refusal %d", i)} }
	for _, tc := range []struct {
		name     string
		stored   []int // keys stored, in order ("ns<i>")
		kept     []int
		forgot   []int
		wantSize int
	}{
		{"none", nil, nil, []int{0}, 0},
		{"a few", []int{1, 2, 3}, []int{1, 2, 3}, []int{4}, 3},
		{"again: the first refusal stays, and counts once", []int{1, 1, 2}, []int{1, 2}, nil, 2},
		{"beyond the bound: the oldest go", rangeInts(maxRefusals + 2), []int{2, maxRefusals + 1}, []int{0, 1}, maxRefusals},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f refusals
			for _, i := range tc.stored {
				f.store(fmt.Sprint("ns", i), e(i))
			}
			for _, i := range tc.kept {
				got, ok := f.load(fmt.Sprint("ns", i))
				require.True(t, ok, "ns%d", i)
				assert.EqualError(t, got.Err, fmt.Sprint("refusal ", i))
			}
			for _, i := range tc.forgot {
				_, ok := f.load(fmt.Sprint("ns", i))
				assert.False(t, ok, "ns%d", i)
			}
			assert.Equal(t, tc.wantSize, f.size())
		})
	}
}

func rangeInts(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// A long-lived Writer under WithNamespaceOf (a namespace per tenant) on an
// index at its quota of namespaces remembers a bounded number of the
// namespaces refused (one more refused request each when a forgotten one
// comes back), as it does routes: every one of 3000 was remembered, for
// the Writer's whole life (found by the lifecycle review).
func TestAWriterRemembersABoundedNumberOfRefusedNamespaces(t *testing.T) {
	quota := &Error{Class: ClassQuotaExceeded, Err: errors.New("Request failed. You've reached the max namespaces allowed in serverless index x. To add more namespaces, upgrade your plan.")}
	require.True(t, stopsOneNamespace(quota), "the test's answer is the namespace quota's")
	send := func(context.Context, string, []*pinecone.Vector) error { return quota }
	w, err := NewWriter(context.Background(), WithUpsertFunc(send), withClock(newFakeClock()), withRand(maxRand),
		WithObserver(Observer{Failure: func(Failure) {}}),
		WithNamespaceOf(func(v *pinecone.Vector) string { return "tenant-" + v.Id }))
	require.NoError(t, err)
	const n = 3000
	for i, v := range vectors(n, 2) {
		require.NoError(t, w.Add(context.Background(), v))
		if i%100 == 99 {
			require.NoError(t, w.Flush(context.Background()))
		}
	}
	require.NoError(t, w.Flush(context.Background()))
	refused := w.in.r.routes.refused.size()
	res, err := w.Close(context.Background())
	require.ErrorIs(t, err, ErrQuotaExceeded)
	require.Equal(t, n, res.Stats.Failed)
	assert.Equal(t, maxRefusals, refused)
}
