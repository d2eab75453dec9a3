// Package dirsync makes a rename durable: a file renamed into a directory
// is on disk under its new name only once the directory is synced.
package dirsync

import "os"

// Sync syncs the directory dir. Call it after a rename in dir.
func Sync(dir string) error {
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
