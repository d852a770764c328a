package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/configs"
)

// The front door works from any directory, as after `go install`: the
// default config and its trace, the bundled studies and the default
// server come from the binary, not from the current directory.
func TestFrontDoorFromAnywhere(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
	t.Chdir(t.TempDir())

	t.Run("sim", func(t *testing.T) {
		var out struct {
			Completed int    `json:"completed"`
			Trace     string `json:"trace"`
			Config    string `json:"config"`
		}
		runJSON(t, &out, "sim", "--json")
		if out.Completed != 12031 || out.Config != "default" || !strings.HasSuffix(out.Trace, "mooncake_conversation.jsonl.zst") {
			t.Errorf("kvsim sim = %+v, want the 12,031 requests of the bundled trace", out)
		}
	})
	t.Run("study", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		// A shard past every point: the parse, the validation and the
		// trace digests of the bundled study and its base, from the cache.
		_, stderr := runOK(t, "study", "default", "--out", out, "--shard", "999/1000")
		if !strings.Contains(stderr, `bundled study "default"`) || !strings.Contains(stderr, filepath.Join(cache, "kvsim")) {
			t.Errorf("stderr does not say where the bundled files are:\n%s", stderr)
		}
		// Again: the files are there already.
		runOK(t, "study", "write_policy", "--out", out, "--shard", "999/1000")
		code, _, stderr := runCLI(t, "study", "nosuch")
		if code != exitUsage || !strings.Contains(stderr, `nosuch: no such study file, and no bundled study "nosuch" (bundled: chat_host_memory, default, fleet_routing, owner_lanes, write_policy)`) {
			t.Errorf("kvsim study nosuch: exit %d: %s", code, stderr)
		}
		// A path is a path, never a bundled name.
		if code, _, stderr := runCLI(t, "study", "default.toml"); code != exitUsage || !strings.Contains(stderr, "no such file") {
			t.Errorf("kvsim study default.toml: exit %d: %s", code, stderr)
		}
	})
	t.Run("serve", func(t *testing.T) {
		url := startServe(t, "--time-scale", "0")
		resp, err := http.Get(url + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /health = %s", resp.Status)
		}
	})
	if entries, err := os.ReadDir("."); err != nil || len(entries) != 0 {
		t.Errorf("the commands wrote into the current directory: %v %v", entries, err)
	}
}

// The study usage names every bundled study.
func TestStudyUsageListsBundled(t *testing.T) {
	for _, n := range configs.BundledStudies() {
		if !strings.Contains(studyUsage, n) {
			t.Errorf("studyUsage does not name the bundled study %q", n)
		}
	}
}
