//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly || illumos

package main

import (
	"errors"
	"os"
	"syscall"
)

// lockSupported: this system has flock, and lockFile locks.
const lockSupported = true

// lockFile takes an exclusive lock (flock) on the file at path, creating
// it if need be, without waiting: errLocked if another process, or
// another lockFile of this one, holds it. The kernel lets go of the lock
// when the process dies, even killed (SIGKILL): a lock left by a crash
// does not stand in the way of the next run, whatever files remain.
//
// The holder removes the file as it lets go (release), so that none is
// left behind: a process that opened the file before it was removed, and
// locks it after, holds a lock on a file no longer at path, which it sees
// and tries again.
func lockFile(path string) (*fileLock, error) {
	for range 10 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, errLocked
			}
			return nil, err
		}
		if same(f, path) {
			return &fileLock{f: f, path: path}, nil
		}
		f.Close() // the holder before removed it: lock the new one
	}
	return nil, errLocked // taken and let go by others all along
}

// release removes the lock file and lets go of the lock; it does nothing
// for a nil lock.
func (l *fileLock) release() {
	if l == nil || l.f == nil {
		return
	}
	// Removed while still locked: whoever locks the file after sees that
	// it is no longer at path.
	_ = os.Remove(l.path)
	_ = l.f.Close()
}
