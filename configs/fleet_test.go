package configs

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvsim/kvsim/fleet/router"
)

// A fleet file's groups are the base server with each group's keys set,
// dotted or as nested tables; the router table sets SGLang's names over
// its defaults.
func TestFleetGroups(t *testing.T) {
	f := mustLoad(t, "testdata/fleet/groups.toml")
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
	if !reflect.DeepEqual(rc, wantRC) {
		t.Errorf("router config %+v, want %+v", rc, wantRC)
	}
	if d := Default().RouterConfig(); !reflect.DeepEqual(d, router.Default()) {
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
		`testdata/fleet/bad.toml:10:9: fleet.groups[0].set: unknown key "gpu.presett"`,
		`testdata/fleet/bad.toml:10:37: fleet.groups[0].set.workload.trace: [workload] is the fleet's, not a group's`,
		`testdata/fleet/bad.toml:14:9: fleet.groups[1].set: server.tp_size: must be >= 1 (got -3)`,
		`testdata/fleet/bad.toml:17:1: router.policy: must be "cache_aware", "round_robin", "random", "power_of_two", "consistent_hash", "kv_aware", "nginx_round_robin", "nginx_hash", "cache_aware_oracle", "prefix_hash", "manual" or "least_load" (got "kv-aware")`,
		`testdata/fleet/bad.toml:20:1: router.miss_rule: must be "min_load" or "smallest_tree" (got "x")`,
		`testdata/fleet/bad.toml:19:1: router.eviction_interval: must be seconds in [0, 31536000] (got -1)`,
		`testdata/fleet/bad.toml:21:1: router.kv_signal_delay: must be seconds in [0, 31536000] (got -2)`,
		`testdata/fleet/bad.toml:18:1: router.cache_threshold: must be in [0, 1] (got 1.5)`,
		`testdata/fleet/bad.toml:22:1: router.kv_host_weight: must be finite and >= 0 (got -1)`,
	}
	if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	for _, c := range []struct{ doc, want string }{
		{"[router]\npolicy = \"random\"\n", `t.toml:7:1: router: only with a [fleet] table (add [[fleet.groups]])`},
		{"[[fleet.groups]]\ncount = 3000\n[[fleet.groups]]\ncount = 3000\n", `t.toml:7:1: fleet.groups: at most 4096 replicas in all (got 6000)`},
		{"[[fleet.groups]]\ncount = 2\n[router]\npolicy = \"nginx_hash\"\nupstreams = [\"a:1\"]\n", `t.toml:11:1: router.upstreams: 1 server names for 2 replicas (one per replica, in replica order)`},
		{"[[fleet.groups]]\ncount = 2\n[router]\nupstreams = [\"a:1\", \"a:1\"]\n", `t.toml:10:1: router.upstreams: "a:1" is entries 0 and 1; names must be distinct`},
		{"[[fleet.groups]]\ncount = 1\nset = { gpu = { preset = \"nope\" } }\n", `t.toml:9:17: fleet.groups[0].set: gpu.preset: gpu unknown preset "nope" (want one of a100-80g, b200, h100-sxm, h200, l40s)`},
	} {
		checkFleetDocError(t, c.doc, c.want)
	}
}

// fleetDoc is a fleet test document: a six-line server, then doc from
// line 7.
func fleetDoc(doc string) []byte {
	return []byte("[model]\npreset = \"qwen2.5-14b\"\n[gpu]\npreset = \"h200\"\n[server]\ntp_size = 4\n" + doc)
}

// router.policy = "cache_aware_oracle" takes cache_aware's keys and
// router.oracle_storage.
func TestFleetOracleKeys(t *testing.T) {
	f, err := Parse(fleetDoc("[[fleet.groups]]\ncount = 2\n[router]\npolicy = \"cache_aware_oracle\"\ncache_threshold = 0.1\noracle_storage = true\n"), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := router.Default()
	want.Policy, want.CacheAware.CacheThreshold, want.CacheAware.OracleStorage = router.CacheAwareOracle, 0.1, true
	if rc := f.RouterConfig(); !reflect.DeepEqual(rc, want) {
		t.Fatalf("router config %+v, want %+v", rc, want)
	}
}

// A group's keys are flattened in key order whatever Go's map order, and
// two spellings of one key in a set are refused (naming both) rather than
// one of them winning at random. Go randomises every map walk, so a
// dependence on map order shows up over many parses.
func TestFleetSetDeterministic(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"[[fleet.groups]]\ncount = 1\nset = { \"server.tp_size\" = 2, server.tp_size = 4 }\n",
			`t.toml:9:31: fleet.groups[0].set.server.tp_size: sets server.tp_size again, as fleet.groups[0].set."server.tp_size" does (t.toml:9:9); write it once`},
		{"[[fleet.groups]]\ncount = 1\nset = { server.tp_size = 2, \"server.tp_size\" = 4 }\n",
			`t.toml:9:29: fleet.groups[0].set."server.tp_size": sets server.tp_size again, as fleet.groups[0].set.server.tp_size does (t.toml:9:9); write it once`},
		{"[[fleet.groups]]\ncount = 1\nset = { \"server.tp_size\" = 2, server = { tp_size = 8 } }\n",
			`t.toml:9:42: fleet.groups[0].set.server.tp_size: sets server.tp_size again, as fleet.groups[0].set."server.tp_size" does (t.toml:9:9); write it once`},
		{"[[fleet.groups]]\ncount = 1\n[fleet.groups.set]\n\"server.tp_size\" = 2\nserver.tp_size = 8\n",
			`t.toml:11:1: fleet.groups[0].set.server.tp_size: sets server.tp_size again, as fleet.groups[0].set."server.tp_size" does (t.toml:10:1); write it once`},
	} {
		for range 50 {
			if !checkFleetDocError(t, c.doc, c.want) {
				break
			}
		}
	}
	// Many keys, some spelled dotted, some quoted, some nested: the same
	// list every time, in key order.
	set := map[string]any{
		"server.hicache_ratio": 3.0, "gpu": map[string]any{"preset": "h100-sxm"},
		"cache":  map[string]any{"eviction": "lru", "write_policy": "write_back"},
		"server": map[string]any{"page_size": int64(16), "tp_size": int64(2)}, "scheduler.policy": "lpm",
	}
	want := []string{"cache.eviction", "cache.write_policy", "gpu.preset", "scheduler.policy", "server.hicache_ratio", "server.page_size", "server.tp_size"}
	for range 50 {
		list, dups := flattenKeys(set)
		var got []string
		for _, st := range list {
			got = append(got, strings.Join(st.key, "."))
		}
		if strings.Join(got, " ") != strings.Join(want, " ") || len(dups) != 0 {
			t.Fatalf("flattenKeys: %v (dups %v), want %v", got, dups, want)
		}
	}
}

// The fleet's structural mistakes are refused at the key's line and
// column in the user's file, one position each: an empty fleet, a missing
// count, a duplicate group name, workload keys a fleet ignores, a wrong
// type or a fleet key inside a group's set.
func TestFleetFileErrors(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"[fleet]\n", `t.toml:7:1: fleet.groups: at least one group ([[fleet.groups]] with a count)`},
		{"[fleet]\ngroups = []\n", `t.toml:7:1: fleet.groups: at least one group ([[fleet.groups]] with a count)`},
		{"[[fleet.groups]]\nname = \"x\"\n", `t.toml:7:1: fleet.groups[0].count: required: the group's number of replicas, in [1, 4096]`},
		{"[[fleet.groups]]\nname = \"a\"\ncount = 1\n[[fleet.groups]]\nname = \"a\"\ncount = 1\n",
			`t.toml:11:1: fleet.groups[1].name: "a" is also group 0's name (t.toml:8:1)`},
		{"[[fleet.groups]]\ncount = 1\n[[fleet.groups]]\nname = \"group0\"\ncount = 1\n",
			`t.toml:10:1: fleet.groups[1].name: "group0" is also group 0's name (t.toml:7:1)`},
		{"[workload]\nidle_gap_cap = -5.0\n[[fleet.groups]]\ncount = 1\n",
			`t.toml:8:1: workload.idle_gap_cap: must be a number of seconds from 1e-9 to 9e9, or 0 for none (got -5)`},
		{"[workload]\nidle_gap_cap = 1e-10\n[[fleet.groups]]\ncount = 1\n",
			`t.toml:8:1: workload.idle_gap_cap: must be a number of seconds from 1e-9 to 9e9, or 0 for none (got 1e-10)`},
		{"[scheduler]\nlpm_fallback_queue = -1\n[[fleet.groups]]\ncount = 1\n[[fleet.groups]]\ncount = 2\nset = { \"server.tp_size\" = 2 }\n",
			`t.toml:8:1: scheduler.lpm_fallback_queue: must be in [0, 16777216] (got -1)`},
		{"[[fleet.groups]]\ncount = 1\n\n\nset = { \"server.tp_size\" = \"x\", \"cache.eviction\" = \"lru\" }\n",
			`t.toml:11:9: fleet.groups[0].set: server.tp_size: expected an integer, found a string ('x')`},
		{"[[fleet.groups]]\ncount = 1\nset = { \"router.policy\" = \"random\" }\n",
			`t.toml:9:9: fleet.groups[0].set.router.policy: [router] is the fleet's, not a group's`},
		{"[[fleet.groups]]\ncount = 1\n[fleet.groups.set]\nserver.hicache_ratio = -4.0\ngpu.preset = \"zz\"\n",
			"t.toml:11:1: fleet.groups[0].set: gpu.preset: gpu unknown preset \"zz\" (want one of a100-80g, b200, h100-sxm, h200, l40s)\n" +
				`t.toml:10:1: fleet.groups[0].set: server.hicache_ratio: must be >= 0 (got -4)`},
	} {
		checkFleetDocError(t, c.doc, c.want)
	}
	// What a fleet does is accepted: either loop, no idle-gap cap; the
	// loop reaches the fleet's factory.
	for _, open := range []bool{true, false} {
		f, err := Parse(fleetDoc(fmt.Sprintf("[workload]\nopen_loop = %v\nidle_gap_cap = 0.0\n[[fleet.groups]]\ncount = 2\n", open)), "t.toml")
		if err != nil || !f.IsFleet() {
			t.Fatalf("open_loop = %v: %v", open, err)
		}
		b, err := f.BuildFleet(ServerOptions{NoTimeline: true}, 0)
		if err != nil || b.Factory.OpenLoop != open {
			t.Fatalf("open_loop = %v: factory's OpenLoop %v, %v", open, b != nil && b.Factory.OpenLoop, err)
		}
	}
}

// A type error in an array of tables names the element, as the file's
// other errors do: go-toml's key has no index.
func TestFleetTypeErrorIndex(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"[[fleet.groups]]\ncount = \"2\"\n", `t.toml:8:9: fleet.groups[0].count: expected an integer, found a string ("2")`},
		{"[[fleet.groups]]\ncount = 1\n[[fleet.groups]]\ncount = 2.5\n", `t.toml:10:9: fleet.groups[1].count: expected an integer, found a float (2.5)`},
		{"[[fleet.groups]]\ncount = 1\nname = 3\n", `t.toml:9:8: fleet.groups[0].name: expected a string, found an integer (3)`},
	} {
		checkFleetDocError(t, c.doc, c.want)
	}
}

// The bundled disaggregated example: its groups' roles, the transfer
// keys, and each pool's router over [router] (SGLang's --prefill-policy
// and --decode-policy fall back to --policy; the other keys are shared).
func TestPDConfig(t *testing.T) {
	f := mustLoad(t, "fleet-pd.toml")
	if !f.IsPD() {
		t.Fatal("fleet-pd.toml is not disaggregated")
	}
	pd := f.PDConfig()
	if len(pd.IsPrefill) != 2 || !pd.IsPrefill[0] || pd.IsPrefill[1] {
		t.Errorf("roles %v, want prefill, decode", pd.IsPrefill)
	}
	if pd.TransferGbps != 200 || pd.TransferLatency != 20*time.Microsecond || pd.TransferQueues != 4 || pd.ReservedDecodeTokens != 512 {
		t.Errorf("transfer %+v", pd)
	}
	if pd.Prefill.Policy != router.CacheAware || pd.Decode.Policy != router.RoundRobin {
		t.Errorf("policies %v, %v", pd.Prefill.Policy, pd.Decode.Policy)
	}
	// Defaults, an array of names, and a pool key over a shared one.
	g := mustParse(t, fleetDoc("[[fleet.groups]]\nname = \"p\"\ncount = 1\n[[fleet.groups]]\nname = \"d\"\ncount = 1\n[[fleet.groups]]\nname = \"p2\"\ncount = 1\n"+
		"[disaggregation]\nprefill = [\"p\", \"p2\"]\ndecode = \"d\"\ntransfer_gbps = 100\n[router]\ncache_threshold = 0.5\n[router.prefill]\nbalance_abs_threshold = 8\n"), "t.toml")
	pd = g.PDConfig()
	want := router.Default()
	want.CacheAware.CacheThreshold = 0.5
	if !reflect.DeepEqual(pd.Decode, want) {
		t.Errorf("decode router %+v, want %+v", pd.Decode, want)
	}
	want.CacheAware.BalanceAbsThreshold = 8
	if !reflect.DeepEqual(pd.Prefill, want) {
		t.Errorf("prefill router %+v, want %+v", pd.Prefill, want)
	}
	if fmt.Sprint(pd.IsPrefill) != "[true false true]" || pd.TransferQueues != 4 || pd.ReservedDecodeTokens != 512 || pd.TransferLatency != 0 || pd.DecodeRadix ||
		pd.BootstrapTimeout != 300*time.Second || pd.WaitingTimeout != 300*time.Second {
		t.Errorf("defaults %+v", pd)
	}
	h := mustParse(t, fleetDoc("[[fleet.groups]]\nname = \"p\"\ncount = 1\n[[fleet.groups]]\nname = \"d\"\ncount = 1\n"+
		"[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 100\nbootstrap_timeout = 0.25\nwaiting_timeout = 600\n"), "t.toml")
	if pd := h.PDConfig(); pd.BootstrapTimeout != 250*time.Millisecond || pd.WaitingTimeout != 600*time.Second || pd.DecodeOffload {
		t.Errorf("timeouts %v, %v, offload %v", pd.BootstrapTimeout, pd.WaitingTimeout, pd.DecodeOffload)
	}
	o := mustParse(t, fleetDoc("[[fleet.groups]]\nname = \"p\"\ncount = 1\n[[fleet.groups]]\nname = \"d\"\ncount = 1\n"+
		"[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 100\ndecode_offload = true\n"), "t.toml")
	if !o.PDConfig().DecodeOffload {
		t.Error("decode_offload = true not read")
	}
}

// Every mistake of [disaggregation], [router.prefill] and [router.decode]
// is refused at its key.
func TestPDErrors(t *testing.T) {
	groups := "[[fleet.groups]]\nname = \"p\"\ncount = 1\n[[fleet.groups]]\nname = \"d\"\ncount = 1\n"
	for _, c := range []struct{ doc, want string }{
		{"[disaggregation]\ntransfer_gbps = 1\n", `t.toml:7:1: disaggregation: only with a [fleet] table (add [[fleet.groups]])`},
		{groups + "[router.decode]\npolicy = \"random\"\n", `t.toml:13:1: router.decode: only with a [disaggregation] table`},
		{groups + "[disaggregation]\nprefill = \"p\"\ntransfer_gbps = 1\n",
			`t.toml:13:1: disaggregation.decode: required: the name of a [[fleet.groups]] (or an array of names) serving decode`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = [\"d\", \"x\"]\ntransfer_gbps = 1\n",
			`t.toml:15:1: disaggregation.decode: no [[fleet.groups]] is named "x"`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = [\"d\", \"p\"]\ntransfer_gbps = 1\n",
			`t.toml:15:1: disaggregation.decode: group "p" has a role already: a group serves prefill or decode`},
		{groups + "[[fleet.groups]]\nname = \"q\"\ncount = 1\n[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\n",
			`t.toml:16:1: disaggregation: group "q" serves neither prefill nor decode: name it in disaggregation.prefill or disaggregation.decode`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\n",
			`t.toml:13:1: disaggregation.transfer_gbps: required: each prefill replica's KV link, Gbit/s`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = -2.0\n",
			`t.toml:16:1: disaggregation.transfer_gbps: must be Gbit/s in (0, 1e+06] (got -2)`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\ntransfer_latency = -1.0\ntransfer_queues = 0\nnum_reserved_decode_tokens = -5\ndecode_cache = \"hicache\"\n",
			"t.toml:17:1: disaggregation.transfer_latency: must be seconds in [0, 31536000] (got -1)\n" +
				"t.toml:18:1: disaggregation.transfer_queues: must be in [1, 1024] (got 0)\n" +
				"t.toml:19:1: disaggregation.num_reserved_decode_tokens: must be tokens in [0, 16777216] (got -5)\n" +
				`t.toml:20:1: disaggregation.decode_cache: "hicache" is not supported yet: "chunk" or "radix"`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\nbootstrap_timeout = 0.0\nwaiting_timeout = -3.0\n",
			"t.toml:17:1: disaggregation.bootstrap_timeout: must be seconds in [1e-06, 31536000] (got 0)\n" +
				"t.toml:18:1: disaggregation.waiting_timeout: must be seconds in [1e-06, 31536000] (got -3)"},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\ndecode_cache = \"radix\"\ndecode_offload = true\n",
			`t.toml:18:1: disaggregation.decode_offload: only with decode_cache = "chunk" (a radix decode replica has no storage tier)`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\ndecode_cache = \"lru\"\n",
			`t.toml:17:1: disaggregation.decode_cache: must be "chunk" or "radix" (got "lru")`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\n[router.prefill]\ncache_threshold = 2.0\n[router.decode]\npolicy = \"nope\"\n",
			"t.toml:18:1: router.prefill.cache_threshold: must be in [0, 1] (got 2)\n" +
				`t.toml:20:1: router.decode.policy: must be "cache_aware", "round_robin", "random", "power_of_two", "consistent_hash", "kv_aware", "nginx_round_robin", "nginx_hash", "cache_aware_oracle", "prefix_hash", "manual" or "least_load" (got "nope")`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\n[[fleet.groups]]\ncount = 1\nset = { \"disaggregation.transfer_gbps\" = 2 }\n",
			"t.toml:13:1: disaggregation: group \"group2\" serves neither prefill nor decode: name it in disaggregation.prefill or disaggregation.decode\n" +
				`t.toml:19:9: fleet.groups[2].set.disaggregation.transfer_gbps: [disaggregation] is the fleet's, not a group's`},
	} {
		checkFleetDocError(t, c.doc, c.want)
	}
}
