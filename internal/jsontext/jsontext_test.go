package jsontext

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawJSON writes its bytes as they are, as a caller's MarshalJSON may.
type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

// hexKey is a string type with a MarshalText of its own.
type hexKey string

func (k hexKey) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString([]byte(k))), nil }

// textKey is a map key JSON spells by its MarshalText.
type textKey struct{ s string }

func (k textKey) MarshalText() ([]byte, error) { return []byte(k.s), nil }

// nested returns v inside n lists.
func nested(v any, n int) any {
	for range n {
		v = []any{v}
	}
	return v
}

func TestCheckNamesTheTextJSONWouldAlter(t *testing.T) {
	for _, tt := range []struct {
		name string
		v    any
		want string // "" for no error
	}{
		{"valid text", map[string]any{"a": "café", "b": []any{"x"}}, ""},
		{"the value's own \\ufffd", map[string]any{"a": "\ufffd"}, ""},
		{"a string that is not UTF-8", map[string]any{"a": "caf\xe9"}, `field "a" is not valid UTF-8`},
		{"a key that is not UTF-8", map[string]any{"k\xff": 1}, "field key \"k\\xff\" is not valid UTF-8"},
		{"deep in a list", map[string]any{"m": map[string]any{"tags": []any{"ok", "b\xc3"}}}, `field "m""tags"[1] is not valid UTF-8`},
		{"a struct's field", map[string]any{"s": struct{ Name string }{"\xff"}}, `field "s""Name" is not valid UTF-8`},
		{"a MarshalJSON's output", map[string]any{"r": rawJSON("\"\xff\"")}, `field "r" is not valid UTF-8`},
		// encoding/json writes a key of a string kind as it is, never
		// through its MarshalText (here valid hex).
		{"a string key with a MarshalText", map[string]any{"m": map[hexKey]string{"k\xff": "x"}}, `field "m"key "k\xff" is not valid UTF-8`},
		{"a MarshalText key's output", map[string]any{"m": map[textKey]int{{"\xff"}: 1}}, `field "m"key "{\xff}" is not valid UTF-8`},
		{"deeper than the walk looks", map[string]any{"f": nested("caf\xe9", maxWalk)}, `field "f"` + strings.Repeat("[0]", maxWalk/2) + ` nests too deep for its text to be checked`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			encoded, err := json.Marshal(tt.v)
			if err != nil { // should encoding/json refuse the MarshalJSON case: check the raw bytes
				encoded = []byte(`{"r":"` + "\xff" + `"}`)
			}
			got := Check(tt.v, encoded)
			if tt.want == "" {
				require.NoError(t, got)
				return
			}
			require.Error(t, got)
			assert.Equal(t, tt.want, got.Error())
		})
	}
}
