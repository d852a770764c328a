package llamacpp

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/traces"
	"pgregory.net/rapid"
)

// testCost: 1 ms per call, 10 µs per prompt token, 1 µs per decode slot.
// Round numbers for hand-worked tests, not a CPU's.
var testCost = &CPUCost{Fitted: hw.Fitted{Prefill: [4]float64{1e6, 1e4, 0, 0}, Decode: [3]float64{1e6, 1e3, 0}}}

func toks(seed uint64, n int) []int32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]int32, n)
	for i := range out {
		out[i] = 1 + int32(rng.IntN(255))
	}
	return out
}

// seq sends requests one at a time (each after the previous finished) and
// returns each result and slot.
type seq struct {
	t  *testing.T
	o  *Online
	at engine.Time
	n  int
}

// slotsConfig is the default server with slots slots and a context of
// context tokens (shared by the slots).
func slotsConfig(slots, context int) Config {
	cfg := DefaultConfig()
	cfg.Slots, cfg.Context = slots, context
	return cfg
}

func newSeq(t *testing.T, cfg Config) *seq {
	t.Helper()
	o, err := NewOnline(cfg, testCost)
	if err != nil {
		t.Fatal(err)
	}
	return &seq{t: t, o: o}
}

func (q *seq) send(prompt []int32, out int, outputs []int32) (engine.RequestResult, int) {
	q.t.Helper()
	q.n++
	id := fmt.Sprintf("r%d", q.n)
	if err := q.o.Submit(traces.Record{ID: id, Arrival: int64(q.at), InputLen: len(prompt), Tokens: prompt, OutputLen: out, OutputTokens: outputs}); err != nil {
		q.t.Fatal(err)
	}
	for {
		t, ok := q.o.Next()
		if !ok {
			q.t.Fatalf("%s never finished", id)
		}
		evs, err := q.o.RunUntil(t)
		if err != nil {
			q.t.Fatal(err)
		}
		for _, e := range evs {
			if e.Done && e.ID == id {
				q.at = t + 1
				slot, _ := q.o.Sim().SlotOf(id)
				return e.Result, slot
			}
		}
	}
}

func (q *seq) expect(what string, prompt []int32, out int, slot, cached int) engine.RequestResult {
	q.t.Helper()
	r, got := q.send(prompt, out, nil)
	if r.Failed != "" {
		q.t.Fatalf("%s failed: %s", what, r.Failed)
	}
	if got != slot || r.CachedTokens != int64(cached) {
		q.t.Errorf("%s: slot %d cached %d, want slot %d cached %d", what, got, r.CachedTokens, slot, cached)
	}
	return r
}

// TestSlotChoice replays e2e's TestProbeSlotChoice; the expectations are
// what the real llama-server answered (e2e/llama/PROBES.md).
func TestSlotChoice(t *testing.T) {
	q := newSeq(t, slotsConfig(2, 4096))
	a, b := toks(1, 200), toks(2, 200)
	q.expect("A, fresh server: LRU, never-used slots by id", a, 3, 0, 0)
	q.expect("B unrelated: LRU, slot 1 never used", b, 3, 1, 0)
	q.expect("A again: full hit re-evaluates the last token", a, 3, 0, 199)
	q.expect("D = A[:20]+180: sim 0.10 is not above 0.10, LRU", slices.Concat(a[:20], toks(3, 180)), 3, 1, 0)
	q.expect("A again", a, 3, 0, 199)
	e := slices.Concat(a[:22], toks(4, 178))
	q.expect("E = A[:22]+178: sim 0.11 beats LRU", e, 3, 0, 22)
	f := slices.Concat(e[:40], toks(5, 160))
	q.expect("F = E[:40]+160: the longer prefix wins", f, 3, 0, 40)
	q.expect("G = 10 new + F[:190]: a substring is no prefix", slices.Concat(toks(6, 10), f[:190]), 3, 1, 0)
	if st := q.o.Stats(); st.SlotBySimilarity != 4 || st.SlotByLRU != 4 || st.FullHits != 2 {
		t.Errorf("stats %+v, want 4 by similarity, 4 by LRU, 2 full hits", st)
	}
}

// TestSlotKeepsOutput: the slot holds prompt + output - 1 tokens.
func TestSlotKeepsOutput(t *testing.T) {
	q := newSeq(t, slotsConfig(1, 2048))
	a, o := toks(10, 100), toks(11, 5)
	r, _ := q.send(a, 5, o)
	if r.CachedTokens != 0 || r.OutputTokens != 5 {
		t.Fatalf("A: %+v", r)
	}
	if got := q.o.Sim().SlotTokens(0); !reflect.DeepEqual(got, slices.Concat(a, o[:4])) {
		t.Fatalf("slot holds %d tokens, want prompt + 4 outputs", len(got))
	}
	q.expect("A + its 5 outputs", slices.Concat(a, o), 2, 0, 104)
}

// TestRAMCache replays e2e's TestProbeRAMCache.
func TestRAMCache(t *testing.T) {
	t.Run("restore", func(t *testing.T) {
		q := newSeq(t, slotsConfig(1, 2048))
		x, y := toks(30, 400), toks(31, 100)
		q.expect("X", x, 3, 0, 0)
		q.expect("Y unrelated: X saved", y, 3, 0, 0)
		r := q.expect("X again: restored, full hit", x, 3, 0, 399)
		if r.CachedHost != 399 || r.CachedDevice != 0 {
			t.Errorf("restored hit split %d device + %d host, want 0 + 399", r.CachedDevice, r.CachedHost)
		}
		q.expect("Y again: restored", y, 3, 0, 99)
		q.expect("Z = X[:80]+20: f_keep 80/402 < 0.25", slices.Concat(x[:80], toks(32, 20)), 3, 0, 0)
		q.expect("U unrelated", toks(33, 50), 3, 0, 0)
		q.expect("W = X[:130]+10: f_keep 130/402 >= 0.25", slices.Concat(x[:130], toks(34, 10)), 3, 0, 130)
	})
	t.Run("capacity", func(t *testing.T) {
		cfg := slotsConfig(1, 2048)
		cfg.CacheRAMMiB = 1
		q := newSeq(t, cfg)
		p := [][]int32{toks(40, 100), toks(41, 100), toks(42, 100), toks(43, 100)}
		for i, pr := range p {
			q.expect(fmt.Sprintf("P%d", i+1), pr, 2, 0, 0)
		}
		q.expect("P1 again: evicted (two 101-token states fit in 1 MiB, not three)", p[0], 2, 0, 0)
		q.expect("P4 again: restored", p[3], 2, 0, 99)
		if st := q.o.Stats(); st.RAMEvictedTokens == 0 {
			t.Errorf("no RAM eviction counted: %+v", st)
		}
	})
	t.Run("off", func(t *testing.T) {
		cfg := slotsConfig(1, 2048)
		cfg.CacheRAMMiB = 0
		q := newSeq(t, cfg)
		x := toks(50, 100)
		q.expect("X", x, 2, 0, 0)
		q.expect("Y", toks(51, 100), 2, 0, 0)
		q.expect("X again: no RAM cache", x, 2, 0, 0)
	})
}

// TestRAMCacheUnit works the prompt cache's rules by hand.
func TestRAMCacheUnit(t *testing.T) {
	st := &Stats{}
	c := &ramCache{limitBytes: 1000, limitTokens: 1 << 20, perToken: 10, stats: st}
	a := []int32{1, 2, 3, 4}
	c.save(a[:2])
	c.save(a) // a[:2] is a prefix of a: obsolete, dropped
	if len(c.states) != 1 || st.RAMObsolete != 1 || c.bytes != 40 {
		t.Fatalf("after saving a[:2] then a: %d states, %d obsolete, %d bytes", len(c.states), st.RAMObsolete, c.bytes)
	}
	c.save(a[:3]) // contained in a: skipped
	if len(c.states) != 1 || st.RAMSaveSkipped != 1 {
		t.Fatalf("saving a prefix of a cached state: %d states, %d skipped", len(c.states), st.RAMSaveSkipped)
	}
	big := make([]int32, 101)
	c.save(big) // 1010 bytes > 1000: refused
	if st.RAMTooLarge != 1 || len(c.states) != 1 {
		t.Fatalf("a state over the limit was stored")
	}
	for i := range 3 {
		c.save([]int32{int32(100 + i), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // 32 tokens, 320 bytes
	}
	// 40 + 3*320 = 1000 fits exactly; one more evicts the oldest (a).
	if len(c.states) != 4 || c.bytes != 1000 {
		t.Fatalf("%d states, %d bytes; want 4 and 1000", len(c.states), c.bytes)
	}
	c.save([]int32{7})
	if len(c.states) != 4 || c.states[0].tokens[0] == 1 || st.RAMEvictedTokens != 4 {
		t.Fatalf("oldest not evicted: %d states, first %v, evicted %d", len(c.states), c.states[0].tokens[:1], st.RAMEvictedTokens)
	}
	// load: f_keep >= 0.25 and strictly better on both counts.
	c2 := &ramCache{limitTokens: 1 << 20, perToken: 1, stats: st}
	x := []int32{1, 2, 3, 4, 5, 6, 7, 8}
	c2.save(x)
	if _, ok := c2.load(nil, []int32{1, 9}); ok {
		t.Fatal("restored a state keeping 1/8 < 0.25")
	}
	if got, ok := c2.load(nil, []int32{1, 2, 9}); !ok || !reflect.DeepEqual(got, x) || len(c2.states) != 0 {
		t.Fatalf("load(2/8 kept) = %v %v, want x, taken out of the cache", got, ok)
	}
	c2.save(x)
	if _, ok := c2.load([]int32{1, 2, 3, 4}, []int32{1, 2, 3, 4, 5}); ok {
		t.Fatal("restored a state no better on f_keep than the slot's own (1.0)")
	}
}

// TestBatching: prompts go in chunks of -b tokens; a prompt arriving while
// another slot decodes rides in that slot's calls.
func TestBatching(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Slots, cfg.Context, cfg.Batch = 2, 4096, 256
	s, err := New(cfg, testCost)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(engine.NewSliceSource([]traces.Record{{ID: "b", InputLen: 1024, OutputLen: 1}})); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Calls != 4 {
		t.Fatalf("1024-token prompt at -b 256: %d calls, want 4", st.Calls)
	}
	s, _ = New(cfg, testCost)
	res, err := s.Run(engine.NewSliceSource([]traces.Record{
		{ID: "a", InputLen: 20, OutputLen: 300},
		{ID: "b", Arrival: 50e6, InputLen: 1024, OutputLen: 2},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Calls != 300 || st.MixedCalls != 5 {
		t.Fatalf("a (300 out) with b: %d calls (%d mixed), want 300 (5 mixed: b's chunks of 255+255+255+255+4 beside a's decode token)", st.Calls, st.MixedCalls)
	}
	if res.Requests[0].ID != "b" {
		t.Fatalf("b should finish first")
	}
}

func TestContext(t *testing.T) {
	cfg := slotsConfig(2, 512)
	s, _ := New(cfg, testCost)
	res, err := s.Run(engine.NewSliceSource([]traces.Record{{ID: "long", InputLen: 300, OutputLen: 2}, {ID: "fill", Arrival: 1, InputLen: 200, OutputLen: 100}}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]engine.RequestResult{}
	for _, r := range res.Requests {
		got[r.ID] = r
	}
	if !strings.Contains(got["long"].Failed, "exceeds the available context size (256 tokens)") {
		t.Errorf("300-token prompt in a 256-token slot: failed %q", got["long"].Failed)
	}
	if got["fill"].OutputTokens != 56 {
		t.Errorf("200 + 100 in 256: %d output tokens, want 56 (as the server)", got["fill"].OutputTokens)
	}
}

func TestConfigValidate(t *testing.T) {
	c := Config{Slots: 0, Context: 0, Batch: 0, SlotPromptSimilarity: 2, CacheRAMMiB: -2, StateBytesPerToken: 0, TokenText: "utf-16", Vocab: traces.Vocab{Lo: 5, Hi: 5}}
	err := c.Validate()
	for _, want := range []string{"llamacpp.parallel: must be >= 1", "llamacpp.batch_size", "llamacpp.slot_prompt_similarity", "llamacpp.cache_ram", "llamacpp.state_bytes_per_token", `llamacpp.token_text: must be "" or "byte-level" (got "utf-16")`, "llamacpp.vocab"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
	if _, err := New(DefaultConfig(), nil); err == nil {
		t.Error("New accepted a nil cost model")
	}
}

// batch is a call of prompt chunks beside decodes generating slots whose
// contexts (their KV lengths, the token decoded included) add up to
// context: the decode tokens first, on slots 0 to decodes-1, the prompts
// after them.
func batch(prompt []hw.Extend, decodes int, context int64) []Chunk {
	var call []Chunk
	for i := range decodes {
		ctx := context / int64(decodes)
		if i == 0 {
			ctx += context % int64(decodes)
		}
		call = append(call, Chunk{Slot: i, New: 1, Cached: ctx - 1, Decode: true})
	}
	for i, e := range prompt {
		call = append(call, Chunk{Slot: decodes + i, New: e.New, Cached: e.Cached})
	}
	return call
}

func TestCPUCost(t *testing.T) {
	c := &CPUCost{Fitted: hw.Fitted{Prefill: [4]float64{100, 2, 0.5, 10}, Decode: [3]float64{300, 7, 1}}}
	p := []hw.Extend{{New: 4, Cached: 2}}
	// prompt: 4 new, pairs 4*2 + 4*5/2 = 18, 1 chunk; decode: 2 slots, 50 context.
	if got := c.CallTime(batch(p, 0, 0), 512); got != 100+8+9+10 {
		t.Errorf("prompt-only = %d, want 127", got)
	}
	if got := c.CallTime(batch(nil, 2, 50), 512); got != 300+14+50 {
		t.Errorf("decode-only = %d, want 364", got)
	}
	if got := c.CallTime(batch(p, 2, 50), 512); got != 300+8+9+10+14+50 {
		t.Errorf("mixed = %d, want 391 (the larger fixed cost once)", got)
	}
	if got := c.CallTime(batch(nil, 0, 0), 512); got != 0 {
		t.Errorf("empty = %d", got)
	}
	// A one-token chunk (a full hit) is a decode token against its cached
	// tokens and itself: alone it is a decode call, beside a prompt a
	// mixed one.
	hit := hw.Extend{New: 1, Cached: 49}
	if got := c.CallTime(batch([]hw.Extend{hit}, 0, 0), 512); got != 300+7+50 {
		t.Errorf("full hit alone = %d, want 357 (a decode step)", got)
	}
	if got := c.CallTime(batch([]hw.Extend{hit, p[0]}, 1, 25), 512); got != 300+8+9+10+14+75 {
		t.Errorf("full hit beside a prompt and a decode = %d, want %d", got, 300+8+9+10+14+75)
	}
	// Small calls: up to 5 tokens in all, the 18 pairs cost 1 each instead
	// of a2 = 0.5; the prompt's 4 tokens and 2 decode tokens make 6, a
	// large call again.
	c.SmallCall, c.SmallPair = 5, 1
	if got := c.CallTime(batch(p, 0, 0), 512); got != 100+8+18+10 {
		t.Errorf("small prompt-only = %d, want 136", got)
	}
	if got := c.CallTime(batch(p, 1, 25), 512); got != 300+8+18+10+7+25 {
		t.Errorf("small mixed (5 tokens) = %d, want 368", got)
	}
	if got := c.CallTime(batch(p, 2, 50), 512); got != 300+8+9+10+14+50 {
		t.Errorf("mixed of 6 tokens = %d, want 391 (pairs at a2)", got)
	}
	// A medium tier of up to 7 tokens at 0.75 per pair: the 6-token mixed
	// call pays it, a call of 8 tokens is large again.
	c.MediumCall, c.MediumPair = 7, 0.75
	if got := c.CallTime(batch(p, 2, 50), 512); got != 300+8+int64(0.75*18+0.5)+10+14+50 {
		t.Errorf("medium mixed (6 tokens) = %d, want %d", got, 300+8+int64(0.75*18+0.5)+10+14+50)
	}
	if got := c.CallTime(batch(p, 1, 25), 512); got != 300+8+18+10+7+25 {
		t.Errorf("small mixed (5 tokens) with a medium tier = %d, want 368", got)
	}
	eight := []hw.Extend{{New: 8, Cached: 2}} // 8*2 + 8*9/2 = 52 pairs
	if got := c.CallTime(batch(eight, 0, 0), 512); got != 100+16+26+10 {
		t.Errorf("large prompt-only (8 tokens) = %d, want 152", got)
	}
}

// genTrace draws requests over a small alphabet of prefixes, so that they
// share prefixes of every length.
func genTrace(t *rapid.T, spaced bool) []traces.Record {
	bases := [][]int32{toks(1, 300), toks(2, 300), toks(3, 300)}
	n := rapid.IntRange(1, 25).Draw(t, "n")
	recs := make([]traces.Record, n)
	var at int64
	for i := range recs {
		b := bases[rapid.IntRange(0, 2).Draw(t, "base")]
		keep := rapid.IntRange(0, 120).Draw(t, "keep")
		tail := rapid.IntRange(0, 60).Draw(t, "tail")
		if keep+tail == 0 {
			tail = 1
		}
		p := slices.Concat(b[:keep], toks(uint64(1000+i), tail))
		if rapid.Bool().Draw(t, "repeat") && i > 0 {
			p = append([]int32(nil), recs[rapid.IntRange(0, i-1).Draw(t, "which")].Tokens...)
		}
		if !spaced {
			at += int64(rapid.IntRange(0, 5e6).Draw(t, "gap"))
		}
		recs[i] = traces.Record{ID: fmt.Sprintf("r%d", i), Arrival: at, InputLen: len(p), Tokens: p, OutputLen: rapid.IntRange(1, 6).Draw(t, "out")}
	}
	return recs
}

func genConfig(t *rapid.T, ram bool) Config {
	cfg := DefaultConfig()
	cfg.Slots = rapid.IntRange(1, 3).Draw(t, "slots")
	cfg.Context = cfg.Slots * rapid.IntRange(120, 400).Draw(t, "slot_ctx")
	cfg.Batch = rapid.IntRange(1, 300).Draw(t, "batch")
	cfg.SlotPromptSimilarity = rapid.SampledFrom([]float64{0, 0.1, 0.5}).Draw(t, "sps")
	cfg.CacheRAMMiB = 0
	if ram {
		cfg.CacheRAMMiB = rapid.SampledFrom([]int64{-1, 1, 8192}).Draw(t, "ram")
		cfg.StateBytesPerToken = rapid.SampledFrom([]int64{4104, 40000}).Draw(t, "state_bytes")
	}
	return cfg
}

// TestPropConcurrencyOne: one request at a time, without the RAM cache, a
// twin that only knows the rules (similarity above the threshold, else the
// least recently released slot) predicts every slot choice and cached
// count: the longest common prefix with the slot's last sequence, minus
// one on a full hit.
func TestPropConcurrencyOne(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t, false)
		recs := genTrace(t, true)
		o, err := NewOnline(cfg, testCost)
		if err != nil {
			t.Fatal(err)
		}
		lastUsed := make([]int, cfg.Slots) // release order; 0 = never
		for i, rec := range recs {
			rec.Arrival = int64(o.Now())
			var snap [][]int32
			for k := range cfg.Slots {
				snap = append(snap, o.Sim().SlotTokens(k))
			}
			want, best := -1, float32(0)
			if cfg.SlotPromptSimilarity > 0 {
				for k, st := range snap {
					if len(st) == 0 {
						continue
					}
					if sim := float32(lcp(st, rec.Tokens)) / float32(len(rec.Tokens)); sim > best && sim > float32(cfg.SlotPromptSimilarity) {
						want, best = k, sim
					}
				}
			}
			if want < 0 {
				want = 0
				for k := range snap {
					if lastUsed[k] < lastUsed[want] {
						want = k
					}
				}
			}
			if err := o.Submit(rec); err != nil {
				t.Fatal(err)
			}
			testutil.Steps(t, o.Next, o.RunUntil, nil)
			if len(rec.Tokens) > cfg.SlotContext() {
				continue
			}
			got, _ := o.Sim().SlotOf(rec.ID)
			l := lcp(snap[want], rec.Tokens)
			if l == len(rec.Tokens) {
				l--
			}
			res := o.Sim().results[len(o.Sim().results)-1]
			if got != want || res.CachedTokens != int64(l) {
				t.Fatalf("request %d: slot %d cached %d, want slot %d cached %d", i, got, res.CachedTokens, want, l)
			}
			lastUsed[got] = i + 1
		}
	})
}

// TestPropInvariants: with the RAM cache and concurrent arrivals, runs are
// deterministic, online runs equal batch runs, no request hits more than
// its prompt minus one, times are ordered and every slot stays within its
// context (checked after every event by checkInvariants).
func TestPropInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t, true)
		recs := genTrace(t, false)
		// With or without the extra time of decode calls after a prompt
		// call: it carries state from call to call, which the online and
		// batch runs must carry alike.
		cost := testCost
		if rapid.Bool().Draw(t, "afterPrompt") {
			var curve []AfterPromptPoint
			var at int64
			for i := range rapid.IntRange(1, 3).Draw(t, "afterPromptPoints") {
				at += rapid.Int64Range(min(int64(i), 1), 3000).Draw(t, "afterPromptContext")
				curve = append(curve, AfterPromptPoint{Context: at,
					Ns:    rapid.Float64Range(0, 2e6).Draw(t, "afterPromptNs"),
					Decay: rapid.Float64Range(0, 0.95).Draw(t, "afterPromptDecay")})
			}
			cost = &CPUCost{Fitted: testCost.Fitted, AfterPromptCurve: curve}
		}
		run := func() (*engine.Result, Stats) {
			res, s := simulate(t, cfg, cost, recs)
			return res, s.Stats()
		}
		a, sa := run()
		b, sb := run()
		if !reflect.DeepEqual(a, b) || sa != sb {
			t.Fatal("two runs of the same trace differ")
		}
		o, _ := NewOnline(cfg, cost)
		for _, rec := range recs {
			// Everything due at the arrival instant is submitted before the
			// clock reaches it, as a batch run reads it.
			if engine.Time(rec.Arrival) > o.Now() {
				if _, err := o.RunUntil(engine.Time(rec.Arrival - 1)); err != nil {
					t.Fatal(err)
				}
			}
			if err := o.Submit(rec); err != nil {
				t.Fatal(err)
			}
		}
		c, err := o.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a.Requests, c.Requests) {
			t.Fatal("online run differs from the batch run")
		}
		if len(a.Requests) != len(recs) {
			t.Fatalf("%d results for %d requests", len(a.Requests), len(recs))
		}
		if !slices.ContainsFunc(cost.AfterPromptCurve, func(p AfterPromptPoint) bool { return p.Ns > 0 }) && sa.AfterPromptNs != 0 {
			t.Fatalf("after_prompt_ns %d charged without the term", sa.AfterPromptNs)
		}
		for _, r := range a.Requests {
			if r.Failed != "" {
				continue
			}
			if r.CachedTokens > r.PromptTokens-1 || r.CachedTokens != r.CachedDevice+r.CachedHost {
				t.Fatalf("%s: cached %d (%d+%d) of a %d-token prompt", r.ID, r.CachedTokens, r.CachedDevice, r.CachedHost, r.PromptTokens)
			}
			if !(r.Arrival <= r.Admitted && r.Admitted <= r.FirstToken && r.FirstToken <= r.Finish) {
				t.Fatalf("%s: times out of order %+v", r.ID, r)
			}
		}
	})
}

func TestTinyCPU(t *testing.T) {
	c := TinyCPU()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// A cold 2000-token prompt: the recipe measured 562 ms, the calibration
	// run 429 ms (its fastest of three).
	if got := c.CallTime(batch([]hw.Extend{{New: 2000}}, 0, 0), 512); got < 300e6 || got > 700e6 {
		t.Errorf("cold 2000-token prompt = %.0f ms, want 300-700", float64(got)/1e6)
	}
	// A full hit's one-token prompt: the recipe measured 7 ms TTFT.
	if got := c.CallTime(batch([]hw.Extend{{New: 1, Cached: 1999}}, 0, 0), 512); got > 10e6 {
		t.Errorf("one token behind 1999 cached = %.1f ms, want under 10", float64(got)/1e6)
	}
}

// Copying slot states to the RAM cache takes server time when the cost
// model charges for it, and a request that arrives while the server copies
// starts in the same loop turn: its prompt joins the same call.
func TestStateCopyTimeGroupsArrivals(t *testing.T) {
	cfg, recs := copyGroupTrace()
	run := func(copyNs float64) (map[string]engine.RequestResult, *Sim) {
		return runByID(t, cfg, &CPUCost{Fitted: testCost.Fitted, StateCopy: copyNs}, recs)
	}
	// b's start saves a's idle slot: 101 tokens (prompt + output - 1) of
	// 100 bytes.
	free, s := run(0)
	if c, _ := s.CopyBytesOf("b"); c.Saved != 10100 || c.Restored != 0 || s.Stats().RAMSaveBytes != 10100 || s.Stats().RAMCopyNs != 0 {
		t.Fatalf("copied for b %+v, stats %+v; want 10100 bytes saved, 0 ns", c, s.Stats())
	}
	// Free copies: b starts at once, alone (1 ms + 50 * 10 µs); c waits for
	// that call.
	if got := free["b"].FirstToken - 1e9; got != 1.5e6 {
		t.Errorf("free copies: b's TTFT %d, want 1.5 ms", got)
	}
	if free["c"].FirstToken <= free["b"].FirstToken {
		t.Errorf("free copies: c's first token at %d, not after b's (%d)", free["c"].FirstToken, free["b"].FirstToken)
	}
	// 1 ns per byte: 10.1 µs of copying, during which c arrives; one call
	// then takes both prompts (1 ms + 100 * 10 µs).
	paid, s := run(1)
	if s.Stats().RAMCopyNs != 10100 {
		t.Errorf("copy time %d ns, want 10100", s.Stats().RAMCopyNs)
	}
	want := engine.Time(1e9 + 10100 + 2e6)
	if paid["b"].FirstToken != want || paid["c"].FirstToken != want {
		t.Errorf("paid copies: first tokens b %d c %d, want both %d", paid["b"].FirstToken, paid["c"].FirstToken, want)
	}
}

// Saves and restores are charged at their own rates, and a save into
// memory the RAM cache has not held before pays StateFresh more per byte:
// a restore reads a cached buffer into the slot's KV, and frees it for the
// next save.
func TestStateCopyRestoreRate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Slots, cfg.Context, cfg.StateBytesPerToken = 1, 1000, 100
	a := toks(1, 100)
	recs := []traces.Record{
		{ID: "a", Arrival: 0, InputLen: 100, Tokens: a, OutputLen: 2},
		{ID: "b", Arrival: 1e9, InputLen: 50, Tokens: toks(2, 50), OutputLen: 2},
		{ID: "a2", Arrival: 2e9, InputLen: 110, Tokens: append(slices.Clip(a), toks(3, 10)...), OutputLen: 2},
		{ID: "c", Arrival: 3e9, InputLen: 50, Tokens: toks(4, 50), OutputLen: 2},
	}
	res, s := runByID(t, cfg, &CPUCost{Fitted: testCost.Fitted, StateCopy: 2, StateFresh: 3, StateRestore: 0.5}, recs)
	// b's start saves a (101 tokens, all new memory); a2's saves b (51,
	// new: the cache still holds a) and restores a, freeing 10100 bytes;
	// c's saves a2 (111 tokens): 10100 bytes into a's old memory, 1000 new.
	want := map[string]Copies{"b": {10100, 10100, 0}, "a2": {5100, 5100, 10100}, "c": {11100, 1000, 0}}
	for id, w := range want {
		if got, _ := s.CopyBytesOf(id); got != w {
			t.Errorf("%s copied %+v, want %+v", id, got, w)
		}
	}
	st := s.Stats()
	ns := int64(2*26300 + 3*16200 + 10100/2)
	if st.RAMSaveBytes != 26300 || st.RAMFreshBytes != 16200 || st.RAMRestoreBytes != 10100 || st.RAMCopyNs != ns {
		t.Errorf("stats %+v; want 26300 saved (16200 new), 10100 restored, %d ns", st, ns)
	}
	if got := res["a2"].CachedHost; got != 100 {
		t.Errorf("a2 cached %d from RAM, want 100 (a's prompt; its output is not in a2's)", got)
	}
}

// A request reaches the server loop Delay after it arrives: a lone
// request's TTFT is Delay plus its call, and a request that arrives while
// another's RAM-cache copies run joins that call only if it is seen before
// they end.
func TestRequestDelay(t *testing.T) {
	cfg, recs := copyGroupTrace()
	run := func(delay int64) map[string]engine.RequestResult {
		// b's start saves a's idle slot: 10100 bytes, 10.1 µs at 1 ns/B.
		res, _ := runByID(t, cfg, &CPUCost{Fitted: testCost.Fitted, StateCopy: 1, Delay: delay}, recs)
		return res
	}
	none, late := run(0), run(2e6)
	// a alone: 1 ms + 100 * 10 µs, plus the delay; its Arrival is still 0.
	if got := late["a"].FirstToken - late["a"].Arrival; got != 2e6+2e6 || late["a"].Arrival != 0 {
		t.Errorf("a: arrival %d, TTFT %d; want 0 and 4 ms", late["a"].Arrival, got)
	}
	// Both delayed alike, c is still seen during b's copies and joins.
	if none["b"].FirstToken != none["c"].FirstToken || late["b"].FirstToken != late["c"].FirstToken {
		t.Errorf("first tokens b/c: %d/%d without delay, %d/%d with", none["b"].FirstToken, none["c"].FirstToken, late["b"].FirstToken, late["c"].FirstToken)
	}
	if got := late["b"].FirstToken - none["b"].FirstToken; got != 2e6 {
		t.Errorf("the delay moved b's first token by %d, want 2 ms", got)
	}
}

// The case the delay is for: a closed-loop follow-up A is sent just as
// request Y ends, when the server has just started its next call (x's
// decode step, 1.001 ms); A waits for that call, then its start saves Y's
// idle slot (54 tokens of 100 bytes at 815 ns per byte: 4.401 ms). B, sent
// 5 ms after A, joins A's prompt call when the server sees it before those
// copies end: without a delay it does (5.402 ms), with 0.8 ms it does not
// (B is seen at 5.8 ms), as on the real server.
func TestRequestDelayKeepsFollowUpsApart(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Slots, cfg.Context, cfg.StateBytesPerToken = 3, 3000, 100
	base := []traces.Record{
		{ID: "x", Arrival: 0, InputLen: 50, Tokens: toks(1, 50), OutputLen: 200},
		{ID: "y", Arrival: 1000, InputLen: 50, Tokens: toks(2, 50), OutputLen: 5},
	}
	run := func(recs []traces.Record, delay int64) (map[string]engine.RequestResult, *Sim) {
		return runByID(t, cfg, &CPUCost{Fitted: testCost.Fitted, StateCopy: 815, Delay: delay}, recs)
	}
	// follow adds a, sent 1 ns after y's end, and b, 5 ms after a (y's end
	// moves with the delay: every request is seen that much later).
	follow := func(delay int64) (map[string]engine.RequestResult, *Sim) {
		first, _ := run(base, delay)
		end := first["y"].Finish // x's next decode step starts here
		return run(append(slices.Clone(base),
			traces.Record{ID: "a", Arrival: int64(end) + 1, InputLen: 50, Tokens: toks(3, 50), OutputLen: 2},
			traces.Record{ID: "b", Arrival: int64(end) + 1 + 5e6, InputLen: 50, Tokens: toks(4, 50), OutputLen: 2},
		), delay)
	}
	none, s := follow(0)
	if c, _ := s.CopyBytesOf("a"); c.Saved != 5400 {
		t.Fatalf("a's start saved %d bytes, want y's 5400", c.Saved)
	}
	if none["a"].FirstToken != none["b"].FirstToken {
		t.Errorf("no delay: a and b first tokens %d and %d, want one call", none["a"].FirstToken, none["b"].FirstToken)
	}
	late, _ := follow(8e5)
	if late["b"].FirstToken <= late["a"].FirstToken {
		t.Errorf("0.8 ms delay: b's first token %d not after a's %d: b joined a's call", late["b"].FirstToken, late["a"].FirstToken)
	}
	// With the delay, a's TTFT is still x's step (1.001 ms, less the 1 ns
	// a came after its start), its copies (4.401 ms) and its call with x's
	// token (1.501 ms): the delay hid in the wait.
	if got := late["a"].FirstToken - late["a"].Arrival; got != 1001000-1+4401000+1501000 {
		t.Errorf("a's TTFT with the delay %d, want 6902999", got)
	}
}

// simulate runs recs on a new server of cfg with cost and returns the
// result and the simulator.
func simulate(t testutil.TB, cfg Config, cost CostModel, recs []traces.Record) (*engine.Result, *Sim) {
	t.Helper()
	s, err := New(cfg, cost)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(engine.NewSliceSource(recs))
	if err != nil {
		t.Fatal(err)
	}
	return res, s
}

// runByID simulates recs on a server of cfg with cost and returns the
// results by request ID, and the simulator (for its stats and copies).
func runByID(t *testing.T, cfg Config, cost CostModel, recs []traces.Record) (map[string]engine.RequestResult, *Sim) {
	t.Helper()
	res, s := simulate(t, cfg, cost, recs)
	out := map[string]engine.RequestResult{}
	for _, r := range res.Requests {
		out[r.ID] = r
	}
	return out, s
}

// copyGroupTrace is a two-slot server and three requests: a alone, then b
// a second later, whose start saves a's idle slot (101 tokens of 100
// bytes), and c 5 µs after b.
func copyGroupTrace() (Config, []traces.Record) {
	cfg := DefaultConfig()
	cfg.Slots, cfg.Context, cfg.StateBytesPerToken = 2, 2000, 100
	return cfg, []traces.Record{
		{ID: "a", Arrival: 0, InputLen: 100, Tokens: toks(1, 100), OutputLen: 2},
		{ID: "b", Arrival: 1e9, InputLen: 50, Tokens: toks(2, 50), OutputLen: 2},
		{ID: "c", Arrival: 1e9 + 5000, InputLen: 50, Tokens: toks(3, 50), OutputLen: 2},
	}
}

// The decode-only calls after a call in which a prompt ended pay the
// curve's ns, then decay times as much each call; a mixed call pays
// nothing, and only the last prompt call counts.
func TestAfterPrompt(t *testing.T) {
	cfg := slotsConfig(2, 2000)
	run := func(ns, decay float64, recs []traces.Record) (map[string]engine.RequestResult, *Sim) {
		return runByID(t, cfg, &CPUCost{Fitted: testCost.Fitted, AfterPromptCurve: []AfterPromptPoint{{Context: 500, Ns: ns, Decay: decay}}}, recs)
	}
	alone := []traces.Record{{ID: "x", Arrival: 0, InputLen: 50, Tokens: toks(1, 50), OutputLen: 5}}
	off, _ := run(0, 0.5, alone)
	on, s := run(1e5, 0.5, alone)
	// Four decode steps of 1.001 ms; with the term 0.1, 0.05, 0.025 and
	// 0.0125 ms more.
	decode := func(r engine.RequestResult) int64 { return int64(r.Finish - r.FirstToken) }
	if got := decode(off["x"]); got != 4*1001000 {
		t.Errorf("decode time without the term %d, want 4004000", got)
	}
	if got := decode(on["x"]); got != 4*1001000+187500 {
		t.Errorf("decode time with the term %d, want 4191500", got)
	}
	if got := s.Stats().AfterPromptNs; got != 187500 {
		t.Errorf("stats after_prompt_ns %d, want 187500", got)
	}
	if on["x"].FirstToken != off["x"].FirstToken {
		t.Errorf("the term moved the prompt call: first token %d, want %d", on["x"].FirstToken, off["x"].FirstToken)
	}
	// y arrives during x's second decode step: its prompt call carries
	// x's third token (mixed: no extra, 1.5 ms + 1 µs), and x's fourth
	// step then pays for the last prompt call alone: 1 time, not 1 + 0.5^3
	// for both.
	both := append(slices.Clone(alone), traces.Record{ID: "y", Arrival: 3e6, InputLen: 50, Tokens: toks(2, 50), OutputLen: 2})
	off, _ = run(0, 0.5, both)
	on, s = run(1e5, 0.5, both)
	if off["y"].FirstToken != off["x"].FirstToken+2*1001000+1501000 {
		t.Fatalf("y's prompt call is not x's third step: x first %d, y first %d", off["x"].FirstToken, off["y"].FirstToken)
	}
	// x: steps 1, 2 pay 0.1 and 0.05 ms; the mixed call nothing; x's
	// fourth step and y's only one (one call, 2 slots) 0.1 ms.
	if got, want := decode(on["x"])-decode(off["x"]), int64(100000+50000+100000); got != want {
		t.Errorf("x's decode time grew by %d, want %d", got, want)
	}
	if got := s.Stats().AfterPromptNs; got != 250000 {
		t.Errorf("stats after_prompt_ns %d, want 250000", got)
	}
}

// The extra is read off the curve at the decode call's context: x's four
// decode steps read 51, 52, 53 and 54 tokens, where a curve through (0, 0)
// and (100, 0.2 ms) gives 2 µs per token.
func TestAfterPromptContext(t *testing.T) {
	cfg := slotsConfig(2, 2000)
	recs := []traces.Record{{ID: "x", Arrival: 0, InputLen: 50, Tokens: toks(1, 50), OutputLen: 5}}
	curve := []AfterPromptPoint{{Context: 0, Ns: 0, Decay: 0.5}, {Context: 100, Ns: 2e5, Decay: 0.5}, {Context: 200, Ns: 0, Decay: 0}}
	_, s := runByID(t, cfg, &CPUCost{Fitted: testCost.Fitted, AfterPromptCurve: curve}, recs)
	if got, want := s.Stats().AfterPromptNs, int64(2000*(51+52*0.5+53*0.25+54*0.125)); got != want {
		t.Errorf("stats after_prompt_ns %d, want %d", got, want)
	}
}

func TestAfterPromptAt(t *testing.T) {
	curve := []AfterPromptPoint{{Context: 100, Ns: 1000, Decay: 0.2}, {Context: 300, Ns: 3000, Decay: 0.6}, {Context: 400, Ns: -5, Decay: 1.5}}
	for _, tc := range []struct {
		context   int64
		ns, decay float64
	}{
		{0, 1000, 0.2}, {100, 1000, 0.2}, {200, 2000, 0.4}, {250, 2500, 0.5}, {300, 3000, 0.6},
		{320, 2399, 0.78}, {350, 1497.5, 0}, // decay 1.05 is outside [0, 1): 0
		{1e6, 0, 0}, // ns -5 and decay 1.5: 0

	} {
		ns, decay := AfterPromptAt(curve, tc.context)
		if math.Abs(ns-tc.ns) > 1e-6 || math.Abs(decay-tc.decay) > 1e-9 {
			t.Errorf("at %d: %g, %g; want %g, %g", tc.context, ns, decay, tc.ns, tc.decay)
		}
	}
	if ns, decay := AfterPromptAt(nil, 5); ns != 0 || decay != 0 {
		t.Errorf("empty curve: %g, %g", ns, decay)
	}
}

// TestPropStreamSameResults: a run that streams its results (Sim.Stream)
// hands the sink exactly the results, in the order, that a run keeping
// them returns, with the same summary and counters, keeps none itself, and
// a sink's error stops the run with that error.
func TestPropStreamSameResults(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t, rapid.Bool().Draw(t, "ram"))
		recs := genTrace(t, false)
		want, _ := simulate(t, cfg, testCost, recs)
		s, err := New(cfg, testCost)
		if err != nil {
			t.Fatal(err)
		}
		var got []engine.RequestResult
		s.Stream(func(r engine.RequestResult) error { got = append(got, r); return nil })
		res, err := s.Run(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests != nil {
			t.Fatalf("a streamed run kept %d results", len(res.Requests))
		}
		if !reflect.DeepEqual(got, want.Requests) || res.Summary != want.Summary || res.Counters != want.Counters {
			t.Fatalf("streamed run differs:\n got %+v\n%+v\nwant %+v\n%+v", got, res.Summary, want.Requests, want.Summary)
		}
		if _, ok := s.SlotOf(recs[0].ID); ok {
			t.Fatal("a streamed run kept the slots by request ID")
		}
		stop := rapid.IntRange(1, len(recs)).Draw(t, "stop")
		s, _ = New(cfg, testCost)
		n := 0
		s.Stream(func(engine.RequestResult) error {
			if n++; n == stop {
				return fmt.Errorf("sink full at %d", n)
			}
			return nil
		})
		if _, err := s.Run(engine.NewSliceSource(recs)); err == nil || err.Error() != fmt.Sprintf("sink full at %d", stop) || n != stop {
			t.Fatalf("sink error at result %d: Run returned %v after %d results", stop, err, n)
		}
	})
}
