package testutil

import (
	"encoding"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// Steps drives an event-driven engine one event time at a time: while
// next reports a pending event, it runs runUntil to that event's time and
// gives each (when not nil) the time and what runUntil returned, stopping
// when next reports none or each returns false. It fails the test on
// runUntil's error. next and runUntil are typically an engine's Next and
// RunUntil methods: testutil.Steps(t, o.Next, o.RunUntil, nil) runs o
// until it is idle.
func Steps[T, E any](tb TB, next func() (T, bool), runUntil func(T) ([]E, error), each func(T, []E) bool) {
	tb.Helper()
	for {
		at, ok := next()
		if !ok {
			return
		}
		evs, err := runUntil(at)
		if err != nil {
			tb.Fatal(err)
		}
		if each != nil && !each(at, evs) {
			return
		}
	}
}

// RunBool runs f as two subtests or sub-benchmarks of tb: off, given
// false, then on, given true.
func RunBool[T interface{ Run(string, func(T)) bool }](tb T, off, on string, f func(T, bool)) {
	tb.Run(off, func(tb T) { f(tb, false) })
	tb.Run(on, func(tb T) { f(tb, true) })
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

// SharedTrace returns the path of rel in the shared public traces
// (shared/data/traces beside the repository, see its README), relative
// to the test's folder, or skips the test when that file is absent.
func SharedTrace(tb testing.TB, rel string) string {
	tb.Helper()
	root := "."
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		if i == 10 {
			tb.Fatal("testutil: no go.mod above the test's folder")
		}
		root = filepath.Join(root, "..")
	}
	p := filepath.Join(root, "..", "shared", "data", "traces", rel)
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("shared trace %s not available (%v): this test needs shared/data/traces beside the repository", p, err)
	}
	return p
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

// TextRoundTrip checks that each of values marshals to text and unmarshals
// from it back to itself, failing the test at the first that does not
// (enum types with MarshalText and UnmarshalText).
func TextRoundTrip[T interface {
	comparable
	encoding.TextMarshaler
}, P interface {
	*T
	encoding.TextUnmarshaler
}](tb TB, values ...T) {
	tb.Helper()
	for _, v := range values {
		b, err := v.MarshalText()
		if err != nil {
			tb.Fatal(err)
		}
		var back T
		if err := P(&back).UnmarshalText(b); err != nil || back != v {
			tb.Fatal(fmt.Sprintf("UnmarshalText(%q) = %v, %v; want %v", b, back, err, v))
		}
	}
}
