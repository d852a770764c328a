// Package invariants gates expensive self-checks, in the style of pebble's
// internal/invariants: build with -tags invariants to turn on O(n)
// consistency checks after every mutation in tree, planner and sim.
//
// Checks guarded by [Enabled] compile away in normal builds because Enabled
// is a constant.
package invariants
