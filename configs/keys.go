package configs

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/kvsim/kvsim/internal/textdist"
)

// schemaKeys lists every key path a File decodes ("cache.eviction",
// "llamacpp.cost.after_prompt.ns"), following inline (embedded) structs,
// sorted. Tables are the prefixes of these paths.
func schemaKeys() []string {
	keys := tomlKeys(reflect.TypeOf(File{}), "")
	slices.Sort(keys)
	return keys
}

func tomlKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("toml")
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			ft = ft.Elem() // an array of tables: its keys
		}
		if opts == "inline" || (f.Anonymous && name == "") {
			keys = append(keys, tomlKeys(ft, prefix)...)
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		if ft.Kind() == reflect.Struct {
			keys = append(keys, tomlKeys(ft, prefix+name+".")...)
			continue
		}
		keys = append(keys, prefix+name)
	}
	return keys
}

// unknownKeys turns go-toml's strict-mode error into one line per unknown
// key or table, "file:line:col: key: unknown key (...)", each with the
// names that are allowed there.
func unknownKeys(name string, data []byte, se *toml.StrictMissingError) []error {
	keys := schemaKeys()
	lines := strings.Split(string(data), "\n")
	var errs []error
	for _, e := range se.Errors {
		row, col := e.Position()
		path := e.Key()
		// The first part of the path that the schema does not know.
		n := 1
		for n < len(path) && known(keys, strings.Join(path[:n], ".")) {
			n++
		}
		bad := strings.Join(path[:n], ".")
		parent := strings.Join(path[:n-1], ".")
		what := "key"
		if row >= 1 && row <= len(lines) && strings.HasPrefix(strings.TrimSpace(lines[row-1]), "[") {
			what = "table"
		}
		if n < len(path) {
			what = "table" // a dotted key through an unknown table
		}
		where := "at the top level"
		if parent != "" {
			where = "in [" + parent + "]"
		}
		msg := fmt.Sprintf("%s:%d:%d: %s: unknown %s", name, row, col, bad, what)
		allowed := children(keys, parent)
		if s := suggest(path[n-1], allowed); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		} else if len(allowed) > 0 {
			msg += fmt.Sprintf(" (%s: %s)", where, strings.Join(allowed, ", "))
		}
		errs = append(errs, fmt.Errorf("%s", msg))
	}
	return errs
}

// known reports whether path is a key or a table of the schema.
func known(keys []string, path string) bool {
	for _, k := range keys {
		if k == path || strings.HasPrefix(k, path+".") {
			return true
		}
	}
	return false
}

// children lists the names directly under table ("" for the top level),
// sorted and without repeats.
func children(keys []string, table string) []string {
	prefix := ""
	if table != "" {
		prefix = table + "."
	}
	var out []string
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		c, _, _ := strings.Cut(rest, ".")
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// suggest returns the allowed name closest to s when it is a likely typo
// (at most two edits away, and fewer than half of s), else "".
func suggest(s string, allowed []string) string {
	best, bestD := "", 3
	for _, a := range allowed {
		if d := textdist.Levenshtein(s, a); d < bestD && 2*d < len(s) {
			best, bestD = a, d
		}
	}
	return best
}
