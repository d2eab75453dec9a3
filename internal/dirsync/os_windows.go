package dirsync

const canSyncDirs = false
