package ndjson

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
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

// Only an I/O error stops the letters: an error that is not one (a letter
// that could not be encoded) is kept for Close, and the letters written
// before and after it all reach the file.
func TestDeadLettersKeepWritingAfterAnErrorThatIsNotIO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "failed.ndjson")
	dl, err := CreateDeadLetters(path)
	require.NoError(t, err)
	dl.WriteBad(1, []byte("before"), nil)
	dl.fail(errors.New("not encodable"))
	dl.WriteBad(2, []byte("after"), nil)
	assert.EqualError(t, dl.Close(), "not encodable")
	assert.Equal(t, 2, dl.Count())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, `{"line":1,"raw":"before","error":""}`+"\n"+`{"line":2,"raw":"after","error":""}`+"\n", string(data))
}

// savesCheckpoint is a Checkpoint that keeps what it is given.
type savesCheckpoint struct{ saved []int64 }

func (c *savesCheckpoint) Load(context.Context) (int64, error) { return 0, nil }

func (c *savesCheckpoint) Save(_ context.Context, n int64) error {
	c.saved = append(c.saved, n)
	return nil
}

// A Sync that fails returns the first error, and so does every later Sync
// and Close: a DeadLetters that failed keeps failing. The checkpoint of
// Checkpoint then saves nothing, and says which file and why.
func TestDeadLettersSyncKeepsTheFirstErrorAndTheCheckpointSavesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "failed.ndjson")
	dl, err := CreateDeadLetters(path)
	require.NoError(t, err)
	cp := &savesCheckpoint{}
	wrapped := dl.Checkpoint(cp)
	disk := &brokenDisk{}
	dl.w = bufio.NewWriterSize(disk, 1<<10)

	dl.WriteBad(1, []byte("lost"), nil)
	assert.EqualError(t, dl.Sync(), "disk error #1")
	for range 2 {
		err := wrapped.Save(context.Background(), 3)
		assert.EqualError(t, err, "ndjson: checkpoint not saved at 3: the dead-letter file "+path+" is not on disk: disk error #1")
	}
	assert.Empty(t, cp.saved, "no save passes a letter that is not on disk")
	assert.EqualError(t, dl.Close(), "disk error #1")
	assert.EqualError(t, dl.Sync(), "disk error #1", "after Close, the same error")
	assert.Equal(t, 1, disk.n, "the failed write is not retried")
}
