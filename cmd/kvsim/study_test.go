package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim/engine"
)

const (
	tinyStudy      = "../../study/testdata/tiny.toml"
	tinyFleetStudy = "../../study/testdata/tiny_fleet.toml"
)

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

// A study whose base is a fleet runs each point as a fleet: two points
// (one replica behind round_robin, two behind cache_aware with a larger
// host tier for the group), golden results with the fleet metrics.
func TestStudyFleetGolden(t *testing.T) {
	dir := t.TempDir()
	stdout, _ := runOK(t, "study", tinyFleetStudy, "--out", dir, "--jobs", "2")
	for _, f := range []string{"results.jsonl", "results.csv", "report.md"} {
		checkGolden(t, "fleet", "tiny_study."+f, string(testutil.ReadFile(t, filepath.Join(dir, f))))
	}
	table, _, _ := strings.Cut(stdout, "\nwrote ")
	checkGolden(t, "fleet", "tiny_study.table", table)
}

// Shards of a fleet study merge into exactly the unsharded results.
func TestStudyFleetShardsMerge(t *testing.T) {
	checkShardsMerge(t, tinyFleetStudy, "0/2", "1/2")
}

// Every study point of a fleet is the fleet kvsim sim --config runs: over
// a grid of group sizes, a group key (the host tier), router policies and
// rate scales, each point's metrics equal the summary of kvsim sim --json
// on the fleet file with the same values, and its decisions and
// per-replica requests the fleet's.
func TestStudyFleetPointsAreSim(t *testing.T) {
	dir := t.TempDir()
	trace, err := filepath.Abs("../../study/testdata/tiny_chat.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "base.toml"), fleetTOML(trace, 1, 0, "round_robin", 1))
	st := filepath.Join(dir, "study.toml")
	writeFile(t, st, `title = "fleet points"
base = "base.toml"
objective = "minimize p99_ttft_ms"
[report]
mrc = false
[sweep]
"fleet.groups.g.count" = [1, 3]
"router.policy" = ["cache_aware", "round_robin", "random", "power_of_two", "consistent_hash"]
[[zip]]
"fleet.groups.g.set.cache.host_tokens" = [1500, 3000]
"workload.rate_scale" = [4.0, 0.5]
`)
	out := filepath.Join(dir, "out")
	runOK(t, "study", st, "--out", out)
	lines := strings.Split(strings.TrimSpace(string(testutil.ReadFile(t, filepath.Join(out, "results.jsonl")))), "\n")
	if len(lines) != 20 {
		t.Fatalf("%d points, want 20", len(lines))
	}
	for i, l := range lines {
		var rec struct {
			Params  map[string]any `json:"params"`
			Metrics engine.Summary `json:"metrics"`
			Fleet   struct {
				Replicas   int              `json:"replicas"`
				Decisions  map[string]int64 `json:"decisions"`
				PerReplica []struct {
					Routed int64 `json:"routed"`
				} `json:"per_replica"`
			} `json:"fleet"`
		}
		decodeJSON(t, l, &rec)
		p := rec.Params
		count := int(p["fleet.groups.g.count"].(float64))
		cfg := filepath.Join(dir, fmt.Sprintf("fleet%d.toml", i))
		writeFile(t, cfg, fleetTOML(trace, count, int(p["fleet.groups.g.set.cache.host_tokens"].(float64)), p["router.policy"].(string), p["workload.rate_scale"].(float64)))
		var sim struct {
			Summary engine.Summary `json:"summary"`
			fleetRouting
		}
		runJSON(t, &sim, "sim", "--config", cfg, "--json")
		if !reflect.DeepEqual(rec.Metrics, sim.Summary) {
			t.Errorf("point %d (%v): study point:\n%+v\nkvsim sim:\n%+v", i, p, rec.Metrics, sim.Summary)
		}
		if rec.Fleet.Replicas != count || len(rec.Fleet.PerReplica) != len(sim.Replicas) {
			t.Errorf("point %d: replicas: study %d (%d rows), sim %d", i, rec.Fleet.Replicas, len(rec.Fleet.PerReplica), len(sim.Replicas))
			continue
		}
		for j, r := range sim.Replicas {
			if rec.Fleet.PerReplica[j].Routed != r.Routed {
				t.Errorf("point %d: replica %d: study routed %d, sim %d", i, j, rec.Fleet.PerReplica[j].Routed, r.Routed)
			}
		}
		for _, d := range sim.Decisions {
			if rec.Fleet.Decisions[d.Reason] != d.Count {
				t.Errorf("point %d: decisions %q: study %d, sim %d", i, d.Reason, rec.Fleet.Decisions[d.Reason], d.Count)
			}
		}
	}
}

// fleetTOML is a fleet file of count small servers (group "g", the host
// tier set for the group when host > 0) behind policy, on trace at rate
// times its rate.
func fleetTOML(trace string, count, host int, policy string, rate float64) string {
	set := ""
	if host > 0 {
		set = fmt.Sprintf("set = { \"cache.host_tokens\" = %d }\n", host)
	}
	return fmt.Sprintf(`seed = 1
[model]
preset = "smollm-135m"
[gpu]
preset = "l40s"
[cache]
device_tokens = 1500
[workload]
trace = %q
rate_scale = %v
[[fleet.groups]]
name = "g"
count = %d
%s[router]
policy = %q
`, trace, rate, count, set, policy)
}
