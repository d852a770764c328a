package configs

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/kvsim/kvsim/internal/fielderr"
	"github.com/kvsim/kvsim/internal/jsonerr"
)

// bom is the UTF-8 byte order mark some editors write at the start of a
// file.
var bom = []byte("\ufeff")

// StripBOM returns data without a leading UTF-8 byte order mark, which
// TOML does not allow but Windows editors write; the trace readers skip it
// too. Columns on the first line are counted without it, as editors show
// them.
func StripBOM(data []byte) []byte { return bytes.TrimPrefix(data, bom) }

// TOMLError turns an error of go-toml decoding data (the file name) into
// target into "file:line:col: key: expected X, found Y" lines in TOML's
// terms, never Go's: decoding errors, unknown keys (one line each) and
// parser errors; any other error is prefixed with the name. target is what
// was decoded into (a pointer), used to tell what the key expects; nil
// falls back to go-toml's own words for the type.
func TOMLError(name string, data []byte, target any, err error) error {
	var se *toml.StrictMissingError
	if errors.As(err, &se) {
		var errs []error
		for _, e := range se.Errors {
			row, col := e.Position()
			errs = append(errs, fmt.Errorf("%s:%d:%d: %s: unknown key", name, row, col, KeyPath(e.Key())))
		}
		return errors.Join(errs...)
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		key := de.Key()
		msg, ok := decodeMessage(data, row, col, key, target, de.Error())
		if !ok {
			// A syntax error, or a value's own UnmarshalText: go-toml's
			// words are TOML's, less its "toml: " prefix.
			msg = strings.TrimPrefix(de.Error(), "toml: ")
		}
		if len(key) == 0 && ok {
			key = keyAt(data, row, col)
		}
		if len(key) > 0 {
			msg = indexedKeyPath(data, row, key) + ": " + msg
		}
		return fmt.Errorf("%s:%d:%d: %s", name, row, col, msg)
	}
	var pe *unstable.ParserError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %v", name, pe)
	}
	return fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "toml: "))
}

// indexedKeyPath writes key, a key of a decoding error at line row of
// data, with the array indices go-toml leaves out (fleet.groups[1].count,
// not fleet.groups.count): those of the last key of that path written at
// or before row. An array of tables itself keeps its name ([[server]] is
// "server", not "server[0]").
func indexedKeyPath(data []byte, row int, key []string) string {
	keys, _ := ScanKeys(data)
	var found fielderr.Path
	for _, k := range keys {
		if k.At.Line > row {
			break
		}
		var parts []string
		for _, st := range k.Path {
			if st.Index < 0 {
				parts = append(parts, st.Key)
			}
		}
		if slices.Equal(parts, key) && k.Path[len(k.Path)-1].Index < 0 {
			found = k.Path
		}
	}
	if found == nil {
		return KeyPath(key)
	}
	return found.String()
}

// KeyPath writes a key path as TOML does: parts joined by dots, a part
// that is not a bare key quoted (sweep."cache.host_tokens").
func KeyPath(parts []string) string { return fielderr.Key(parts...).String() }

var (
	reMismatch = regexp.MustCompile(`^cannot decode TOML (.+?) into (?:struct field .* of type )?(.+)$`)
	reStore    = regexp.MustCompile(`^cannot store (a table|an array table) in an? (.+)$`)
	reNegative = regexp.MustCompile(`^negative integer value (-?\d+) cannot be stored in (\w+)$`)
	reRange    = regexp.MustCompile(`^integer value (-?\d+) cannot be stored in (\w+)$`)
	reTooLarge = regexp.MustCompile(`number is too large to fit in a 64-bit signed integer$`)
	reFloat    = regexp.MustCompile(`^unable to parse float`)
)

// decodeMessage says in TOML's terms what go-toml's message msg (about the
// value at row:col of key) means: "expected X, found Y"; false for a
// message that is not about a value.
func decodeMessage(data []byte, row, col int, key []string, target any, msg string) (string, bool) {
	msg = strings.TrimPrefix(msg, "toml: ")
	lit := literalAt(data, row, col)
	ft, ok := fieldType(target, key)
	switch {
	case reMismatch.MatchString(msg):
		m := reMismatch.FindStringSubmatch(msg)
		found, goType := m[1], m[2]
		want := ""
		if ok {
			want = expects(ft)
			// A mismatch inside an array names the element's type.
			if (ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array) && goType == ft.Elem().String() && goType != ft.String() {
				return fmt.Sprintf("expected %s, found %s in it", expects(ft.Elem()), foundTOML(found, lit)), true
			}
		}
		if want == "" {
			want = goWords(goType)
		}
		return fmt.Sprintf("expected %s, found %s", want, foundTOML(found, lit)), true
	case reStore.MatchString(msg):
		m := reStore.FindStringSubmatch(msg)
		found := "a table"
		if m[1] == "an array table" {
			found = "an array of tables ([[...]])"
		}
		want := goWords(m[2])
		if ok {
			want = expects(ft)
		}
		return fmt.Sprintf("expected %s, found %s", want, found), true
	case reNegative.MatchString(msg):
		return fmt.Sprintf("expected an integer >= 0, found %s", reNegative.FindStringSubmatch(msg)[1]), true
	case reRange.MatchString(msg):
		m := reRange.FindStringSubmatch(msg)
		return fmt.Sprintf("expected %s, found %s", goWords(m[2]), m[1]), true
	case reTooLarge.MatchString(msg):
		return fmt.Sprintf("expected an integer between %d and %d, found %s", math.MinInt64, math.MaxInt64, lit), true
	case reFloat.MatchString(msg):
		return fmt.Sprintf("expected a finite number, found %s", lit), true
	}
	return "", false
}

// fieldType is the Go type that key decodes into in target, following
// struct fields by their toml tags (and inline structs), maps, slices and
// arrays (of tables) and pointers.
func fieldType(target any, key []string) (reflect.Type, bool) {
	if target == nil {
		return nil, false
	}
	return typeAt(reflect.TypeOf(target), key)
}

func typeAt(t reflect.Type, key []string) (reflect.Type, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if len(key) == 0 {
		return t, true
	}
	switch t.Kind() {
	case reflect.Struct:
		if f, ok := tomlField(t, key[0]); ok {
			return typeAt(f, key[1:])
		}
	case reflect.Map:
		return typeAt(t.Elem(), key[1:])
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Struct || t.Elem().Kind() == reflect.Map {
			return typeAt(t.Elem(), key)
		}
	}
	return nil, false
}

// tomlField finds the field that TOML key name decodes into.
func tomlField(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, opts, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if opts == "inline" || (f.Anonymous && tag == "") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if sub, ok := tomlField(ft, name); ok {
					return sub, true
				}
			}
			continue
		}
		if tag == name || (tag == "" && strings.EqualFold(f.Name, name)) {
			return f.Type, true
		}
	}
	return nil, false
}

// expects says what a value of Go type t is written as in TOML ("an
// integer >= 0", "an array of 4 numbers"); "" for anything (any).
func expects(t reflect.Type) string {
	t, str := jsonerr.Elem(t)
	if str {
		return "a string"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return goWords(t.Kind().String())
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "a table"
	case reflect.Slice, reflect.Array:
		elem := plural(expects(t.Elem()))
		if t.Kind() == reflect.Array {
			return fmt.Sprintf("an array of %d %s", t.Len(), elem)
		}
		if elem == "" {
			return "an array"
		}
		return "an array of " + elem
	}
	return ""
}

// plural turns "an integer >= 0" into "integers >= 0", "a table" into
// "tables".
func plural(s string) string {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "an "), "a ")
	w, rest, _ := strings.Cut(s, " ")
	if w == "" {
		return ""
	}
	if rest != "" {
		rest = " " + rest
	}
	return w + "s" + rest
}

// goWords says what a Go type named t (as go-toml prints it) is written
// as in TOML, for when the target's type is not known.
func goWords(t string) string {
	switch t {
	case "string":
		return "a string"
	case "bool":
		return "a boolean (true or false)"
	case "int", "int64":
		return "an integer"
	case "int8":
		return "an integer between -128 and 127"
	case "int16":
		return "an integer between -32768 and 32767"
	case "int32":
		return "an integer between -2147483648 and 2147483647"
	case "uint", "uint64":
		return "an integer >= 0"
	case "uint8":
		return "an integer between 0 and 255"
	case "uint16":
		return "an integer between 0 and 65535"
	case "uint32":
		return "an integer between 0 and 4294967295"
	case "float32", "float64":
		return "a number"
	}
	switch {
	case strings.HasPrefix(t, "[]"), strings.HasPrefix(t, "["), t == "slice", t == "array":
		return "an array"
	case strings.HasPrefix(t, "map["), strings.HasPrefix(t, "struct"), t == "map":
		return "a table"
	}
	return "a different kind of value"
}

// foundTOML says what a TOML value of go-toml's kind is ("integer",
// "inline table") with its text lit as written.
func foundTOML(kind, lit string) string {
	switch kind {
	case "inline table", "table":
		return "a table"
	case "array":
		return "an array"
	}
	a := "a "
	if strings.ContainsRune("aeiou", rune(kind[0])) {
		a = "an "
	}
	if lit == "" {
		return a + kind
	}
	return fmt.Sprintf("%s%s (%s)", a, kind, lit)
}

// Found says what a decoded TOML value is, in TOML's terms, with the value
// itself when it is short: "an integer (5)", "a table".
func Found(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case string:
		return fmt.Sprintf("a string (%s)", clip(strconv.Quote(x)))
	case int64:
		return fmt.Sprintf("an integer (%d)", x)
	case float64:
		return fmt.Sprintf("a float (%s)", strconv.FormatFloat(x, 'g', -1, 64))
	case bool:
		return fmt.Sprintf("a boolean (%t)", x)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return "a date or time"
}

// Check reports whether a decoded TOML value v can be the value of the
// server config's key path (say "cache.host_tokens"): nil, or "expected
// an integer, found a table".
func Check(path string, v any) error {
	t, ok := typeAt(reflect.TypeFor[File](), strings.Split(path, "."))
	if !ok {
		return nil
	}
	if fits(t, v) {
		return nil
	}
	return fmt.Errorf("expected %s, found %s", expects(t), Found(v))
}

// fits reports whether go-toml decodes v into a t.
func fits(t reflect.Type, v any) bool {
	t, str := jsonerr.Elem(t)
	if str {
		_, ok := v.(string)
		return ok
	}
	switch t.Kind() {
	case reflect.Bool:
		_, ok := v.(bool)
		return ok
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		_, ok := v.(int64)
		return ok
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(int64)
		return ok && n >= 0
	case reflect.Float32, reflect.Float64:
		switch v.(type) {
		case int64, float64:
			return true
		}
		return false
	case reflect.Struct, reflect.Map:
		_, ok := v.(map[string]any)
		return ok
	case reflect.Slice, reflect.Array:
		list, ok := v.([]any)
		if !ok || (t.Kind() == reflect.Array && len(list) > t.Len()) {
			return false
		}
		for _, e := range list {
			if !fits(t.Elem(), e) {
				return false
			}
		}
		return true
	}
	return true
}

// literalAt is the scalar value written at row:col (1-based) of data, as
// written (a string with its quotes), clipped; "" for a table or array.
func literalAt(data []byte, row, col int) string {
	lines := strings.Split(string(data), "\n")
	if row < 1 || row > len(lines) || col < 1 || col > len(lines[row-1]) {
		return ""
	}
	s := lines[row-1][col-1:]
	if s == "" || s[0] == '[' || s[0] == '{' {
		return ""
	}
	if s[0] == '"' || s[0] == '\'' {
		for i := 1; i < len(s); i++ {
			if s[i] == '\\' && s[0] == '"' {
				i++
				continue
			}
			if s[i] == s[0] {
				return clip(s[:i+1])
			}
		}
		return clip(s)
	}
	if i := strings.IndexAny(s, ",]}#"); i >= 0 {
		s = s[:i]
	}
	return clip(strings.TrimSpace(s))
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}

// keyAt is the key path whose value is written at row:col, or nil: the
// last key assignment ([ScanKeys]) that starts before it, without array
// indices (fieldType follows an array to its element type).
func keyAt(data []byte, row, col int) []string {
	keys, _ := ScanKeys(data) // the keys up to a parse error will do
	var last fielderr.Path
	for _, k := range keys {
		if k.At.Line > row || (k.At.Line == row && k.At.Col > col) {
			break
		}
		if !k.Header && !k.Implied && !k.Inline {
			last = k.Path
		}
	}
	var parts []string
	for _, st := range last {
		if st.Index < 0 {
			parts = append(parts, st.Key)
		}
	}
	return parts
}
