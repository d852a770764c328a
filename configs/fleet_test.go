package configs

import (
	"strings"
	"testing"
	"time"

	"github.com/kvsim/kvsim/fleet/router"
)

// A fleet file's groups are the base server with each group's keys set,
// dotted or as nested tables; the router table sets SGLang's names over
// its defaults.
func TestFleetGroups(t *testing.T) {
	f, err := Load("testdata/fleet/groups.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !f.IsFleet() || Default().IsFleet() {
		t.Fatalf("IsFleet: %v for a fleet file, %v for the default", f.IsFleet(), Default().IsFleet())
	}
	gs, err := f.FleetGroups()
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		name  string
		count int
		gpu   string
		ratio float64
		tp    int
	}
	want := []got{{"big", 2, "h100-sxm", 4, 4}, {"group1", 1, "h200", 2, 4}}
	if len(gs) != len(want) {
		t.Fatalf("%d groups, want %d", len(gs), len(want))
	}
	for i, g := range gs {
		if h := (got{g.Name, g.Count, g.File.GPU.Name, g.File.Server.HiCacheRatio, g.File.Server.TPSize}); h != want[i] {
			t.Errorf("group %d: %+v, want %+v", i, h, want[i])
		}
		if g.File.IsFleet() {
			t.Errorf("group %d's server file is a fleet", i)
		}
	}
	rc := f.RouterConfig()
	wantRC := router.Default()
	wantRC.Policy = router.RoundRobin
	wantRC.CacheAware.CacheThreshold = 0.5
	if rc != wantRC {
		t.Errorf("router config %+v, want %+v", rc, wantRC)
	}
	if d := Default().RouterConfig(); d != router.Default() {
		t.Errorf("default router config %+v, want SGLang's %+v", d, router.Default())
	}
	if rc.CacheAware.EvictionInterval != 120*time.Second {
		t.Errorf("eviction_interval %v", rc.CacheAware.EvictionInterval)
	}
}

// Every problem of [fleet] and [router] is reported at once, at its line,
// named by its key; a group's server errors are named under its set.
func TestFleetErrors(t *testing.T) {
	_, err := Load("testdata/fleet/bad.toml")
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`testdata/fleet/bad.toml:9:1: fleet.groups[0].count: must be in [1, 4096] (got 0)`,
		`testdata/fleet/bad.toml:10:1: fleet.groups[0].set: unknown key "gpu.presett"`,
		`testdata/fleet/bad.toml:10:37: fleet.groups[0].set.workload.trace: [workload] is the fleet's, not a group's`,
		`testdata/fleet/bad.toml:14:1: fleet.groups[1].set: server.tp_size: must be >= 1 (got -3)`,
		`testdata/fleet/bad.toml:17:1: router.policy: must be "cache_aware", "round_robin", "random", "power_of_two" or "consistent_hash" (got "kv_aware"; kv_aware needs the replicas' cache oracle, not built yet)`,
		`testdata/fleet/bad.toml:20:1: router.miss_rule: must be "min_load" or "smallest_tree" (got "x")`,
		`testdata/fleet/bad.toml:19:1: router.eviction_interval: must be seconds in [0, 31536000] (got -1)`,
		`testdata/fleet/bad.toml:18:1: router.cache_threshold: must be in [0, 1] (got 1.5)`,
	}
	if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	for _, c := range []struct{ doc, want string }{
		{"[router]\npolicy = \"random\"\n", `t.toml:7:1: router: only with a [fleet] table (add [[fleet.groups]])`},
		{"[[fleet.groups]]\ncount = 3000\n[[fleet.groups]]\ncount = 3000\n", `t.toml:7:1: fleet.groups: at most 4096 replicas in all (got 6000)`},
		{"[[fleet.groups]]\ncount = 1\nset = { gpu = { preset = \"nope\" } }\n", `t.toml:9:1: fleet.groups[0].set: gpu.preset: gpu unknown preset "nope" (want one of a100-80g, b200, h100-sxm, h200, l40s)`},
	} {
		_, err := Parse([]byte("[model]\npreset = \"qwen2.5-14b\"\n[gpu]\npreset = \"h200\"\n[server]\ntp_size = 4\n"+c.doc), "t.toml")
		if err == nil || err.Error() != c.want {
			t.Errorf("%q: error %v, want %s", c.doc, err, c.want)
		}
	}
}
