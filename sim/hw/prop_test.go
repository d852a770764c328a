package hw

import (
	"errors"
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// drawDeployment draws a preset model and GPU, and the default server
// with a TP size the model allows.
func drawDeployment(t *rapid.T) (Model, GPU, Server) {
	m := mustModel(t, rapid.SampledFrom(ModelPresets()).Draw(t, "model"))
	g := mustGPU(t, rapid.SampledFrom(GPUPresets()).Draw(t, "gpu"))
	s := DefaultServer()
	s.TPSize = rapid.SampledFrom(tpSizes(m)).Draw(t, "tp")
	return m, g, s
}

// genRoofline draws a preset model and GPU, a TP size and efficiencies.
func genRoofline(t *rapid.T) *Roofline {
	m, g, s := drawDeployment(t)
	frac := rapid.Float64Range(0.05, 1)
	us := rapid.Float64Range(0, 2000)
	e := Efficiency{
		GEMMMFU: frac.Draw(t, "mfu"), Attention: frac.Draw(t, "attn"), HBM: frac.Draw(t, "hbm"),
		AllReduce: frac.Draw(t, "ar"), AllReduceLatencyUs: us.Draw(t, "ar_us"),
		PrefillOverheadUs: us.Draw(t, "prefill_us"), DecodeOverheadUs: us.Draw(t, "decode_us"),
	}
	r, err := NewRoofline(m, g, s, e)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func genExtend() *rapid.Generator[Extend] {
	return rapid.Custom(func(t *rapid.T) Extend {
		return Extend{New: rapid.Int64Range(0, 20000).Draw(t, "new"), Cached: rapid.Int64Range(0, 200000).Draw(t, "cached")}
	})
}

func genBatch(t *rapid.T) []Extend {
	return rapid.SliceOfN(genExtend(), 1, 12).Draw(t, "batch")
}

// genCost draws either cost model: the properties hold for both.
func genCost(t *rapid.T) costModel {
	if rapid.Bool().Draw(t, "fitted") {
		slope := rapid.Float64Range(0, 1e5)
		return &Fitted{
			Prefill: [4]float64{rapid.Float64Range(-1e6, 1e7).Draw(t, "a0"), slope.Draw(t, "a1"), rapid.Float64Range(0, 10).Draw(t, "a2"), slope.Draw(t, "a3")},
			Decode:  [3]float64{rapid.Float64Range(-1e6, 1e7).Draw(t, "b0"), slope.Draw(t, "b1"), rapid.Float64Range(0, 100).Draw(t, "b2")},
		}
	}
	return genRoofline(t)
}

func TestPropPrefillMonotoneInNew(t *testing.T) {
	checkPrefillMonotone(t, "new", 20000, func(e *Extend) *int64 { return &e.New })
}

func TestPropPrefillMonotoneInCached(t *testing.T) {
	checkPrefillMonotone(t, "cached", 200000, func(e *Extend) *int64 { return &e.Cached })
}

// checkPrefillMonotone checks that adding up to most tokens to the field of
// one request of a batch never makes the prefill faster.
func checkPrefillMonotone(t *testing.T, what string, most int64, field func(*Extend) *int64) {
	rapid.Check(t, func(t *rapid.T) {
		c, batch := genCost(t), genBatch(t)
		before := c.PrefillTime(batch)
		i := rapid.IntRange(0, len(batch)-1).Draw(t, "i")
		*field(&batch[i]) += rapid.Int64Range(0, most).Draw(t, "more")
		if after := c.PrefillTime(batch); after < before {
			t.Fatalf("more %s tokens: %d ns -> %d ns", what, before, after)
		}
	})
}

// TestPropCacheHitNeverCostsMore: for the same prompts, turning new tokens
// into cached ones never makes the forward slower.
func TestPropCacheHitNeverCostsMore(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c, batch := genCost(t), genBatch(t)
		before := c.PrefillTime(batch)
		i := rapid.IntRange(0, len(batch)-1).Draw(t, "i")
		k := rapid.Int64Range(0, batch[i].New).Draw(t, "hit")
		batch[i].New -= k
		batch[i].Cached += k
		if after := c.PrefillTime(batch); after > before {
			t.Fatalf("%d more cached of the same prompt: %d ns -> %d ns", k, before, after)
		}
	})
}

func TestPropDecodeMonotone(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genCost(t)
		b := rapid.IntRange(0, 4096).Draw(t, "batch")
		ctx := rapid.Int64Range(0, 1<<24).Draw(t, "context")
		before := c.DecodeTime(b, ctx)
		db := rapid.IntRange(0, 4096).Draw(t, "more_batch")
		dctx := rapid.Int64Range(0, 1<<24).Draw(t, "more_context")
		if after := c.DecodeTime(b+db, ctx); after < before {
			t.Fatalf("batch %d -> %d: %d ns -> %d ns", b, b+db, before, after)
		}
		if after := c.DecodeTime(b, ctx+dctx); after < before {
			t.Fatalf("context %d -> %d: %d ns -> %d ns", ctx, ctx+dctx, before, after)
		}
	})
}

// TestPropPrefillOrderFree: a batch's cost does not depend on its order
// (up to float summation order, i.e. 1 ns).
func TestPropPrefillOrderFree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c, batch := genCost(t), genBatch(t)
		before := c.PrefillTime(batch)
		slices.Reverse(batch)
		if after := c.PrefillTime(batch); after-before > 1 || before-after > 1 {
			t.Fatalf("reversed batch: %d ns -> %d ns", before, after)
		}
	})
}

// TestPropFittedIsDotProduct checks Fitted against the plain formula.
func TestPropFittedIsDotProduct(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		coef := rapid.Float64Range(-1e4, 1e4)
		var f Fitted
		for i := range f.Prefill {
			f.Prefill[i] = coef.Draw(t, "a")
		}
		for i := range f.Decode {
			f.Decode[i] = coef.Draw(t, "b")
		}
		batch := genBatch(t)
		var tokens, pairs, reqs float64
		for _, e := range batch {
			if e.New == 0 {
				continue
			}
			tokens += float64(e.New)
			pairs += float64(e.New*e.Cached) + float64(e.New*(e.New+1)/2)
			reqs++
		}
		want := int64(0)
		if reqs > 0 {
			want = int64(math.Round(max(0, f.Prefill[0]+f.Prefill[1]*tokens+f.Prefill[2]*pairs+f.Prefill[3]*reqs)))
		}
		if got := f.PrefillTime(batch); got != want {
			t.Fatalf("PrefillTime = %d, dot product %d", got, want)
		}
		b := rapid.IntRange(1, 4096).Draw(t, "batch_size")
		ctx := rapid.Int64Range(0, 1<<24).Draw(t, "context")
		want = int64(math.Round(max(0, f.Decode[0]+f.Decode[1]*float64(b)+f.Decode[2]*float64(ctx))))
		if got := f.DecodeTime(b, ctx); got != want {
			t.Fatalf("DecodeTime = %d, dot product %d", got, want)
		}
	})
}

// TestPropSizingBounds checks the pool sizes against their definitions for
// random deployments: the pool fits its budget and is as large as it can
// be, pages are whole, and the host pool holds ratio times the device pool.
func TestPropSizingBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m, g, s := drawDeployment(t)
		s.PageSize = rapid.SampledFrom([]int{1, 16, 64}).Draw(t, "page")
		s.HiCacheRatio = rapid.Float64Range(0, 8).Draw(t, "ratio")
		if rapid.Bool().Draw(t, "set_mfs") {
			s.MemFractionStatic = rapid.Float64Range(0.5, 0.95).Draw(t, "mfs")
		}
		z, err := Size(m, g, s)
		if err != nil {
			if !errors.Is(err, ErrDoesNotFit) {
				t.Fatalf("Size() = %v, want nil or ErrDoesNotFit", err)
			}
			if m.WeightBytes(s.TPSize) < int64(float64(g.MemoryMiB<<20)*0.5) && s.MemFractionStatic > 0.9 {
				t.Fatalf("weights %d B fit in half of %d MiB with mfs %v, but Size() = %v", m.WeightBytes(s.TPSize), g.MemoryMiB, s.MemFractionStatic, err)
			}
			return
		}
		page := int64(s.PageSize)
		if z.DeviceTokens <= 0 || z.DeviceTokens%page != 0 {
			t.Fatalf("DeviceTokens %d not a positive multiple of page %d", z.DeviceTokens, page)
		}
		if z.DeviceTokens*z.CellBytes > z.KVBudgetBytes {
			t.Fatalf("%d tokens * %d B exceed the budget %d B", z.DeviceTokens, z.CellBytes, z.KVBudgetBytes)
		}
		if (z.DeviceTokens+page)*z.CellBytes <= z.KVBudgetBytes {
			t.Fatalf("another page fits: %d tokens * %d B, budget %d B", z.DeviceTokens+page, z.CellBytes, z.KVBudgetBytes)
		}
		if z.MaxRunningRequests < 1 || int64(z.MaxRunningRequests) > z.DeviceTokens/2 || z.MaxRunningRequests > 4096 {
			t.Fatalf("MaxRunningRequests %d outside [1, min(%d/2, 4096)]", z.MaxRunningRequests, z.DeviceTokens)
		}
		if s.HiCacheRatio > 0 {
			if z.HostTokens%page != 0 || float64(z.HostTokens) <= float64(z.DeviceTokens)*s.HiCacheRatio-1 || z.HostTokens > int64(float64(z.DeviceTokens)*s.HiCacheRatio)+page {
				t.Fatalf("HostTokens %d for %d device tokens at ratio %v, page %d", z.HostTokens, z.DeviceTokens, s.HiCacheRatio, page)
			}
		} else if z.HostTokens != 0 {
			t.Fatalf("HostTokens %d with ratio 0", z.HostTokens)
		}
		if z.WeightBytes+z.DeviceTokens*z.CellBytes > int64(float64(z.FreeBeforeWeightsBytes)*z.MemFractionStatic)+1 {
			t.Fatalf("weights + KV exceed mem_fraction_static of the free memory")
		}
	})
}

// tpSizes are the TP sizes among 1, 2, 4 and 8 that SGLang runs m with
// (CheckParallel): smollm-135m's 9 heads take tp 1 only.
func tpSizes(m Model) []int {
	var out []int
	for _, tp := range []int{1, 2, 4, 8} {
		s := DefaultServer()
		s.TPSize = tp
		if CheckParallel(m, s) == nil {
			out = append(out, tp)
		}
	}
	return out
}
