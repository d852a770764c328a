package hw

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// sizingCase is one Size call with every derived number worked out by hand
// (the arithmetic is in each case's comment; a Python transcription of
// SGLang's formulas gives the same integers).
type sizingCase struct {
	name       string
	model, gpu string
	server     func(*Server)
	want       Sizing // only the fields compared in TestSize
}

var sizingCases = []sizingCase{
	{
		// Qwen2.5-14B, H200, tp 1. gpu_mem 143771 MiB is in [90, 160) GiB:
		// chunk 8192, graph bs 256 (tp < 4).
		// reserved = 512 + 8192*1.5 + 256*2 + 1/8*1024 = 512+12288+512+128 = 13440 MiB.
		// mfs = round((143771-13440)/143771, 3) = round(0.906518, 3) = 0.907.
		// free = (143771-1024) MiB = 149,681,078,272 B; weights = 14,770,033,664*2 = 29,540,067,328 B.
		// rest = free*0.907 - weights = 106,220,670,664 B; cell = 8*256*48*2 = 196,608 B.
		// tokens = 106,220,670,664 // 196,608 = 540,266.
		// slots = clamp(int(540266/32768*512) = 8441, 2048, 4096) = 4096; mrr = min(4096, 270133) = 4096.
		// host = int(540266*2) // 1 + 1 = 1,080,533.
		name: "qwen2.5-14b/h200/tp1", model: "qwen2.5-14b", gpu: "h200",
		want: Sizing{ChunkedPrefillSize: 8192, CUDAGraphMaxBS: 256, ReservedMiB: 13440, MemFractionStatic: 0.907,
			FreeBeforeWeightsBytes: 149681078272, WeightBytes: 29540067328, CellBytes: 196608,
			KVBudgetBytes: 106220670664, DeviceTokens: 540266, ReqPoolSize: 4096, MaxRunningRequests: 4096, HostTokens: 1080533},
	},
	{
		// Llama-3.1-70B, H100 SXM, tp 4: graph bs 512 (tp >= 4).
		// reserved = 512 + 12288 + 1024 + 4/8*1024 = 14336; mfs = round(67223/81559, 3) = round(0.824225, 3) = 0.824.
		// free = 80535 MiB = 84,447,068,160 B; weights = 70,553,706,496*2/4 = 35,276,853,248 B.
		// rest = 84,447,068,160*0.824 - 35,276,853,248 = 34,307,530,915 B; cell = 2 heads*256*80*2 = 81,920.
		// tokens = 418,793; slots = clamp(int(418793/131072*512) = 1635) = 2048; mrr 2048.
		// host = 837,586 + 1 = 837,587.
		name: "llama-3.1-70b/h100-sxm/tp4", model: "llama-3.1-70b", gpu: "h100-sxm", server: func(s *Server) { s.TPSize = 4 },
		want: Sizing{ChunkedPrefillSize: 8192, CUDAGraphMaxBS: 512, ReservedMiB: 14336, MemFractionStatic: 0.824,
			FreeBeforeWeightsBytes: 84447068160, WeightBytes: 35276853248, CellBytes: 81920,
			KVBudgetBytes: 34307530915, DeviceTokens: 418793, ReqPoolSize: 2048, MaxRunningRequests: 2048, HostTokens: 837587},
	},
	{
		// Llama-3.1-8B, A100 80GB (81920 MiB, in [60, 90) GiB): chunk 8192, graph 256.
		// reserved 13440; mfs = round(68480/81920, 3) = round(0.835938, 3) = 0.836.
		// free = 80896 MiB = 84,825,604,096 B; weights = 16,060,522,496 B.
		// rest = 84,825,604,096*0.836 - 16,060,522,496 = 54,853,682,528; cell 131,072.
		// tokens = 418,500; slots 2048 (int(1634.8) below the floor); mrr 2048; host 837,001.
		name: "llama-3.1-8b/a100-80g/tp1", model: "llama-3.1-8b", gpu: "a100-80g",
		want: Sizing{ChunkedPrefillSize: 8192, CUDAGraphMaxBS: 256, ReservedMiB: 13440, MemFractionStatic: 0.836,
			FreeBeforeWeightsBytes: 84825604096, WeightBytes: 16060522496, CellBytes: 131072,
			KVBudgetBytes: 54853682528, DeviceTokens: 418500, ReqPoolSize: 2048, MaxRunningRequests: 2048, HostTokens: 837001},
	},
	{
		// DeepSeek-V3, H200, tp 8: graph 512; reserved = 512 + 12288 + 1024 + 8/8*1024 = 14848.
		// mfs = round(128923/143771, 3) = round(0.896724, 3) = 0.897.
		// weights = 671,026,419,200 * 1 B / 8 = 83,878,302,400 B.
		// rest = 149,681,078,272*0.897 - 83,878,302,400 = 50,385,624,809 B; cell = (512+64)*61*2 = 70,272.
		// tokens = 717,008; slots = clamp(int(717008/163840*512) = 2240) = 2240; mrr 2240; host 1,434,017.
		name: "deepseek-v3/h200/tp8", model: "deepseek-v3", gpu: "h200", server: func(s *Server) { s.TPSize = 8 },
		want: Sizing{ChunkedPrefillSize: 8192, CUDAGraphMaxBS: 512, ReservedMiB: 14848, MemFractionStatic: 0.897,
			FreeBeforeWeightsBytes: 149681078272, WeightBytes: 83878302400, CellBytes: 70272,
			KVBudgetBytes: 50385624809, DeviceTokens: 717008, ReqPoolSize: 2240, MaxRunningRequests: 2240, HostTokens: 1434017},
	},
	{
		// Llama-3.1-8B, H100 SXM (81559 MiB, in [60, 90) GiB), tp 1: reserved 13440;
		// mfs = round(68119/81559, 3) = round(0.835212, 3) = 0.835.
		// rest = 84,447,068,160*0.835 - 16,060,522,496 = 54,452,779,417; cell 131,072.
		// tokens = 415,441; slots 2048; mrr 2048; host = 830,882 + 1 = 830,883.
		name: "llama-3.1-8b/h100-sxm/tp1", model: "llama-3.1-8b", gpu: "h100-sxm", want: llama8bH100(nil),
	},
	{
		// Page 64: tokens = 415441 // 64 * 64 = 415,424; host = (830848 // 64 + 1) * 64 = (12982+1)*64 = 830,912.
		name: "llama-3.1-8b/h100-sxm/page64", model: "llama-3.1-8b", gpu: "h100-sxm", server: func(s *Server) { s.PageSize = 64 },
		want: llama8bH100(func(z *Sizing) { z.DeviceTokens, z.HostTokens = 415424, 830912 }),
	},
	{
		// hicache_size 100 GB overrides the ratio: int(100e9 // 131072) = 762,939, + 1 page = 762,940.
		name: "llama-3.1-8b/h100-sxm/hicache_size", model: "llama-3.1-8b", gpu: "h100-sxm", server: func(s *Server) { s.HiCacheSizeGB = 100 },
		want: llama8bH100(func(z *Sizing) { z.HostTokens = 762940 }),
	},
	{
		// Chunking off: the reserve uses max_prefill_tokens 16384:
		// 512 + 16384*1.5 + 512 + 128 = 25728; mfs = round(55831/81559, 3) = round(0.684548, 3) = 0.685.
		// rest = 84,447,068,160*0.685 - 16,060,522,496 = 41,785,719,193; tokens 318,799; host 637,599.
		name: "llama-3.1-8b/h100-sxm/no-chunking", model: "llama-3.1-8b", gpu: "h100-sxm", server: func(s *Server) { s.ChunkedPrefillSize = -1 },
		want: llama8bH100(func(z *Sizing) {
			z.ChunkedPrefillSize, z.ReservedMiB, z.MemFractionStatic = -1, 25728, 0.685
			z.KVBudgetBytes, z.DeviceTokens, z.HostTokens = 41785719193, 318799, 637599
		}),
	},
	{
		// mem_fraction_static 0.9 set (no reserve): rest = 84,447,068,160*0.9 - 16,060,522,496
		// = 59,941,838,848 (profiled 457,319), capped by max_total_tokens 2000:
		// slots 2048, mrr = min(2048, 2000 // 2) = 1000; host = 4000 + 1 = 4001.
		name: "llama-3.1-8b/h100-sxm/capped", model: "llama-3.1-8b", gpu: "h100-sxm",
		server: func(s *Server) { s.MemFractionStatic = 0.9; s.MaxTotalTokens = 2000 },
		want: llama8bH100(func(z *Sizing) {
			z.ReservedMiB, z.MemFractionStatic, z.KVBudgetBytes = 0, 0.9, 59941838848
			z.DeviceTokens, z.MaxRunningRequests, z.HostTokens = 2000, 1000, 4001
		}),
	},
	{
		// max_running_requests 100 over dp 2: min(100 // 2, 415441 // 2) = 50.
		name: "llama-3.1-8b/h100-sxm/mrr", model: "llama-3.1-8b", gpu: "h100-sxm",
		server: func(s *Server) { s.MaxRunningRequests = 100; s.DPSize = 2 },
		want:   llama8bH100(func(z *Sizing) { z.MaxRunningRequests = 50 }),
	},
	{
		// L40S (46068 MiB, in [35, 60) GiB): chunk 4096, graph 32, no 10 GiB floor below 60 GiB:
		// reserved = 512 + 4096*1.5 + 64 + 128 = 6848; mfs = round(39220/46068, 3) = round(0.851350, 3) = 0.851.
		// free = 45044 MiB = 47,232,057,344 B; weights = int(134,515,008*1.0625) = 142,922,196.
		// rest = 47,232,057,344*0.851 - 142,922,196 = 40,051,558,603; cell = 3*128*30*2 = 23,040.
		// tokens 1,738,348; slots 4096; host 3,476,697.
		name: "smollm-135m/l40s", model: "smollm-135m", gpu: "l40s",
		want: Sizing{ChunkedPrefillSize: 4096, CUDAGraphMaxBS: 32, ReservedMiB: 6848, MemFractionStatic: 0.851,
			FreeBeforeWeightsBytes: 47232057344, WeightBytes: 142922196, CellBytes: 23040,
			KVBudgetBytes: 40051558603, DeviceTokens: 1738348, ReqPoolSize: 4096, MaxRunningRequests: 4096, HostTokens: 3476697},
	},
	{
		// B200 (183359 MiB >= 160 GiB): chunk 16384, graph 512;
		// reserved = 512 + 16384*1.5 + 1024 + 8/8*1024 = 27136; mfs = round(156223/183359, 3) = round(0.852007, 3) = 0.852.
		// tp 8: one KV head per rank, cell 16,384; weights 2,007,565,312; tokens 9,819,830.
		name: "llama-3.1-8b/b200/tp8", model: "llama-3.1-8b", gpu: "b200", server: func(s *Server) { s.TPSize = 8 },
		want: Sizing{ChunkedPrefillSize: 16384, CUDAGraphMaxBS: 512, ReservedMiB: 27136, MemFractionStatic: 0.852,
			FreeBeforeWeightsBytes: 191192104960, WeightBytes: 2007565312, CellBytes: 16384,
			KVBudgetBytes: 160888108113, DeviceTokens: 9819830, ReqPoolSize: 4096, MaxRunningRequests: 4096, HostTokens: 19639661},
	},
	{
		// Llama-3.1-70B on two A100s barely fits: reserved = 512 + 12288 + 512 + 2/8*1024 = 13568,
		// mfs = round(68352/81920, 3) = 0.834; rest = 84,825,604,096*0.834 - 70,553,706,496 = 190,847,320;
		// cell = 4*256*80*2 = 163,840 -> 1164 tokens, mrr = min(2048, 582) = 582; no host pool (ratio 0).
		name: "llama-3.1-70b/a100-80g/tp2", model: "llama-3.1-70b", gpu: "a100-80g",
		server: func(s *Server) { s.TPSize = 2; s.HiCacheRatio = 0 },
		want: Sizing{ChunkedPrefillSize: 8192, CUDAGraphMaxBS: 256, ReservedMiB: 13568, MemFractionStatic: 0.834,
			FreeBeforeWeightsBytes: 84825604096, WeightBytes: 70553706496, CellBytes: 163840,
			KVBudgetBytes: 190847320, DeviceTokens: 1164, ReqPoolSize: 2048, MaxRunningRequests: 582, HostTokens: 0},
	},
}

// llama8bH100 is the sizing of the llama-3.1-8b/h100-sxm/tp1 case with
// edit (if not nil) applied: the cases that change one server argument
// list only the numbers that move.
func llama8bH100(edit func(*Sizing)) Sizing {
	z := Sizing{ChunkedPrefillSize: 8192, CUDAGraphMaxBS: 256, ReservedMiB: 13440, MemFractionStatic: 0.835,
		FreeBeforeWeightsBytes: 84447068160, WeightBytes: 16060522496, CellBytes: 131072,
		KVBudgetBytes: 54452779417, DeviceTokens: 415441, ReqPoolSize: 2048, MaxRunningRequests: 2048, HostTokens: 830883}
	if edit != nil {
		edit(&z)
	}
	return z
}

func TestSize(t *testing.T) {
	for _, c := range sizingCases {
		t.Run(c.name, func(t *testing.T) {
			z := mustSize(t, c.model, c.gpu, c.server)
			w := c.want
			check := func(field string, got, want any) {
				if got != want {
					t.Errorf("%s = %v, want %v", field, got, want)
				}
			}
			check("ChunkedPrefillSize", z.ChunkedPrefillSize, w.ChunkedPrefillSize)
			check("CUDAGraphMaxBS", z.CUDAGraphMaxBS, w.CUDAGraphMaxBS)
			check("ReservedMiB", z.ReservedMiB, w.ReservedMiB)
			check("MemFractionStatic", z.MemFractionStatic, w.MemFractionStatic)
			check("FreeBeforeWeightsBytes", z.FreeBeforeWeightsBytes, w.FreeBeforeWeightsBytes)
			check("WeightBytes", z.WeightBytes, w.WeightBytes)
			check("CellBytes", z.CellBytes, w.CellBytes)
			check("KVBudgetBytes", z.KVBudgetBytes, w.KVBudgetBytes)
			check("DeviceTokens", z.DeviceTokens, w.DeviceTokens)
			check("LogicalDeviceTokens", z.LogicalDeviceTokens, w.DeviceTokens)
			check("ReqPoolSize", z.ReqPoolSize, w.ReqPoolSize)
			check("MaxRunningRequests", z.MaxRunningRequests, w.MaxRunningRequests)
			check("HostTokens", z.HostTokens, w.HostTokens)
			check("HostBytes", z.HostBytes, w.HostTokens*w.CellBytes)
			// The explanation names each derived number.
			text := strings.Join(z.Explain(), "\n")
			for _, n := range []int64{z.DeviceTokens, int64(z.MaxRunningRequests), z.HostTokens, z.CellBytes} {
				if !strings.Contains(text, itoa(n)) {
					t.Errorf("Explain() lacks %d:\n%s", n, text)
				}
			}
		})
	}
}

func itoa(n int64) string {
	var b strings.Builder
	if n == 0 {
		return "0"
	}
	var d []byte
	for ; n > 0; n /= 10 {
		d = append(d, byte('0'+n%10))
	}
	for i := len(d) - 1; i >= 0; i-- {
		b.WriteByte(d[i])
	}
	return b.String()
}

// mustModel returns the model preset name, failing the test if there is
// none.
func mustModel(t testutil.TB, name string) Model {
	t.Helper()
	m, err := ModelPreset(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mustGPU returns the GPU preset name, failing the test if there is none.
func mustGPU(t testutil.TB, name string) GPU {
	t.Helper()
	g, err := GPUPreset(name)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func mustSize(t *testing.T, model, gpu string, edit func(*Server)) Sizing {
	t.Helper()
	m := mustModel(t, model)
	g := mustGPU(t, gpu)
	s := DefaultServer()
	if edit != nil {
		edit(&s)
	}
	z, err := Size(m, g, s)
	if err != nil {
		t.Fatalf("Size() = %v", err)
	}
	return z
}

func TestSizeDCP(t *testing.T) {
	// dcp 8 stripes DeepSeek's KV over the 8 ranks: each rank's pool is the
	// same 717,008 tokens, the replica holds 8 times as many.
	z := mustSize(t, "deepseek-v3", "h200", func(s *Server) { s.TPSize = 8; s.DCPSize = 8 })
	if z.DeviceTokens != 717008 || z.LogicalDeviceTokens != 8*717008 {
		t.Errorf("DeviceTokens %d, LogicalDeviceTokens %d; want 717008 and 8x", z.DeviceTokens, z.LogicalDeviceTokens)
	}
	m := mustModel(t, "llama-3.1-8b")
	g := mustGPU(t, "h100-sxm")
	s := DefaultServer()
	s.TPSize, s.DCPSize = 2, 2
	_, err := Size(m, g, s)
	checkErrors(t, err, []string{"hw.server.dcp_size: decode context parallelism needs an mla model (got 2 with mha)"})
}

func TestSizeDoesNotFit(t *testing.T) {
	m := mustModel(t, "llama-3.1-70b")
	g := mustGPU(t, "h100-sxm")
	// 141.1 GB of weights on one 80 GB GPU.
	_, err := Size(m, g, DefaultServer())
	if !errors.Is(err, ErrDoesNotFit) || !strings.Contains(err.Error(), "131.42 GiB") {
		t.Errorf("Size(70b, h100, tp1) = %v, want ErrDoesNotFit naming the 131.42 GiB of weights", err)
	}
	// A 10 GiB GPU: the reserve (512 + 2048*1.5 + 8*2 + 128 = 3728 MiB) fits but the 8B weights do not.
	g.MemoryMiB = 10240
	m = mustModel(t, "llama-3.1-8b")
	if _, err = Size(m, g, DefaultServer()); !errors.Is(err, ErrDoesNotFit) {
		t.Errorf("Size(8b, 10 GiB) = %v, want ErrDoesNotFit", err)
	}
	// A reserve bigger than the GPU.
	g.MemoryMiB = 2048
	if _, err = Size(m, g, DefaultServer()); !errors.Is(err, ErrDoesNotFit) || !strings.Contains(err.Error(), "mem_fraction_static") {
		t.Errorf("Size(8b, 2 GiB) = %v, want ErrDoesNotFit suggesting mem_fraction_static", err)
	}
}

func TestSizeWarnings(t *testing.T) {
	z := mustSize(t, "llama-3.1-70b", "a100-80g", func(s *Server) { s.TPSize = 2; s.HiCacheRatio = 0.5 })
	text := strings.Join(z.Warnings, "\n")
	for _, want := range []string{"not larger than the device pool", "below context_len 131072"} {
		if !strings.Contains(text, want) {
			t.Errorf("Warnings = %q, want one containing %q", z.Warnings, want)
		}
	}
	if z := mustSize(t, "llama-3.1-8b", "h100-sxm", nil); len(z.Warnings) != 0 {
		t.Errorf("Warnings = %q, want none", z.Warnings)
	}
}

func TestServerValidate(t *testing.T) {
	s := Server{TPSize: 6, DPSize: 0, DCPSize: 4, PageSize: 0, MemFractionStatic: 1.5, MaxTotalTokens: -1,
		ChunkedPrefillSize: -2, MaxPrefillTokens: 0, MaxRunningRequests: -1, CUDAGraphMaxBS: -1,
		HiCacheRatio: -1, HiCacheSizeGB: nan(), RuntimeOverheadMiB: -1}
	checkErrors(t, s.Validate(), []string{
		"hw.server.dp_size: must be >= 1 (got 0)",
		"hw.server.dcp_size: must be >= 1 and divide tp_size (got 4)",
		"hw.server.page_size: must be >= 1 (got 0)",
		"hw.server.mem_fraction_static: must be 0 (auto) or in (0, 1) (got 1.5)",
		"hw.server.max_total_tokens: must be 0 (unset) or > 0 (got -1)",
		"hw.server.chunked_prefill_size: must be 0 (auto), -1 (off) or > 0 (got -2)",
		"hw.server.max_prefill_tokens: must be > 0 (got 0)",
		"hw.server.max_running_requests: must be 0 (auto) or > 0 (got -1)",
		"hw.server.cuda_graph_max_bs: must be 0 (auto) or > 0 (got -1)",
		"hw.server.hicache_ratio: must be >= 0 (got -1)",
		"hw.server.hicache_size: must be >= 0 (got NaN)",
		"hw.server.runtime_overhead_mib: must be >= 0 (got -1)",
	})
	if err := DefaultServer().Validate(); err != nil {
		t.Errorf("DefaultServer().Validate() = %v", err)
	}
	// Size reports the problems of all three inputs at once.
	_, err := Size(Model{}, GPU{}, Server{})
	if n := len(strings.Split(err.Error(), "\n")); n < 9+5+4 {
		t.Errorf("Size(zero values) reported %d problems:\n%v", n, err)
	}
}

func TestRoundPy(t *testing.T) {
	// Python: round(0.8352, 3) == 0.835, round(0.9065, 3) == 0.906 (the
	// binary value is below the tie), round(0.0625, 3) == 0.062 (an exact
	// tie goes to even).
	for _, c := range []struct{ x, want float64 }{{0.8352, 0.835}, {0.9065, 0.906}, {0.0625, 0.062}, {0.0635, 0.064}} {
		if got := roundPy(c.x, 3); got != c.want {
			t.Errorf("roundPy(%v, 3) = %v, want %v", c.x, got, c.want)
		}
	}
}

// CheckParallel refuses the TP sizes SGLang's attention layers assert
// against, and allows KV-head replication when tp is a multiple of them.
func TestCheckParallel(t *testing.T) {
	for _, c := range []struct {
		model    string
		tp, dcp  int
		wantErrs int
	}{
		{"qwen2.5-14b", 4, 1, 0},   // 40 heads, 8 KV heads
		{"qwen2.5-14b", 3, 1, 2},   // divides neither
		{"qwen2.5-14b", 5, 1, 1},   // 40 % 5 == 0, 8 % 5 != 0
		{"qwen2.5-14b", 20, 1, 1},  // 20 > 8 KV heads, 20 % 8 != 0
		{"llama-3.1-8b", 16, 1, 0}, // 16 % 8 KV heads == 0: replicated
		{"smollm-135m", 2, 1, 2},   // 9 heads, 3 KV heads
		{"deepseek-v3", 8, 1, 0},   // MLA: no KV-head rule
		{"deepseek-v3", 3, 1, 1},   // 128 % 3 != 0
		{"llama-3.1-8b", 2, 2, 1},  // dcp needs MLA
	} {
		m := mustModel(t, c.model)
		s := DefaultServer()
		s.TPSize, s.DCPSize = c.tp, c.dcp
		err := CheckParallel(m, s)
		n := 0
		if err != nil {
			n = len(strings.Split(err.Error(), "\n"))
		}
		if n != c.wantErrs {
			t.Errorf("CheckParallel(%s, tp %d, dcp %d) = %v, want %d errors", c.model, c.tp, c.dcp, err, c.wantErrs)
		}
		g := mustGPU(t, "h200")
		if _, err := Size(m, g, s); (err != nil && !errors.Is(err, ErrDoesNotFit)) != (c.wantErrs > 0) {
			t.Errorf("Size(%s, tp %d, dcp %d) = %v, want the same verdict", c.model, c.tp, c.dcp, err)
		}
	}
}
