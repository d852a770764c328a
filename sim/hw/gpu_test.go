package hw

import (
	"math"
	"testing"
)

func nan() float64 { return math.NaN() }

func TestGPUPresets(t *testing.T) {
	want := map[string]int64{"a100-80g": 81920, "b200": 183359, "h100-sxm": 81559, "h200": 143771, "l40s": 46068}
	names := GPUPresets()
	if len(names) != len(want) {
		t.Fatalf("GPUPresets() = %v", names)
	}
	for _, n := range names {
		g := mustGPU(t, n)
		if err := g.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v", n, err)
		}
		if g.Name != n || g.MemoryMiB != want[n] {
			t.Errorf("%s: Name %q MemoryMiB %d, want %d", n, g.Name, g.MemoryMiB, want[n])
		}
	}
}

func TestGPUValidate(t *testing.T) {
	checkErrors(t, GPU{HostLinkLatencyUs: -1}.Validate(), []string{
		"hw.gpu.memory_mib: must be > 0 (got 0)",
		"hw.gpu.peak_tflops: must be > 0 (got 0)",
		"hw.gpu.hbm_gbps: must be > 0 (got 0)",
		"hw.gpu.nvlink_gbps: must be > 0 (got 0)",
		"hw.gpu.host_link_gbps: must be > 0 (got 0)",
		"hw.gpu.host_link_latency_us: must be >= 0 (got -1)",
	})
	g := mustGPU(t, "h100-sxm")
	g.HBMGBps = math.Inf(1)
	checkErrors(t, g.Validate(), []string{"hw.gpu.hbm_gbps: must be > 0 (got +Inf)"})
}

// TestHostCopyBandwidth checks that a zero efficiency takes the default
// share of the host link and a set one is used as given.
func TestHostCopyBandwidth(t *testing.T) {
	g := mustGPU(t, "h100-sxm")
	link, def := 63.0e9, 0.85 // PCIe Gen5 x16 per direction; the default share
	for _, c := range []struct{ eff, want float64 }{
		{0, link * def},
		{1, link},
		{0.5, 31.5e9},
	} {
		if got := g.HostCopyBandwidth(c.eff); got != c.want {
			t.Errorf("HostCopyBandwidth(%v) = %v, want %v", c.eff, got, c.want)
		}
	}
}
