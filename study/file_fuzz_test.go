package study

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGridSize(t *testing.T) {
	axes := func(lens ...int) []Axis {
		var out []Axis
		for _, n := range lens {
			out = append(out, Axis{Values: make([][]any, n)})
		}
		return out
	}
	for _, tc := range []struct {
		lens  []int
		n     int
		sizes string
		ok    bool
	}{
		{[]int{10, 20}, 200, "10 x 20 = 200", true},
		{[]int{MaxPoints}, MaxPoints, "100000 = 100000", true},
		{[]int{MaxPoints, 1}, MaxPoints, "100000 x 1 = 100000", true},
		{[]int{MaxPoints, 2}, 0, "100000 x 2", false},
		// 1000^7 overflows no int on the way: the check stops multiplying.
		{[]int{1000, 1000, 1000, 1000, 1000, 1000, 1000}, 0, "1000 x 1000 x 1000 x 1000 x 1000 x 1000 x 1000", false},
	} {
		n, sizes, ok := gridSize(axes(tc.lens...))
		if n != tc.n || sizes != tc.sizes || ok != tc.ok {
			t.Errorf("gridSize(%v) = %d, %q, %v; want %d, %q, %v", tc.lens, n, sizes, ok, tc.n, tc.sizes, tc.ok)
		}
	}
}

// Any bytes parse without a panic into a study or positioned errors that
// name the file (bases resolve against testdata/).
func FuzzParse(f *testing.F) {
	for _, glob := range []string{"testdata/*.toml", "testdata/bad/*.toml", "../configs/studies/*.toml"} {
		paths, _ := filepath.Glob(glob)
		for _, p := range paths {
			if data, err := os.ReadFile(p); err == nil {
				f.Add(data)
			}
		}
	}
	name := filepath.Join("testdata", "fuzz.toml")
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data, name)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, name) {
					t.Fatalf("error line does not name the file: %q", line)
				}
			}
			return
		}
		if len(s.Points()) == 0 || len(s.Points()) > MaxPoints {
			t.Fatalf("%d points", len(s.Points()))
		}
	})
}
