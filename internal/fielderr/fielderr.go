package fielderr

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Step is one step of a [Path]: the key Key, or, when Index >= 0, the
// element Index of an array.
type Step struct {
	Key   string
	Index int
}

// Path is a key path: keys and array indices from the document's root.
// Paths are values: Key and At return new paths and never share storage
// with the receiver's spare capacity.
type Path []Step

// Key returns the path of the keys parts, from the root.
func Key(parts ...string) Path {
	return Path(nil).Key(parts...)
}

// Key returns p followed by the keys parts.
func (p Path) Key(parts ...string) Path {
	out := slices.Grow(slices.Clone(p), len(parts))
	for _, k := range parts {
		out = append(out, Step{Key: k, Index: -1})
	}
	return out
}

// At returns p followed by the array element i (i >= 0).
func (p Path) At(i int) Path {
	return append(slices.Clip(slices.Clone(p)), Step{Index: i})
}

// HasPrefix reports whether p starts with every step of q.
func (p Path) HasPrefix(q Path) bool {
	return len(p) >= len(q) && slices.Equal(p[:len(q)], q)
}

// Replace returns p with its prefix from replaced by to; p itself when it
// does not start with from.
func (p Path) Replace(from, to Path) Path {
	if !p.HasPrefix(from) {
		return p
	}
	return append(slices.Clone(to), p[len(from):]...)
}

// Parent is p without its last step (nil for the root or a one-step path).
func (p Path) Parent() Path {
	if len(p) <= 1 {
		return nil
	}
	return slices.Clip(p[:len(p)-1])
}

// String writes p as TOML writes a key: keys joined by dots, a key that is
// not a bare key quoted (sweep."cache.cp"), array indices in brackets
// (after_prompt[2].ns).
func (p Path) String() string {
	var b strings.Builder
	for i, s := range p {
		if s.Index >= 0 {
			fmt.Fprintf(&b, "[%d]", s.Index)
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		if isBareKey(s.Key) {
			b.WriteString(s.Key)
		} else {
			b.WriteString(strconv.Quote(s.Key))
		}
	}
	return b.String()
}

// isBareKey reports whether TOML can write s unquoted.
func isBareKey(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// Error is a problem with the field at Path. It prints as "path: cause".
type Error struct {
	Path Path
	Err  error
}

// Error implements error.
func (e *Error) Error() string {
	if len(e.Path) == 0 {
		return e.Err.Error()
	}
	return e.Path.String() + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// New returns the field error at p whose cause reads as
// fmt.Sprintf(format, args...) (lowercase, no trailing period).
func New(p Path, format string, args ...any) error {
	return &Error{Path: p, Err: fmt.Errorf(format, args...)}
}

// Wrap returns err as the field error at p; nil for nil.
func Wrap(p Path, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Path: p, Err: err}
}

// Range returns the common "must be WANT (got GOT)" field error, whose
// cause is a [RangeError].
func Range(p Path, want string, got any) error {
	return &Error{Path: p, Err: &RangeError{Want: want, Got: got}}
}

// RangeError is the cause of a field error about a value outside its valid
// range: "must be WANT (got GOT)". A caller that maps a domain's field to a
// file's key in other units rewrites Got to the value as written.
type RangeError struct {
	Want string
	Got  any
}

// Error implements error.
func (e *RangeError) Error() string { return fmt.Sprintf("must be %s (got %v)", e.Want, e.Got) }

// Flatten returns the errors that err joins (errors.Join, recursively),
// in order, or err alone; nil for nil.
func Flatten(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, Flatten(e)...)
	}
	return out
}

// Map returns err with the path of every field error it joins rewritten
// by f, keeping the order; other errors are kept as they are.
func Map(err error, f func(Path) Path) error {
	parts := Flatten(err)
	if len(parts) == 0 {
		return nil
	}
	out := make([]error, len(parts))
	for i, e := range parts {
		var fe *Error
		if errors.As(e, &fe) && fe == e {
			out[i] = &Error{Path: f(fe.Path), Err: fe.Err}
			continue
		}
		out[i] = e
	}
	return errors.Join(out...)
}

// At is an error at a position of a file: "file:line:col: err", or
// "file: err" when Line is 0 (a default, a derived value, a key not
// written in the file).
type At struct {
	File      string
	Line, Col int
	Err       error
}

// Error implements error.
func (e *At) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d:%d: %v", e.File, e.Line, e.Col, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

// Unwrap returns the error placed.
func (e *At) Unwrap() error { return e.Err }

// Dotted returns the path of a dotted key written in Go source, such as
// "cache.eviction": its parts are bare keys, split at every dot. It is for
// paths a program names, not for keys read from a document (use [Key]).
func Dotted(s string) Path {
	return Key(strings.Split(s, ".")...)
}
