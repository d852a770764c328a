package hw

import "testing"

// benchBatch is a typical mixed prefill batch: chunked long prompts and
// short turns with cache hits.
func benchBatch() []Extend {
	return []Extend{
		{New: 4096, Cached: 0}, {New: 2048, Cached: 6144}, {New: 120, Cached: 3000},
		{New: 64, Cached: 18000}, {New: 900, Cached: 0}, {New: 33, Cached: 512},
		{New: 500, Cached: 1500}, {New: 1, Cached: 1999},
	}
}

type namedCost struct {
	name string
	c    costModel
}

func benchModels(b *testing.B) []namedCost {
	var out []namedCost
	for _, c := range []struct {
		model, gpu string
		tp         int
	}{{"llama-3.1-8b", "h100-sxm", 1}, {"deepseek-v3", "h200", 8}} {
		m := mustModel(b, c.model)
		g := mustGPU(b, c.gpu)
		s := DefaultServer()
		s.TPSize = c.tp
		out = append(out, namedCost{"roofline/" + c.model, mustRoofline(b, m, g, s, DefaultEfficiency())})
	}
	return append(out, namedCost{"fitted", &Fitted{Prefill: [4]float64{1e6, 25000, 1, 2000}, Decode: [3]float64{3e5, 1e4, 50}}})
}

func BenchmarkPrefillTime(b *testing.B) {
	batch := benchBatch()
	for _, nc := range benchModels(b) {
		c := nc.c
		b.Run(nc.name, func(b *testing.B) {
			b.ReportAllocs()
			var sum int64
			for b.Loop() {
				sum += c.PrefillTime(batch)
			}
			b.ReportMetric(float64(sum)/float64(b.N)/1e6, "sim-ms/forward")
		})
	}
}

func BenchmarkDecodeTime(b *testing.B) {
	for _, nc := range benchModels(b) {
		c := nc.c
		b.Run(nc.name, func(b *testing.B) {
			b.ReportAllocs()
			var sum int64
			bs := 1
			for b.Loop() {
				sum += c.DecodeTime(bs, int64(bs)*2048)
				bs = bs%256 + 1
			}
			b.ReportMetric(float64(sum)/float64(b.N)/1e6, "sim-ms/step")
		})
	}
}
