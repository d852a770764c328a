// Package lint holds repository-wide checks that run as ordinary tests
// (go test ./internal/lint):
//
//   - import direction: packages import only "downwards" in the layering
//     tree, traces <- planner <- sim <- replay <- configs <- study <- cmd, with
//     internal/* usable by all;
//   - determinism: the simulator core (tree, planner, sim, traces) calls no
//     wall clock, no global math/rand, no crypto/rand, and starts no
//     goroutines and uses no select statements.
//
// Messages follow pebble's style: position, offending construct, and what to
// use instead.
package lint
