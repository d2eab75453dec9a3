package ndjson_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/upsertlib/upsert/ndjson"
)

func TestDecodeMetadataAgreesWithTheReader(t *testing.T) {
	for _, obj := range []string{
		`{"genre":"drama","year":2020,"tags":["a","b"],"nested":{"x":true}}`,
		`{}`,
		`null`,
		`{"k":null}`,
		`["a"]`,
		`"text"`,
		`12`,
		`{"k":"\ud800"}`,
		"{\"k\":\"\xff\"}",
		"[\"\xff\"]",
		`{"k":1e400}`,
		`{"caf\u00e9":"ok \ud83d\ude00"}`,
	} {
		t.Run(obj, func(t *testing.T) {
			got, err := ndjson.DecodeMetadata([]byte(obj))

			r := ndjson.NewReader(strings.NewReader(`{"id":"a","metadata":` + obj + "}\n"))
			want, wantErr := r.Next()
			var le *ndjson.LineError
			if errors.As(wantErr, &le) {
				require.Error(t, err)
				assert.Equal(t, le.Err.Error(), err.Error())
				assert.ErrorIs(t, err, ndjson.ErrWrongType)
				return
			}
			require.NoError(t, wantErr)
			require.NoError(t, err)
			assert.True(t, proto.Equal(want.Metadata, got), "got %v, want %v", got, want.Metadata)
		})
	}
}

func TestDecodeMetadataRefusesWhatIsNotJSON(t *testing.T) {
	for _, obj := range []string{``, `{"k":}`, `{"k":1} x`} {
		_, err := ndjson.DecodeMetadata([]byte(obj))
		assert.ErrorIs(t, err, ndjson.ErrSyntax, obj)
	}
}
