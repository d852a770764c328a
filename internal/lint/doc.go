// Package lint holds repository-wide checks, run as ordinary tests
// (go test ./internal/lint). Each check is a function of a module root
// that returns its findings, "file:line:col: what <- what to do instead"
// in pebble's style:
//
//   - [Imports]: packages import only "downwards" in the layering
//     tree, traces <- planner <- sim <- fleet <- replay <- configs <-
//     calibrate <- study <- cmd ([Layers]), and within a top-level
//     directory in the order [SubLayers] gives its packages (sim/engine,
//     sim/hw and sim/policy below the server models sim and sim/llamacpp,
//     which do not import each other); internal/*
//     is usable by all, except that only tests may import the test helpers
//     ([TestOnly]: internal/enginetest, internal/golden, internal/testutil),
//     and an external test package (x_test) may import any package of its
//     own directory;
//   - [Determinism]: the non-test code of the simulator core ([Core]: tree,
//     planner, sim, traces) calls no wall clock or timer ([Banned]), no
//     global math/rand or math/rand/v2 function, imports no crypto/rand,
//     and has no go or select statements.
//
// The tests run both on the repository, which must have no findings, and
// on testdata/fake, a tiny module with one violation of each kind, whose
// findings they compare with the exact messages: a check that stops
// finding what it should fails its fixture test.
package lint
