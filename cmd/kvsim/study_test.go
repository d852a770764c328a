package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

const tinyStudy = "../../study/testdata/tiny.toml"

func TestStudyRunsAndResumes(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr := runOK(t, "study", tinyStudy, "--out", dir, "--jobs", "2")
	for _, want := range []string{"Tiny host-tier study", "cache.host_tokens", "*      4  6000", "* best for", "wrote " + filepath.Join(dir, "report.md")} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	// Piped stderr gets one plain line per point, no terminal escapes.
	if n := strings.Count(stderr, "kvsim study: point "); n != 6 || strings.Contains(stderr, "\033[") {
		t.Errorf("stderr has %d point lines (want 6) or escapes:\n%s", n, stderr)
	}
	first := testutil.ReadFile(t, filepath.Join(dir, "results.jsonl"))
	code, _, stderr := runCLI(t, "study", "--out", dir, tinyStudy)
	if code != exitOK || !strings.Contains(stderr, "resuming: 6 points already") || strings.Contains(stderr, "kvsim study: point ") {
		t.Fatalf("rerun: exit %d, stderr:\n%s", code, stderr)
	}
	again, err := os.ReadFile(filepath.Join(dir, "results.jsonl"))
	if err != nil || !bytes.Equal(first, again) {
		t.Errorf("rerun changed results.jsonl (%v)", err)
	}
}

// Shards run as separate invocations into their own folders and merge into
// exactly the unsharded results, as a Kubernetes Indexed Job or a Slurm
// array would run them.
func TestStudyShardsMergeLikeUnsharded(t *testing.T) {
	checkShardsMerge(t, tinyStudy, "0/3", "1/3", "2/3")
}

// checkShardsMerge runs study whole and as the shards, each in its own
// invocation, and checks that merging the shards gives the whole run's
// files byte for byte.
func checkShardsMerge(t *testing.T, study string, shardSpecs ...string) {
	t.Helper()
	root := t.TempDir()
	whole := filepath.Join(root, "whole")
	runOK(t, "study", study, "--out", whole)
	shards := filepath.Join(root, "shards")
	var dirs []string
	for _, sh := range shardSpecs {
		code, stdout, stderr := runCLI(t, "study", study, "--out", shards, "--shard", sh, "--jobs", "1")
		if code != exitOK {
			t.Fatalf("shard %s: exit %d: %s", sh, code, stderr)
		}
		if strings.Contains(stdout, "report.md") {
			t.Errorf("shard %s wrote a report:\n%s", sh, stdout)
		}
		dirs = append(dirs, filepath.Join(shards, "shard-"+strings.ReplaceAll(sh, "/", "-of-")))
	}
	stdout, _ := runOK(t, append([]string{"study", "merge"}, dirs...)...)
	merged := filepath.Join(shards, "merged")
	if !strings.Contains(stdout, "wrote "+filepath.Join(merged, "report.md")) {
		t.Errorf("merge output:\n%s", stdout)
	}
	for _, f := range []string{"results.jsonl", "results.csv", "report.md", "study.json"} {
		a, err1 := os.ReadFile(filepath.Join(whole, f))
		b, err2 := os.ReadFile(filepath.Join(merged, f))
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("%s: merged differs from unsharded (%v, %v)", f, err1, err2)
		}
	}
}

func TestStudyErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"study"}, exitUsage, "give a study file"},
		{[]string{"study", "../../study/testdata/bad/unknown_key.toml"}, exitUsage, `unknown_key.toml:7:1: sweep: unknown key path "server.hicach_ratio"; did you mean "server.hicache_ratio"?`},
		{[]string{"study", "../../study/testdata/bad/bad_value.toml"}, exitUsage, `bad_value.toml:6:1: point 1 (cache.eviction=arc): cache.eviction: must be one of`},
		{[]string{"study", "../../study/testdata/bad/sweep_type.toml"}, exitUsage, `sweep_type.toml:6:1: sweep."cache.host_tokens"[0]: expected an integer, found a table`},
		{[]string{"study", tinyStudy, "--shard", "3/3"}, exitUsage, "0 <= i < n"},
		{[]string{"study", tinyStudy, "extra.toml"}, exitUsage, `unexpected argument "extra.toml"`},
		{[]string{"study", "/nonexistent/study.toml"}, exitUsage, "no such file"},
		{[]string{"study", "merge"}, exitUsage, "give the shards' output folders"},
		{[]string{"study", "merge", "/nonexistent/dir"}, exitFail, "not a kvsim study output folder"},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

// Every bundled study parses, every point validates and each names an
// existing trace.
func TestStudyBundledFilesParse(t *testing.T) {
	files, err := filepath.Glob("../../configs/studies/*.toml")
	if err != nil || len(files) < 4 {
		t.Fatalf("bundled studies: %v %v", files, err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_server.toml") {
			continue // a base server config, not a study
		}
		dir := t.TempDir()
		// --shard with a huge n and an index past every point runs nothing:
		// only the parse, the validation and the trace digests.
		code, _, stderr := runCLI(t, "study", f, "--out", dir, "--shard", "999/1000")
		if code != exitOK {
			t.Errorf("%s: exit %d: %s", f, code, stderr)
		}
	}
}
