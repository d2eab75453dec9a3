package ndjson

import (
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"
)

// DecodeMetadata decodes obj, a JSON object, as a [Reader] decodes a line's
// "metadata" field, by the same rules and with the same messages: it is for
// metadata that comes as JSON text from elsewhere (a column of a file, a
// message header) and must be refused where the line
// {"id":…,"metadata":obj} would be. The error wraps [ErrSyntax] when obj is
// not valid JSON, and [ErrWrongType] when it is not an object (JSON null
// gives nil metadata and no error), holds a string that is not valid
// Unicode (which encoding/json would replace with U+FFFD), or cannot be a
// protobuf Struct. Unlike a Reader, DecodeMetadata sets no length limit,
// and a syntax error's offset counts from the start of obj.
func DecodeMetadata(obj []byte) (*structpb.Struct, error) {
	var m map[string]any
	err := json.Unmarshal(obj, &m)
	var typ *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &typ) {
		return nil, describeJSONError(err, "")
	}
	// A Reader checks the line's Unicode before the fields' types.
	if !validUnicode(obj) {
		return nil, fmt.Errorf("%w: field \"metadata\" holds %s", ErrWrongType, notUnicode)
	}
	if err != nil {
		return nil, describeJSONError(err, fieldNames[fieldMetadata])
	}
	return metadataStruct(m)
}

// metadataStruct returns m, decoded JSON metadata, as a Struct; nil for nil.
func metadataStruct(m map[string]any) (*structpb.Struct, error) {
	if m == nil {
		return nil, nil
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		// structpb's message may quote a value: leave it out.
		return nil, fmt.Errorf("%w: metadata cannot be represented as a protobuf Struct", ErrWrongType)
	}
	return s, nil
}
