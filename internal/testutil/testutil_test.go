package testutil

import (
	"errors"
	"fmt"
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

func TestChainKeys(t *testing.T) {
	got := ChainKeys([][]uint64{{1, 2}, {1, 3}, {2}, {1, 2, 2}})
	want := [][]uint64{{1, 2}, {1, 3}, {4}, {1, 2, 5}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("ChainKeys = %v, want %v", got, want)
	}
}

func TestRelabelFar(t *testing.T) {
	odd := func(h uint64) uint64 { return h*0x9e3779b97f4a7c15 | 1<<63 }
	near, far := RelabelFar([][]uint64{{1, 2}, {2}, {3}, {4}}, 9)
	wantNear := [][]uint64{{9, 1, 2}, {2}, {3}, {9, 4}}
	wantFar := [][]uint64{{0, odd(1), 2}, {2}, {odd(3)}, {0, 4}}
	if !slices.EqualFunc(near, wantNear, slices.Equal) || !slices.EqualFunc(far, wantFar, slices.Equal) {
		t.Errorf("RelabelFar = %v, %v; want %v, %v", near, far, wantNear, wantFar)
	}
}

// RunBool runs the off case, with false, before the on case, with true,
// each as a subtest of its name.
func TestRunBool(t *testing.T) {
	type run struct {
		name string
		v    bool
	}
	var got []run
	RunBool(t, "off", "on", func(t *testing.T, v bool) { got = append(got, run{t.Name(), v}) })
	if want := []run{{"TestRunBool/off", false}, {"TestRunBool/on", true}}; !slices.Equal(got, want) {
		t.Errorf("RunBool ran %v, want %v", got, want)
	}
}

// word is a text enum for TestTextRoundTrip: 1 is "one", 2 is "two"; with
// lossy set, every name unmarshals to 1.
type word int

var lossy bool

func (w word) MarshalText() ([]byte, error) {
	if w < 1 || w > 2 {
		return nil, fmt.Errorf("word(%d) has no name", int(w))
	}
	return []byte([]string{"one", "two"}[w-1]), nil
}

func (w *word) UnmarshalText(b []byte) error {
	switch {
	case lossy || string(b) == "one":
		*w = 1
	case string(b) == "two":
		*w = 2
	default:
		return fmt.Errorf("no word %q", b)
	}
	return nil
}

// TextRoundTrip passes values that come back and fails, naming the text,
// on one that does not or that has no text.
func TestTextRoundTrip(t *testing.T) {
	TextRoundTrip(t, word(1), word(2))
	for _, c := range []struct {
		lossy bool
		v     word
		want  string
	}{
		{true, 2, `UnmarshalText("two") = 1, <nil>; want 2`},
		{false, 3, "word(3) has no name"},
	} {
		lossy = c.lossy
		r := &fatalRecorder{}
		func() {
			defer func() {
				if p := recover(); p != r {
					t.Fatalf("recovered %v, want the recorder's Fatal", p)
				}
			}()
			TextRoundTrip(r, word(1), c.v)
		}()
		if got := fmt.Sprint(r.msg...); got != c.want {
			t.Errorf("Fatal(%s), want Fatal(%s)", got, c.want)
		}
	}
	lossy = false
}
