package main

import (
	"syscall"
	"testing"
)

// BenchmarkSimDefault runs `kvsim sim --json` end to end on the bundled
// default (the Mooncake conversation trace, 12,031 requests, on the
// default server): trace decoding, the simulation and the summary. It
// reports simulated requests per wall second and per CPU second of the
// process (user + system, GC included), which a shared machine disturbs
// much less than the wall clock.
func BenchmarkSimDefault(b *testing.B) {
	const requests = 12031
	cpu0 := processCPU(b)
	for b.Loop() {
		if code, _, stderr := runCLI(b, "sim", "--json"); code != 0 {
			b.Fatalf("kvsim sim: exit %d: %s", code, stderr)
		}
	}
	cpu := processCPU(b) - cpu0
	b.ReportMetric(float64(requests)*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
	b.ReportMetric(float64(requests)*float64(b.N)/cpu, "requests/cpu-s")
}

// processCPU returns the process's user and system CPU time in seconds.
func processCPU(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
