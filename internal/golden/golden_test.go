package golden

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps its failures instead of failing.
type recorder struct {
	testing.TB
	errs  []string
	fatal bool
}

func (r *recorder) Helper() {}
func (r *recorder) Error(args ...any) {
	r.errs = append(r.errs, fmt.Sprint(args...))
}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatal(args ...any) {
	r.Error(args...)
	r.fatal = true
	panic(r)
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.fatal = true
	panic(r)
}

// check runs Check on a recorder, catching its Fatal.
func check(path string, got string) (r *recorder) {
	r = &recorder{}
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
	}()
	Check(r, path, []byte(got))
	return r
}

// Check passes on equal bytes, fails naming the file and the first line
// that differs, fails fatally on a missing file, and under -update
// rewrites the file (creating its folder) without checking.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.golden")
	if err := os.WriteFile(path, []byte("one\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := check(path, "one\ntwo\n"); len(r.errs) != 0 {
		t.Errorf("equal: %q", r.errs)
	}
	r := check(path, "one\nthree\n")
	if len(r.errs) != 1 || r.fatal || !strings.Contains(r.errs[0], path) || !strings.Contains(r.errs[0], "line 2:\n got: three\nwant: two") {
		t.Errorf("differs: %q (fatal %v)", r.errs, r.fatal)
	}
	if r := check(path, "one\ntwo"); len(r.errs) != 1 || !strings.Contains(r.errs[0], "2 lines, want 3") {
		t.Errorf("shorter: %q", r.errs)
	}
	missing := filepath.Join(dir, "sub", "b.golden")
	if r := check(missing, "x"); !r.fatal || !strings.Contains(r.errs[0], "-update") {
		t.Errorf("missing: %q (fatal %v)", r.errs, r.fatal)
	}

	*update = true
	defer func() { *update = false }()
	if r := check(missing, "new\n"); len(r.errs) != 0 {
		t.Errorf("update: %q", r.errs)
	}
	if b, err := os.ReadFile(missing); err != nil || string(b) != "new\n" {
		t.Errorf("update wrote %q, %v", b, err)
	}
}

// BadFiles compares each refused file's error with its .err golden.
func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{"x.toml": "", "x.err": "bad x\n", "y.toml": "", "y.err": "bad y\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	BadFiles(t, filepath.Join(dir, "*"), func(t *testing.T, path string) error {
		seen = append(seen, filepath.Base(path))
		return errors.New("bad " + strings.TrimSuffix(filepath.Base(path), ".toml"))
	})
	if strings.Join(seen, ",") != "x.toml,y.toml" {
		t.Errorf("loaded %v", seen)
	}
}
