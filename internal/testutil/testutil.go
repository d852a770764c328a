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

	"pgregory.net/rapid"
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

// DrawPrefixTrace draws a trace of page keys with heavy prefix sharing:
// up to most requests, each either extending a prefix of an earlier
// request or starting afresh, with up to add keys more drawn from an
// alphabet of 1 to alphabet keys, offset+1 upwards (so keys also repeat at
// different depths).
func DrawPrefixTrace(t *rapid.T, most, add int, alphabet, offset uint64) [][]uint64 {
	n := rapid.IntRange(0, most).Draw(t, "requests")
	alpha := rapid.Uint64Range(1, alphabet).Draw(t, "alphabet")
	var reqs [][]uint64
	for range n {
		var r []uint64
		if len(reqs) > 0 && rapid.Bool().Draw(t, "extend") {
			prev := reqs[rapid.IntRange(0, len(reqs)-1).Draw(t, "prev")]
			r = append(r, prev[:rapid.IntRange(0, len(prev)).Draw(t, "keep")]...)
		}
		for k := rapid.IntRange(0, add).Draw(t, "add"); k > 0; k-- {
			r = append(r, rapid.Uint64Range(1, alpha).Draw(t, "page")+offset)
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// ChainKeys rewrites requests' block keys as chained hashes, as in
// Mooncake traces: two blocks get the same id exactly when their prefixes
// (the keys up to and including theirs) are equal. Ids count from 1 in
// order of first appearance.
func ChainKeys(reqs [][]uint64) [][]uint64 {
	type edge struct{ parent, key uint64 }
	ids := map[edge]uint64{}
	out := make([][]uint64, len(reqs))
	for i, r := range reqs {
		var cur uint64
		for _, k := range r {
			id, ok := ids[edge{cur, k}]
			if !ok {
				id = uint64(len(ids) + 1)
				ids[edge{cur, k}] = id
			}
			out[i] = append(out[i], id)
			cur = id
		}
	}
	return out
}

// RelabelFar returns two traces of page keys equal up to a one-to-one
// relabelling: every third request of reqs gets the key unused (which no
// request of reqs may hold) in front, and far has the same requests with
// unused as 0, even keys kept and odd keys sent far up (above 1<<63) by an
// odd multiplier. A dense key table and an edge map both take part.
func RelabelFar(reqs [][]uint64, unused uint64) (near, far [][]uint64) {
	for i, r := range reqs {
		var s []uint64
		if i%3 == 0 {
			s = append(s, 0)
			r = append([]uint64{unused}, r...)
		}
		for _, h := range r[len(s):] {
			if h%2 == 1 {
				h = h*0x9e3779b97f4a7c15 | 1<<63 // odd multiplier: one to one
			}
			s = append(s, h)
		}
		near = append(near, r)
		far = append(far, s)
	}
	return near, far
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
