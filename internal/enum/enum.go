// Package enum names the values of kvsim's small enum types, the ones that
// count 1, 2, ... in declaration order and keep 0 for "the default": it
// prints a value's name, parses a name back, and lists the names for an
// error message. tree, sim and replay declare their enums' names with it,
// so that String, Parse and the "want a, b or c" list come from one table.
package enum

import (
	"fmt"
	"slices"
	"strings"
)

// Names holds the names of the values 1, 2, ... of an enum type T.
type Names[T ~int] struct {
	typ   string   // T's name, for a value without a name: "Strategy(0)"
	what  string   // what a value is, for Parse's error: "eviction strategy"
	names []string // names[i] names the value i+1
}

// New returns the names of T's values 1, 2, ...: typ is T's Go name and
// what says in words what a value is.
func New[T ~int](typ, what string, names ...string) Names[T] {
	return Names[T]{typ: typ, what: what, names: names}
}

// String returns v's name, or "Type(v)" for a value without one (0, the
// default, among them).
func (n Names[T]) String(v T) string {
	if n.Valid(v) {
		return n.names[v-1]
	}
	return fmt.Sprintf("%s(%d)", n.typ, int(v))
}

// Valid reports whether v has a name.
func (n Names[T]) Valid(v T) bool { return v >= 1 && int(v) <= len(n.names) }

// Lookup returns the value named name, and whether there is one.
func (n Names[T]) Lookup(name string) (T, bool) {
	for i, s := range n.names {
		if s == name {
			return T(i + 1), true
		}
	}
	return 0, false
}

// Parse returns the value named name, or an error that says what was
// wanted: `unknown eviction strategy "arc" (want lru, lfu or fifo)`.
func (n Names[T]) Parse(name string) (T, error) {
	if v, ok := n.Lookup(name); ok {
		return v, nil
	}
	return 0, fmt.Errorf("unknown %s %q (want %s)", n.what, name, n.List())
}

// Strings returns the names in order (a copy).
func (n Names[T]) Strings() []string { return slices.Clone(n.names) }

// List returns the names in order as a phrase: "a, b or c".
func (n Names[T]) List() string {
	k := len(n.names)
	if k < 2 {
		return strings.Join(n.names, "")
	}
	return strings.Join(n.names[:k-1], ", ") + " or " + n.names[k-1]
}
