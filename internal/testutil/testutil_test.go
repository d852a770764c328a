package testutil

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// ReadAll returns every value before io.EOF, in order, and nothing for an
// empty reader.
func TestReadAll(t *testing.T) {
	for _, want := range [][]int{nil, {7}, {1, 2, 3}} {
		i := 0
		got := ReadAll(t, func() (int, error) {
			if i == len(want) {
				return 0, io.EOF
			}
			i++
			return want[i-1], nil
		})
		if !slices.Equal(got, want) || (want == nil) != (got == nil) {
			t.Errorf("ReadAll = %v, want %v", got, want)
		}
	}
}

// fatalRecorder records a Fatal instead of failing.
type fatalRecorder struct {
	testing.TB
	msg []any
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatal(args ...any) {
	r.msg = args
	panic(r)
}

// ReadAll stops at the first error that is not io.EOF and fails with it.
func TestReadAllFailsOnError(t *testing.T) {
	boom := errors.New("boom")
	r := &fatalRecorder{}
	calls := 0
	func() {
		defer func() {
			if p := recover(); p != r {
				t.Fatalf("recovered %v, want the recorder's Fatal", p)
			}
		}()
		ReadAll(r, func() (int, error) {
			calls++
			if calls == 3 {
				return 0, boom
			}
			return calls, nil
		})
	}()
	if len(r.msg) != 1 || r.msg[0] != boom || calls != 3 {
		t.Errorf("Fatal(%v) after %d calls, want Fatal(boom) after 3", r.msg, calls)
	}
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := ReadFile(t, path); string(got) != "abc" {
		t.Errorf("ReadFile = %q", got)
	}
}
