package upsert

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// run must stop everything it started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
