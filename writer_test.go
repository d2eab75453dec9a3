package upsert

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNewWriterRejectsOptionsItCannotUse(t *testing.T) {
	cp := FileCheckpoint(filepath.Join(t.TempDir(), "cp"))
	w, err := NewWriter(context.Background(), WithUpsertFunc(newFakeIndex(nil).Upsert), WithCheckpoint(cp))
	assert.ErrorIs(t, err, ErrBadOption, "a Writer has no input to replay: a checkpoint would mean nothing")
	assert.Nil(t, w)
}
