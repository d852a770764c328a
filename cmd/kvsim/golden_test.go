package main

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// update makes the CLI golden tests rewrite their files in testdata/ instead
// of comparing against them (`make golden`, or `go test ./cmd/kvsim -args -update`).
// Every golden test in this package shares this one flag.
var update = flag.Bool("update", false, "rewrite golden files")

// checkGolden compares got with testdata/<dir>/<name>.golden, rewriting the
// file first under -update.
func checkGolden(t *testing.T, dir, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", dir, name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got != string(want) {
		t.Fatalf("%s:\n got:\n%s\nwant:\n%s", name, got, want)
	}
}
