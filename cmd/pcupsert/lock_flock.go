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
// and tries again (lockAt).
func lockFile(path string) (*fileLock, error) {
	f, err := lockAt(path, os.O_RDWR)
	if err != nil {
		return nil, err
	}
	return &fileLock{f: f, remove: path}, nil
}

// lockForWriting takes an exclusive lock (flock) on the file at path
// itself, which the run is about to write in place (the dead-letter
// file), on a descriptor of its own, without waiting and without
// truncating the file: errLocked if another process (or another lock of
// this one) holds it to write it, errBeingRead if others hold it shared,
// to read it (lockForReading). The file is created (mode 0600) if it does
// not exist; created so, or found empty (what a killed run leaves), and
// still empty at release, it is removed then: a run that wrote nothing in
// it leaves no file behind, as before it was locked. A link is never
// removed.
func lockForWriting(path string) (*fileLock, error) {
	f, err := lockAt(path, os.O_WRONLY)
	if err != nil {
		return nil, err
	}
	l := &fileLock{f: f}
	if emptyFile(path) {
		l.removeIfEmpty = path
	}
	return l, nil
}

// lockAt opens the file at path with flag, creating it (mode 0600) if need
// be, and takes an exclusive lock (flock) on it without waiting:
// errLocked if another process (or another lock of this one) holds it
// exclusively, errBeingRead if others hold it shared only. A lock on a
// file that, once locked, is no longer the one at path (its holder
// removed it as it let go) is given up for one on the file now there. A
// link is followed (/dev/stdout, to /proc/self/fd/1).
func lockAt(path string, flag int) (*os.File, error) {
	for range 10 {
		f, err := os.OpenFile(path, flag|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		fd := int(f.Fd())
		if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			if errors.Is(err, syscall.EWOULDBLOCK) {
				err = errLocked
				// Shared locks only are held by readers, which let this
				// one be taken; an exclusive one, by a writer, does not.
				if syscall.Flock(fd, syscall.LOCK_SH|syscall.LOCK_NB) == nil {
					err = errBeingRead
				}
			}
			f.Close()
			return nil, err
		}
		if same(f, path) {
			return f, nil
		}
		f.Close() // its holder removed it as it let go: lock the one now there
	}
	return nil, errLocked // taken and let go by others all along
}

// emptyFile reports whether path is a regular file, not a link, that
// holds nothing.
func emptyFile(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Size() == 0
}

// lockForReading takes a shared lock (flock) on the input file f, on a
// descriptor of its own (a duplicate of f's), without waiting: errLocked
// if another process holds it exclusively (lockForWriting: it writes its
// dead letters there). Runs that read one file may hold it at once. The
// duplicate shares f's open file (stdin's, redirected from a file, may be
// shared with other processes): release unlocks it before closing it.
func lockForReading(f *os.File) (*fileLock, error) {
	// Duplicated and marked close-on-exec under ForkLock, as os.Open
	// does: a command started meanwhile must not inherit the lock.
	syscall.ForkLock.RLock()
	fd, err := syscall.Dup(int(f.Fd()))
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, err
	}
	g := os.NewFile(uintptr(fd), f.Name())
	if err := syscall.Flock(fd, syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		g.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, err
	}
	return &fileLock{f: g, unlock: true}, nil
}

// release lets go of the lock, removing the file first for a lock of
// lockFile, and for one of lockForWriting that created its file if
// nothing was written in it; it does nothing for a nil lock.
func (l *fileLock) release() {
	if l == nil || l.f == nil {
		return
	}
	// Removed while still locked: whoever locks the file after sees that
	// it is no longer at path.
	if l.remove != "" {
		_ = os.Remove(l.remove)
	}
	if l.removeIfEmpty != "" {
		if fi, err := l.f.Stat(); err == nil && fi.Size() == 0 && same(l.f, l.removeIfEmpty) {
			_ = os.Remove(l.removeIfEmpty)
		}
	}
	if l.unlock {
		_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	}
	_ = l.f.Close()
}
