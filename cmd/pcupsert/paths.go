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
	}
	return nil
}

// lockDeadLetter locks the dead-letter file at path for the run: a
// second pcupsert writing the same file at the same time (two loads in
// one directory, with the default --dead-letter) would truncate it or
// write over the first one's letters, and one reading it (replaying it as
// its input) would lose what it had not read yet; either is refused with
// a *usageError naming the file. The file is written in place, never
// replaced (unlike the checkpoint), so the lock is on the file itself
// (lockForWriting), not on a lock file next to it: a path that names a
// file of each process (/dev/stdout redirected to a file) locks that
// process's file, and no file but the dead-letter file is created. The
// lock is taken before the file is created or truncated, and held to the
// run's end; the caller releases it (a nil lock included), after the dead
// letters are closed. A device or a pipe (/dev/null) is not locked:
// nothing in it can be lost. A lock that cannot be taken for another
// reason (a file system without flock) is warned of on con, and the run
// goes on without it, as it did before dead-letter files were locked.
func lockDeadLetter(path string, con io.Writer) (*fileLock, error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, nil
	}
	lock, err := lockForWriting(path)
	switch {
	case errors.Is(err, errBeingRead):
		return nil, usagef("--dead-letter %s: another pcupsert is reading it (as its input), and this run would truncate it "+
			"or write into it while it is read: wait for that run to end, or give another --dead-letter", path)
	case errors.Is(err, errLocked):
		return nil, usagef("--dead-letter %s: another pcupsert is writing to it, and this run "+
			"would truncate it or write over that run's letters: wait for that run to end, or give another --dead-letter", path)
	case err != nil:
		fmt.Fprintf(con, "pcupsert: warning: --dead-letter %s: cannot be locked (%v): another pcupsert writing to it, "+
			"or reading it, at the same time would not be refused\n", path, rootCause(err))
		return nil, nil
	}
	return lock, nil
}

// lockInput locks the input file f, named name, for a run that reads
// it (lockForReading): a run writing its dead letters to it is refused,
// as this run is if one is writing them there already (a *usageError);
// runs that only read it may read it at once. A pipe or a device is not
// locked. A lock that cannot be taken for another reason is warned of on
// con, and the run goes on without it. The caller releases it at the
// run's end (a nil lock included).
func lockInput(f *os.File, name string, con io.Writer) (*fileLock, error) {
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, nil
	}
	lock, err := lockForReading(f)
	switch {
	case errors.Is(err, errLocked):
		return nil, usagef("%s: another pcupsert is writing its dead letters to it, and would truncate it or write into it "+
			"while this run reads it: wait for that run to end", name)
	case err != nil:
		fmt.Fprintf(con, "pcupsert: warning: %s: cannot be locked (%v): another pcupsert writing its dead letters to it "+
			"while this run reads it would not be refused\n", name, rootCause(err))
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
