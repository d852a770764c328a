package policy

import (
	"errors"
	"fmt"
	"strings"
)

// Policy names one of the two L1/L2 residency policies of SGLang's policy
// simulator, or kvsim's offline optimum [Belady]. The zero value is
// invalid.
type Policy int

// The policies, with the names SGLang's simulator accepts (it has no aliases).
const (
	// MainWriteThrough is "main_write_through": count hits per page and copy
	// a page to host once its count reaches the threshold and its parent is
	// on host (or is the root); L2 evicts host-only leaves only.
	MainWriteThrough Policy = 1 + iota
	// BoundaryL1L2 is "boundary_l1_l2": reserve host copies for the whole
	// request path (all or nothing), evict duplicate host copies before
	// host-only leaves, and demote pages to host on L1 eviction.
	BoundaryL1L2
	// Belady is "belady", kvsim's own and not SGLang's: L1 only, evicting
	// the page whose next reference in the whole trace is furthest
	// (Belady's MIN), the most L1 hits any eviction policy can get. It
	// needs the trace in advance, so only [Run] replays it; see doc.go,
	// "The offline optimum".
	Belady
)

var policyNames = [...]string{
	MainWriteThrough: "main_write_through",
	BoundaryL1L2:     "boundary_l1_l2",
	Belady:           "belady",
}

// String returns the policy's SGLang name.
func (p Policy) String() string {
	if p > 0 && int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Policies lists SGLang's policies in SGLang's order (its
// SUPPORTED_POLICIES); the command line runs them when none is named.
// [Belady] is not among them.
func Policies() []Policy { return []Policy{MainWriteThrough, BoundaryL1L2} }

// allPolicies is Policies and Belady: the names ParsePolicy accepts.
func allPolicies() []Policy { return []Policy{MainWriteThrough, BoundaryL1L2, Belady} }

// ErrUnknownPolicy is matched (errors.Is) by the error of [ParsePolicy].
var ErrUnknownPolicy = errors.New("unknown policy")

// ParsePolicy maps a policy name (SGLang's two, or "belady") to a Policy.
// Names are exact, as in SGLang (no case folding, no aliases); surrounding
// spaces are ignored, as SGLang strips each comma-separated name.
func ParsePolicy(name string) (Policy, error) {
	n := strings.TrimSpace(name)
	for _, p := range allPolicies() {
		if p.String() == n {
			return p, nil
		}
	}
	names := make([]string, 0, len(policyNames))
	for _, p := range allPolicies() {
		names = append(names, p.String())
	}
	return 0, fmt.Errorf("%w %q (want one of %s)", ErrUnknownPolicy, name, strings.Join(names, ", "))
}

// Config sets up one simulation.
type Config struct {
	// Policy is the residency policy. Default MainWriteThrough (SGLang's
	// command line runs both policies when none is named; its simulator
	// class has no default).
	Policy Policy
	// L1Pages is the device (L1) capacity in pages, >= 0. Default 0.
	L1Pages int
	// L2Pages is the host (L2) capacity in pages, >= 0. Default 0 (no
	// host tier: every host allocation fails and is counted). Belady
	// models L1 only and requires 0.
	L2Pages int
	// WriteThroughThreshold is the per-page hit count at which
	// MainWriteThrough copies a page to host, >= 1. Default 1 (SGLang's
	// default). BoundaryL1L2 and Belady ignore it.
	WriteThroughThreshold int
}

// Default returns the defaults of SGLang's simulator: write-through
// threshold 1, with MainWriteThrough and empty tiers.
func Default() Config {
	return Config{Policy: MainWriteThrough, WriteThroughThreshold: 1}
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if c.Policy != MainWriteThrough && c.Policy != BoundaryL1L2 && c.Policy != Belady {
		errs = append(errs, fmt.Errorf("policy: must be main_write_through, boundary_l1_l2 or belady (got %v)", c.Policy))
	}
	if c.L1Pages < 0 {
		errs = append(errs, fmt.Errorf("l1_pages: must be >= 0 (got %d)", c.L1Pages))
	}
	if c.L2Pages < 0 {
		errs = append(errs, fmt.Errorf("l2_pages: must be >= 0 (got %d)", c.L2Pages))
	} else if c.Policy == Belady && c.L2Pages != 0 {
		errs = append(errs, fmt.Errorf("l2_pages: must be 0 under belady, which models L1 only (got %d)", c.L2Pages))
	}
	if c.WriteThroughThreshold <= 0 {
		errs = append(errs, fmt.Errorf("write_through_threshold: must be > 0 (got %d)", c.WriteThroughThreshold))
	}
	return errors.Join(errs...)
}
