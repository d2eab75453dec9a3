package ndjson

import (
	"bufio"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert"
)

// brokenDisk fails every write, each time with a new error.
type brokenDisk struct{ n int }

func (b *brokenDisk) Write([]byte) (int, error) {
	b.n++
	return 0, fmt.Errorf("disk error #%d", b.n)
}

func TestDeadLettersKeepTheFirstError(t *testing.T) {
	dl, err := CreateDeadLetters(filepath.Join(t.TempDir(), "failed.ndjson"))
	require.NoError(t, err)
	disk := &brokenDisk{}
	dl.w = bufio.NewWriterSize(disk, 16) // every letter overflows the buffer

	for i := range 5 {
		dl.Write(upsert.Failure{Index: i, ID: "a", Record: &pinecone.Vector{Id: "a", Values: &[]float32{1, 2, 3}}, Class: upsert.ClassServer})
	}
	assert.Zero(t, dl.Count(), "no letter made it")
	assert.Equal(t, 1, disk.n, "letters after the error are dropped, not retried")
	assert.EqualError(t, dl.Close(), "disk error #1")
	assert.EqualError(t, dl.Close(), "disk error #1", "a second Close gives the same error")
}
