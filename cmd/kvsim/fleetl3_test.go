package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/sim/engine"
)

var fleetSharedL3 = filepath.Join("..", "..", "configs", "fleet-shared-l3.toml")

// The shared-L3 example (four replicas behind round_robin, one store) on
// the first 300 requests of the conversation trace: the table shows the
// storage section with cross-replica reads and one line per replica.
func TestSimFleetSharedL3Table(t *testing.T) {
	code, out, errOut := runCLI(t, "sim", "--config", fleetSharedL3, "--trace", fleetTrace)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	checkGolden(t, "fleet", "shared-l3", out)
}

// The same fleet with storage.shared = false: private stores read no page
// another replica wrote, and the shared store's fleet hits more.
func TestSimFleetSharedL3VersusPrivate(t *testing.T) {
	doc, err := os.ReadFile(fleetSharedL3)
	if err != nil {
		t.Fatal(err)
	}
	type l3 struct {
		Hit   int64 `json:"l3_hit_tokens"`
		Cross int64 `json:"l3_cross_replica_pages_read"`
	}
	run := func(shared string) (hitRate float64, fleetL3 l3, stores int) {
		t.Helper()
		body := strings.Replace(string(doc), "shared = true", "shared = "+shared, 1)
		body = strings.Replace(body, `trace = "traces/`, `trace = "`+filepath.Join("..", "..", "configs", "traces")+"/", 1)
		path := filepath.Join(t.TempDir(), "f.toml")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI(t, "sim", "--config", path, "--trace", fleetTrace, "--json")
		if code != exitOK || errOut != "" {
			t.Fatalf("shared = %s: exit %d, stderr %q", shared, code, errOut)
		}
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
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if got.L3 == nil || len(got.Replicas) != 4 || got.Replicas[3].L3 == nil {
			t.Fatalf("shared = %s: no L3 results in %s", shared, out)
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
// shared groups differ in store capacity is refused at the group's key.
func TestSimFleetSharedL3Refuses(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"[storage]\nshared = true\n", "f.toml:2:1: storage.shared: true needs storage.enabled = true"},
		{"[model]\npreset = \"qwen2.5-14b\"\n[gpu]\npreset = \"h200\"\n[cache]\nhost_tokens = 4000\n[storage]\nenabled = true\nshared = true\ncapacity_tokens = 1000\n[[fleet.groups]]\ncount = 1\n[[fleet.groups]]\ncount = 1\nset = { \"storage.capacity_tokens\" = 2000 }\n",
			`f.toml:15:9: fleet.groups[1].set.storage.capacity_tokens: 2000 differs from group 0's 1000`},
	} {
		f := filepath.Join(t.TempDir(), "f.toml")
		if err := os.WriteFile(f, []byte(c.doc), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runCLI(t, "sim", "--config", f, "--trace", fleetTrace)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stderr %q, want %q", c.doc, code, errOut, c.want)
		}
	}
}

// A fleet of one replica whose storage is shared reports the summary
// `kvsim sim --open-loop` reports for its server alone.
func TestSimFleetSharedL3OfOne(t *testing.T) {
	server, err := os.ReadFile(filepath.Join("testdata", "replay", "sim_small.toml"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(server) + "\n[storage]\nenabled = true\nshared = true\nprefetch_policy = \"wait_complete\"\n"
	dir := t.TempDir()
	single, one := filepath.Join(dir, "single.toml"), filepath.Join(dir, "one.toml")
	if err := os.WriteFile(single, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(one, []byte(doc+"[[fleet.groups]]\ncount = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
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
	code, out, errOut := runCLI(t, append([]string{"sim", "--trace", fleetTrace, "--json"}, args...)...)
	if code != exitOK || errOut != "" {
		t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
	}
	var s engine.Summary
	var wrap struct {
		Summary *engine.Summary `json:"summary"`
	}
	if err := json.Unmarshal([]byte(out), &wrap); err != nil {
		t.Fatal(err)
	}
	if wrap.Summary != nil {
		return *wrap.Summary
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	return s
}
