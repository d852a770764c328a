package testutil

import (
	"flag"
	"io"
	"os"
	"slices"
	"testing"
)

// TB is what the helpers need of a test: *testing.T, *testing.B and
// *rapid.T all have it.
type TB interface {
	Helper()
	Fatal(args ...any)
}

// ReadAll calls next until it returns io.EOF and returns every value it
// gave before, failing the test on any other error. next is typically a
// reader's Next method: testutil.ReadAll(t, rd.Next).
func ReadAll[T any](tb TB, next func() (T, error)) []T {
	tb.Helper()
	var out []T
	for {
		v, err := next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, v)
	}
}

// ReadFile returns the contents of the file at path, failing the test if
// it cannot be read.
func ReadFile(tb TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// MainWithDefaults is a TestMain's body: it parses the command line, sets
// every flag of defaults (name to value, e.g. "rapid.checks": "200") that
// the command line did not set, runs the tests and returns their exit
// code. It panics if a default names no flag or does not parse.
func MainWithDefaults(m *testing.M, defaults map[string]string) int {
	flag.Parse()
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	names := make([]string, 0, len(defaults))
	for name := range defaults {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !given[name] {
			if err := flag.Set(name, defaults[name]); err != nil {
				panic("testutil: " + err.Error())
			}
		}
	}
	return m.Run()
}
