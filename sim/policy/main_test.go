package policy

import (
	"os"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// TestMain raises rapid's default number of checks for plain `go test`
// unless -rapid.checks was given.
func TestMain(m *testing.M) {
	os.Exit(testutil.MainWithDefaults(m, map[string]string{"rapid.checks": "300"}))
}
