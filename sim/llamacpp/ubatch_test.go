package llamacpp

import (
	"testing"

	"github.com/kvsim/kvsim/sim/hw"
	"pgregory.net/rapid"
)

// llama.cpp splits a call of two 300-token prompts (slots 2 and 3) beside
// slots 0 and 1 generating into micro-batches of 4 x 1, 2 x 256 and 2 x 43
// tokens: each prompt's first token takes the per-row kernel, its next 256
// the tiled one (blocks of 64 x 64 up to the diagonal), its last 43 the
// per-row kernel again.
func TestAttentionSplitsLikeLlamaCpp(t *testing.T) {
	call := []Chunk{
		{Slot: 0, New: 1, Cached: 330, Decode: true},
		{Slot: 1, New: 1, Cached: 300, Decode: true},
		{Slot: 2, New: 300},
		{Slot: 3, New: 300},
	}
	tiled, short := Attention(call, 512, 64)
	// 256 rows after 1 key: query blocks end at keys 65, 129, 193, 257: 2 + 3 + 4 + 5 blocks.
	if want := 2 * 14 * 64 * 64.0; tiled != want {
		t.Errorf("tiled pairs %v, want %v", tiled, want)
	}
	// 1 row after 0 keys, 43 rows after 257.
	if want := 2 * (1 + 43*257 + 43*44/2.0); short != want {
		t.Errorf("short pairs %v, want %v", short, want)
	}
	// Slots 0 and 3 are not consecutive: each prompt has a micro-batch of
	// its own, 100 rows: blocks up to keys 64 and 100, 1 + 2.
	call = []Chunk{{Slot: 1, New: 1, Cached: 50, Decode: true}, {Slot: 0, New: 100}, {Slot: 3, New: 100}}
	if tiled, short := Attention(call, 512, 64); tiled != 2*3*4096 || short != 0 {
		t.Errorf("non-consecutive slots: tiled %v short %v, want %v and 0", tiled, short, 2*3*4096)
	}
	// The last block of rows is padded: 80 new tokens cost what 128 do.
	a, _ := Attention([]Chunk{{Slot: 0, New: 80, Cached: 500}}, 512, 64)
	b, _ := Attention([]Chunk{{Slot: 0, New: 128, Cached: 500}}, 512, 64)
	if a != b || a != (9+10)*4096 {
		t.Errorf("80 rows %v, 128 rows %v, want both %v", a, b, (9+10)*4096)
	}
	// Fewer than 64 rows: causal pairs.
	if tiled, short := Attention([]Chunk{{Slot: 0, New: 63, Cached: 1000}}, 512, 64); tiled != 0 || short != 63*1000+63*64/2 {
		t.Errorf("63 rows: tiled %v short %v", tiled, short)
	}
	// Micro-batches of 512 rows: a 1000-token prompt is 512 then 488.
	if tiled, _ := Attention([]Chunk{{Slot: 0, New: 1000}}, 512, 64); tiled != (tilePairs(512, 0, 64) + tilePairs(488, 512, 64)) {
		t.Errorf("1000 rows: tiled %v", tiled)
	}
}

// However llama.cpp splits a call, its prompt chunks' causal pairs add up
// to those of the whole chunks (tile 0 counts them), every chunk's tokens
// are taken, and with tiles every pair is counted once: the tiled kernel's
// blocks cover at least the causal pairs of its rows.
func TestAttentionConservesPairs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(t, "n")
		slots := rapid.Permutation([]int{0, 1, 2, 3, 4, 5}).Draw(t, "slots")[:n]
		var call, decodes, prompts []Chunk
		var want float64
		for i, s := range slots {
			if rapid.Bool().Draw(t, "decode") {
				decodes = append(decodes, Chunk{Slot: s, New: 1, Cached: int64(rapid.IntRange(0, 2000).Draw(t, "ctx")), Decode: true})
				continue
			}
			c := Chunk{Slot: s, New: int64(rapid.IntRange(2, 1500).Draw(t, "new")), Cached: int64(rapid.IntRange(0, 1500).Draw(t, "cached"))}
			prompts = append(prompts, c)
			want += causalPairs(c.New, c.Cached)
			_ = i
		}
		call = append(decodes, prompts...)
		ub := rapid.IntRange(1, 1024).Draw(t, "ubatch")
		if got, short := Attention(call, ub, 0); got != want || short != 0 {
			t.Fatalf("tile 0: %v pairs (short %v), want %v", got, short, want)
		}
		if tiled, short := Attention(call, ub, 64); tiled+short < want {
			t.Fatalf("tiles: %v + %v pairs, fewer than the causal %v", tiled, short, want)
		}
	})
}

// With Tile 0 a call pays its causal pairs at the rate of its size; with
// tiles, the pairs of the blocks the kernels compute.
func TestCPUCostCallTime(t *testing.T) {
	c := &CPUCost{Fitted: hw.Fitted{Prefill: [4]float64{100, 2, 0.5, 10}, Decode: [3]float64{300, 7, 1}}}
	call := []Chunk{{Slot: 0, New: 1, Cached: 20, Decode: true}, {Slot: 1, New: 4, Cached: 2}, {Slot: 2, New: 1, Cached: 9}}
	// Decodes: slot 0 (21 context) and slot 2's one-token chunk (10); slot
	// 1's prompt: 4 tokens, 4*2 + 4*5/2 = 18 causal pairs at a2.
	if got, want := c.CallTime(call, 512), int64(300+2*4+0.5*18+10+7*2+31); got != want {
		t.Errorf("tile 0: CallTime %d, want %d", got, want)
	}
	c.Tile, c.ShortPair = 2, 3
	// Decodes: slot 0 (21 context) and slot 2's one-token chunk (10); the
	// 4-row prompt of slot 1 after 2 keys: micro-batches {0,1,2} x 1 then
	// {1} x 3: 1 row (short, 3 pairs), then 3 rows tiled in blocks of 2:
	// keys 5 -> 3 blocks, keys 6 -> 3 blocks, 6 x 4 = 24 pairs.
	want := int64(300 + 2*4 + 0.5*24 + 3*3 + 10 + 7*2 + 31)
	if got := c.CallTime(call, 512); got != want {
		t.Errorf("tiles: CallTime %d, want %d", got, want)
	}
	if got := c.CallTime([]Chunk{{Slot: 0, New: 1, Cached: 9}}, 512); got != 300+7+10 {
		t.Errorf("a full hit alone: %d, want a decode step, 317", got)
	}
}
