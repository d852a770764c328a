package sim

import "github.com/kvsim/kvsim/internal/enum"

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

var schedulePolicyNames = enum.New[SchedulePolicy]("SchedulePolicy", "schedule policy",
	"fcfs", "lpm", "dfs-weight", "lof", "random")

func (p SchedulePolicy) String() string { return schedulePolicyNames.String(p) }

// ParseSchedulePolicy returns the policy SGLang's --schedule-policy names
// name: fcfs, lpm, dfs-weight, lof or random.
func ParseSchedulePolicy(name string) (SchedulePolicy, error) {
	return schedulePolicyNames.Parse(name)
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

var prefetchPolicyNames = enum.New[PrefetchPolicy]("PrefetchPolicy", "prefetch policy",
	"best_effort", "wait_complete", "timeout")

func (p PrefetchPolicy) String() string { return prefetchPolicyNames.String(p) }

// ParsePrefetchPolicy returns the policy named name: best_effort,
// wait_complete or timeout.
func ParsePrefetchPolicy(name string) (PrefetchPolicy, error) {
	return prefetchPolicyNames.Parse(name)
}

// StorageEviction is how a limited storage tier makes room
// (storage.eviction). The zero value means the default, StorageLRU.
type StorageEviction int

// Storage eviction modes.
const (
	// StorageLRU drops the least recently written or read page whenever a
	// write goes over capacity (exact LRU).
	StorageLRU StorageEviction = 1 + iota
	// StorageMooncake is Mooncake Store's eviction (fleet-spec 3.3): a
	// write that finds the store full or reaches the high watermark runs a
	// round that drops a share of the pages, least recently used first,
	// skipping pages under a lookup's lease.
	StorageMooncake
)

var storageEvictionNames = enum.New[StorageEviction]("StorageEviction", "storage eviction",
	"lru", "mooncake")

func (e StorageEviction) String() string { return storageEvictionNames.String(e) }

// ParseStorageEviction returns the mode named name: lru or mooncake.
func ParseStorageEviction(name string) (StorageEviction, error) {
	return storageEvictionNames.Parse(name)
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

var plannerNames = enum.New[Planner]("Planner", "planner", "auto", "sglang", "owner-lane")

func (p Planner) String() string { return plannerNames.String(p) }

// ParsePlanner returns the planner named name: auto, sglang or owner-lane.
func ParsePlanner(name string) (Planner, error) { return plannerNames.Parse(name) }
