package textdist

import "testing"

func TestLevenshtein(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"cache", "cache", 0}, {"cahce", "cache", 2}, {"serverr", "server", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}} {
		if d := Levenshtein(tc.a, tc.b); d != tc.d {
			t.Errorf("Levenshtein(%q, %q) = %d, want %d", tc.a, tc.b, d, tc.d)
		}
	}
}
