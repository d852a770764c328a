package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// fleetBenchConfig is configs/default.toml as a fleet of replicas copies
// of the default server behind policy, on trace (of format) at rateScale
// times its rate.
func fleetBenchConfig(b *testing.B, trace, format string, rateScale, replicas int, policy string) string {
	b.Helper()
	def, err := os.ReadFile("../../configs/default.toml")
	if err != nil {
		b.Fatal(err)
	}
	cfg := strings.Replace(string(def), `trace = "traces/mooncake_conversation.jsonl.zst"`, fmt.Sprintf("trace = %q", trace), 1)
	cfg = strings.Replace(cfg, `format = "mooncake"`, fmt.Sprintf("format = %q\nrate_scale = %d", format, rateScale), 1)
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
			cfg := fleetBenchConfig(b, repeatTrace(b, copies), "kvsim", 16, 16, "cache_aware")
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

// BenchmarkFleetVsSingles compares a fleet with the single servers it is
// made of (issue 21: a fleet of N costs at most 1.3 times the sum of N
// single-server runs on the same requests). Each round runs the bundled
// conversation trace (12,031 requests) on a fleet of N default servers
// behind round_robin, then round_robin's N sub-traces each on one server
// built by the same factory, alone; the CPU time of the process (user +
// system: [phaseCPU]) is measured around
// each. It reports fleet/singles, the ratio of the two CPU times, and the
// requests per CPU second of each.
func BenchmarkFleetVsSingles(b *testing.B) {
	const trace = "../../configs/traces/mooncake_conversation.jsonl.zst"
	_, recs := readTrace(b, trace)
	for _, n := range []int{4, 16} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			f, err := configs.Load(fleetBenchConfig(b, trace, "mooncake", 1, n, "round_robin"))
			if err != nil {
				b.Fatal(err)
			}
			built, err := f.BuildFleet(configs.ServerOptions{NoTimeline: true}, 0)
			if err != nil {
				b.Fatal(err)
			}
			subs := make([][]traces.Record, n)
			for i, r := range recs {
				subs[i%n] = append(subs[i%n], r)
			}
			var fleetCPU, singlesCPU float64
			for b.Loop() {
				fleetCPU += phaseCPU(b, func() error {
					_, err := built.Factory.RunFleet(engine.NewSliceSource(recs))
					return err
				})
				for i, sub := range subs {
					singlesCPU += phaseCPU(b, func() error {
						_, err := built.Factory.Replicas[i].Factory.Run(engine.NewSliceSource(sub))
						return err
					})
				}
			}
			reqs := float64(len(recs) * b.N)
			b.ReportMetric(fleetCPU/singlesCPU, "fleet/singles")
			b.ReportMetric(reqs/fleetCPU, "fleet-requests/cpu-s")
			b.ReportMetric(reqs/singlesCPU, "singles-requests/cpu-s")
		})
	}
}

// phaseCPU returns the process's CPU seconds in run, its garbage
// collected inside it, after every page of the heap was returned to the
// system, so that run faults in its own memory as a process of its own
// would (on a VM a page fault can cost more than the simulation's work on
// the page).
func phaseCPU(b *testing.B, run func() error) float64 {
	debug.FreeOSMemory()
	c0 := processCPU(b)
	if err := run(); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	return processCPU(b) - c0
}
