package configs

import (
	"strings"
	"testing"
)

// A value of the wrong kind is reported where it is written, with its key
// path, what the key takes and what was found, in TOML's words: never a Go
// type, field or package name.
func TestTOMLTypeErrors(t *testing.T) {
	const presets = "[model]\npreset = \"qwen2.5-14b\"\n[gpu]\npreset = \"h200\"\n"
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"string", "[scheduler]\npolicy = 3\n", "x.toml:2:10: scheduler.policy: expected a string, found an integer (3)"},
		{"int", "[server]\npage_size = 1.5\n", "x.toml:2:13: server.page_size: expected an integer, found a float (1.5)"},
		{"table", "model = 5\n", "x.toml:1:9: model: expected a table, found an integer (5)"},
		{"table via dotted key", "gpu = \"h200\"\n", `x.toml:1:7: gpu: expected a table, found a string ("h200")`},
		{"uint", "seed = -1\n", "x.toml:1:8: seed: expected an integer >= 0, found -1"},
		{"uint float", "seed = 1.5\n", "x.toml:1:8: seed: expected an integer >= 0, found a float (1.5)"},
		{"float overflow", presets + "memory_mib = 1e400\n", "x.toml:5:14: gpu.memory_mib: expected a finite number, found 1e400"},
		{"int overflow", "[server]\npage_size = 99999999999999999999\n", "x.toml:2:13: server.page_size: expected an integer between -9223372036854775808 and 9223372036854775807, found 99999999999999999999"},
		{"bool", "[cache]\nhierarchical = \"yes\"\n", `x.toml:2:16: cache.hierarchical: expected a boolean (true or false), found a string ("yes")`},
		{"inline table", "[server]\npage_size = {a = 1}\n", "x.toml:2:13: server.page_size: expected an integer, found a table"},
		{"array", "[cost.fitted]\nprefill = \"x\"\n", `x.toml:2:11: cost.fitted.prefill: expected an array of 4 numbers, found a string ("x")`},
		{"array element", "[cost.fitted]\nprefill = [1.0, \"x\"]\n", `x.toml:2:17: cost.fitted.prefill: expected a number, found a string ("x") in it`},
		{"array of tables", "[[server]]\npage_size = 1\n", "x.toml:1:3: server: expected a table, found an array of tables ([[...]])"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "x.toml")
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("Parse error:\n%s\nwant:\n%s", got, tc.want)
			}
			for _, goWord := range []string{"struct", "configs.", "hw.", "of type", "int64", "uint64", "float64", "strconv", " toml:"} {
				if strings.Contains(err.Error(), goWord) {
					t.Errorf("error names %q", goWord)
				}
			}
		})
	}
}

// A file that starts with a UTF-8 byte order mark (as Windows editors
// write) reads as the same file without it.
func TestTOMLByteOrderMark(t *testing.T) {
	doc := "seed = 7\n[model]\npreset = \"qwen2.5-14b\"\n[gpu]\npreset = \"h200\"\n"
	f, err := Parse([]byte("\ufeff"+doc), "bom.toml")
	if err != nil {
		t.Fatalf("Parse with a BOM: %v", err)
	}
	if f.Seed != 7 {
		t.Fatalf("seed = %d, want 7", f.Seed)
	}
	_, err = Parse([]byte("\ufeffseed = -1\n"), "bom.toml")
	if want := "bom.toml:1:8: seed: expected an integer >= 0, found -1"; err == nil || err.Error() != want {
		t.Fatalf("Parse error = %v, want %s", err, want)
	}
}

// Check tells a study whether a swept value fits a key.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		path string
		v    any
		want string
	}{
		{"cache.host_tokens", int64(3), ""},
		{"cache.host_tokens", map[string]any{"a": int64(1)}, "expected an integer, found a table"},
		{"cache.host_tokens", 1.5, "expected an integer, found a float (1.5)"},
		{"seed", int64(-1), "expected an integer >= 0, found an integer (-1)"},
		{"cache.write_policy", int64(1), "expected a string, found an integer (1)"},
		{"cost.efficiency.gemm_mfu", int64(1), ""},
		{"cost.fitted.prefill", []any{1.0, "x"}, "expected an array of 4 numbers, found an array"},
		{"cache.hierarchical", true, ""},
	} {
		err := Check(tc.path, tc.v)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("Check(%s, %v) = %q, want %q", tc.path, tc.v, got, tc.want)
		}
	}
}
