//go:build unix

package main

import (
	"os/signal"
	"syscall"
)

// brokenConsoleFails has a write to a stdout or stderr whose reader is
// gone (`pcupsert … 2>&1 | tee run.log` when Ctrl-C ends tee too, an ssh
// session that dropped) fail with EPIPE, as it does on any other file,
// instead of killing the process with SIGPIPE, Go's default for fds 1 and
// 2: the run still writes its dead letters, saves its checkpoint and
// exits with its status. Ignoring is inherited across exec, but pcupsert
// starts no process.
func brokenConsoleFails() { signal.Ignore(syscall.SIGPIPE) }
