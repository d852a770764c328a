package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Config errors reach the user the same way from every command: exit 2
// and the file, line and key of the problem.
func TestConfigErrorsAtTheFrontDoor(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	trace := simTrace(t)
	badFormat := write("format.toml", "[model]\npreset = \"qwen2.5-14b\"\n\n[gpu]\npreset = \"h200\"\n\n[workload]\ntrace = \"x.jsonl\"\nformat = \"mooncak\"\n")
	llama, err := filepath.Abs("../../configs/llamacpp/tiny.toml")
	if err != nil {
		t.Fatal(err)
	}
	study := write("study.toml", "title = \"t\"\nbase = \""+filepath.ToSlash(llama)+"\"\nobjective = \"minimize p99_ttft_ms\"\n\n[sweep]\n\"seed\" = [1, 2]\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		// The config's format is checked even when --trace replaces the trace.
		{[]string{"sim", "--config", badFormat, "--trace", trace}, "format.toml:9:1: workload.format: must be one of mooncake, bailian, weka, azure, tokens, kvsim, or empty to detect it (got \"mooncak\")"},
		{[]string{"sim", "--config", badFormat}, "format.toml:9:1: workload.format:"},
		{[]string{"sim", "--trace", trace, "--format", "nope"}, "--format: unknown trace format \"nope\""},
		{[]string{"serve", "--config", llama}, "tiny.toml: engine.kind: this command simulates SGLang only (got \"llamacpp\""},
		{[]string{"study", study}, "engine.kind: studies simulate SGLang only (got \"llamacpp\""},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}
