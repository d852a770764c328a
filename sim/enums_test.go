package sim

import (
	"testing"

	"github.com/kvsim/kvsim/tree"
)

// Every named value parses back from its name; an unknown name is an
// error, and an unnamed value prints as Type(n).
func TestEnumsRoundTrip(t *testing.T) {
	for _, p := range []SchedulePolicy{FCFS, LPM, DFSWeight, LOF, Random} {
		if got, err := ParseSchedulePolicy(p.String()); err != nil || got != p {
			t.Errorf("ParseSchedulePolicy(%q) = %v, %v", p, got, err)
		}
	}
	for _, p := range []PrefetchPolicy{BestEffort, WaitComplete, PrefetchTimeout} {
		if got, err := ParsePrefetchPolicy(p.String()); err != nil || got != p {
			t.Errorf("ParsePrefetchPolicy(%q) = %v, %v", p, got, err)
		}
	}
	for _, p := range []Planner{PlannerAuto, PlannerSGLang, PlannerOwnerLane} {
		if got, err := ParsePlanner(p.String()); err != nil || got != p {
			t.Errorf("ParsePlanner(%q) = %v, %v", p, got, err)
		}
	}
	for _, m := range []tree.LaneMode{tree.LanePages, tree.LaneTokens} {
		if got, err := tree.ParseLanes(m.String()); err != nil || got != m {
			t.Errorf("ParseLanes(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseSchedulePolicy("sjf"); err == nil {
		t.Error(`ParseSchedulePolicy("sjf") succeeded`)
	}
	if _, err := ParsePlanner(""); err == nil {
		t.Error(`ParsePlanner("") succeeded`)
	}
	if got := SchedulePolicy(0).String(); got != "SchedulePolicy(0)" {
		t.Errorf("SchedulePolicy(0) = %q", got)
	}
}

// A typed value out of range is reported by Validate with its number.
func TestValidateEnumOutOfRange(t *testing.T) {
	cfg := Default(100)
	cfg.Scheduler.Policy = 9
	cfg.Cache.Planner = 7
	want := "cache.planner: must be \"auto\", \"sglang\" or \"owner-lane\" (got Planner(7))\n" +
		"scheduler.policy: must be one of fcfs, lpm, dfs-weight, lof, random (got SchedulePolicy(9))"
	if err := cfg.Validate(); err == nil || err.Error() != want {
		t.Fatalf("Validate() = %v, want\n%s", err, want)
	}
}
