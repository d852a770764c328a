package sim

import (
	"os"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// TestMain raises rapid's default to 200 cases for plain `go test` unless
// -rapid.checks was given (make prop passes 2000).
func TestMain(m *testing.M) {
	os.Exit(testutil.MainWithDefaults(m, map[string]string{"rapid.checks": "200"}))
}
