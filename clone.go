package upsert

import (
	"encoding"
	"encoding/json"
	"maps"
	"reflect"
	"slices"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/upsertlib/upsert/internal/jsontext"
	"github.com/upsertlib/upsert/internal/structkind"
	"google.golang.org/protobuf/types/known/structpb"
)

// cloneVector returns a copy of v that shares nothing the caller may
// change: its values, sparse values and metadata are copied. Stream and
// Writer take records this way, so that a producer may reuse a record (a
// decoder's buffers) as soon as it is handed over.
func cloneVector(v *pinecone.Vector) *pinecone.Vector {
	if v == nil {
		return nil
	}
	// One allocation for the vector and its values' slice header.
	c := &struct {
		pinecone.Vector
		values []float32
	}{Vector: pinecone.Vector{Id: v.Id, Metadata: cloneStruct(v.Metadata)}}
	if v.Values != nil {
		c.values = slices.Clone(*v.Values)
		c.Values = &c.values
	}
	if s := v.SparseValues; s != nil {
		c.SparseValues = &pinecone.SparseValues{Indices: slices.Clone(s.Indices), Values: slices.Clone(s.Values)}
	}
	return &c.Vector
}

// cloneStruct copies metadata. It is written out rather than proto.Clone,
// which costs several times as much through reflection; a Value of no
// known kind stays empty, as the validator then reports.
func cloneStruct(s *structpb.Struct) *structpb.Struct {
	if s == nil {
		return nil
	}
	c := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(s.Fields))}
	for k, v := range s.Fields {
		c.Fields[k] = cloneValue(v)
	}
	return c
}

func cloneValue(v *structpb.Value) *structpb.Value {
	if !structkind.Set(v) {
		if v == nil {
			return nil
		}
		return &structpb.Value{} // no kind, as protobuf encodes a typed nil one
	}
	switch x := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return structpb.NewStringValue(x.StringValue)
	case *structpb.Value_NumberValue:
		return structpb.NewNumberValue(x.NumberValue)
	case *structpb.Value_BoolValue:
		return structpb.NewBoolValue(x.BoolValue)
	case *structpb.Value_NullValue:
		return structpb.NewNullValue()
	case *structpb.Value_StructValue:
		return structpb.NewStructValue(cloneStruct(x.StructValue))
	case *structpb.Value_ListValue:
		var l *structpb.ListValue
		if x.ListValue != nil {
			l = &structpb.ListValue{Values: make([]*structpb.Value, len(x.ListValue.Values))}
			for i, e := range x.ListValue.Values {
				l.Values[i] = cloneValue(e)
			}
		}
		return structpb.NewListValue(l)
	default:
		return &structpb.Value{}
	}
}

// cloneRecord copies an integrated record, down through its maps and
// lists, for the same reason. A value of Go's JSON types is copied as it
// is; of another type, it is kept as JSON will send it:
//
//   - text of a string kind (a named string type), or a non-nil pointer to
//     one, becomes a string, as the SDK sends it and as the token estimate
//     (estimateTokens) reads it;
//   - a number or boolean of the caller's own type is kept: it is a copy
//     already;
//   - a non-nil pointer to anything else is followed, one level;
//   - a json.RawMessage keeps its bytes, copied;
//   - a value of any other type (a []byte, a struct, a type with its own
//     MarshalJSON or MarshalText) becomes the JSON it encodes to now.
//
// A value that cannot be encoded, or whose encoding would alter text that
// is not valid UTF-8, is kept as given, for [checkRecord] to refuse: such
// a record is never sent. So is an id that is not held as a string, so
// that its refusal names the caller's type.
func cloneRecord(r *pinecone.IntegratedRecord) *pinecone.IntegratedRecord {
	if r == nil {
		return nil
	}
	c := pinecone.IntegratedRecord(cloneJSON(map[string]any(*r)).(map[string]any))
	keepIDAsGiven(c, *r)
	return &c
}

// keepIDAsGiven puts back into c, a copy of r, r's id when c does not hold
// it as a string: checkRecord refuses it, naming the caller's type rather
// than that of the copy.
func keepIDAsGiven(c, r pinecone.IntegratedRecord) {
	key := "_id"
	id, ok := c[key]
	if !ok {
		key = "id"
		id, ok = c[key]
	}
	if _, text := id.(string); ok && !text {
		c[key] = r[key]
	}
}

func cloneJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		c := maps.Clone(x)
		for k, e := range c {
			c[k] = cloneJSON(e)
		}
		return c
	case []any:
		c := slices.Clone(x)
		for i, e := range c {
			c[i] = cloneJSON(e)
		}
		return c
	case []string:
		return slices.Clone(x)
	case []float64:
		return slices.Clone(x)
	case json.RawMessage:
		return slices.Clone(x)
	case nil, string, bool, float64, float32, int, int64, json.Number:
		return v
	default:
		return cloneOther(v)
	}
}

// cloneOther copies a value of a type other than those cloneJSON knows,
// by cloneRecord's rules.
func cloneOther(v any) any {
	if s, ok := stringOf(v); ok {
		return s
	}
	if encodesItself(v) {
		return freeze(v)
	}
	rv := reflect.ValueOf(v)
	switch k := rv.Kind(); {
	case k >= reflect.Bool && k <= reflect.Float64: // bool, integers, floats
		return v
	case k == reflect.Pointer && !rv.IsNil() && rv.Elem().Kind() != reflect.Pointer:
		return cloneJSON(rv.Elem().Interface())
	}
	return freeze(v)
}

// stringOf returns the text v holds when JSON encodes v as that text: v is
// of a string kind, or a non-nil pointer to one, neither type has a
// MarshalJSON or MarshalText of its own, and it is not a json.Number
// (encoded as the number it holds).
func stringOf(v any) (string, bool) {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer && !rv.IsNil() && !encodesItself(v) {
		rv = rv.Elem()
		v = rv.Interface()
	}
	if rv.Kind() != reflect.String || encodesItself(v) || rv.Type() == reflect.TypeFor[json.Number]() {
		return "", false
	}
	return rv.String(), true
}

// encodesItself reports whether v's type says itself how JSON encodes it.
func encodesItself(v any) bool {
	switch v.(type) {
	case json.Marshaler, encoding.TextMarshaler:
		return true
	}
	return false
}

// freeze returns v as the JSON it encodes to now, since it may share the
// caller's memory; or v itself when it cannot be encoded, or when encoding
// it would alter text that is not valid UTF-8 (encoding/json writes \ufffd
// for it), so that checkRecord names the fault and the record is not sent.
func freeze(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	if jsontext.MayBeAltered(b) {
		if _, bad := jsontext.NotUTF8(v); bad {
			return v
		}
	}
	return json.RawMessage(b)
}
