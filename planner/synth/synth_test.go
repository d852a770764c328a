package synth_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kvsim/kvsim/internal/golden"
	"github.com/kvsim/kvsim/planner"
	"github.com/kvsim/kvsim/planner/synth"
	"pgregory.net/rapid"
)

// summary describes a snapshot in a few numbers plus a digest of all of it.
func summary(nodes []planner.Node, deficits []int64) string {
	var device, locked, maxDepth int
	depth := map[int64]int{0: 0}
	for _, nd := range nodes {
		depth[nd.ID] = depth[nd.Parent] + 1
		maxDepth = max(maxDepth, depth[nd.ID])
		if nd.Device {
			device++
		}
		if nd.Locked {
			locked++
		}
	}
	b, err := json.Marshal(struct {
		N []planner.Node
		D []int64
	}{nodes, deficits})
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("nodes %d, device %d, locked %d, max depth %d\ndeficits %v\nsha256 %x\n",
		len(nodes), device, locked, maxDepth, deficits, sha256.Sum256(b))
}

// TestSnapshotGolden pins the generator's output for the configurations of
// `make run` and the benchmarks: plan-bench figures stay comparable only as
// long as the snapshot does not change. Rewrite with -update only for a
// deliberate change to the generator.
func TestSnapshotGolden(t *testing.T) {
	for _, c := range []synth.Config{
		{Candidates: 2000, Deficit: 7877, Lanes: 8, Seed: 1},
		{Candidates: 50, Deficit: 100, Lanes: 3, Seed: 42},
	} {
		name := fmt.Sprintf("c%d-d%d-cp%d-s%d", c.Candidates, c.Deficit, c.Lanes, c.Seed)
		t.Run(name, func(t *testing.T) {
			nodes, deficits, err := synth.Snapshot(c)
			if err != nil {
				t.Fatal(err)
			}
			got := summary(nodes, deficits)
			golden.CheckString(t, filepath.Join("testdata", name+".golden"), got)
		})
	}
}

// TestPropSnapshotShape checks what plan-bench promises about its input, for
// random configurations: the snapshot is valid, exactly Candidates nodes are
// eligible at the start, the deficits sum to Deficit, and the same Config
// yields the same snapshot.
func TestPropSnapshotShape(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := synth.Config{
			Candidates: rapid.IntRange(1, 300).Draw(t, "candidates"),
			Deficit:    rapid.Int64Range(0, 2000).Draw(t, "deficit"),
			Lanes:      rapid.IntRange(1, 9).Draw(t, "cp"),
			Seed:       rapid.Uint64().Draw(t, "seed"),
		}
		nodes, deficits, err := synth.Snapshot(c)
		if err != nil {
			t.Fatalf("Snapshot(%+v): %v", c, err)
		}
		var total int64
		for _, d := range deficits {
			total += d
		}
		if len(deficits) != c.Lanes || total != c.Deficit {
			t.Fatalf("deficits %v, want %d lanes summing to %d", deficits, c.Lanes, c.Deficit)
		}
		if _, err := planner.Reference(nodes, deficits); err != nil {
			t.Fatalf("not a valid snapshot: %v", err)
		}
		hasDeviceChild := map[int64]bool{}
		for _, nd := range nodes {
			if nd.Device {
				hasDeviceChild[nd.Parent] = true
			}
		}
		eligible := 0
		for _, nd := range nodes {
			if nd.Device && !nd.Locked && !hasDeviceChild[nd.ID] {
				eligible++
			}
		}
		if eligible != c.Candidates {
			t.Fatalf("%d eligible nodes, want %d", eligible, c.Candidates)
		}
		again, _, err := synth.Snapshot(c)
		if err != nil || summary(again, deficits) != summary(nodes, deficits) {
			t.Fatalf("Snapshot is not reproducible (%v)", err)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []synth.Config{
		{Candidates: 0, Deficit: 1, Lanes: 1},
		{Candidates: 1, Deficit: -1, Lanes: 1},
		{Candidates: 1, Deficit: 1, Lanes: 0},
		{Candidates: 1, Deficit: 1, Lanes: 1025},
	} {
		if _, _, err := synth.Snapshot(c); err == nil {
			t.Errorf("Snapshot(%+v) = nil error, want an error", c)
		}
	}
}
