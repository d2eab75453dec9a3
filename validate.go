package upsert

import (
	"fmt"
	"math"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Pinecone's per-record limits (docs.pinecone.io, database limits).
const (
	MaxIDBytes        = 512       // record id: 1 to 512 ASCII characters, no NUL
	MaxMetadataBytes  = 40 * 1024 // metadata per record, measured as JSON
	MaxDimension      = 20_000    // dense values per record
	MaxSparseNonZeros = 2_048     // sparse values per record
)

// validator checks records against Pinecone's rules before anything is
// sent, so that one bad record fails alone and with a message naming it and
// the rule, instead of failing its batch at the index.
type validator struct {
	index *indexShape // the dimension and type the index takes; nil: unknown
}

// check returns the record's encoded size, or an error naming the rule it
// breaks.
func (v *validator) check(r *pinecone.Vector) (size int, err error) {
	if r == nil {
		return 0, fmt.Errorf("record is nil")
	}
	if err := checkID(r.Id); err != nil {
		return 0, err
	}
	dense := 0
	if r.Values != nil {
		dense = len(*r.Values)
	}
	sparse := r.SparseValues != nil && (len(r.SparseValues.Indices) > 0 || len(r.SparseValues.Values) > 0)
	if dense == 0 && !sparse {
		return 0, fmt.Errorf("has neither dense nor sparse values")
	}
	if dense > 0 {
		if dense > MaxDimension {
			return 0, fmt.Errorf("has %d dense values; Pinecone allows at most %d", dense, MaxDimension)
		}
		if i, ok := firstNonFinite(*r.Values); ok {
			return 0, fmt.Errorf("dense value at position %d is NaN or infinite; values must be finite", i)
		}
		if allZero(*r.Values) {
			return 0, fmt.Errorf("dense values are all zero; Pinecone requires at least one non-zero value")
		}
	}
	if err := v.index.accepts(dense, sparse); err != nil {
		return 0, err
	}
	if sparse {
		if err := checkSparse(r.SparseValues); err != nil {
			return 0, err
		}
	}
	metadataSize := 0
	if r.Metadata != nil {
		if metadataSize, err = checkMetadata(r.Metadata); err != nil {
			return 0, err
		}
	}
	return wireSize(r, metadataSize), nil
}

func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("id is empty")
	case len(id) > MaxIDBytes:
		return fmt.Errorf("id is %d bytes; Pinecone allows at most %d", len(id), MaxIDBytes)
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c == 0:
			return fmt.Errorf("id has a NUL byte at offset %d", i)
		case c >= 0x80:
			return fmt.Errorf("id has a non-ASCII byte at offset %d; ids must be ASCII", i)
		}
	}
	return nil
}

// firstNonFinite finds a NaN or an infinity: the float32s whose exponent
// bits are all set. Testing the bits keeps this loop cheap for vectors of
// thousands of values.
func firstNonFinite(vs []float32) (int, bool) {
	const exponent = 0x7f800000
	for i, f := range vs {
		if math.Float32bits(f)&exponent == exponent {
			return i, true
		}
	}
	return 0, false
}

// allZero reports whether every value is zero, which Pinecone refuses in
// dense values ("Dense vectors must contain at least one non-zero value").
// Real embeddings stop the loop at the first value.
func allZero(vs []float32) bool {
	for _, f := range vs {
		if f != 0 {
			return false
		}
	}
	return true
}

func checkSparse(s *pinecone.SparseValues) error {
	if len(s.Indices) != len(s.Values) {
		return fmt.Errorf("sparse values have %d indices and %d values; they must be equal", len(s.Indices), len(s.Values))
	}
	if len(s.Indices) > MaxSparseNonZeros {
		return fmt.Errorf("sparse values have %d non-zeros; Pinecone allows at most %d", len(s.Indices), MaxSparseNonZeros)
	}
	if i, ok := firstNonFinite(s.Values); ok {
		return fmt.Errorf("sparse value at position %d is NaN or infinite; values must be finite", i)
	}
	if i, ok := firstDuplicate(s.Indices); ok {
		return fmt.Errorf("sparse index at position %d appears more than once; indices must be unique", i)
	}
	return nil
}

// firstDuplicate finds a repeated index. Sparse vectors are usually sorted,
// which is checked in one pass; otherwise a set is used.
func firstDuplicate(idx []uint32) (int, bool) {
	sorted := true
	for i := 1; i < len(idx); i++ {
		if idx[i] == idx[i-1] {
			return i, true
		}
		if idx[i] < idx[i-1] {
			sorted = false
		}
	}
	if sorted {
		return 0, false
	}
	seen := make(map[uint32]struct{}, len(idx))
	for i, x := range idx {
		if _, ok := seen[x]; ok {
			return i, true
		}
		seen[x] = struct{}{}
	}
	return 0, false
}

// smallMetadataBytes is a protobuf size under which the JSON form of a
// Struct cannot reach MaxMetadataBytes, so that the costly JSON encoding is
// skipped below it. JSON spends at most six times the protobuf bytes: a
// control character in a string is one byte in protobuf and six in JSON
// (\u00XX), a double 9 bytes against at most 24 characters.
const smallMetadataBytes = MaxMetadataBytes / 6

// checkMetadata checks the value types Pinecone accepts and the size, and
// returns the protobuf size of md.
func checkMetadata(md *structpb.Struct) (int, error) {
	for k, v := range md.GetFields() {
		switch x := v.GetKind().(type) {
		case *structpb.Value_StringValue, *structpb.Value_BoolValue:
		case *structpb.Value_NumberValue:
			if math.IsNaN(x.NumberValue) || math.IsInf(x.NumberValue, 0) {
				return 0, fmt.Errorf("metadata field %q is NaN or infinite; numbers must be finite", k)
			}
		case *structpb.Value_ListValue:
			for i, e := range x.ListValue.GetValues() {
				if _, ok := e.GetKind().(*structpb.Value_StringValue); !ok {
					return 0, fmt.Errorf("metadata field %q: list element %d is not a string; Pinecone accepts lists of strings only", k, i)
				}
			}
		case *structpb.Value_StructValue:
			return 0, fmt.Errorf("metadata field %q is an object; Pinecone accepts strings, numbers, booleans and lists of strings", k)
		case *structpb.Value_NullValue:
			return 0, fmt.Errorf("metadata field %q is null; Pinecone does not accept null metadata values", k)
		default:
			return 0, fmt.Errorf("metadata field %q has no value", k)
		}
	}
	n := proto.Size(md)
	if n > smallMetadataBytes {
		js, err := protojson.Marshal(md)
		if err != nil {
			return 0, fmt.Errorf("metadata cannot be encoded: %w", err)
		}
		if len(js) > MaxMetadataBytes {
			return 0, fmt.Errorf("metadata is %d bytes as JSON; Pinecone allows at most %d", len(js), MaxMetadataBytes)
		}
	}
	return n, nil
}
