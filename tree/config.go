package tree

import (
	"errors"
	"fmt"

	"github.com/kvsim/kvsim/internal/enum"
)

// Strategy is a device (and host) eviction order. The keys are SGLang's
// (mem_cache/evict_policy.py); the smallest key is evicted first and ties are
// broken by node id.
type Strategy int

// Eviction strategies.
const (
	// LRU evicts the least recently accessed node first (SGLang's default).
	LRU Strategy = 1 + iota
	// LFU evicts the node with the fewest hits first, LRU among equals.
	LFU
	// FIFO evicts the oldest node first (by creation).
	FIFO
	// MRU evicts the most recently accessed node first.
	MRU
	// FILO evicts the newest node first.
	FILO
	// Priority evicts the lowest request priority first, LRU among equals.
	Priority
	// SLRU is SGLang's "slru" key: nodes with fewer than ProtectedHits hits
	// (probation) before the others (protected), LRU inside each segment. The
	// protected segment is unbounded.
	SLRU
	// SegmentedLRU is the classic segmented LRU (Karedla et al., 1994): a
	// node is promoted to the protected segment when its hit count reaches
	// ProtectedHits; the protected segment holds at most ProtectedShare of the
	// device capacity, and when it overflows its least recently used nodes
	// are demoted back to probation. Probation is evicted first.
	SegmentedLRU
	// Belady evicts the node whose pages are next needed furthest in the
	// future (Belady's MIN, 1966), never-needed nodes first, by node id
	// among those. It is an oracle for what-if studies: it needs the whole
	// trace in advance, through an [Oracle] given with [Tree.SetOracle].
	Belady
)

var strategyNames = enum.New[Strategy]("Strategy", "eviction strategy",
	"lru", "lfu", "fifo", "mru", "filo", "priority", "slru", "slru-segmented", "belady")

func (s Strategy) String() string { return strategyNames.String(s) }

// ParseStrategy returns the strategy named as SGLang's
// --radix-eviction-policy names it ("lru", "lfu", "fifo", "mru", "filo",
// "priority", "slru"), "slru-segmented" for the classic segmented LRU, or
// "belady" for the offline optimum.
func ParseStrategy(name string) (Strategy, error) { return strategyNames.Parse(name) }

// WritePolicy says when device pages are copied to the host tier.
type WritePolicy int

// Write policies (SGLang's --hicache-write-policy).
const (
	// WriteThrough copies a node to host at its first counted hit.
	WriteThrough WritePolicy = 1 + iota
	// WriteThroughSelective copies a node to host at its second counted hit.
	WriteThroughSelective
	// WriteBack copies a node to host only when device eviction selects it,
	// synchronously.
	WriteBack
)

var writePolicyNames = enum.New[WritePolicy]("WritePolicy", "write policy",
	"write_through", "write_through_selective", "write_back")

func (w WritePolicy) String() string { return writePolicyNames.String(w) }

// ParseWritePolicy parses SGLang's write policy names.
func ParseWritePolicy(name string) (WritePolicy, error) { return writePolicyNames.Parse(name) }

// LaneMode says how a sequence's KV is striped over the owner lanes.
type LaneMode int

// Lane modes.
const (
	// LanePages gives logical page k of a sequence to lane k mod CP.
	LanePages LaneMode = 1 + iota
	// LaneTokens gives token p of a sequence to lane p mod CP, as SGLang's
	// decode context parallelism stripes tokens.
	LaneTokens
)

var laneNames = enum.New[LaneMode]("LaneMode", "lane layout", "page", "token")

func (m LaneMode) String() string { return laneNames.String(m) }

// ParseLanes returns the lane layout named name: "page" (page k on lane
// k mod cp) or "token" (token p on lane p mod cp).
func ParseLanes(name string) (LaneMode, error) { return laneNames.Parse(name) }

// Config configures a Tree. All sizes are in tokens.
type Config struct {
	// PageSize is the number of tokens per KV page (SGLang --page-size);
	// every key is whole pages. Default 1; must be >= 1.
	PageSize int
	// CP is the number of owner lanes (context-parallel ranks). Default 1;
	// valid 1..1024.
	CP int
	// Lanes is the striping of tokens over lanes. Default LanePages.
	Lanes LaneMode
	// DeviceTokens is the device (GPU) KV capacity of each lane, in tokens.
	// Must be > 0.
	DeviceTokens int64
	// HostTokens is the host-memory (L2) capacity of each lane, in tokens.
	// 0 (the default) means no host tier: the tree is SGLang's plain
	// RadixCache.
	HostTokens int64
	// Eviction is the eviction order for both tiers. Default LRU.
	Eviction Strategy
	// ProtectedHits is the hit count at which a node is protected under SLRU
	// and SegmentedLRU. Default 2 (SGLang's protected_threshold).
	ProtectedHits int64
	// ProtectedShare is the share of the device capacity that the protected
	// segment may hold under SegmentedLRU. Default 0.8; valid (0, 1].
	ProtectedShare float64
	// WritePolicy is the host write policy. Default WriteThrough (SGLang's
	// server default). Ignored without a host tier.
	WritePolicy WritePolicy
	// WriteThroughThreshold is the hit count at which a node is copied to
	// host. Default 1 for WriteThrough and 2 otherwise, as in SGLang.
	WriteThroughThreshold int64
	// LoadBackThreshold is the smallest host hit, in tokens, that is loaded
	// back instead of recomputed. Default 10 (SGLang's load_back_threshold).
	LoadBackThreshold int64
	// HoldWriteBacks makes every write-back copy keep a host protection (as
	// [Tree.ProtectHost]) from the moment it is written, and lists the node
	// for [Tree.TakeWriteBacks]: a storage tier backs these copies up and
	// releases them when its own write lands. Default false.
	HoldWriteBacks bool
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	setDefault(&c.PageSize, 1)
	setDefault(&c.CP, 1)
	setDefault(&c.Lanes, LanePages)
	setDefault(&c.Eviction, LRU)
	setDefault(&c.ProtectedHits, 2)
	setDefault(&c.ProtectedShare, 0.8)
	setDefault(&c.WritePolicy, WriteThrough)
	if c.WriteThroughThreshold == 0 {
		if c.WritePolicy == WriteThrough {
			c.WriteThroughThreshold = 1
		} else {
			c.WriteThroughThreshold = 2
		}
	}
	setDefault(&c.LoadBackThreshold, 10)
	return c
}

// Validate reports every problem with c (after defaults), each naming the
// field and the value found.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(field, want string, got any) {
		errs = append(errs, fmt.Errorf("tree.%s: must be %s (got %v)", field, want, got))
	}
	if c.PageSize < 1 {
		bad("page_size", ">= 1", c.PageSize)
	}
	if c.CP < 1 || c.CP > 1024 {
		bad("cp", "in [1, 1024]", c.CP)
	}
	if !laneNames.Valid(c.Lanes) {
		bad("lanes", "page or token", c.Lanes)
	}
	if c.DeviceTokens <= 0 {
		bad("device_tokens", "> 0", c.DeviceTokens)
	}
	if c.HostTokens < 0 {
		bad("host_tokens", ">= 0", c.HostTokens)
	}
	if !strategyNames.Valid(c.Eviction) {
		bad("eviction", "a known strategy", c.Eviction)
	}
	if c.ProtectedHits < 1 {
		bad("protected_hits", ">= 1", c.ProtectedHits)
	}
	if !(c.ProtectedShare > 0 && c.ProtectedShare <= 1) {
		bad("protected_share", "in (0, 1]", c.ProtectedShare)
	}
	if !writePolicyNames.Valid(c.WritePolicy) {
		bad("write_policy", "a known policy", c.WritePolicy)
	}
	if c.WriteThroughThreshold < 1 {
		bad("write_through_threshold", ">= 1", c.WriteThroughThreshold)
	}
	if c.LoadBackThreshold < 0 {
		bad("load_back_threshold", ">= 0", c.LoadBackThreshold)
	}
	return errors.Join(errs...)
}

// setDefault sets *p to def if it is the zero value.
func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}
