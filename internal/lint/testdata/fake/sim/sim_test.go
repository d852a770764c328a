package sim

import (
	"testing"
	"time"

	"example.com/fake/internal/golden"
)

// Tests may use the wall clock, and the test-only packages.
func TestRun(t *testing.T) {
	golden.Check()
	time.Sleep(time.Millisecond)
	go Run(func() {})
}
