//go:build unix

// Dead letters written to a named pipe or a device, as `pcupsert
// --dead-letter /dev/stdout | gzip` and `--dead-letter /dev/null` do. Unix
// only: syscall.Mkfifo and syscall.Mknod do not exist elsewhere.

package ndjson_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/ndjson"
)

// openers are the two ways to open a dead-letter file.
var openers = []struct {
	name string
	open func(string) (*ndjson.DeadLetters, error)
}{
	{"CreateDeadLetters", ndjson.CreateDeadLetters},
	{"AppendDeadLetters", ndjson.AppendDeadLetters},
}

// mkfifo makes a named pipe in a temporary directory, or skips the test.
func mkfifo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "letters.fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip("no named pipes:", err)
	}
	return path
}

// mkfifoReader makes a named pipe and drains it on a goroutine, which
// sends what it read once the writer has closed the pipe.
func mkfifoReader(t *testing.T) (path string, done <-chan []byte) {
	t.Helper()
	path = mkfifo(t)
	ch := make(chan []byte, 1)
	go func() {
		data, _ := os.ReadFile(path) // opens when the writer does, ends when it closes
		ch <- data
	}()
	return path, ch
}

// A pipe or a device cannot be fsynced (Linux answers EINVAL), and there
// is nothing to sync: a letter written to one is delivered. Sync, every
// save of dl.Checkpoint and Close succeed, so that a run does not report
// letters lost when none was, and a checkpointed run can save at all.
func TestDeadLettersOnANamedPipeSyncAndCloseWithoutError(t *testing.T) {
	for _, o := range openers {
		t.Run(o.name, func(t *testing.T) {
			path, done := mkfifoReader(t)
			dl, err := o.open(path)
			require.NoError(t, err)
			dl.Write(rateLimited(0, &pinecone.Vector{Id: "a", Values: floats(1)}))
			assert.NoError(t, dl.Sync(), "every letter reached the pipe")
			cp := dl.Checkpoint(upsert.FileCheckpoint(filepath.Join(t.TempDir(), "ckpt")))
			assert.NoError(t, cp.Save(context.Background(), 1), "the checkpoint can be saved")
			dl.WriteBad(2, []byte("x"), nil)
			assert.NoError(t, dl.Close())
			letters := strings.Split(strings.TrimSuffix(string(<-done), "\n"), "\n")
			require.Len(t, letters, 2, "both letters were delivered, whole")
			assert.True(t, strings.HasPrefix(letters[0], `{"id":"a",`), letters[0])
			assert.Equal(t, `{"line":2,"raw":"x","error":""}`, letters[1])
		})
	}
}

// The mode 0600 is for the file the letters are in. A device (pcupsert's
// `--dead-letter /dev/null`) is left as it is: as root, a chmod would make
// the machine's /dev/null 0600, and every other user's `> /dev/null` fail;
// as anyone else, it fails (the device is root's). Shown on a null device
// of the test's own, made with mknod (root only), never on /dev/null.
func TestDeadLettersLeaveTheModeOfADeviceAsItIs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the device number of the null device is Linux's")
	}
	for _, o := range openers {
		t.Run(o.name, func(t *testing.T) {
			dev := filepath.Join(t.TempDir(), "null")
			if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, 1<<8|3); err != nil { // major 1, minor 3: /dev/null
				t.Skip("cannot make a device node:", err)
			}
			require.NoError(t, os.Chmod(dev, 0o666)) // whatever the umask
			dl, err := o.open(dev)
			require.NoError(t, err)
			dl.WriteBad(1, []byte("x"), nil)
			assert.NoError(t, dl.Sync(), "nothing to sync on a device")
			assert.NoError(t, dl.Close())
			assert.Equal(t, 1, dl.Count())
			fi, err := os.Stat(dev)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o666), fi.Mode().Perm(), "the device's mode is left as it was")
		})
	}
}

// AppendDeadLetters opens the file for writing only, as CreateDeadLetters
// does (a resumed `pcupsert --checkpoint … --dead-letter /dev/stdout |
// consumer` appends). Open for reading too, the process would be a reader
// of its own pipe: once the consumer left, writes would fill the pipe and
// block for ever under DeadLetters' lock, and the run with them. They fail
// instead (EPIPE), and Close returns that error.
func TestAppendDeadLettersToAPipeWhoseReaderLeftFailsRatherThanHangs(t *testing.T) {
	path := mkfifo(t)
	consumer, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	require.NoError(t, err)
	dl, err := ndjson.AppendDeadLetters(path)
	require.NoError(t, err)
	require.NoError(t, consumer.Close()) // the consumer exits

	closed := make(chan error, 1)
	go func() {
		for i := range 400 { // 400 letters of ~1 KiB: more than a pipe holds
			dl.Write(rateLimited(i, &pinecone.Vector{Id: strings.Repeat("x", 1000), Values: floats(1)}))
		}
		closed <- dl.Close()
	}()
	select {
	case err := <-closed:
		assert.ErrorIs(t, err, syscall.EPIPE, "the letters could not be delivered: the reader is gone")
	case <-time.After(5 * time.Second):
		drain(t, path) // unblock the writer, so that the test ends
		t.Fatal("Write or Close hangs on a pipe whose reader left: the run would hang with them")
	}
}

// drain reads the named pipe at path until its writer closes it.
func drain(t *testing.T, path string) {
	r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	require.NoError(t, err)
	go func() {
		defer r.Close()
		buf := make([]byte, 1<<16)
		for {
			if _, err := r.Read(buf); err != nil && !errors.Is(err, syscall.EAGAIN) {
				return
			}
		}
	}()
}
