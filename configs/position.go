package configs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// keyAliases maps the key paths that domain packages use in their
// validation errors to the key paths of a kvsim TOML file.
var keyAliases = []struct{ from, to string }{
	{"hw.roofline.", "cost.efficiency."},
	{"hw.fitted.", "cost.fitted."},
	{"hw.server.", "server."},
	{"hw.model.", "model."},
	{"hw.gpu.", "gpu."},
	{"scheduler.max_running_requests", "server.max_running_requests"},
	{"scheduler.max_prefill_tokens", "server.max_prefill_tokens"},
	{"scheduler.chunked_prefill_size", "server.chunked_prefill_size"},
	{"cache.page_size", "server.page_size"},
}

// positioned rewrites every error of a joined validation error as
// "file:line:col: key: message", finding each key in the document. An
// error whose key is not written in the file (a default, a derived value)
// gets the file name only.
func positioned(name string, data []byte, err error) error {
	var parts []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			parts = append(parts, positioned(name, data, e))
		}
		return errors.Join(parts...)
	}
	msg := err.Error()
	key, rest, ok := strings.Cut(msg, ": ")
	if !ok || strings.ContainsAny(key, " \t") {
		return fmt.Errorf("%s: %s", name, msg)
	}
	for _, a := range keyAliases {
		if strings.HasPrefix(key, a.from) {
			key = a.to + strings.TrimPrefix(key, a.from)
			break
		}
	}
	if line, col := keyPos(data, key); line > 0 {
		return fmt.Errorf("%s:%d:%d: %s: %s", name, line, col, key, rest)
	}
	return fmt.Errorf("%s: %s: %s", name, key, rest)
}

// keyPos finds the line and column where a dotted key path (an index such
// as "prefill[1]" counts as its key) is assigned in a TOML document: a
// "[table]" header followed by "key = ...". It understands the simple
// layout kvsim's files use, not every TOML construct; 0, 0 means not found.
//
// A path through an array of tables, "a.b[2].key", finds key in the third
// "[[a.b]]" table, or that table's header when key is not written in it,
// or the key "a.b" of an inline array.
func keyPos(data []byte, path string) (line, col int) {
	table, key := "", path
	nth := -1 // the array-of-tables element the key is in
	if i := strings.IndexByte(path, '['); i >= 0 {
		if j := strings.Index(path[i:], "]."); j > 0 {
			if n, err := strconv.Atoi(path[i+1 : i+j]); err == nil {
				table, key, nth = path[:i], path[i+j+2:], n
			}
		}
		if nth < 0 {
			path = path[:i]
		}
	}
	if nth < 0 {
		dot := strings.LastIndexByte(path, '.')
		table, key = "", path
		if dot >= 0 {
			table, key = path[:dot], path[dot+1:]
		}
	}
	cur, seen := "", -1
	header := 0
	for n, l := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "[[") {
			cur = "[[" // inside an array element: no plain path matches
			if end := strings.Index(t, "]]"); end > 0 && strings.TrimSpace(t[2:end]) == table && nth >= 0 {
				seen++
				if seen == nth {
					cur, header = table, n+1
				} else if seen > nth {
					break
				}
			}
			continue
		}
		if strings.HasPrefix(t, "[") {
			if end := strings.IndexByte(t, ']'); end > 0 {
				cur = strings.TrimSpace(t[1:end])
			}
			if nth >= 0 {
				cur = "[[" // a table header ends the array element
			}
			continue
		}
		k, _, ok := strings.Cut(t, "=")
		if !ok || cur != table || strings.TrimSpace(k) != key {
			continue
		}
		return n + 1, strings.Index(l, strings.TrimSpace(k)) + 1
	}
	switch {
	case header > 0:
		return header, 1
	case nth >= 0:
		return keyPos(data, table) // an inline array: its key
	}
	return 0, 0
}
