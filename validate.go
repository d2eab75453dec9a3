package upsert

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/upsertlib/upsert/internal/structkind"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Pinecone's per-record limits (docs.pinecone.io, database limits).
const (
	MaxIDBytes        = 512       // record id: 1 to 512 ASCII characters, no NUL
	MaxMetadataBytes  = 40 * 1024 // metadata per record, measured as compact JSON
	MaxDimension      = 20_000    // dense values per record
	MaxSparseNonZeros = 2_048     // sparse values per record
	MaxNamespaceChars = 512       // namespace name: 0 to 512 ASCII characters, no NUL
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

// shownIDBytes is how much of an id an error or a log line shows: an id
// too long for Pinecone may be any length, and every failure quoting it
// whole floods logs. Failure.ID holds it whole.
const shownIDBytes = 64

// shortID returns id, or its first shownIDBytes bytes and its length when
// it is longer.
func shortID(id string) string {
	if len(id) <= shownIDBytes {
		return id
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(id[:shownIDBytes], ""), len(id))
}

// quoteID is id quoted for an error, shortened as shortID does.
func quoteID(id string) string {
	if len(id) <= shownIDBytes {
		return strconv.Quote(id)
	}
	return fmt.Sprintf("%q… (%d bytes)", strings.ToValidUTF8(id[:shownIDBytes], ""), len(id))
}

func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("id is empty")
	case len(id) > MaxIDBytes:
		return fmt.Errorf("id is %d bytes; Pinecone allows at most %d", len(id), MaxIDBytes)
	}
	if i, what := notASCII(id); i >= 0 {
		return fmt.Errorf("id has %s at offset %d; ids must be ASCII without NUL", what, i)
	}
	return nil
}

// notASCII returns the offset of the first byte of s that Pinecone's
// identifiers (ids, namespaces) refuse, NUL or non-ASCII, and what it is;
// -1 when there is none.
func notASCII(s string) (offset int, what string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == 0:
			return i, "a NUL byte"
		case c >= 0x80:
			return i, "a non-ASCII byte"
		}
	}
	return -1, ""
}

// firstNonFinite finds a NaN or an infinity: the float32s whose exponent
// bits are all set. Testing the bits keeps this loop cheap for vectors of
// thousands of values.
func firstNonFinite(vs []float32) (int, bool) {
	const exponent = 0x7f800000
	i := 0
	for ; i+4 <= len(vs); i += 4 { // four at a time: the loop's overhead, not the test, was its cost
		w := vs[i : i+4 : i+4]
		a, b := math.Float32bits(w[0])&exponent, math.Float32bits(w[1])&exponent
		c, d := math.Float32bits(w[2])&exponent, math.Float32bits(w[3])&exponent
		if a == exponent || b == exponent || c == exponent || d == exponent {
			break
		}
	}
	for ; i < len(vs); i++ {
		if math.Float32bits(vs[i])&exponent == exponent {
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

// checkMetadata checks the value types Pinecone accepts, that every string
// is valid UTF-8 (protobuf cannot encode it otherwise: gRPC would fail the
// whole request on the client) and the size, and returns the protobuf size
// of md.
func checkMetadata(md *structpb.Struct) (int, error) {
	size, err := metadataJSONSize(md)
	if err != nil {
		return 0, err
	}
	if size > MaxMetadataBytes {
		return 0, fmt.Errorf("metadata is %d bytes as JSON; Pinecone allows at most %d", size, MaxMetadataBytes)
	}
	return proto.Size(md), nil
}

// metadataJSONSize returns the size of md as compact JSON, the way
// encoding/json writes it without HTML escapes: the same for every build of
// a program (protojson, the obvious tool, inserts spaces at random on
// purpose), and what a server that re-encodes metadata measures. It
// returns the rule a field breaks instead, when one does.
func metadataJSONSize(md *structpb.Struct) (int, error) {
	size := len("{}") + max(len(md.GetFields())-1, 0) // braces and commas
	for k, v := range md.GetFields() {
		n, ok := jsonStringSize(k)
		if !ok {
			return 0, fmt.Errorf("metadata key %q: key is not valid UTF-8", k)
		}
		if strings.HasPrefix(k, "$") { // the filter language's operators start with $
			return 0, fmt.Errorf("metadata key %q starts with \"$\"; Pinecone refuses such keys", k)
		}
		size += n + len(":")
		if !structkind.Set(v) {
			return 0, fmt.Errorf("metadata field %q has no value", k)
		}
		switch x := v.GetKind().(type) {
		case *structpb.Value_StringValue:
			if n, ok = jsonStringSize(x.StringValue); !ok {
				return 0, fmt.Errorf("metadata field %q is not valid UTF-8", k)
			}
			size += n
		case *structpb.Value_BoolValue:
			size += len(strconv.FormatBool(x.BoolValue))
		case *structpb.Value_NumberValue:
			if math.IsNaN(x.NumberValue) || math.IsInf(x.NumberValue, 0) {
				return 0, fmt.Errorf("metadata field %q is NaN or infinite; numbers must be finite", k)
			}
			size += jsonNumberSize(x.NumberValue)
		case *structpb.Value_ListValue:
			vs := x.ListValue.GetValues()
			size += len("[]") + max(len(vs)-1, 0)
			for i, e := range vs {
				s, isString := e.GetKind().(*structpb.Value_StringValue)
				if !isString || s == nil {
					return 0, fmt.Errorf("metadata field %q: list element %d is not a string; Pinecone accepts lists of strings only", k, i)
				}
				if n, ok = jsonStringSize(s.StringValue); !ok {
					return 0, fmt.Errorf("metadata field %q: list element %d is not valid UTF-8", k, i)
				}
				size += n
			}
		case *structpb.Value_StructValue:
			return 0, fmt.Errorf("metadata field %q is an object; Pinecone accepts strings, numbers, booleans and lists of strings", k)
		case *structpb.Value_NullValue:
			return 0, fmt.Errorf("metadata field %q is null; Pinecone does not accept null metadata values", k)
		default:
			return 0, fmt.Errorf("metadata field %q has no value", k)
		}
	}
	return size, nil
}

// jsonStringSize returns the size of s as a JSON string, quotes included,
// or false when s is not valid UTF-8.
func jsonStringSize(s string) (int, bool) {
	n := len(`""`)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20:
				n += len(`\u0000`)
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return 0, false
		}
		i += size
		if r == '\u2028' || r == '\u2029' {
			size = len(`\u2028`) // escaped for JavaScript
		}
		n += size
	}
	return n, true
}

// jsonNumberSize returns the size of f as encoding/json writes a float64:
// the shortest form, exponent notation outside [1e-6, 1e21).
func jsonNumberSize(f float64) int {
	var buf [32]byte
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b := strconv.AppendFloat(buf[:0], f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		return n - 1 // e-07 is written e-7
	}
	return len(b)
}

// ValidNamespace returns the rule of Pinecone's that namespace breaks (at
// most [MaxNamespaceChars] ASCII characters, no NUL), or nil. Every record
// routed to such a namespace fails as [ClassInvalid] before it is sent:
// check a namespace taken from configuration with it before a long run.
// The records API also refuses "." and ".." (see [Records]).
func ValidNamespace(namespace string) error {
	return checkNamespace(namespace, false)
}

// checkNamespace returns the rule a namespace breaks, or nil: every record
// routed to it fails with that rule before sending. In a URL path (inPath)
// "." and ".." are dot segments that every HTTP client resolves away: the
// SDK would post the records to another endpoint (404, which stops the run).
func checkNamespace(ns string, inPath bool) error {
	if inPath && (ns == "." || ns == "..") {
		return fmt.Errorf("namespace %q cannot be written through the records API: a URL path resolves it away", ns)
	}
	if n := len(ns); n > MaxNamespaceChars {
		return fmt.Errorf("namespace %q… is %d bytes long: at most %d ASCII characters", ns[:32], n, MaxNamespaceChars)
	}
	if i, what := notASCII(ns); i >= 0 {
		return fmt.Errorf("namespace %q has %s at offset %d; namespaces must be ASCII without NUL", ns, what, i)
	}
	return nil
}
