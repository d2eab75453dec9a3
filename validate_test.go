package upsert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/upsertlib/upsert/upserttest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestValidationNamesTheRecordAndTheRule(t *testing.T) {
	dense := func(vals ...float32) *[]float32 { return &vals }
	good := func() *pinecone.Vector { return &pinecone.Vector{Id: "bad", Values: dense(1, 2, 3)} }
	tests := []struct {
		name string
		vec  *pinecone.Vector
		rule string
	}{
		{"a nil record is refused", nil, "record is nil"},
		{"an empty id is refused", &pinecone.Vector{Values: dense(1, 2, 3)}, "id is empty"},
		{"an id over 512 bytes is refused", &pinecone.Vector{Id: strings.Repeat("x", 513), Values: dense(1, 2, 3)}, "at most 512"},
		{"a non-ASCII id is refused", &pinecone.Vector{Id: "café", Values: dense(1, 2, 3)}, "non-ASCII"},
		{"an id with NUL is refused", &pinecone.Vector{Id: "a\x00b", Values: dense(1, 2, 3)}, "NUL"},
		{"a record without values is refused", &pinecone.Vector{Id: "bad"}, "neither dense nor sparse"},
		{"empty values are refused", &pinecone.Vector{Id: "bad", Values: dense()}, "neither dense nor sparse"},
		{"a dimension unlike the index's is refused", &pinecone.Vector{Id: "bad", Values: dense(1, 2)}, "the index's dimension is 3"},
		{"all-zero dense values are refused", &pinecone.Vector{Id: "bad", Values: dense(0, 0, 0)}, "at least one non-zero value"},
		{"all-zero dense values are refused beside sparse ones", &pinecone.Vector{Id: "bad", Values: dense(0, 0, 0), SparseValues: &pinecone.SparseValues{Indices: []uint32{1}, Values: []float32{1}}}, "all zero"},
		{"a NaN is refused", &pinecone.Vector{Id: "bad", Values: dense(1, float32(math.NaN()), 3)}, "position 1 is NaN or infinite"},
		{"an infinity is refused", &pinecone.Vector{Id: "bad", Values: dense(1, 2, float32(math.Inf(1)))}, "must be finite"},
		{"sparse indices and values of different lengths are refused", &pinecone.Vector{Id: "bad", Values: dense(1, 2, 3), SparseValues: &pinecone.SparseValues{Indices: []uint32{1, 2}, Values: []float32{1}}}, "must be equal"},
		{"duplicate sparse indices are refused", &pinecone.Vector{Id: "bad", Values: dense(1, 2, 3), SparseValues: &pinecone.SparseValues{Indices: []uint32{4, 4}, Values: []float32{1, 2}}}, "appears more than once"},
		{"unsorted duplicate sparse indices are refused", &pinecone.Vector{Id: "bad", Values: dense(1, 2, 3), SparseValues: &pinecone.SparseValues{Indices: []uint32{9, 4, 9}, Values: []float32{1, 2, 3}}}, "appears more than once"},
		{"more than 2048 sparse values are refused", &pinecone.Vector{Id: "bad", Values: dense(1, 2, 3), SparseValues: &pinecone.SparseValues{Indices: seq(2049), Values: make([]float32, 2049)}}, "at most 2048"},
		{"a NaN sparse value is refused", &pinecone.Vector{Id: "bad", Values: dense(1, 2, 3), SparseValues: &pinecone.SparseValues{Indices: []uint32{1}, Values: []float32{float32(math.NaN())}}}, "must be finite"},
		{"nested metadata is refused", withMetadata(good(), map[string]any{"a": map[string]any{"b": 1}}), `"a" is an object`},
		{"a list of numbers in metadata is refused", withMetadata(good(), map[string]any{"a": []any{1.0, 2.0}}), "lists of strings only"},
		{"a null in metadata is refused", withMetadata(good(), map[string]any{"a": nil}), "is null"},
		{"metadata over 40 KB is refused", withMetadata(good(), map[string]any{"a": strings.Repeat("x", 41_000)}), "40960"},
		{"invalid UTF-8 in a metadata string is refused", withRawMetadata(good(), "a", structpb.NewStringValue("ok \xff")), `metadata field "a" is not valid UTF-8`},
		{"invalid UTF-8 in a metadata list is refused", withRawMetadata(good(), "a", structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue("x"), structpb.NewStringValue("\xc3(")}})), `"a": list element 1 is not valid UTF-8`},
		{"invalid UTF-8 in a metadata key is refused", withRawMetadata(good(), "k\xff", structpb.NewBoolValue(true)), "key is not valid UTF-8"},
		{"a metadata key starting with $ is refused", withRawMetadata(good(), "$in", structpb.NewBoolValue(true)), `metadata key "$in" starts with "$"`},
		{"a dimension over 20000 is refused", &pinecone.Vector{Id: "bad", Values: new([]float32)}, ""},
	}
	big := make([]float32, 20_001)
	tests[len(tests)-1].vec.Values = &big
	tests[len(tests)-1].rule = "at most 20000"
	for _, tt := range tests {
		t.Run(tt.name+", and the valid records still land", func(t *testing.T) {
			fi := newFakeIndex(nil)
			recs := []*pinecone.Vector{{Id: "ok-1", Values: dense(1, 2, 3)}, tt.vec, {Id: "ok-2", Values: dense(4, 5, 6)}}
			res, err := All(context.Background(), recs, testOpts(fi, withIndexInfo(indexInfo{dimension: 3}, nil))...)
			require.ErrorIs(t, err, ErrInvalid)
			require.Len(t, res.Failed, 1)
			f := res.Failed[0]
			assert.Equal(t, 1, f.Index)
			assert.Equal(t, ClassInvalid, f.Class)
			assert.Zero(t, f.Attempts, "refused before sending")
			assert.Contains(t, f.Err.Error(), "record 1")
			assert.Contains(t, f.Err.Error(), tt.rule)
			assert.Equal(t, 2, res.Upserted)
			assert.Len(t, fi.Stored(), 2)
		})
	}
}

func TestValidationAcceptsWhatPineconeAccepts(t *testing.T) {
	dense := []float32{0.1, -2, 3e10}
	tests := []struct {
		name string
		vec  *pinecone.Vector
	}{
		{"a dense vector", &pinecone.Vector{Id: "a", Values: &dense}},
		{"a sparse-only vector", &pinecone.Vector{Id: "s", SparseValues: &pinecone.SparseValues{Indices: []uint32{3, 1}, Values: []float32{1, 2}}}},
		{"metadata of every accepted type", withMetadata(&pinecone.Vector{Id: "m", Values: &dense}, map[string]any{
			"s": "x", "n": 1.5, "b": true, "l": []any{"a", "b"}, "empty": []any{}})},
		{"a 512-byte ASCII id with punctuation", &pinecone.Vector{Id: strings.Repeat("a#-_:/.", 73) + "x", Values: &dense}},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is accepted", func(t *testing.T) {
			var v validator
			_, err := v.check(tt.vec)
			assert.NoError(t, err)
		})
	}
}

// withRawMetadata sets one metadata field without structpb.NewStruct's
// checks, as a decoder filling the struct directly would.
func withRawMetadata(v *pinecone.Vector, key string, val *structpb.Value) *pinecone.Vector {
	v.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{key: val}}
	return v
}

// The size of metadata is that of its compact JSON, the same for every
// build of a program: protojson, which the check used to measure with,
// inserts spaces at random on purpose.
func TestMetadataSizeIsItsCompactJSON(t *testing.T) {
	t.Run("the size is what encoding/json writes, compact and without HTML escapes", func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		strs := []string{"", "plain", "quote\" and \\ backslash", "tab\tnew\nline\r", "ctl\x01\x1f\x7f", "<html> & stuff", "café ☕ 𝄞", "\u2028\u2029"}
		nums := []float64{0, 1, -1, 0.1, 1.5e-7, 1e-6, 123456789, 1e20, 1e21, -3.25e300, math.SmallestNonzeroFloat64, math.MaxFloat64, 100, 0.000001}
		for range 300 {
			fields := map[string]any{}
			for range r.IntN(6) {
				key := strs[r.IntN(len(strs))] + string(rune('a'+r.IntN(26)))
				switch r.IntN(4) {
				case 0:
					fields[key] = strs[r.IntN(len(strs))]
				case 1:
					fields[key] = nums[r.IntN(len(nums))] * float64(1-2*r.IntN(2))
				case 2:
					fields[key] = r.IntN(2) == 0
				default:
					l := []any{}
					for range r.IntN(3) {
						l = append(l, strs[r.IntN(len(strs))])
					}
					fields[key] = l
				}
			}
			md, err := structpb.NewStruct(fields)
			require.NoError(t, err)
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			require.NoError(t, enc.Encode(md.AsMap()))
			size, err := metadataJSONSize(md)
			require.NoError(t, err)
			assert.Equal(t, buf.Len()-1, size, "%s", buf.String())
		}
	})
	t.Run("40960 bytes pass and 40961 fail, whatever their shape", func(t *testing.T) {
		for _, fields := range []int{1, 40, 1000} {
			for _, extra := range []int{0, 1} {
				md := metadataOfJSONSize(t, MaxMetadataBytes+extra, fields)
				_, err := checkMetadata(md)
				if extra == 0 {
					assert.NoError(t, err, "%d fields", fields)
				} else {
					assert.ErrorContains(t, err, "40961 bytes as JSON", "%d fields", fields)
				}
			}
		}
	})
}

// metadataOfJSONSize builds metadata of n string fields whose compact JSON
// is exactly size bytes.
func metadataOfJSONSize(t *testing.T, size, n int) *structpb.Struct {
	fields := make(map[string]any, n)
	// {"kNNNN":"…",…}: 2 braces, n-1 commas, each field 10 bytes and its value.
	per := 10
	left := size - 2 - (n - 1) - n*per
	require.Positive(t, left)
	for i := range n {
		l := left / n
		if i == 0 {
			l += left % n
		}
		fields[fmt.Sprintf("k%04d", i)] = strings.Repeat("x", l)
	}
	md, err := structpb.NewStruct(fields)
	require.NoError(t, err)
	b, err := json.Marshal(md.AsMap())
	require.NoError(t, err)
	require.Len(t, b, size)
	return md
}

func seq(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)
	}
	return out
}

// withIndexInfo makes the run's index answer info and err when asked its
// dimension and type, as DescribeIndexStats does through WithIndex.
func withIndexInfo(info indexInfo, err error) Option {
	return func(c *config) {
		c.describe = func(context.Context, time.Time) (indexInfo, error) { return info, err }
	}
}

func TestValidationKnowsTheIndexsType(t *testing.T) {
	dense := &pinecone.Vector{Id: "dense", Values: &[]float32{1, 2}}
	sparse := &pinecone.Vector{Id: "sparse", SparseValues: &pinecone.SparseValues{Indices: []uint32{7}, Values: []float32{0.5}}}
	hybrid := &pinecone.Vector{Id: "hybrid", Values: &[]float32{1, 2}, SparseValues: &pinecone.SparseValues{Indices: []uint32{7}, Values: []float32{0.5}}}
	tests := []struct {
		vectorType string
		refused    map[string]string // id -> rule
	}{
		{"dense", map[string]string{"sparse": "the index is dense"}},
		{"sparse", map[string]string{"dense": "the index is sparse", "hybrid": "the index is sparse"}},
		{"", nil}, // not known: the index judges
	}
	for _, tt := range tests {
		t.Run("a "+tt.vectorType+" index", func(t *testing.T) {
			fi := newFakeIndex(nil)
			recs := []*pinecone.Vector{dense, sparse, hybrid}
			res, _ := All(context.Background(), recs, testOpts(fi, withIndexInfo(indexInfo{vectorType: tt.vectorType}, nil))...)
			require.Len(t, res.Failed, len(tt.refused))
			for _, f := range res.Failed {
				assert.Contains(t, f.Err.Error(), tt.refused[f.ID], "record %s", f.ID)
				assert.Zero(t, f.Attempts, "refused before sending")
			}
			assert.Len(t, fi.Stored(), len(recs)-len(tt.refused))
		})
	}
}

// When the index cannot say its dimension, a wrong first record must not
// make the correct ones after it fail: the dimension is learned from the
// first record the index accepts.
func TestAWrongFirstRecordDoesNotFailTheRightOnes(t *testing.T) {
	const dim = 4
	// Answers as Pinecone does to a record of another dimension.
	fi := newFakeIndex(nil)
	var mu sync.Mutex
	var sent int
	send := func(ctx context.Context, ns string, batch []*pinecone.Vector) error {
		mu.Lock()
		sent++
		mu.Unlock()
		for _, v := range batch {
			if n := len(*v.Values); n != dim {
				return status.Errorf(codes.InvalidArgument, "Vector dimension %d does not match the dimension of the index %d", n, dim)
			}
		}
		return fi.Upsert(ctx, ns, batch)
	}
	recs := append([]*pinecone.Vector{{Id: "wrong", Values: &[]float32{1, 2, 3}}}, vectors(2000, dim)...)
	recs = append(recs, &pinecone.Vector{Id: "wrong-later", Values: &[]float32{1, 2, 3}})
	for _, ask := range []struct {
		name string
		opt  Option
	}{
		{"the index cannot be asked", func(*config) {}},
		{"asking the index failed", withIndexInfo(indexInfo{}, status.Error(codes.PermissionDenied, "no"))},
	} {
		t.Run(ask.name, func(t *testing.T) {
			sent = 0
			res, err := All(context.Background(), recs, WithUpsertFunc(send), withClock(newFakeClock()), withRand(maxRand), WithBatchSize(100), WithConcurrency(1), ask.opt)
			require.ErrorIs(t, err, ErrInvalid)
			require.Len(t, res.Failed, 2)
			assert.Equal(t, "wrong", res.Failed[0].ID)
			assert.Positive(t, res.Failed[0].Attempts, "the index judged the first record")
			assert.Equal(t, "wrong-later", res.Failed[1].ID)
			assert.Zero(t, res.Failed[1].Attempts, "once the index accepted a record, its dimension is known")
			assert.Contains(t, res.Failed[1].Err.Error(), "the index's dimension is 4")
			assert.Equal(t, 2000, res.Upserted)
		})
	}
}

// An index with a dense dimension is a dense index: Pinecone refuses a
// record with sparse values only ("Vector dimension 0 does not match the
// dimension of the index N", and upserttest does the same). When the run
// knows the dimension (WithDimension, or learned from an accepted record)
// but not the type, validation let such a record through and the index
// refused its whole batch; the record now fails alone, before sending.
func TestASparseOnlyRecordIsRefusedBeforeSendingWhenTheIndexHasADimension(t *testing.T) {
	sparseOnly := &pinecone.Vector{Id: "sparse", SparseValues: &pinecone.SparseValues{Indices: []uint32{1}, Values: []float32{0.5}}}
	fi := newFakeIndex(nil)
	recs := []*pinecone.Vector{
		{Id: "ok-1", Values: &[]float32{1, 2, 3}},
		sparseOnly,
		{Id: "ok-2", Values: &[]float32{4, 5, 6}},
	}
	check := func(t *testing.T, res Result, err error) {
		t.Helper()
		require.ErrorIs(t, err, ErrInvalid)
		require.Len(t, res.Failed, 1)
		f := res.Failed[0]
		assert.Equal(t, "sparse", f.ID)
		assert.Equal(t, ClassInvalid, f.Class)
		assert.Zero(t, f.Attempts, "refused before sending")
		assert.Contains(t, f.Err.Error(), "record 1")
		assert.Equal(t, 2, res.Upserted)
	}
	t.Run("WithDimension", func(t *testing.T) {
		res, err := All(context.Background(), recs, testOpts(fi, WithDimension(3))...)
		check(t, res, err)
	})
	t.Run("an upserttest index that holds dense vectors, through the SDK", func(t *testing.T) {
		srv := upserttest.NewServer()
		defer srv.Close()
		pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "test-key"})
		require.NoError(t, err)
		idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: "ns"})
		require.NoError(t, err)
		defer idx.Close()
		_, err = idx.UpsertVectors(context.Background(), []*pinecone.Vector{{Id: "seed", Values: &[]float32{1, 1, 1}}})
		require.NoError(t, err)
		res, err := All(context.Background(), recs, WithIndex(idx), withClock(newFakeClock()), withRand(maxRand))
		check(t, res, err)
	})
}

// An id too long for Pinecone may be any length: the error, which every
// failure and the run's error quote, shows its start and its length, and
// Failure.ID holds it whole.
func TestALongIDIsShortenedInErrors(t *testing.T) {
	long := strings.Repeat("x", 600)
	res, err := All(context.Background(), []*pinecone.Vector{{Id: long, Values: &[]float32{1, 2}}},
		WithUpsertFunc(func(context.Context, string, []*pinecone.Vector) error { return nil }))
	require.ErrorIs(t, err, ErrInvalid)
	require.Len(t, res.Failed, 1)
	assert.Equal(t, long, res.Failed[0].ID)
	msg := res.Failed[0].Err.Error()
	assert.Less(t, len(msg), 200, msg)
	assert.Contains(t, msg, `"`+strings.Repeat("x", shownIDBytes)+`"… (600 bytes)`)
	assert.Contains(t, msg, "id is 600 bytes; Pinecone allows at most 512")
	assert.Less(t, len(err.Error()), 300, "the run's error quotes it short too")
}

// A metadata value whose kind is a typed nil (&structpb.Value{Kind:
// (*structpb.Value_StringValue)(nil)}, as code that builds values by hand
// may leave) holds no value, as protobuf encodes it: the record fails
// alone, named with its rule, where reading the kind's field panicked the
// call (validation in All, the copy in Stream and Writer.Add).
func TestAMetadataValueOfATypedNilKindFailsItsRecordAlone(t *testing.T) {
	for _, kind := range []struct {
		name string
		val  *structpb.Value
	}{
		{"string", &structpb.Value{Kind: (*structpb.Value_StringValue)(nil)}},
		{"number", &structpb.Value{Kind: (*structpb.Value_NumberValue)(nil)}},
		{"list", &structpb.Value{Kind: (*structpb.Value_ListValue)(nil)}},
		{"list element", structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{{Kind: (*structpb.Value_StringValue)(nil)}}})},
	} {
		for _, call := range []string{"All", "Stream"} {
			t.Run(call+" "+kind.name, func(t *testing.T) {
				odd := withRawMetadata(&pinecone.Vector{Id: "odd", Values: &[]float32{1, 2}}, "k", kind.val)
				recs := []*pinecone.Vector{{Id: "ok", Values: &[]float32{1, 2}}, odd}
				fi := newFakeIndex(nil)
				var res Result
				var err error
				require.NotPanics(t, func() {
					if call == "All" {
						res, err = All(context.Background(), recs, testOpts(fi)...)
					} else {
						res, err = Stream(context.Background(), slices.Values(recs), testOpts(fi)...)
					}
				})
				require.ErrorIs(t, err, ErrInvalid)
				assert.Contains(t, fi.Stored(), "ok")
				assert.Equal(t, 1, res.Upserted)
				require.Len(t, res.Failed, 1)
				assert.Equal(t, "odd", res.Failed[0].ID)
				assert.Contains(t, res.Failed[0].Err.Error(), `metadata field "k"`)
			})
		}
	}
}

// firstNonFinite finds the first NaN or infinity at every position and
// length, past the four-at-a-time loop's end too, and none in finite
// values (the largest and the smallest included).
func TestFirstNonFiniteFindsTheFirstAtEveryPosition(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	for n := range 14 {
		vs := make([]float32, n)
		for i := range vs {
			vs[i] = math.MaxFloat32 * float32(1-2*(i%2))
		}
		i, found := firstNonFinite(vs)
		assert.False(t, found, "n=%d: all finite, got %d", n, i)
		for p := range n {
			for _, b := range bad {
				w := slices.Clone(vs)
				w[p] = b
				if p+2 < n {
					w[p+2] = b // a later one is not the first
				}
				i, found := firstNonFinite(w)
				assert.True(t, found && i == p, "n=%d: %v at %d, got %d %v", n, b, p, i, found)
			}
		}
	}
}

// A metadata key starting with "$" is refused by Pinecone (go-pinecone's
// NewMetadata says so; upserttest refuses it): the record fails alone
// before sending, and the index sees no request refused, where the batch
// was refused and bisected down to it (9 requests for 16 records).
func TestAMetadataKeyStartingWithDollarFailsItsRecordBeforeSending(t *testing.T) {
	srv := upserttest.NewServer()
	defer srv.Close()
	recs := vectors(16, 4)
	withMetadata(recs[7], map[string]any{"$genre": "drama"})

	res, err := All(context.Background(), recs, WithIndex(shapeIndex(t, srv, "docs")), WithBatchSize(16), WithConcurrency(1))
	require.Error(t, err)
	require.Len(t, res.Failed, 1)
	assert.Equal(t, "v7", res.Failed[0].ID)
	assert.Equal(t, ClassInvalid, res.Failed[0].Class)
	assert.ErrorContains(t, res.Failed[0].Err, `metadata key "$genre" starts with "$"`)
	assert.Equal(t, 15, srv.Count("docs"), "every other record lands")
	assert.Zero(t, srv.Stats().Codes[codes.InvalidArgument], "nothing refused by the index")
}
