package sim

import (
	"fmt"
	"strings"

	"github.com/kvsim/kvsim/tree"
)

// SchedulePolicy is the order of the waiting queue (SGLang's
// --schedule-policy). The zero value means the default, FCFS.
type SchedulePolicy int

// Schedule policies.
const (
	// FCFS admits requests in arrival order.
	FCFS SchedulePolicy = 1 + iota
	// LPM admits the longest cached prefix first (while the queue is at
	// most SchedulerConfig.LPMFallbackQueue long).
	LPM
	// DFSWeight orders the queue by a depth-first walk of the radix tree
	// weighted by waiting requests.
	DFSWeight
	// LOF admits the longest output (max_new_tokens) first.
	LOF
	// Random shuffles the queue with the run's seed.
	Random
)

var schedulePolicyNames = []string{"fcfs", "lpm", "dfs-weight", "lof", "random"}

func (p SchedulePolicy) String() string {
	return enumName(schedulePolicyNames, "SchedulePolicy", int(p))
}

// ParseSchedulePolicy returns the policy SGLang's --schedule-policy names
// name: fcfs, lpm, dfs-weight, lof or random.
func ParseSchedulePolicy(name string) (SchedulePolicy, error) {
	v, err := parseEnum(schedulePolicyNames, name)
	return SchedulePolicy(v), err
}

// PrefetchPolicy says when a request whose prefix is being fetched from
// the storage tier is admitted (--hicache-storage-prefetch-policy). The zero
// value means the default, BestEffort.
type PrefetchPolicy int

// Prefetch policies.
const (
	// BestEffort admits the request with whatever has arrived.
	BestEffort PrefetchPolicy = 1 + iota
	// WaitComplete holds the request until the whole hit is fetched.
	WaitComplete
	// PrefetchTimeout holds it until fetched or the timeout passes
	// (StorageConfig.PrefetchTimeoutBase and the rest).
	PrefetchTimeout
)

var prefetchPolicyNames = []string{"best_effort", "wait_complete", "timeout"}

func (p PrefetchPolicy) String() string {
	return enumName(prefetchPolicyNames, "PrefetchPolicy", int(p))
}

// ParsePrefetchPolicy returns the policy named name: best_effort,
// wait_complete or timeout.
func ParsePrefetchPolicy(name string) (PrefetchPolicy, error) {
	v, err := parseEnum(prefetchPolicyNames, name)
	return PrefetchPolicy(v), err
}

// Planner chooses device victims when memory is short. The zero value
// means the default, PlannerAuto.
type Planner int

// Planners.
const (
	// PlannerAuto is PlannerSGLang for one lane, PlannerOwnerLane for more
	// (except under belady eviction, which the owner-lane planner cannot
	// follow).
	PlannerAuto Planner = 1 + iota
	// PlannerSGLang is SGLang's evict: strategy order until the request
	// is covered.
	PlannerSGLang
	// PlannerOwnerLane is the lazy-heap planner covering each lane's
	// deficit (package planner).
	PlannerOwnerLane
)

var plannerNames = []string{"auto", "sglang", "owner-lane"}

func (p Planner) String() string { return enumName(plannerNames, "Planner", int(p)) }

// ParsePlanner returns the planner named name: auto, sglang or owner-lane.
func ParsePlanner(name string) (Planner, error) {
	v, err := parseEnum(plannerNames, name)
	return Planner(v), err
}

// ParseLanes returns the lane layout named name: "page" (page k on lane
// k mod cp) or "token" (token p on lane p mod cp).
func ParseLanes(name string) (tree.LaneMode, error) {
	for _, m := range []tree.LaneMode{tree.LanePages, tree.LaneTokens} {
		if m.String() == name {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown lane layout %q (want page or token)", name)
}

// enumName is the name of the value v of an enum whose values 1, 2, ...
// are named names, or "Type(v)".
func enumName(names []string, typ string, v int) string {
	if v >= 1 && v <= len(names) {
		return names[v-1]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// parseEnum returns the value (1-based) of name among names.
func parseEnum(names []string, name string) (int, error) {
	for i, n := range names {
		if n == name {
			return i + 1, nil
		}
	}
	return 0, fmt.Errorf("unknown value %q (want %s)", name, strings.Join(names, ", "))
}
