package main

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim/engine"
)

const tinyFleetStudy = "../../study/testdata/tiny_fleet.toml"

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
