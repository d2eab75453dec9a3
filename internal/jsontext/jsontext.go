// Package jsontext finds text that a JSON string cannot hold as it is: a
// string that is not valid UTF-8, for which encoding/json writes \ufffd,
// so that the JSON holds text its value never had. Package upsert refuses
// such records before sending them; package ndjson writes their dead
// letters without the altered text.
package jsontext

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"
)

// escapedRuneError is what encoding/json writes in a string for each byte
// that is not valid UTF-8.
var escapedRuneError = []byte(`\ufffd`)

// MayBeAltered reports whether encoded, what encoding/json wrote of a
// value, may hold text it altered: it is not valid UTF-8 (a value's own
// MarshalJSON wrote it), or it holds \ufffd, which is also what a value
// may spell itself; NotUTF8 tells. Most JSON shows neither, which one pass
// tells.
func MayBeAltered(encoded []byte) bool {
	return !utf8.Valid(encoded) || bytes.Contains(encoded, escapedRuneError)
}

// Check returns why encoded, what encoding/json wrote of v (or of a value
// holding v), does not hold v's text as it is, or nil: a key or string of
// v that is not valid UTF-8, which encoding/json wrote as \ufffd, or JSON
// that is not valid UTF-8 (from a json.RawMessage or a MarshalJSON). Only
// encoded is read when it shows neither, as most does; then v is walked,
// to name the field.
func Check(v any, encoded []byte) error {
	if !MayBeAltered(encoded) {
		return nil
	}
	if path, bad := NotUTF8(v); bad {
		if deep, ok := strings.CutSuffix(path, tooDeep); ok {
			return fmt.Errorf("field %s nests too deep for its text to be checked", deep)
		}
		return fmt.Errorf("field %s is not valid UTF-8", path)
	}
	if !utf8.Valid(encoded) {
		return errors.New("encodes to JSON that is not valid UTF-8")
	}
	return nil
}

// NotUTF8 finds, in v, a key or text that is not valid UTF-8, which JSON
// would send altered or invalid, and returns its path, such as
// "meta""tags"[2] (see notUTF8Value). A value nested deeper than the walk
// looks (maxWalk) cannot be told sound, and counts as bad: its path ends
// in "[…]".
func NotUTF8(v any) (path string, bad bool) { return notUTF8Value(reflect.ValueOf(v), 0) }

// maxWalk is how deep notUTF8Value looks: a value JSON encodes may still
// hold a cycle the walk would follow (an embedded pointer to itself, whose
// fields JSON shadows), and metadata is shallow.
const maxWalk = 64

// tooDeep ends the path of a value deeper than maxWalk.
const tooDeep = "[…]"

// notUTF8Value is NotUTF8 for a value of any type, walked as encoding/json
// walks it, depth levels down: the output of its own MarshalJSON or
// MarshalText, else its strings, the elements of its slices, arrays and
// maps, the keys of its maps and its exported fields.
func notUTF8Value(v reflect.Value, depth int) (path string, bad bool) {
	if !v.IsValid() || (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
		return "", false
	}
	if depth > maxWalk {
		return tooDeep, true
	}
	depth++
	if b, ok := ownEncoding(v); ok {
		return "", !utf8.Valid(b)
	}
	switch v.Kind() {
	case reflect.String:
		return "", !utf8.ValidString(v.String())
	case reflect.Pointer, reflect.Interface:
		return notUTF8Value(v.Elem(), depth)
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 { // base64 or numbers
			return "", false
		}
		for i := range v.Len() {
			if p, bad := notUTF8Value(v.Index(i), depth); bad {
				return fmt.Sprintf("[%d]", i) + p, true
			}
		}
	case reflect.Map:
		return notUTF8Map(v, depth)
	case reflect.Struct:
		return notUTF8Struct(v, depth)
	}
	return "", false
}

// ownEncoding returns what v's own MarshalJSON or MarshalText writes, when
// it has one that encoding/json would call.
func ownEncoding(v reflect.Value) ([]byte, bool) {
	if v.CanAddr() {
		v = v.Addr() // encoding/json calls methods of *T on addressable values
	}
	if !v.CanInterface() {
		return nil, false
	}
	switch m := v.Interface().(type) {
	case json.Marshaler:
		b, _ := m.MarshalJSON()
		return b, true
	case encoding.TextMarshaler:
		b, _ := m.MarshalText()
		return b, true
	}
	return nil, false
}

func notUTF8Map(v reflect.Value, depth int) (path string, bad bool) {
	keys := v.MapKeys()
	slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	for _, k := range keys {
		if keyNotUTF8(k) {
			return fmt.Sprintf("key %q", fmt.Sprint(k)), true
		}
		if p, bad := notUTF8Value(v.MapIndex(k), depth); bad {
			return fmt.Sprintf("%q", fmt.Sprint(k)) + p, true
		}
	}
	return "", false
}

// keyNotUTF8 reports whether encoding/json writes map key k altered: the
// key itself when its kind is string, else its MarshalText, if any
// (encoding/json's resolveKeyName; integers are digits).
func keyNotUTF8(k reflect.Value) bool {
	if k.Kind() == reflect.String {
		return !utf8.ValidString(k.String())
	}
	if !k.CanInterface() || k.Kind() == reflect.Pointer && k.IsNil() {
		return false
	}
	if m, ok := k.Interface().(encoding.TextMarshaler); ok {
		b, _ := m.MarshalText()
		return !utf8.Valid(b)
	}
	return false
}

// notUTF8Struct walks the fields encoding/json encodes: exported or
// embedded, and not tagged "-".
func notUTF8Struct(v reflect.Value, depth int) (path string, bad bool) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if !f.IsExported() && !f.Anonymous || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		if p, bad := notUTF8Value(v.Field(i), depth); bad {
			return fmt.Sprintf("%q", name) + p, true
		}
	}
	return "", false
}
