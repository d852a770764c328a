package study

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/internal/textdist"
)

// schemaKeys lists every key path of the server schema (configs.File), from
// its toml tags: the sweepable keys. A struct is a table; anything else
// (numbers, strings, booleans, fixed arrays) is a key.
var schemaKeys = sync.OnceValue(func() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("toml"), ",")
			ft := f.Type
			if f.Anonymous || strings.Contains(opts, "inline") {
				walk(ft, prefix)
				continue
			}
			if name == "" || name == "-" {
				continue
			}
			if ft.Kind() == reflect.Struct {
				walk(ft, prefix+name+".")
				continue
			}
			out = append(out, prefix+name)
		}
	}
	walk(reflect.TypeFor[configs.File](), "")
	slices.Sort(out)
	return out
})

// checkKeyPath reports whether key names a key (not a table) of the server
// schema, suggesting the nearest one when it does not.
func checkKeyPath(key string) error {
	keys := schemaKeys()
	if _, ok := slices.BinarySearch(keys, key); ok {
		return nil
	}
	for _, k := range keys {
		if strings.HasPrefix(k, key+".") {
			return fmt.Errorf("%q: is a table of the server schema, not a key; sweep its keys (e.g. %q)", key, k)
		}
	}
	return fmt.Errorf("unknown key path %q%s", key, suggest(key, keys))
}

// suggest returns `; did you mean "x"?` for the nearest candidate within a
// small edit distance, or "".
func suggest(name string, candidates []string) string {
	best, bestD := "", len(name)/3+2
	for _, c := range candidates {
		if d := textdist.Levenshtein(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}
