package upsert

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// run must stop everything it started.
//
// It also raises rapid's default number of checks to 1000 per property
// (200 under -short: rapid runs a fifth of them), unless -rapid.checks or
// RAPID_CHECKS says otherwise: the model tests' short pass in the README's
// test command.
func TestMain(m *testing.M) {
	flag.Parse()
	set := os.Getenv("RAPID_CHECKS") != ""
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		_ = flag.Set("rapid.checks", "1000")
	}
	goleak.VerifyTestMain(m)
}
