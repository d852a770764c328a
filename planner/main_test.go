package planner_test

import (
	"flag"
	"os"
	"testing"
)

// update makes the golden tests rewrite testdata/ (`make golden`).
var update = flag.Bool("update", false, "rewrite golden files")

// TestMain runs at least 200 cases per rapid property in a plain `go test`,
// unless -rapid.checks was given (`make prop` passes 2000).
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "rapid.checks" {
			set = true
		}
	})
	if !set {
		if err := flag.Set("rapid.checks", "200"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
