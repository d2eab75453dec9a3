//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly || illumos)

package main

import "os"

// lockSupported: this system has no flock (Windows, Plan 9, WebAssembly,
// AIX, Solaris): lockFile, lockForWriting and lockForReading do not lock,
// and two runs on one checkpoint, or on one dead-letter file, or one
// writing the dead-letter file another reads, are not refused there. A
// lock file whose existence alone would be the lock would outlive a
// killed run and refuse every run after it.
const lockSupported = false

// lockFile does nothing on this system: see lockSupported.
func lockFile(string) (*fileLock, error) { return &fileLock{}, nil }

// lockForWriting does nothing on this system: see lockSupported.
func lockForWriting(string) (*fileLock, error) { return nil, nil }

// lockForReading does nothing on this system: see lockSupported.
func lockForReading(*os.File) (*fileLock, error) { return nil, nil }

// release does nothing on this system.
func (l *fileLock) release() {}
