package main

import (
	"path/filepath"
	"testing"

	"github.com/kvsim/kvsim/internal/golden"
)

// checkGolden compares got with testdata/<dir>/<name>.golden, or rewrites
// the file under -update (`make golden`, or `go test ./cmd/kvsim -args
// -update`; see internal/golden).
func checkGolden(t *testing.T, dir, name, got string) {
	t.Helper()
	golden.CheckString(t, filepath.Join("testdata", dir, name+".golden"), got)
}
