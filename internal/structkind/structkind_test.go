package structkind

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestSet(t *testing.T) {
	tests := []struct {
		name string
		v    *structpb.Value
		want bool
	}{
		{"nil", nil, false},
		{"no kind", &structpb.Value{}, false},
		{"a string", structpb.NewStringValue(""), true},
		{"a number", structpb.NewNumberValue(0), true},
		{"a bool", structpb.NewBoolValue(false), true},
		{"null", structpb.NewNullValue(), true},
		{"a list", structpb.NewListValue(nil), true},
		{"a struct", structpb.NewStructValue(nil), true},
		{"a typed nil string", &structpb.Value{Kind: (*structpb.Value_StringValue)(nil)}, false},
		{"a typed nil number", &structpb.Value{Kind: (*structpb.Value_NumberValue)(nil)}, false},
		{"a typed nil bool", &structpb.Value{Kind: (*structpb.Value_BoolValue)(nil)}, false},
		{"a typed nil null", &structpb.Value{Kind: (*structpb.Value_NullValue)(nil)}, false},
		{"a typed nil list", &structpb.Value{Kind: (*structpb.Value_ListValue)(nil)}, false},
		{"a typed nil struct", &structpb.Value{Kind: (*structpb.Value_StructValue)(nil)}, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Set(tt.v), tt.name)
	}
}
