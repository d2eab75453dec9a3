// Package structkind tells whether a protobuf struct value holds a value.
package structkind

import "google.golang.org/protobuf/types/known/structpb"

// Set reports whether v holds a value of some kind. A kind set to a typed
// nil (&structpb.Value{Kind: (*structpb.Value_StringValue)(nil)}) holds
// none: protobuf encodes it as a value with no kind, and reading its field
// panics.
func Set(v *structpb.Value) bool {
	switch x := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return x != nil
	case *structpb.Value_NumberValue:
		return x != nil
	case *structpb.Value_BoolValue:
		return x != nil
	case *structpb.Value_NullValue:
		return x != nil
	case *structpb.Value_StructValue:
		return x != nil
	case *structpb.Value_ListValue:
		return x != nil
	}
	return false
}
