package main

import "flag"

// update makes the CLI golden tests rewrite their files in testdata/ instead
// of comparing against them (`make golden`, or `go test ./cmd/kvsim -args -update`).
// Every golden test in this package shares this one flag.
var update = flag.Bool("update", false, "rewrite golden files")
