package planner_test

import (
	"os"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// TestMain runs at least 200 cases per rapid property in a plain `go test`,
// unless -rapid.checks was given (`make prop` passes 2000).
func TestMain(m *testing.M) {
	os.Exit(testutil.MainWithDefaults(m, map[string]string{"rapid.checks": "200"}))
}
