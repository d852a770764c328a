package sim

import (
	"testing"
	"time"
)

// Tests may use the wall clock.
func TestRun(t *testing.T) {
	time.Sleep(time.Millisecond)
	go Run(func() {})
}
