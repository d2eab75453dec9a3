package ndjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"unicode/utf8"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/upsertlib/upsert/internal/structkind"
	"google.golang.org/protobuf/types/known/structpb"
)

// recordOut is a record as written: absent fields are left out.
type recordOut struct {
	ID           string      `json:"id"`
	Values       *[]float32  `json:"values,omitempty"`
	SparseValues *sparseJSON `json:"sparse_values,omitempty"`
	Metadata     any         `json:"metadata,omitempty"` // nil, or a map[string]any
}

// newRecordOut returns v as written. It fails for an id or metadata that
// JSON would not hold as they are (see checkMetadata); a NaN or infinite
// value fails later, when the record is encoded.
func newRecordOut(v *pinecone.Vector) (recordOut, error) {
	if !utf8.ValidString(v.Id) {
		return recordOut{}, errors.New("id is not valid UTF-8")
	}
	out := recordOut{ID: v.Id, Values: v.Values}
	if v.Values != nil && *v.Values == nil {
		out.Values = &[]float32{} // "values":[] rather than null
	}
	if s := v.SparseValues; s != nil {
		out.SparseValues = &sparseJSON{Indices: s.Indices, Values: s.Values}
	}
	if v.Metadata != nil {
		if err := checkMetadata(v.Metadata); err != nil {
			return recordOut{}, err
		}
		out.Metadata = v.Metadata.AsMap()
	}
	return out, nil
}

// checkMetadata returns an error naming a field of md that JSON would not
// hold as it is, at any depth: a NaN or infinite number (structpb's AsMap
// turns it into a string), or a key or string that is not valid UTF-8
// (encoding/json writes U+FFFD in its place). A Reader would read either
// back as other metadata, without an error. The message names the field,
// never its value.
func checkMetadata(md *structpb.Struct) error {
	path, why := badField(md)
	if why == "" {
		return nil
	}
	return fmt.Errorf("metadata field %s: %s", path, why)
}

// badField returns the path in s of a key or value that JSON would not
// hold as it is, such as "tags"[2], and why; why is "" when there is none.
func badField(s *structpb.Struct) (path, why string) {
	for k, v := range s.GetFields() {
		if !utf8.ValidString(k) {
			return fmt.Sprintf("%q", k), "key is not valid UTF-8"
		}
		if p, why := badValue(v); why != "" {
			return fmt.Sprintf("%q", k) + p, why
		}
	}
	return "", ""
}

// badValue is badField for a value, its path relative to v.
func badValue(v *structpb.Value) (path, why string) {
	if v.GetKind() != nil && !structkind.Set(v) {
		return "", "has no value (a kind set to a typed nil)" // AsMap would panic
	}
	switch x := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		if math.IsNaN(x.NumberValue) || math.IsInf(x.NumberValue, 0) {
			return "", "NaN or infinite; JSON numbers must be finite"
		}
	case *structpb.Value_StringValue:
		if !utf8.ValidString(x.StringValue) {
			return "", "not valid UTF-8"
		}
	case *structpb.Value_ListValue:
		for i, e := range x.ListValue.GetValues() {
			if p, why := badValue(e); why != "" {
				return fmt.Sprintf("[%d]", i) + p, why
			}
		}
	case *structpb.Value_StructValue:
		if p, why := badField(x.StructValue); why != "" {
			return "." + p, why
		}
	}
	return "", ""
}

// Encode writes v to w as one line of the format, with a trailing "\n", in
// a single Write call. Values are written with the fewest digits that read
// back as the same float32, so that a [Reader] returns a record equal to
// v. It fails, writing nothing, for a nil record and for one that JSON
// cannot hold as it is: a NaN or infinite value or metadata number, an id
// or a metadata key or string that is not valid UTF-8. Otherwise it
// returns w's error.
func Encode(w io.Writer, v *pinecone.Vector) error {
	if v == nil {
		return errors.New("ndjson: nil record")
	}
	out, err := newRecordOut(v)
	var b []byte
	if err == nil {
		b, err = marshalLine(out)
	}
	if err != nil {
		return fmt.Errorf("ndjson: record %q: %w", v.Id, err)
	}
	_, err = w.Write(b)
	return err
}

// marshalLine encodes x as JSON followed by "\n", without escaping HTML
// characters, so that strings read as they were given.
func marshalLine(x any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(x); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
