package enum

import (
	"strings"
	"testing"
)

type color int

func TestNames(t *testing.T) {
	n := New[color]("color", "color", "red", "green", "blue")
	for v, want := range map[color]string{0: "color(0)", 1: "red", 2: "green", 3: "blue", 4: "color(4)", -1: "color(-1)"} {
		if got := n.String(v); got != want {
			t.Errorf("String(%d) = %q, want %q", v, got, want)
		}
		if got, want := n.Valid(v), v >= 1 && v <= 3; got != want {
			t.Errorf("Valid(%d) = %v, want %v", v, got, want)
		}
		if v >= 1 && v <= 3 {
			if got, err := n.Parse(want); got != v || err != nil {
				t.Errorf("Parse(%q) = %d, %v, want %d", want, got, err, v)
			}
		}
	}
	if _, ok := n.Lookup("Red"); ok {
		t.Error(`Lookup("Red") found a value`)
	}
	_, err := n.Parse("")
	if want := `unknown color "" (want red, green or blue)`; err == nil || err.Error() != want {
		t.Errorf(`Parse("") = %v, want %s`, err, want)
	}
	for names, want := range map[string]string{"": "", "a": "a", "a b": "a or b"} {
		var list []string
		if names != "" {
			list = strings.Fields(names)
		}
		if got := New[color]("c", "c", list...).List(); got != want {
			t.Errorf("List of %q = %q, want %q", names, got, want)
		}
	}
}
