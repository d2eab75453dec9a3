package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// checkPaths returns a *usageError if the checkpoint and the dead-letter
// file are one file, by path or as the same file under two names: each
// save of the checkpoint would replace the dead letters. (openInput
// refuses the input as either.)
func checkPaths(o options) error {
	switch {
	case o.checkpoint == "":
		return nil
	case samePath(o.checkpoint, o.deadLetter):
		return usagef("--checkpoint %s and --dead-letter %s are the same file: each save of the checkpoint would replace "+
			"the dead letters; give them two paths", o.checkpoint, o.deadLetter)
	case samePath(o.checkpoint+lockSuffix, o.deadLetter):
		return usagef("--dead-letter %s is the lock file of --checkpoint %s, which the run removes at its end; "+
			"give it another path", o.deadLetter, o.checkpoint)
	case samePath(o.deadLetter+lockSuffix, o.checkpoint):
		return usagef("--checkpoint %s is the lock file of --dead-letter %s, which the run removes at its end; "+
			"give it another path", o.checkpoint, o.deadLetter)
	}
	return nil
}

// lockDeadLetter locks the dead-letter file at path for the run, as
// openCheckpoint locks the checkpoint (lockFile, on PATH.lock): a second
// pcupsert writing the same file at the same time (two loads in one
// directory, with the default --dead-letter) would truncate it or write
// over the first one's letters, and is refused with a *usageError naming
// the file. The lock is taken before the file is created or truncated,
// and held to the run's end; the caller releases it (a nil lock included).
// A device or a pipe (/dev/null) is not locked: nothing in it can be
// lost. A lock that cannot be taken for another reason (a directory where
// no file can be created, holding an existing dead-letter file that can
// be written) is warned of on con, and the run goes on without it, as it
// did before dead-letter files were locked.
func lockDeadLetter(path string, con io.Writer) (*fileLock, error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, nil
	}
	lock, err := lockFile(path + lockSuffix)
	switch {
	case errors.Is(err, errLocked):
		return nil, usagef("--dead-letter %s: another pcupsert is writing to it (it holds a lock on %s.lock), and this run "+
			"would truncate it or write over that run's letters: wait for that run to end, or give another --dead-letter", path, path)
	case err != nil:
		fmt.Fprintf(con, "pcupsert: warning: --dead-letter %s: cannot be locked (%v): another pcupsert writing to it "+
			"at the same time would not be refused\n", path, rootCause(err))
		return nil, nil
	}
	return lock, nil
}

// samePath reports whether a and b name the same file, existing or not:
// the same path once made absolute, the same existing file (a link), or
// the same name in the same directory (through a link to it).
func samePath(a, b string) bool {
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	switch {
	case errA == nil && errB == nil && absA == absB:
		return true
	case sameFile(a, b):
		return true
	}
	return filepath.Base(a) == filepath.Base(b) && sameFile(filepath.Dir(a), filepath.Dir(b))
}

// sameFile reports whether a and b are the same existing file.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// checkDeadLetterWritable returns an error if no dead letter could be
// written at path: an existing file that cannot be opened for writing
// (which is left as it is), a directory, or a directory in which no file
// can be created. Checked at the start, as the checkpoint is: a run must
// not find out at its first failure that it cannot keep it.
func checkDeadLetterWritable(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return checkWritable(path) // created at the first letter
	case fi.IsDir():
		return errors.New("it is a directory")
	case !fi.Mode().IsRegular():
		return nil // a device (/dev/null) or a pipe: opening it may wait for its reader
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return rootCause(err)
	}
	return f.Close()
}

// countLines returns the number of complete lines of the regular file at
// path; 0 if it cannot be read or is no regular file (a pipe or a
// terminal would never end). A dead-letter file holds a letter a line; a
// last line without its newline is a letter a kill cut off, which
// ndjson.AppendDeadLetters does not count either.
func countLines(path string) int {
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return 0
	}
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	n := 0
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if err != nil {
			return n
		}
	}
}
