//go:build !windows

package dirsync

const canSyncDirs = true
