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

// stepper is a fake engine for TestSteps: its events are at the times
// left in due; RunUntil(at) takes those at or before at.
type stepper struct {
	due  []int
	fail error
}

func (s *stepper) Next() (int, bool) {
	if len(s.due) == 0 {
		return 0, false
	}
	return s.due[0], true
}

func (s *stepper) RunUntil(at int) ([]int, error) {
	if s.fail != nil {
		return nil, s.fail
	}
	var evs []int
	for len(s.due) > 0 && s.due[0] <= at {
		evs, s.due = append(evs, s.due[0]), s.due[1:]
	}
	return evs, nil
}

// Steps runs to each pending time in turn until none is left or each
// says stop, and fails on RunUntil's error.
func TestSteps(t *testing.T) {
	s := &stepper{due: []int{1, 1, 4, 9}}
	var got [][]int
	Steps(t, s.Next, s.RunUntil, func(at int, evs []int) bool {
		got = append(got, append([]int{at}, evs...))
		return true
	})
	if want := [][]int{{1, 1, 1}, {4, 4}, {9, 9}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("steps %v, want %v", got, want)
	}
	s = &stepper{due: []int{2, 3, 5}}
	n := 0
	Steps(t, s.Next, s.RunUntil, func(int, []int) bool { n++; return n < 2 })
	if n != 2 || !slices.Equal(s.due, []int{5}) {
		t.Errorf("stopped after %d steps with %v left, want 2 and [5]", n, s.due)
	}
	Steps(t, s.Next, s.RunUntil, nil)
	if len(s.due) != 0 {
		t.Errorf("%v left after running with no callback", s.due)
	}
	boom := errors.New("boom")
	r := &fatalRecorder{}
	func() {
		defer func() {
			if p := recover(); p != r {
				t.Fatalf("recovered %v, want the recorder's Fatal", p)
			}
		}()
		s = &stepper{due: []int{7}, fail: boom}
		Steps(r, s.Next, s.RunUntil, nil)
	}()
	if len(r.msg) != 1 || r.msg[0] != boom {
		t.Errorf("Fatal(%v), want Fatal(boom)", r.msg)
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

var errNoName = errors.New("the word has no name")

func (w word) MarshalText() ([]byte, error) {
	if w < 1 || w > 2 {
		return nil, errNoName
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
		return errors.New("no such word")
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
		want  any
	}{
		{true, 2, `UnmarshalText("two") = 1, <nil>; want 2`},
		{false, 3, errNoName},
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
		if len(r.msg) != 1 || r.msg[0] != c.want {
			t.Errorf("Fatal(%v), want Fatal(%v)", r.msg, c.want)
		}
	}
	lossy = false
}
