package lint

import (
	"slices"
	"strings"
	"testing"
)

// The repository itself passes both checks.
func TestRepository(t *testing.T) {
	for _, c := range []struct {
		name  string
		check func(string) ([]Finding, error)
	}{{"Imports", Imports}, {"Determinism", Determinism}} {
		findings, err := c.check("../..")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, f := range findings {
			t.Errorf("%s: %s", c.name, f)
		}
	}
}

// checkFixture runs check on testdata/fake, a tiny module with one
// violation of each kind the check finds, and compares the findings with
// want, in order.
func checkFixture(t *testing.T, check func(string) ([]Finding, error), want []string) {
	t.Helper()
	findings, err := check("testdata/fake")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(findings))
	for i, f := range findings {
		got[i] = f.String()
	}
	if !slices.Equal(got, want) {
		t.Errorf("findings:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

func TestImportsFixture(t *testing.T) {
	checkFixture(t, Imports, []string{
		`configs/configs.go:3:8: import "example.com/fake/nowhere": unknown top-level package "nowhere"; add it to internal/lint's Layers`,
		`replay/golden.go:3:8: replay imports internal/golden <- only tests may import it`,
		`sim/back.go:3:8: sim must not import example.com/fake/replay <- imports flow ` + layerOrder,
		`sim/hw/hw.go:3:8: sim/hw must not import example.com/fake/sim <- within sim/, SubLayers orders the packages`,
		`sim/policy/policy.go:3:8: sim/policy must not import example.com/fake/replay <- imports flow ` + layerOrder,
		`sim/unlisted/unlisted.go:3:8: sim/unlisted imports sim/hw: add both to internal/lint's SubLayers["sim"]`,
		`tools/tools.go:3:8: "tools" is not in internal/lint's Layers`,
	})
}

func TestDeterminismFixture(t *testing.T) {
	checkFixture(t, Determinism, []string{
		`planner/planner.go:4:2: import crypto/rand <- take a seeded *rand.Rand`,
		`planner/planner.go:9:2: select statement <- the simulator core does not use channels`,
		`sim/sim.go:9:6: time.Now <- use the injected sim clock`,
		`sim/sim.go:10:2: go statement <- the simulator core is single-threaded; schedule an event`,
		`sim/sim.go:11:2: time.AfterFunc <- schedule an event instead`,
		`sim/sim.go:12:2: time.NewTicker <- schedule an event instead`,
		`sim/sim.go:13:6: rand.IntN uses the global generator <- use an injected, seeded *rand.Rand`,
		`sim/sim.go:15:6: time.Tick <- schedule an event instead`,
		`sim/sim.go:16:2: time.NewTimer <- schedule an event instead`,
		`traces/traces.go:3:8: import math/rand <- use math/rand/v2 with an injected, seeded *rand.Rand`,
	})
}
