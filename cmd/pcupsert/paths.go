package main

import (
	"bytes"
	"errors"
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
