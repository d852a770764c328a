package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim/engine"
)

// The shared-L3 example with storage.shared = false: private stores read no page
// another replica wrote, and the shared store's fleet hits more.
func TestSimFleetSharedL3VersusPrivate(t *testing.T) {
	doc := testutil.ReadFile(t, fleetSharedL3)
	type l3 struct {
		Hit   int64 `json:"l3_hit_tokens"`
		Cross int64 `json:"l3_cross_replica_pages_read"`
	}
	run := func(shared string) (hitRate float64, fleetL3 l3, stores int) {
		t.Helper()
		body := strings.Replace(string(doc), "shared = true", "shared = "+shared, 1)
		body = strings.Replace(body, `trace = "traces/`, `trace = "`+filepath.Join("..", "..", "configs", "traces")+"/", 1)
		path := filepath.Join(t.TempDir(), "f.toml")
		writeFile(t, path, body)
		var got struct {
			Summary struct {
				CacheHitRate float64 `json:"cache_hit_rate"`
			} `json:"summary"`
			L3       *l3               `json:"l3"`
			SharedL3 []json.RawMessage `json:"shared_l3"`
			Replicas []struct {
				L3 *l3 `json:"l3"`
			} `json:"replicas"`
		}
		runQuietJSON(t, &got, "sim", "--config", path, "--trace", fleetTrace, "--json")
		if got.L3 == nil || len(got.Replicas) != 4 || got.Replicas[3].L3 == nil {
			t.Fatalf("shared = %s: no L3 results in %+v", shared, got)
		}
		return got.Summary.CacheHitRate, *got.L3, len(got.SharedL3)
	}
	sharedRate, shared, n := run("true")
	if shared.Cross == 0 || n != 1 {
		t.Errorf("shared: %+v, %d stores; want cross-replica reads from one store", shared, n)
	}
	privateRate, private, n := run("false")
	if private.Cross != 0 || n != 0 {
		t.Errorf("private: %+v, %d shared stores; want no cross-replica read", private, n)
	}
	if sharedRate <= privateRate || shared.Hit <= private.Hit {
		t.Errorf("hit rate %v (L3 %d tokens) shared, %v (L3 %d) private", sharedRate, shared.Hit, privateRate, private.Hit)
	}
}

// storage.shared is refused without a store to share, and a fleet whose
// shared groups differ in store capacity, eviction or aggregate bandwidth
// cap is refused at the group's key; so is a cap without a shared store,
// or a negative one.
func TestSimFleetSharedL3Refuses(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"[storage]\nshared = true\n", "f.toml:2:1: storage.shared: true needs storage.enabled = true"},
		{"[model]\npreset = \"qwen2.5-14b\"\n[gpu]\npreset = \"h200\"\n[cache]\nhost_tokens = 4000\n[storage]\nenabled = true\nshared = true\ncapacity_tokens = 1000\n[[fleet.groups]]\ncount = 1\n[[fleet.groups]]\ncount = 1\nset = { \"storage.capacity_tokens\" = 2000 }\n",
			`f.toml:15:9: fleet.groups[1].set.storage.capacity_tokens: 2000 differs from group 0's 1000`},
		{"[model]\npreset = \"qwen2.5-14b\"\n[gpu]\npreset = \"h200\"\n[cache]\nhost_tokens = 4000\n[storage]\nenabled = true\nshared = true\ncapacity_tokens = 1000\n[[fleet.groups]]\ncount = 1\n[[fleet.groups]]\ncount = 1\nset = { \"storage.eviction\" = \"mooncake\" }\n",
			`f.toml:15:9: fleet.groups[1].set.storage.eviction: mooncake differs from group 0's lru`},
		{"[model]\npreset = \"qwen2.5-14b\"\n[gpu]\npreset = \"h200\"\n[cache]\nhost_tokens = 4000\n[storage]\nenabled = true\naggregate_gbps = 20\n",
			"f.toml:9:1: storage.aggregate_gbps: needs storage.shared = true"},
		{"[model]\npreset = \"qwen2.5-14b\"\n[gpu]\npreset = \"h200\"\n[cache]\nhost_tokens = 4000\n[storage]\nenabled = true\nshared = true\naggregate_gbps = 20\n[[fleet.groups]]\ncount = 1\n[[fleet.groups]]\ncount = 1\nset = { \"storage.aggregate_gbps\" = 5.0 }\n",
			`f.toml:15:9: fleet.groups[1].set.storage.aggregate_gbps: 5 differs from group 0's 20`},
		{"[model]\npreset = \"qwen2.5-14b\"\n[gpu]\npreset = \"h200\"\n[cache]\nhost_tokens = 4000\n[storage]\nenabled = true\nshared = true\naggregate_gbps = -1\n",
			"f.toml:10:1: storage.aggregate_gbps: must be >= 0 (0: no cap) (got -1)"},
	} {
		checkFleetFileRefused(t, c.doc, c.want)
	}
}

// A fleet of one replica whose storage is shared reports the summary
// `kvsim sim --open-loop` reports for its server alone.
func TestSimFleetSharedL3OfOne(t *testing.T) {
	server := testutil.ReadFile(t, filepath.Join("testdata", "replay", "sim_small.toml"))
	doc := string(server) + "\n[storage]\nenabled = true\nshared = true\nprefetch_policy = \"wait_complete\"\n"
	dir := t.TempDir()
	single, one := filepath.Join(dir, "single.toml"), filepath.Join(dir, "one.toml")
	writeFile(t, single, doc)
	writeFile(t, one, doc+"[[fleet.groups]]\ncount = 1\n")
	want, got := simSummary(t, "--config", single, "--open-loop"), simSummary(t, "--config", one)
	if want.StorageHitRate == 0 {
		t.Fatalf("the server takes nothing from storage: %+v", want)
	}
	if got != want {
		t.Errorf("fleet of one %+v\nwant the server's %+v", got, want)
	}
}

// simSummary runs kvsim sim --trace fleetTrace --json with args and returns
// the summary, a single server's or a fleet's.
func simSummary(t *testing.T, args ...string) engine.Summary {
	t.Helper()
	out := runQuiet(t, append([]string{"sim", "--trace", fleetTrace, "--json"}, args...)...)
	var s engine.Summary
	var wrap struct {
		Summary *engine.Summary `json:"summary"`
	}
	decodeJSON(t, out, &wrap)
	if wrap.Summary != nil {
		return *wrap.Summary
	}
	decodeJSON(t, out, &s)
	return s
}

// The shared-L3 example with a store of 2 M tokens (the 300 requests back
// up about 4 M): exact LRU keeps it full and runs no round; Mooncake
// eviction runs rounds that leave it below capacity, and reports them.
func TestSimFleetSharedL3Mooncake(t *testing.T) {
	doc := testutil.ReadFile(t, fleetSharedL3)
	const capTokens = 2_000_000
	type l3 struct {
		Evicted int64 `json:"l3_pages_evicted"`
		Rounds  int64 `json:"l3_eviction_rounds"`
		Refused int64 `json:"l3_pages_refused"`
	}
	run := func(eviction string) (fleetL3 l3, stored int64) {
		t.Helper()
		body := strings.Replace(string(doc), "shared = true", fmt.Sprintf("shared = true\ncapacity_tokens = %d\neviction = %q", capTokens, eviction), 1)
		body = strings.Replace(body, `trace = "traces/`, `trace = "`+filepath.Join("..", "..", "configs", "traces")+"/", 1)
		path := filepath.Join(t.TempDir(), "f.toml")
		writeFile(t, path, body)
		var got struct {
			L3       *l3 `json:"l3"`
			SharedL3 []struct {
				Stored int64 `json:"stored_tokens"`
			} `json:"shared_l3"`
		}
		runQuietJSON(t, &got, "sim", "--config", path, "--trace", fleetTrace, "--json")
		if got.L3 == nil || len(got.SharedL3) != 1 {
			t.Fatalf("eviction %s: no shared L3 results in %+v", eviction, got)
		}
		return *got.L3, got.SharedL3[0].Stored
	}
	lru, lruStored := run("lru")
	if lru.Evicted == 0 || lru.Rounds != 0 || lru.Refused != 0 || lruStored != capTokens {
		t.Errorf("lru: %+v, %d tokens stored; want evictions, no round, a full store", lru, lruStored)
	}
	moon, moonStored := run("mooncake")
	if moon.Evicted == 0 || moon.Rounds == 0 || moonStored >= capTokens {
		t.Errorf("mooncake: %+v, %d tokens stored; want rounds that leave the store below %d", moon, moonStored, capTokens)
	}
}
