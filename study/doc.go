// Package study turns a capacity question into a grid of kvsim simulations
// and an answer: a study file names a base server configuration (a
// configs TOML file, or inline tables of the same schema), the keys to
// sweep, and an objective; [Run] simulates every point of the grid in
// parallel, appends each result to results.jsonl as it finishes (so an
// interrupted run resumes where it stopped), and writes results.csv, the
// plots and report.md with the best point for the objective.
//
// # Points
//
// The grid is the product of the axes in file order: every [sweep] key,
// then every [[zip]] group (keys whose values move together); the first
// axis varies slowest, and a point's index is its position in that order.
// A point is made by editing the decoded base document (set each swept key
// path to its value) and re-parsing it with configs.Parse, so every point
// gets the server schema's strict validation; its errors are reported at
// the study file's [sweep] line that caused them. Unknown key paths are
// found against the schema (configs.File's toml tags) before anything runs.
//
// # Determinism and parallelism
//
// Each point is an independent, deterministic simulation (package sim), so
// a point's result does not depend on which worker ran it or when. Lines
// are appended to results.jsonl in completion order with one write and an
// fsync each; when the run ends the file is rewritten in point order. The
// table, CSV, plots and report are computed from that file only, so a whole
// run, a resumed run, and merged shards ([Merge]) give byte-identical
// results.jsonl, results.csv and report.md. Wall-clock time appears only
// in the progress output.
//
// # Identity
//
// A point's digest is the sha256 of its TOML document with the trace path
// replaced by the sha256 of the trace's bytes; the study's digest covers
// the axes and every point digest. Resuming and merging refuse results of
// another study, whatever the title, objective or output settings.
//
// # Not modelled
//
// Points run one replica each (as kvsim sim does); a sweep over dp_size
// does not simulate a load balancer. A base that is a fleet file
// ([[fleet.groups]]) runs every point as a fleet behind its router, as
// kvsim sim --config does, and may sweep router.KEY,
// fleet.groups.NAME.count and fleet.groups.NAME.set.KEY (study/fleet.go);
// its records carry [FleetMetrics]. The miss-ratio curve from the trace
// is an ideal LRU prefix cache with no timing; the simulated points on the
// same figure include the scheduler, chunking, write policies and
// eviction order, so they need not lie on it. See docs/studies.md.
package study
