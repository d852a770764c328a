package hw

import (
	"errors"
	"maps"
	"math"
	"slices"

	"github.com/kvsim/kvsim/internal/fielderr"
)

// GPU is one accelerator's capacity and speeds. Rates are peak datasheet
// figures; the cost model applies efficiencies on top ([Efficiency]).
type GPU struct {
	// Name identifies the GPU in reports, e.g. "h100-sxm".
	Name string `toml:"name"`
	// MemoryMiB is the total device memory in MiB (2^20 bytes) exactly as
	// `nvidia-smi --query-gpu=memory.total` prints it, which is what
	// SGLang's get_device_memory_capacity returns and compares with its
	// 20/35/60/90/160 * 1024 thresholds (so SGLang's "GB" are GiB). It is a
	// little less than the marketing size: an "80 GB" H100 reports 81559.
	// > 0.
	MemoryMiB int64 `toml:"memory_mib"`
	// PeakTFLOPS is the dense (not 2:4 sparse) BF16 tensor-core peak in
	// 10^12 FLOP/s. > 0.
	PeakTFLOPS float64 `toml:"peak_tflops"`
	// HBMGBps is the device memory bandwidth in 10^9 B/s. > 0.
	HBMGBps float64 `toml:"hbm_gbps"`
	// NVLinkGBps is the GPU-to-GPU bandwidth per direction in 10^9 B/s used
	// by tensor-parallel all-reduces: NVLink, or PCIe peer-to-peer for a GPU
	// without NVLink. > 0.
	NVLinkGBps float64 `toml:"nvlink_gbps"`
	// HostLinkGBps is the host (CPU DRAM) link bandwidth per direction in
	// 10^9 B/s (PCIe x16, or NVLink-C2C on Grace systems): the HiCache L2
	// transfer ceiling. Real copies reach about 80-90% of it. > 0.
	HostLinkGBps float64 `toml:"host_link_gbps"`
	// HostLinkLatencyUs is the fixed cost of one host<->device copy
	// (launch and completion) in microseconds. >= 0.
	HostLinkLatencyUs float64 `toml:"host_link_latency_us"`
}

// DefaultHostLinkEfficiency is the share of [GPU.HostLinkGBps] a HiCache
// copy reaches unless a study sets its own: real copies reach about 80-90%
// of the link, and 0.85 is the middle of that range.
const DefaultHostLinkEfficiency = 0.85

// HostCopyBandwidth returns the bytes per second one host<->device copy
// reaches at efficiency eff, the share of the host link it uses; eff 0
// means [DefaultHostLinkEfficiency].
func (g GPU) HostCopyBandwidth(eff float64) float64 {
	if eff == 0 {
		eff = DefaultHostLinkEfficiency
	}
	return g.HostLinkGBps * 1e9 * eff
}

// PCIe x16 per direction: 16 lanes * GT/s * 128/130 encoding / 8 bits.
// Gen4 16 GT/s gives 31.5 GB/s, Gen5 32 GT/s gives 63.0 GB/s (NVIDIA's
// datasheets round these to "64 GB/s" and "128 GB/s" bidirectional).
const (
	pcie4x16GBps = 31.5
	pcie5x16GBps = 63.0
	// hostCopyLatencyUs is a typical cudaMemcpyAsync launch-to-completion
	// time for a small pinned copy (5-10 µs measured on PCIe systems); not a
	// datasheet figure.
	hostCopyLatencyUs = 10
)

// gpuPresets come from the vendors' datasheets; MemoryMiB is what
// nvidia-smi reports on each part.
var gpuPresets = map[string]GPU{
	// NVIDIA H100 SXM5 80GB datasheet: BF16 tensor core 1,979 TFLOPS with
	// sparsity (989.4 dense), HBM3 3.35 TB/s, NVLink 900 GB/s total (450 per
	// direction), PCIe Gen5 x16. nvidia-smi: 81559 MiB.
	"h100-sxm": {Name: "h100-sxm", MemoryMiB: 81559, PeakTFLOPS: 989.4, HBMGBps: 3350,
		NVLinkGBps: 450, HostLinkGBps: pcie5x16GBps, HostLinkLatencyUs: hostCopyLatencyUs},
	// NVIDIA H200 SXM datasheet: 141 GB HBM3e at 4.8 TB/s, same tensor cores
	// as H100 (989.4 dense BF16), NVLink 900 GB/s total, PCIe Gen5 x16.
	// nvidia-smi: 143771 MiB.
	"h200": {Name: "h200", MemoryMiB: 143771, PeakTFLOPS: 989.4, HBMGBps: 4800,
		NVLinkGBps: 450, HostLinkGBps: pcie5x16GBps, HostLinkLatencyUs: hostCopyLatencyUs},
	// NVIDIA A100 80GB SXM datasheet: BF16 tensor core 312 TFLOPS dense,
	// HBM2e 2,039 GB/s, NVLink 600 GB/s total (300 per direction), PCIe Gen4
	// x16. nvidia-smi: 81920 MiB.
	"a100-80g": {Name: "a100-80g", MemoryMiB: 81920, PeakTFLOPS: 312, HBMGBps: 2039,
		NVLinkGBps: 300, HostLinkGBps: pcie4x16GBps, HostLinkLatencyUs: hostCopyLatencyUs},
	// NVIDIA L40S datasheet: BF16 tensor core 362.05 TFLOPS dense (733 with
	// sparsity), 48 GB GDDR6 at 864 GB/s, no NVLink (TP all-reduces go over
	// PCIe Gen4 x16 peer-to-peer). nvidia-smi: 46068 MiB.
	"l40s": {Name: "l40s", MemoryMiB: 46068, PeakTFLOPS: 362.05, HBMGBps: 864,
		NVLinkGBps: pcie4x16GBps, HostLinkGBps: pcie4x16GBps, HostLinkLatencyUs: hostCopyLatencyUs},
	// NVIDIA HGX B200 datasheet (8 GPUs): FP16/BF16 tensor core 36 PFLOPS
	// with sparsity, i.e. 2,250 TFLOPS dense per GPU; 1.4 TB HBM3e at 64 TB/s
	// (8 TB/s per GPU); NVLink 5 1.8 TB/s total per GPU (900 per
	// direction); host over PCIe Gen5 x16. nvidia-smi: 183359 MiB.
	"b200": {Name: "b200", MemoryMiB: 183359, PeakTFLOPS: 2250, HBMGBps: 8000,
		NVLinkGBps: 900, HostLinkGBps: pcie5x16GBps, HostLinkLatencyUs: hostCopyLatencyUs},
}

// GPUPreset returns the named GPU preset (see [GPUPresets]).
func GPUPreset(name string) (GPU, error) { return preset(gpuPresets, "gpu", name) }

// GPUPresets lists the GPU preset names, sorted.
func GPUPresets() []string { return slices.Sorted(maps.Keys(gpuPresets)) }

// Validate reports every invalid field at once, each named by its key path
// in a study, as a [fielderr.Error] (hw.gpu.<key>).
func (g GPU) Validate() error {
	var errs []error
	bad := func(key, rule string, got any) {
		errs = append(errs, fielderr.New(fielderr.Key("hw", "gpu", key), "%s (got %v)", rule, got))
	}
	if g.MemoryMiB <= 0 {
		bad("memory_mib", "must be > 0", g.MemoryMiB)
	}
	positive := func(key string, v float64) {
		if !(v > 0) || math.IsInf(v, 0) {
			bad(key, "must be > 0", v)
		}
	}
	positive("peak_tflops", g.PeakTFLOPS)
	positive("hbm_gbps", g.HBMGBps)
	positive("nvlink_gbps", g.NVLinkGBps)
	positive("host_link_gbps", g.HostLinkGBps)
	if !(g.HostLinkLatencyUs >= 0) || math.IsInf(g.HostLinkLatencyUs, 0) {
		bad("host_link_latency_us", "must be >= 0", g.HostLinkLatencyUs)
	}
	// Upper bounds far past any real GPU, so that the sizing's products
	// stay inside int64.
	for _, c := range []struct {
		key string
		v   float64
		max float64
	}{
		{"memory_mib", float64(g.MemoryMiB), 1 << 30}, {"peak_tflops", g.PeakTFLOPS, 1e9}, {"hbm_gbps", g.HBMGBps, 1e9},
		{"nvlink_gbps", g.NVLinkGBps, 1e9}, {"host_link_gbps", g.HostLinkGBps, 1e9}, {"host_link_latency_us", g.HostLinkLatencyUs, 1e9},
	} {
		if c.v > c.max && !math.IsInf(c.v, 1) { // +Inf is refused above
			bad(c.key, "must be at most "+plainNum(c.max), plainNum(c.v))
		}
	}
	return errors.Join(errs...)
}
