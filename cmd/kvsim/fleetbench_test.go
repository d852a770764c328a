package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
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
// built by the same factory, alone; each run starts with the heap returned
// to the system ([measurePhase]). It reports fleet/singles, the ratio of
// the two CPU times, and for each side ([reportPhases]) its requests per
// CPU second and what makes up its cost: page faults, bytes and objects
// allocated, collections, the peak heap and the peak RSS.
func BenchmarkFleetVsSingles(b *testing.B) {
	recs := fleetBenchTrace(b)
	for _, n := range []int{4, 16} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			fs := newFleetVsSingles(b, recs, n)
			var fleet, singles phaseCost
			for b.Loop() {
				fleet.add(fs.runFleet(b))
				singles.add(fs.runSingles(b))
			}
			b.ReportMetric(fleet.cpu/singles.cpu, "fleet/singles")
			reportPhases(b, len(recs), map[string]phaseCost{"fleet": fleet, "singles": singles})
		})
	}
}

// BenchmarkFleetVsSinglesPhase runs one side of [BenchmarkFleetVsSingles]
// only (phase=fleet: the fleet's run; phase=singles: the N single-server
// runs), each run measured as there, so that -cpuprofile and -memprofile
// show one side's costs alone.
func BenchmarkFleetVsSinglesPhase(b *testing.B) {
	recs := fleetBenchTrace(b)
	for _, n := range []int{4, 16} {
		for _, phase := range []string{"fleet", "singles"} {
			b.Run(fmt.Sprintf("replicas=%d/phase=%s", n, phase), func(b *testing.B) {
				fs := newFleetVsSingles(b, recs, n)
				run := fs.runFleet
				if phase == "singles" {
					run = fs.runSingles
				}
				var c phaseCost
				for b.Loop() {
					c.add(run(b))
				}
				reportPhases(b, len(recs), map[string]phaseCost{phase: c})
			})
		}
	}
}

// fleetBenchTrace is the bundled conversation trace's records.
func fleetBenchTrace(b *testing.B) []traces.Record {
	_, recs := readTrace(b, "../../configs/traces/mooncake_conversation.jsonl.zst")
	return recs
}

// fleetVsSingles is a fleet of N default servers behind round_robin on
// recs, and round_robin's N sub-traces of recs.
type fleetVsSingles struct {
	built *configs.FleetBuilt
	recs  []traces.Record
	subs  [][]traces.Record
}

func newFleetVsSingles(b *testing.B, recs []traces.Record, n int) *fleetVsSingles {
	f, err := configs.Load(fleetBenchConfig(b, "../../configs/traces/mooncake_conversation.jsonl.zst", "mooncake", 1, n, "round_robin"))
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
	return &fleetVsSingles{built: built, recs: recs, subs: subs}
}

// runFleet runs the fleet on the whole trace.
func (fs *fleetVsSingles) runFleet(b *testing.B) phaseCost {
	return measurePhase(b, func() error {
		_, err := fs.built.Factory.RunFleet(engine.NewSliceSource(fs.recs))
		return err
	})
}

// runSingles runs each sub-trace alone on its replica's server: the sum
// of the runs' costs, their peaks the largest run's.
func (fs *fleetVsSingles) runSingles(b *testing.B) phaseCost {
	var c phaseCost
	for i, sub := range fs.subs {
		c.add(measurePhase(b, func() error {
			_, err := fs.built.Factory.Replicas[i].Factory.Run(engine.NewSliceSource(sub))
			return err
		}))
	}
	return c
}

// phaseCost is what runs cost the process: counts are summed over runs,
// peaks are the largest run's.
type phaseCost struct {
	cpu      float64 // CPU seconds, user + system
	minflt   int64   // minor page faults
	alloc    uint64  // bytes allocated
	mallocs  uint64  // objects allocated
	gcs      uint32  // collections the runs triggered (not the one after each)
	peakHeap uint64  // the largest heap goal of a run's collections, bytes
	peakRSS  int64   // the largest resident set of a run, KiB (0: unknown)
}

func (c *phaseCost) add(o phaseCost) {
	c.cpu += o.cpu
	c.minflt += o.minflt
	c.alloc += o.alloc
	c.mallocs += o.mallocs
	c.gcs += o.gcs
	c.peakHeap = max(c.peakHeap, o.peakHeap)
	c.peakRSS = max(c.peakRSS, o.peakRSS)
}

// reportPhases reports each phase's requests per CPU second (of requests
// per run) and its costs per benchmark iteration, each metric prefixed
// with the phase's name.
func reportPhases(b *testing.B, requests int, phases map[string]phaseCost) {
	n := float64(b.N)
	for name, c := range phases {
		b.ReportMetric(float64(requests)*n/c.cpu, name+"-requests/cpu-s")
		b.ReportMetric(float64(c.minflt)/n, name+"-minflt/op")
		b.ReportMetric(float64(c.alloc)/n/(1<<20), name+"-alloc-MB/op")
		b.ReportMetric(float64(c.mallocs)/n, name+"-allocs/op")
		b.ReportMetric(float64(c.gcs)/n, name+"-GCs/op")
		b.ReportMetric(float64(c.peakHeap)/(1<<20), name+"-peak-heap-MB")
		if c.peakRSS > 0 {
			b.ReportMetric(float64(c.peakRSS)/1024, name+"-peak-RSS-MB")
		}
	}
}

// measurePhase returns what run cost the process, its garbage collected
// inside it, after every page of the heap was returned to the system, so
// that run faults in its own memory as a process of its own would (on a
// VM a page fault can cost more than the simulation's work on the page).
// The peak heap is the largest heap goal the collector set during run
// (the heap grows to the goal before the next collection); the peak RSS
// is the process's, reset before run (Linux's clear_refs).
func measurePhase(b *testing.B, run func() error) phaseCost {
	debug.FreeOSMemory()
	resetPeakRSS()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	ru0 := rusage(b)
	w := watchHeapGoal()
	if err := run(); err != nil {
		b.Fatal(err)
	}
	peak := w.stop()
	ru1 := rusage(b)
	runtime.ReadMemStats(&m1)
	c := phaseCost{
		minflt: ru1.Minflt - ru0.Minflt, alloc: m1.TotalAlloc - m0.TotalAlloc, mallocs: m1.Mallocs - m0.Mallocs,
		gcs: m1.NumGC - m0.NumGC, peakHeap: peak, peakRSS: peakRSSSinceReset(),
	}
	runtime.GC()
	c.cpu = cpuSeconds(rusage(b)) - cpuSeconds(ru0)
	return c
}

func rusage(b *testing.B) syscall.Rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru
}

func cpuSeconds(ru syscall.Rusage) float64 {
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// resetPeakRSS resets the process's peak resident set (VmHWM) to its
// current one, where Linux allows it.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSSSinceReset is the process's peak resident set (VmHWM) in KiB, 0
// when it cannot be read.
func peakRSSSinceReset() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kib
		}
	}
	return 0
}

// heapGoalWatch records the largest heap goal of the collections that end
// while it runs: a finalizer re-armed at every collection reads it.
type heapGoalWatch struct {
	peak    atomic.Uint64
	stopped atomic.Bool
}

func watchHeapGoal() *heapGoalWatch {
	w := &heapGoalWatch{}
	w.sample()
	w.arm()
	return w
}

func (w *heapGoalWatch) arm() {
	runtime.SetFinalizer(new([16]byte), func(*[16]byte) {
		if !w.stopped.Load() {
			w.sample()
			w.arm()
		}
	})
}

func (w *heapGoalWatch) sample() {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	g := s[0].Value.Uint64()
	for p := w.peak.Load(); g > p && !w.peak.CompareAndSwap(p, g); p = w.peak.Load() {
	}
}

// stop samples the goal once more and returns the largest.
func (w *heapGoalWatch) stop() uint64 {
	w.sample()
	w.stopped.Store(true)
	return w.peak.Load()
}
