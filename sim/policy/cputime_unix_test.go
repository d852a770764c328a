//go:build unix

package policy

import "syscall"

// processCPUNanos returns the CPU time (user and system, every thread) the
// process has used so far, and whether it could be read.
func processCPUNanos() (int64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), true
}
