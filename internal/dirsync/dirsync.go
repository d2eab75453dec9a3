// Package dirsync makes a new name durable: a file created in or renamed
// into a directory is on disk under that name only once the directory is
// synced.
package dirsync

import "os"

// Sync syncs the directory dir. Call it after a file is created in or
// renamed into dir. On Windows
// it does nothing: syncing a directory there fails ("Access is denied":
// FlushFileBuffers takes files only), and NTFS journals the rename itself.
func Sync(dir string) error {
	if !canSyncDirs {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
