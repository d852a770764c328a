package golden

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files instead of comparing with them")

// Update reports whether the test binary runs with -update: golden files
// are being rewritten, not checked.
func Update() bool { return *update }

// Check compares got with the golden file at path. Under -update it
// writes got to path instead (creating its folder) and checks nothing. A
// missing file or a difference fails the test, naming the file and the
// first line that differs.
func Check(tb testing.TB, path string, got []byte) {
	tb.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		msg := fmt.Sprintf("%s differs (rerun with -update and review the diff): %s", path, firstDiff(string(got), string(want)))
		if len(got) <= maxShown {
			msg += fmt.Sprintf("\ngot:\n%s", got)
		}
		tb.Error(msg)
	}
}

// CheckString is [Check] for text.
func CheckString(tb testing.TB, path, got string) {
	tb.Helper()
	Check(tb, path, []byte(got))
}

// BadFiles runs one subtest per file matching pattern (a filepath.Glob
// pattern), other than the .err goldens themselves; none matching fails
// the test. load must refuse the file, and its error's text, with a
// newline, must be the golden file named as the file with its extension
// replaced by .err. load gets the subtest's t for any checks of its own.
func BadFiles(t *testing.T, pattern string, load func(t *testing.T, path string) error) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, ".err") })
	if err != nil || len(files) == 0 {
		t.Fatalf("no files match %s: %v", pattern, err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			err := load(t, path)
			if err == nil {
				t.Fatalf("%s: no error", path)
			}
			CheckString(t, strings.TrimSuffix(path, filepath.Ext(path))+".err", err.Error()+"\n")
		})
	}
}

// maxShown is the longest output a failure prints in full (a sim golden
// runs to hundreds of kilobytes; its first differing line says enough).
const maxShown = 4 << 10

// firstDiff names the first line where got and want differ.
func firstDiff(got, want string) string {
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(gl) && i < len(wl); i++ {
		if gl[i] != wl[i] {
			return fmt.Sprintf("line %d:\n got: %s\nwant: %s", i+1, gl[i], wl[i])
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(gl), len(wl))
}
