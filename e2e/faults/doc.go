// Package faults is kvsim's fault-injection suite: the kvsim binary run as
// a user runs it, on inputs and in conditions that break naive programs,
// each case asserting what a user may rely on (docs/design.md, "When
// things go wrong"):
//
//   - the exit code: 0 for success, 1 when the run failed, 2 for bad flags
//     or a bad config;
//   - a message on stderr that names the file and, for bad input, the
//     position and what was expected; never a Go panic or runtime trace;
//   - peak memory (the child's maximum RSS) under the bound the case
//     states;
//   - every file left behind is valid: whole lines that read back, or no
//     file at all.
//
// The surfaces: the trace readers (empty, truncated, binary, NaN, huge
// numbers, deep nesting, invalid UTF-8, corrupt compression, pipes),
// configs at and beyond their bounds, standard output on /dev/full, output
// on a small tmpfs (as root; a file-size limit otherwise), and kvsim
// capture and kvsim study interrupted by SIGINT, SIGTERM and SIGKILL.
//
// The suite is behind the build tag faults and runs with
//
//	make faults      # go test -tags faults -count=1 ./e2e/faults/
//
// which make ci runs. It builds bin/kvsim's equivalent into a temporary
// folder first.
package faults
