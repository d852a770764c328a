//go:build !unix

package policy

// processCPUNanos cannot read the CPU time here.
func processCPUNanos() (int64, bool) { return 0, false }
