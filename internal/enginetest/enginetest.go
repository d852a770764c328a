package enginetest

import (
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/sim/llamacpp"
)

// Fitted is a cost model with round coefficients: 1 ms + 10 µs per new
// token (+ 1 ns per attention pair) for prefill, 2 ms + 1 ns per context
// token for a decode step.
var Fitted = hw.Fitted{Prefill: [4]float64{1e6, 1e4, 1, 0}, Decode: [3]float64{2e6, 0, 1}}

// SGLang returns a small SGLang server on [Fitted], run open loop: 2048
// device tokens and a host tier of 4096.
func SGLang() engine.Factory {
	sc := sim.Default(2048)
	sc.Cache.HostTokens = 4096
	return &sim.Factory{Config: sc, Cost: &Fitted, OpenLoop: true}
}

// Llama returns a small llama-server on [Fitted]: two slots of a
// 4096-token context and a 16 MiB RAM cache.
func Llama() engine.Factory {
	lc := llamacpp.DefaultConfig()
	lc.Slots, lc.Context, lc.CacheRAMMiB = 2, 4096, 16
	return &llamacpp.Factory{Config: lc, Cost: &llamacpp.CPUCost{Fitted: Fitted, StateCopy: 0.01}}
}

// Prompt returns request i's prompt: the first shared tokens of system
// prompt prefix (below 100: the tokens 1000*prefix, 1000*prefix+1, ...,
// wrapping after 1000), then own tokens (at most 1000) that no other
// request's prompt has.
func Prompt(prefix, shared, i, own int) []int32 {
	toks := make([]int32, 0, shared+own)
	for j := range shared {
		toks = append(toks, int32(1000*prefix+j%1000))
	}
	for j := range own {
		toks = append(toks, int32(100000+1000*i+j))
	}
	return toks
}
