package tree

import (
	"os"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// TestMain raises rapid's defaults for plain `go test` to 200 cases of up to
// 100 steps, unless -rapid.checks or -rapid.steps were given (make prop
// passes -rapid.checks=2000).
func TestMain(m *testing.M) {
	os.Exit(testutil.MainWithDefaults(m, map[string]string{"rapid.checks": "200", "rapid.steps": "100"}))
}
