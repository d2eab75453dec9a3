package ndjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// recordOut is a record as written: absent fields are left out.
type recordOut struct {
	ID           string      `json:"id"`
	Values       *[]float32  `json:"values,omitempty"`
	SparseValues *sparseJSON `json:"sparse_values,omitempty"`
	Metadata     any         `json:"metadata,omitempty"` // nil, or a map[string]any
}

func newRecordOut(v *pinecone.Vector) recordOut {
	out := recordOut{ID: v.Id, Values: v.Values}
	if v.Values != nil && *v.Values == nil {
		out.Values = &[]float32{} // "values":[] rather than null
	}
	if s := v.SparseValues; s != nil {
		out.SparseValues = &sparseJSON{Indices: s.Indices, Values: s.Values}
	}
	if v.Metadata != nil {
		out.Metadata = v.Metadata.AsMap()
	}
	return out
}

// Encode writes v to w as one line of the format, with a trailing "\n", in
// a single Write call. Values are written with the fewest digits that read
// back as the same float32, so that a [Reader] returns a record equal to
// v. It fails, writing nothing, for a nil record and for one that JSON
// cannot hold (a NaN or infinite value); otherwise it returns w's error.
func Encode(w io.Writer, v *pinecone.Vector) error {
	if v == nil {
		return errors.New("ndjson: nil record")
	}
	b, err := marshalLine(newRecordOut(v))
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
