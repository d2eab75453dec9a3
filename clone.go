package upsert

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
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
	case nil:
		if v == nil {
			return nil
		}
		return &structpb.Value{}
	default:
		return &structpb.Value{}
	}
}

// cloneRecord copies an integrated record, down through its maps and
// lists, for the same reason; a value of any other type but a JSON scalar
// (a json.RawMessage, a []byte, a pointer, a struct) is kept as the JSON
// it encodes to now.
func cloneRecord(r *pinecone.IntegratedRecord) *pinecone.IntegratedRecord {
	if r == nil {
		return nil
	}
	c := pinecone.IntegratedRecord(cloneJSON(map[string]any(*r)).(map[string]any))
	return &c
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
	case nil, string, bool, float64, float32, int, int64, json.Number:
		return v
	default:
		// It may share the caller's memory: freeze what it says now.
		// One that cannot be encoded is left for checkRecord to name.
		if b, err := json.Marshal(v); err == nil {
			return json.RawMessage(b)
		}
		return v
	}
}
