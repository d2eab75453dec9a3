//go:build !unix

package main

// brokenConsoleFails does nothing: without SIGPIPE, a write to a pipe
// whose reader is gone already fails with an error (see brokenpipe_unix.go).
func brokenConsoleFails() {}
