package hw_test

import (
	"fmt"

	"github.com/kvsim/kvsim/sim/hw"
)

// qwenOnH200 returns the Qwen2.5-14B model preset and the H200 GPU
// preset, the examples' deployment.
func qwenOnH200() (hw.Model, hw.GPU) {
	m, err := hw.ModelPreset("qwen2.5-14b")
	if err != nil {
		panic(err)
	}
	g, err := hw.GPUPreset("h200")
	if err != nil {
		panic(err)
	}
	return m, g
}

// Size explains how SGLang would lay out memory for Qwen2.5-14B on one
// H200 with its default server arguments.
func ExampleSize() {
	m, g := qwenOnH200()
	z, err := hw.Size(m, g, hw.DefaultServer())
	if err != nil {
		panic(err)
	}
	for _, line := range z.Explain() {
		fmt.Println(line)
	}
	// Output:
	// qwen2.5-14b on h200, tp 1, dp 1, dcp 1, page 1 (per rank unless said)
	// gpu memory: 143771 MiB (140.40 GiB), nvidia-smi memory.total as SGLang reads it
	// chunked_prefill_size: 8192 (auto from the GPU-memory table); max_prefill_tokens 16384
	// cuda_graph_max_bs: 256 (auto from the GPU-memory table and tp)
	// reserved: 13440 MiB = 512 + 8192*1.5 (activations) + 256*2 (cuda graphs) + tp 1/8*1024
	// mem_fraction_static: 0.907 = round((143771 - 13440) / 143771, 3)
	// free before weights: 139.40 GiB = 140.40 GiB - 1024 MiB runtime overhead (CUDA context, NCCL)
	// weights: 27.51 GiB = 14770033664 params * 2 B / tp 1
	// kv cell: 196608 B/token = max(1, 8 kv heads / tp 1) = 8 heads * (head_dim 128 + v_head_dim 128) * 48 layers * 2 B
	// kv budget: 98.93 GiB = (139.40 GiB - 27.51 GiB) - 139.40 GiB * (1 - 0.907)
	// device pool: 540266 tokens = 106220670664 B // 196608 B/token = 540266, rounded down to whole pages of 1
	// request slots: 4096 = clamp(int(540266 / context_len 32768 * 512), 2048, 4096)
	// max_running_requests: 4096 = min(4096 request slots, 540266 // 2)
	// host pool: 1080533 tokens = (int(540266 * 2) // 1 + 1) * 1, 197.85 GiB pinned
}

// A roofline prices prefill forwards and decode steps; a cache hit removes
// most of a prompt's cost.
func ExampleNewRoofline() {
	m, g := qwenOnH200()
	r, err := hw.NewRoofline(m, g, hw.DefaultServer(), hw.DefaultEfficiency())
	if err != nil {
		panic(err)
	}
	ms := func(ns int64) string { return fmt.Sprintf("%.2f ms", float64(ns)/1e6) }
	fmt.Println("prefill 8192 new:               ", ms(r.PrefillTime([]hw.Extend{{New: 8192}})))
	fmt.Println("prefill 192 new after 8000 hits:", ms(r.PrefillTime([]hw.Extend{{New: 192, Cached: 8000}})))
	fmt.Println("decode 64 requests of 2k tokens:", ms(r.DecodeTime(64, 64*2048)))
	// Output:
	// prefill 8192 new:                432.35 ms
	// prefill 192 new after 8000 hits: 12.64 ms
	// decode 64 requests of 2k tokens: 14.71 ms
}
