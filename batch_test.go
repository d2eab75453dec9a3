package upsert

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWireSizeIsTheExactEncodedSize(t *testing.T) {
	dense := func(n int) *[]float32 { v := make([]float32, n); return &v }
	tests := []struct {
		name string
		vec  *pinecone.Vector
	}{
		{"a small dense vector", &pinecone.Vector{Id: "a", Values: dense(3)}},
		{"a vector of 1536 dimensions", &pinecone.Vector{Id: "doc-1#chunk-7", Values: dense(1536)}},
		{"a vector whose length needs a two-byte varint", &pinecone.Vector{Id: "b", Values: dense(40)}},
		{"a sparse vector with large indices", &pinecone.Vector{Id: "s", SparseValues: &pinecone.SparseValues{
			Indices: []uint32{1, 300, 70_000, 4_000_000_000}, Values: []float32{1, 2, 3, 4}}}},
		{"a hybrid vector", &pinecone.Vector{Id: "h", Values: dense(8), SparseValues: &pinecone.SparseValues{
			Indices: []uint32{5}, Values: []float32{0.5}}}},
		{"a vector with metadata", withMetadata(&pinecone.Vector{Id: "m", Values: dense(4)}, map[string]any{
			"title": "Go", "year": 2026, "draft": false, "tags": []any{"a", "b"}, "body": strings.Repeat("z", 300)})},
		{"a vector with empty metadata", withMetadata(&pinecone.Vector{Id: "e", Values: dense(2)}, map[string]any{})},
		{"a 512-byte id", &pinecone.Vector{Id: strings.Repeat("i", 512), Values: dense(2)}},
	}
	for _, ns := range []string{"", "a-namespace"} {
		for _, tt := range tests {
			t.Run(tt.name+" in namespace "+ns+" is sized exactly", func(t *testing.T) {
				got := requestOverhead(ns) + wireSize(tt.vec, -1)
				assert.Equal(t, encodedRequestSize(t, []*pinecone.Vector{tt.vec}, ns), got)
			})
		}
	}
	t.Run("a batch is the sum of its records", func(t *testing.T) {
		batch := []*pinecone.Vector{tests[0].vec, tests[3].vec, tests[5].vec}
		sum := requestOverhead("ns")
		for _, v := range batch {
			sum += wireSize(v, -1)
		}
		assert.Equal(t, encodedRequestSize(t, batch, "ns"), sum)
	})
}

func TestBatcherCutsByCountAndBytes(t *testing.T) {
	items := func(sizes ...int) []item {
		out := make([]item, len(sizes))
		for i, s := range sizes {
			out[i] = item{seq: i, size: s}
		}
		return out
	}
	tests := []struct {
		name     string
		maxBytes int
		maxCount int
		sizes    []int
		want     [][]int // seqs of each batch, the last one from take
	}{
		{"a batch closes at the count", 1000, 2, []int{1, 1, 1, 1, 1}, [][]int{{0, 1}, {2, 3}, {4}}},
		{"a batch closes before the bytes overflow", 10, 100, []int{4, 4, 4, 9, 1}, [][]int{{0, 1}, {2}, {3, 4}}},
		{"a record of exactly the limit gets a batch of its own", 10, 100, []int{3, 10, 3}, [][]int{{0}, {1}, {2}}},
		{"a batch size of one sends each record alone", 100, 1, []int{5, 5, 5}, [][]int{{0}, {1}, {2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := batcher{maxBytes: tt.maxBytes, next: func() (int, uint64) { return tt.maxCount, 0 }}
			var got [][]int
			collect := func(full batch, ok bool) {
				if !ok {
					return
				}
				batch := full.items
				var seqs []int
				total := 0
				for _, it := range batch {
					seqs = append(seqs, it.seq)
					total += it.size
				}
				require.LessOrEqual(t, total, tt.maxBytes)
				require.LessOrEqual(t, len(batch), tt.maxCount)
				got = append(got, seqs)
			}
			for _, it := range items(tt.sizes...) {
				collect(b.add(it))
			}
			last := b.take()
			collect(last, len(last.items) > 0)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestSplitHalves(t *testing.T) {
	for _, n := range []int{2, 3, 7, 1000} {
		its := make([]item, n)
		for i := range its {
			its[i].seq = i
		}
		a, b := split(its)
		assert.Equal(t, n, len(a)+len(b))
		assert.Equal(t, (n+1)/2, len(a), "the first half is the larger")
		assert.Equal(t, len(a), b[0].seq, "the halves keep input order")
		assert.Equal(t, len(a), cap(a), "appending to the first half cannot reach the second")
	}
}

func TestRecutMakesTheFewestNearlyEqualPieces(t *testing.T) {
	tests := []struct {
		n, limit int
		sizes    []int
	}{
		{n: 400, limit: 21, sizes: slices.Repeat([]int{20}, 20)},
		{n: 100, limit: 50, sizes: []int{50, 50}},
		{n: 101, limit: 50, sizes: []int{33, 34, 34}},
		{n: 7, limit: 1, sizes: []int{1, 1, 1, 1, 1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d records at most %d a piece", tt.n, tt.limit), func(t *testing.T) {
			its := make([]item, tt.n)
			for i := range its {
				its[i].seq = i
			}
			pieces := recut(its, tt.limit)
			next := 0
			var sizes []int
			for _, p := range pieces {
				assert.LessOrEqual(t, len(p), tt.limit)
				assert.Equal(t, next, p[0].seq, "the pieces keep input order")
				assert.Equal(t, len(p), cap(p), "appending to a piece cannot reach the next")
				next += len(p)
				sizes = append(sizes, len(p))
			}
			assert.Equal(t, tt.n, next, "every record is in a piece")
			assert.Equal(t, tt.sizes, sizes)
		})
	}
}

func TestRepeatsFlagsEachIDThatOccursMoreThanOnce(t *testing.T) {
	hashes := map[string]func(string) uint64{
		"a good hash": func(s string) uint64 {
			var h uint64 = 14695981039346656037
			for i := 0; i < len(s); i++ {
				h = (h ^ uint64(s[i])) * 1099511628211
			}
			return h
		},
		"a hash where every id collides": func(string) uint64 { return 7 },
	}
	const (
		later   = repeatedLater
		earlier = repeatedEarlier
		both    = later | earlier
	)
	flagsOf := func(hash func(string) uint64, ids ...string) []uint8 {
		hs := make([]uint64, len(ids))
		for i, id := range ids {
			hs[i] = hash(id)
		}
		// ids are "namespace/id": equal strings, same namespace and id.
		return repeats(hs, func(i, j int) bool { return ids[i] == ids[j] })
	}
	for name, hash := range hashes {
		t.Run("with "+name+" every occurrence but the last comes again later", func(t *testing.T) {
			got := flagsOf(hash, "a/a", "a/b", "a/a", "a/c", "a/b", "a/a", "a/d")
			assert.Equal(t, []uint8{later, later, both, 0, earlier, earlier, 0}, got)
		})
		t.Run("with "+name+" distinct ids are not flagged", func(t *testing.T) {
			assert.Equal(t, []uint8{0, 0, 0}, flagsOf(hash, "a/x", "a/y", "a/z"))
		})
		t.Run("with "+name+" one id in two namespaces is two records", func(t *testing.T) {
			assert.Equal(t, []uint8{later, 0, earlier}, flagsOf(hash, "a/x", "b/x", "a/x"))
		})
	}
	t.Run("no records need no table", func(t *testing.T) {
		assert.Empty(t, repeats(nil, nil))
	})
}
