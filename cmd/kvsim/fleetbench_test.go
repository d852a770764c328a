package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fleetBenchConfig is configs/default.toml as a fleet of replicas copies
// of the default server behind policy, on trace (a kvsim-format file) at
// rateScale times its rate.
func fleetBenchConfig(b *testing.B, trace string, rateScale, replicas int, policy string) string {
	b.Helper()
	def, err := os.ReadFile("../../configs/default.toml")
	if err != nil {
		b.Fatal(err)
	}
	cfg := strings.Replace(string(def), `trace = "traces/mooncake_conversation.jsonl.zst"`, fmt.Sprintf("trace = %q", trace), 1)
	cfg = strings.Replace(cfg, `format = "mooncake"`, fmt.Sprintf("format = \"kvsim\"\nrate_scale = %d", rateScale), 1)
	cfg += fmt.Sprintf("\n[[fleet.groups]]\nname = \"h200\"\ncount = %d\n\n[router]\npolicy = %q\n", replicas, policy)
	path := filepath.Join(b.TempDir(), "fleet.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// repeatTrace writes the bundled conversation trace repeated copies
// times back to back (kvsim trace gen repeat) and returns its path.
func repeatTrace(b *testing.B, copies int) string {
	b.Helper()
	out := filepath.Join(b.TempDir(), fmt.Sprintf("x%d.jsonl", copies))
	if code, _, stderr := runCLI(b, "trace", "gen", "repeat", "--copies", fmt.Sprint(copies), "--out", out, "../../configs/traces/mooncake_conversation.jsonl.zst"); code != 0 {
		b.Fatalf("kvsim trace gen repeat: exit %d: %s", code, stderr)
	}
	return out
}

// BenchmarkFleetConversation16x runs `kvsim sim --json` in-process on a
// fleet of 16 default servers behind cache_aware, on the bundled
// conversation trace repeated copies times and replayed at 16 times its
// rate: copies=16 is issue 21's target, 192k requests in one simulated
// hour (under 60 s and 3 GB on 2 cores); copies=4 is its first quarter of
// an hour, quicker to profile. It reports simulated requests per wall
// and CPU second and the process's peak RSS (which includes the trace's
// generation before the timer).
func BenchmarkFleetConversation16x(b *testing.B) {
	const perCopy = 12031
	for _, copies := range []int{4, 16} {
		b.Run(fmt.Sprintf("copies=%d", copies), func(b *testing.B) {
			cfg := fleetBenchConfig(b, repeatTrace(b, copies), 16, 16, "cache_aware")
			requests := float64(perCopy * copies)
			cpu0 := processCPU(b)
			for b.Loop() {
				if code, _, stderr := runCLI(b, "sim", "--config", cfg, "--json"); code != 0 {
					b.Fatalf("kvsim sim: exit %d: %s", code, stderr)
				}
			}
			cpu := processCPU(b) - cpu0
			b.ReportMetric(requests*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
			b.ReportMetric(requests*float64(b.N)/cpu, "requests/cpu-s")
			b.ReportMetric(float64(peakRSS(b))/1024, "peak-RSS-MB")
		})
	}
}

// peakRSS returns the process's peak resident set size in KiB.
func peakRSS(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Maxrss
}
