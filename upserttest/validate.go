package upserttest

import (
	"encoding/json"
	"math"
	"sort"
	"strings"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// Pinecone's per-request limits, which a Server always enforces on Upsert
// requests. A request that breaks any of them is rejected whole with
// codes.InvalidArgument and a message; nothing of it is written. Like the
// real service's, the messages of these limits, and of the other rules
// below, name no record, with two exceptions that copy Pinecone's answers
// naming the offending id: a non-ASCII id ("Vector ID must be ASCII, but
// got '…'") and all-zero dense values ("Dense vectors must contain at least
// one non-zero value. Vector ID '…' contains only zeros").
const (
	// MaxVectorsPerRequest is the most vectors an Upsert request may hold.
	MaxVectorsPerRequest = 1000
	// MaxIDBytes is the longest vector id, in bytes. Ids must not be empty.
	MaxIDBytes = 512
	// MaxMetadataBytes is the largest metadata of one vector: 40 KiB of its
	// compact JSON encoding (as encoding/json writes it, without HTML
	// escaping), which is how clients usually measure it.
	MaxMetadataBytes = 40 * 1024
	// MaxDimension is the most dense values a vector may have.
	MaxDimension = 20000
	// MaxSparseValues is the most non-zero values (index/value pairs) a
	// sparse vector may have.
	MaxSparseValues = 2048
	// MaxNamespaceChars is the longest namespace name, in characters.
	MaxNamespaceChars = 512
)

// Besides these limits, a vector id must be ASCII without NUL; a vector
// must have dense values, sparse values or both; its dense values must not
// be all zero; its sparse indices and values must have the same length,
// and its sparse indices must not repeat; all its values must be finite
// (no NaN or ±Inf); its metadata keys must not start with "$" (the SDK's
// NewMetadata says so; the message is upserttest's own), and its metadata
// values must be strings, finite numbers, booleans or lists of strings (no
// nested objects, no nulls). And a vector must fit the index (see indexShape):
// only sparse values in a sparse index, dense values of the index's
// dimension in a dense one.

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// validateNamespace refuses a namespace name Pinecone does not allow:
// longer than 512 characters, or not ASCII, or with a NUL. The messages are
// this server's: Pinecone's are not published.
func validateNamespace(ns string) error {
	switch {
	case len(ns) > MaxNamespaceChars:
		return invalid("Namespace name is %d bytes long, which exceeds the limit of %d characters", len(ns), MaxNamespaceChars)
	case strings.ContainsFunc(ns, notASCII):
		return invalid("Namespace name must be ASCII without NUL, but got %q", ns)
	}
	return nil
}

// indexShape is what an index holds: its vector type (VectorTypeDense,
// VectorTypeSparse, or "" while neither WithVectorType, WithDimension
// (dense) nor a vector written has decided it) and its dimension (0 while
// neither WithDimension nor a dense vector has fixed it). A Pinecone index
// is dense or sparse from its creation; the server, by default, lets its
// first write decide, as if the index had been created for it.
type indexShape struct {
	vectorType string
	dim        int
}

// Errors of a vector that does not fit the index's vector type.
var (
	errDenseInSparseIndex = invalid("Sparse index does not support dense values")
	errSparseInDenseIndex = invalid("Dense index requires dense values")
)

// validate checks the per-request limits, and each vector against the
// index's shape as it stands before the request.
func validate(vectors []*pinecone.Vector, shape indexShape) error {
	if len(vectors) > MaxVectorsPerRequest {
		return invalid("Request contains %d vectors, which exceeds the limit of %d vectors per upsert request", len(vectors), MaxVectorsPerRequest)
	}
	for _, v := range vectors {
		if err := validateVector(v, shape); err != nil {
			return err
		}
	}
	return nil
}

// validateVector checks v against the per-record limits and against shape.
// A vector without dense values in an index with a dimension is answered
// as a dimension mismatch, "Vector dimension 0 does not match the
// dimension of the index N", as Pinecone does (a captured answer:
// probots-io/pinecone-php#15), rather than by the other rules it breaks.
func validateVector(v *pinecone.Vector, shape indexShape) error {
	if err := validID("Vector", v.Id); err != nil {
		return err
	}
	dense := 0
	if v.Values != nil {
		dense = len(*v.Values)
	}
	sparse := 0
	if sv := v.SparseValues; sv != nil {
		if len(sv.Indices) != len(sv.Values) {
			return invalid("Sparse vector indices and values must have the same length, got %d indices and %d values", len(sv.Indices), len(sv.Values))
		}
		sparse = len(sv.Values)
		if sparse > MaxSparseValues {
			return invalid("Sparse vector has %d non-zero values, which exceeds the limit of %d", sparse, MaxSparseValues)
		}
	}
	if shape.dim > 0 && dense != shape.dim {
		return dimensionError(dense, shape.dim) // an index with a dimension names it, however large
	}
	if dense == 0 && sparse == 0 {
		return invalid("Vector must have dense values, sparse values, or both")
	}
	if dense > MaxDimension {
		return invalid("Vector dimension %d exceeds the maximum dimension of %d", dense, MaxDimension)
	}
	if dense > 0 && !finite(*v.Values) {
		return invalid("Dense vector values must be finite numbers, found NaN or Inf")
	}
	if dense > 0 && allZero(*v.Values) {
		// Pinecone's words, naming the vector (a captured answer:
		// deepset-ai/haystack#10194, Dec 2025).
		return invalid("Dense vectors must contain at least one non-zero value. Vector ID '%s' contains only zeros", v.Id)
	}
	switch {
	case shape.vectorType == VectorTypeSparse && dense > 0:
		return errDenseInSparseIndex
	case shape.vectorType == VectorTypeDense && dense == 0:
		return errSparseInDenseIndex
	}
	if sparse > 0 && !finite(v.SparseValues.Values) {
		return invalid("Sparse vector values must be finite numbers, found NaN or Inf")
	}
	if i, ok := repeatedIndex(v.SparseValues); ok {
		// Pinecone refuses them with INVALID_ARGUMENT; its message is not
		// published, so this one is the server's.
		return invalid("Sparse vector indices must be unique, found index %d more than once", i)
	}
	if v.Metadata != nil {
		if err := validateMetadata(v.Metadata); err != nil {
			return err
		}
	}
	return nil
}

// repeatedIndex returns an index that appears more than once in sv's
// indices (sv may be nil). Sparse indices are usually sorted, which one
// pass checks; otherwise a set is used.
func repeatedIndex(sv *pinecone.SparseValues) (uint32, bool) {
	if sv == nil {
		return 0, false
	}
	idx := sv.Indices
	sorted := true
	for i := 1; i < len(idx); i++ {
		if idx[i] == idx[i-1] {
			return idx[i], true
		}
		sorted = sorted && idx[i] > idx[i-1]
	}
	if sorted {
		return 0, false
	}
	seen := make(map[uint32]struct{}, len(idx))
	for _, x := range idx {
		if _, ok := seen[x]; ok {
			return x, true
		}
		seen[x] = struct{}{}
	}
	return 0, false
}

func allZero(xs []float32) bool {
	for _, x := range xs {
		if x != 0 {
			return false
		}
	}
	return true
}

func finite(xs []float32) bool {
	for _, x := range xs {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return false
		}
	}
	return true
}

func validateMetadata(md *structpb.Struct) error {
	keys := make([]string, 0, len(md.Fields))
	for k := range md.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.HasPrefix(k, "$") {
			return invalid("Metadata key '%s' must not start with '$'", k)
		}
		if !validMetadataValue(md.Fields[k]) {
			// Pinecone's words; "got 'null'" is the form seen answered.
			return invalid("Metadata value must be a string, number, boolean or list of strings, got '%s' for field '%s'", metadataKindName(md.Fields[k]), k)
		}
	}
	if n := metadataSize(md); n > MaxMetadataBytes {
		return invalid("Metadata size is %d bytes, which exceeds the limit of %d bytes per vector", n, MaxMetadataBytes)
	}
	return nil
}

func validMetadataValue(v *structpb.Value) bool {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue, *structpb.Value_BoolValue:
		return true
	case *structpb.Value_NumberValue:
		return !math.IsNaN(k.NumberValue) && !math.IsInf(k.NumberValue, 0)
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			if _, ok := e.GetKind().(*structpb.Value_StringValue); !ok {
				return false
			}
		}
		return true
	default: // null, nested struct, unset
		return false
	}
}

// metadataKindName names the kind of a metadata value that Pinecone
// refuses.
func metadataKindName(v *structpb.Value) string {
	switch v.GetKind().(type) {
	case *structpb.Value_NullValue, nil:
		return "null"
	case *structpb.Value_StructValue:
		return "object"
	case *structpb.Value_ListValue:
		return "list"
	default:
		return "number"
	}
}

// metadataSize is the size of md's compact JSON encoding. md must have
// passed validMetadataValue, so that it encodes.
func metadataSize(md *structpb.Struct) int {
	var w countingWriter
	enc := json.NewEncoder(&w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(md.AsMap()); err != nil {
		return math.MaxInt
	}
	return w.n - 1 // Encode appends a newline
}

type countingWriter struct{ n int }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return len(p), nil
}

// dimensionError is the answer to a vector whose dimension differs from
// the index's; got is 0 for a vector without dense values.
func dimensionError(got, want int) error {
	return invalid("Vector dimension %d does not match the dimension of the index %d", got, want)
}

// fit checks every vector, in order, against shape, which each vector may
// complete: while the type is not decided, the first vector decides it
// (sparse values only: sparse; dense values: dense), and the first dense
// vector fixes the dimension. It returns the shape the index has after
// writing them. In a dense index, or one with a dimension, a vector without
// dense values is a dimension mismatch of dimension 0 ("Vector dimension
// 0 does not match the dimension of the index 1536", Pinecone's answer); in
// a sparse index, dense values are refused.
func fit(vectors []*pinecone.Vector, shape indexShape) (indexShape, error) {
	for _, v := range vectors {
		n := 0
		if v.Values != nil {
			n = len(*v.Values)
		}
		switch {
		case n == 0 && shape.dim > 0:
			return shape, dimensionError(0, shape.dim)
		case n == 0 && shape.vectorType == VectorTypeDense:
			return shape, errSparseInDenseIndex
		case n == 0:
			shape.vectorType = VectorTypeSparse
		case shape.vectorType == VectorTypeSparse:
			return shape, errDenseInSparseIndex
		case shape.dim == 0:
			shape.vectorType, shape.dim = VectorTypeDense, n
		case n != shape.dim:
			return shape, dimensionError(n, shape.dim)
		default:
			shape.vectorType = VectorTypeDense
		}
	}
	return shape, nil
}

// errStopped is returned by waits that end because the server is closing or
// restarting.
var errStopped = status.Error(codes.Unavailable, "upserttest: server is shutting down")
