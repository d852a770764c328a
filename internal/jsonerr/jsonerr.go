// Package jsonerr says what encoding/json found wrong in a document in the
// document's own terms: the key path as the user wrote it, what was
// expected and what was found ("sampling_params.max_new_tokens: expected
// an integer, found a string"), or the byte where the syntax broke. It
// never names a Go type, struct or field.
//
// Explain serves documents read whole: HTTP bodies, study results lines,
// plan snapshots. The traces package places type errors itself (at the
// value's column, by walking the line) and shares the words: Expected,
// Found and Kind.
package jsonerr

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// Problem is one decoding error of a JSON document.
type Problem struct {
	// Offset is the byte offset in the document where decoding stopped:
	// the bad character of a syntax error, the end of a value of the
	// wrong kind; -1 when not known.
	Offset int64
	// Path is the key path of a value of the wrong kind, as written in
	// the document (sampling_params.max_new_tokens); "" for the document
	// itself or a syntax error.
	Path string
	// Msg says what was expected and found ("expected an integer, found a
	// string"), or what is wrong with the syntax.
	Msg string
	// Syntax is set for a syntax error (or a document cut short).
	Syntax bool
}

// String is "PATH: MSG" for a value of the wrong kind, "at byte N: MSG"
// for a syntax error, or MSG.
func (p Problem) String() string {
	switch {
	case p.Path != "":
		return p.Path + ": " + p.Msg
	case p.Syntax && p.Offset >= 0:
		return fmt.Sprintf("at byte %d: %s", p.Offset, p.Msg)
	}
	return p.Msg
}

// Describe is Explain(err).String().
func Describe(err error) string { return Explain(err).String() }

// Explain describes an error of json.Unmarshal or a json.Decoder.
func Explain(err error) Problem {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		msg := strings.TrimPrefix(syn.Error(), "json: ")
		if msg == "unexpected end of JSON input" {
			msg = "the document ends before its JSON value does"
		}
		return Problem{Offset: syn.Offset, Msg: msg, Syntax: true}
	case errors.As(err, &typ):
		return Problem{Offset: typ.Offset, Path: typ.Field, Msg: fmt.Sprintf("expected %s, found %s", Expected(typ.Type), Found(typ.Value))}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return Problem{Offset: -1, Msg: "the document ends before its JSON value does", Syntax: true}
	}
	return Problem{Offset: -1, Msg: strings.TrimPrefix(err.Error(), "json: ")}
}

var (
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonNumber      = reflect.TypeFor[json.Number]()
)

// Elem returns t without its pointers, and whether a value of it is
// written as a string: a Go string, or a value that decodes itself from
// text (encoding.TextUnmarshaler), as encoding/json and go-toml both
// honour.
func Elem(t reflect.Type) (elem reflect.Type, str bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t, t.Kind() == reflect.String || reflect.PointerTo(t).Implements(textUnmarshaler)
}

// Expected says what JSON value decodes into a Go value of type t: "an
// integer", "an array of objects".
func Expected(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	t, str := Elem(t)
	if t == jsonNumber {
		return "a number"
	}
	if str {
		return "a string"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer >= 0"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		e := Expected(t.Elem())
		if e == "a value" {
			return "an array"
		}
		e = strings.TrimPrefix(strings.TrimPrefix(e, "an "), "a ")
		w, rest, _ := strings.Cut(e, " ")
		if rest != "" {
			rest = " " + rest
		}
		if w == "true" { // "true or false"
			return "an array of true or false values"
		}
		return "an array of " + w + "s" + rest
	}
	return "a value"
}

// Found rewords json.UnmarshalTypeError's Value ("string", "number 1.5")
// as "a string", "1.5".
func Found(v string) string {
	switch v {
	case "string":
		return "a string"
	case "number":
		return "a number"
	case "bool":
		return "true or false"
	case "array":
		return "an array"
	case "object":
		return "an object"
	case "null":
		return "null"
	}
	if n, ok := strings.CutPrefix(v, "number "); ok {
		return n
	}
	return v
}

// Kind says what the JSON value raw is ("a string", "an array", "1.5"), as
// Found does; it looks at raw's first byte (and, for a number, its text).
func Kind(raw []byte) string {
	s := strings.TrimLeft(string(raw[:min(len(raw), 64)]), " \t\r\n")
	if s == "" {
		return "nothing"
	}
	switch s[0] {
	case '"':
		return "a string"
	case '[':
		return "an array"
	case '{':
		return "an object"
	case 't', 'f':
		return "true or false"
	case 'n':
		return "null"
	}
	if len(raw) > 64 {
		return "a number"
	}
	return strings.TrimSpace(s)
}
