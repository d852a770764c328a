package fielderr

import (
	"errors"
	"testing"
)

func TestPathString(t *testing.T) {
	for _, tc := range []struct {
		p    Path
		want string
	}{
		{Key("cache", "eviction"), "cache.eviction"},
		{Key("llamacpp", "cost", "after_prompt").At(2).Key("ns"), "llamacpp.cost.after_prompt[2].ns"},
		{Key("sweep", "cache.cp"), `sweep."cache.cp"`},
		{Key("a").At(0).At(1), "a[0][1]"},
		{Dotted("hw.server.tp_size"), "hw.server.tp_size"},
		{Key(""), `""`},
		{nil, ""},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

// Key and At never write into the receiver's spare capacity: two paths
// grown from one parent stay apart.
func TestPathNoAliasing(t *testing.T) {
	parent := make(Path, 0, 8).Key("a", "b")
	x, y := parent.Key("x"), parent.Key("y")
	i, j := parent.At(1), parent.At(2)
	if x.String() != "a.b.x" || y.String() != "a.b.y" || i.String() != "a.b[1]" || j.String() != "a.b[2]" {
		t.Fatalf("paths share storage: %s %s %s %s", x, y, i, j)
	}
}

func TestReplace(t *testing.T) {
	p := Dotted("hw.fitted.prefill").At(1)
	if got := p.Replace(Dotted("hw.fitted"), Dotted("llamacpp.cost")).String(); got != "llamacpp.cost.prefill[1]" {
		t.Errorf("Replace = %s", got)
	}
	if got := p.Replace(Dotted("hw.roofline"), Dotted("cost")).String(); got != p.String() {
		t.Errorf("Replace of a prefix it lacks = %s, want %s", got, p)
	}
	if Dotted("hw.fittedx").HasPrefix(Dotted("hw.fitted")) {
		t.Error("HasPrefix matched a longer key")
	}
}

// Map rewrites the paths of the field errors a joined error holds, in
// order, through nested joins, and keeps the rest.
func TestMapFlatten(t *testing.T) {
	other := errors.New("hw: does not fit")
	err := errors.Join(Range(Dotted("a.b"), ">= 1", 0), errors.Join(other, New(Dotted("a.c"), "bad")))
	got := Map(err, func(p Path) Path { return p.Replace(Key("a"), Key("z")) })
	want := "z.b: must be >= 1 (got 0)\nhw: does not fit\nz.c: bad"
	if got.Error() != want {
		t.Fatalf("Map = %q, want %q", got, want)
	}
	if n := len(Flatten(got)); n != 3 {
		t.Fatalf("Flatten: %d errors, want 3", n)
	}
	var fe *Error
	if !errors.As(Flatten(got)[2], &fe) || fe.Path.String() != "z.c" {
		t.Fatalf("errors.As: %v", fe)
	}
	if Map(nil, nil) != nil || Wrap(nil, nil) != nil {
		t.Fatal("nil in, not nil out")
	}
}

func TestAt(t *testing.T) {
	e := New(Dotted("server.tp_size"), "must be >= 1 (got 0)")
	if got := (&At{File: "f.toml", Line: 3, Col: 1, Err: e}).Error(); got != "f.toml:3:1: server.tp_size: must be >= 1 (got 0)" {
		t.Errorf("At = %q", got)
	}
	if got := (&At{File: "f.toml", Err: e}).Error(); got != "f.toml: server.tp_size: must be >= 1 (got 0)" {
		t.Errorf("At without a line = %q", got)
	}
}
