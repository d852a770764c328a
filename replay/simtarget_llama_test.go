package replay

import (
	"testing"

	"github.com/kvsim/kvsim/sim/llamacpp"
	"github.com/kvsim/kvsim/traces"
)

func newLlamaTarget(t testing.TB, slots int, traceOutputs bool) *SimTarget {
	t.Helper()
	cfg := llamacpp.DefaultConfig()
	cfg.Slots, cfg.Context = slots, slots*2048
	st, err := NewSimTarget(SimConfig{Engine: &llamacpp.Factory{Config: cfg, Cost: &llamacpp.CPUCost{Fitted: testFitted}}, TraceOutputs: traceOutputs})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func seq(seed, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(1 + (seed*7919+i*31)%255)
	}
	return out
}

// The simulated llama-server behind the replay target gives the probe's
// answers (e2e/llama/PROBES.md §1): A and B take the two slots cold, A
// again is a full hit that re-evaluates its last token.
func TestLlamaSimTargetSlots(t *testing.T) {
	st := newLlamaTarget(t, 2, false)
	a, b := seq(1, 200), seq(2, 200)
	recs := []traces.Record{
		{ID: "A", InputLen: 200, Tokens: a, OutputLen: 3},
		{ID: "B", InputLen: 200, Tokens: b, OutputLen: 3},
		{ID: "A2", InputLen: 200, Tokens: a, OutputLen: 3},
	}
	cfg := Default()
	cfg.MaxConcurrency = 1
	res := runReplay(t, st, cfg, recs)
	want := []int{0, 0, 199}
	for i, r := range res.Requests {
		if r.Failed != "" || r.CachedTokens != want[i] {
			t.Errorf("%s: cached %d failed %q, want %d", r.ID, r.CachedTokens, r.Failed, want[i])
		}
	}
	if info, _ := st.Info(t.Context()); info.Server != "kvsim-sim-llamacpp" {
		t.Errorf("info %+v", info)
	}
	// The replay is deterministic, as for the SGLang simulator.
	again := runReplay(t, newLlamaTarget(t, 2, false), cfg, recs)
	for i := range res.Requests {
		if res.Requests[i].End-res.Requests[i].Start != again.Requests[i].End-again.Requests[i].Start {
			t.Fatalf("request %d: E2E %d then %d", i, res.Requests[i].E2E(), again.Requests[i].E2E())
		}
	}
}

// With TraceOutputs the record's recorded output ids are what the slot
// keeps, so the next turn that carries them hits prompt + output - 1;
// without, the prediction stops at the prompt.
func TestLlamaSimTargetTraceOutputs(t *testing.T) {
	p1 := seq(3, 100)
	out := []int32{4065, 4065, 1089, 7}
	p2 := append(append(append([]int32(nil), p1...), out...), seq(4, 20)...)
	recs := []traces.Record{
		{ID: "t1", InputLen: len(p1), Tokens: p1, OutputLen: 4, OutputTokens: out},
		{ID: "t2", InputLen: len(p2), Tokens: p2, OutputLen: 4, Parent: "t1"},
	}
	cfg := Default()
	for _, c := range []struct {
		traceOutputs bool
		want         int
	}{{true, 103}, {false, 100}} {
		res := runReplay(t, newLlamaTarget(t, 1, c.traceOutputs), cfg, recs)
		if got := res.Requests[1].CachedTokens; got != c.want {
			t.Errorf("TraceOutputs %v: turn 2 cached %d, want %d", c.traceOutputs, got, c.want)
		}
	}
}

// A byte-level llama-server holds back tokens that leave the text in an
// incomplete UTF-8 sequence: with the server's output ids in the trace,
// the client's first token comes with the token that completes the text,
// and tokens sent together are one chunk, one gap, as the client of the
// OpenAI stream counts them (one per chunk of text); E2E does not change.
// Synthetic outputs, and whole-text tokens, stream every token.
func TestLlamaSimTargetHoldsBackSplitUTF8(t *testing.T) {
	p := seq(5, 100)
	out := []int32{0xED, 0xED, 0xED, 3733, 3733, 3733}
	recs := []traces.Record{{ID: "r", InputLen: len(p), Tokens: p, OutputLen: len(out), OutputTokens: out}}
	run := func(tokenText string, traceOutputs bool) RequestResult {
		cfg := llamacpp.DefaultConfig()
		cfg.TokenText = tokenText
		st, err := NewSimTarget(SimConfig{Engine: &llamacpp.Factory{Config: cfg, Cost: &llamacpp.CPUCost{Fitted: testFitted}}, TraceOutputs: traceOutputs})
		if err != nil {
			t.Fatal(err)
		}
		return runReplay(t, st, Default(), recs).Requests[0]
	}
	whole := run(llamacpp.TokenTextWhole, true)
	held := run(llamacpp.TokenTextByteLevel, true)
	synthetic := run(llamacpp.TokenTextByteLevel, false)
	if len(whole.ITL) != 5 || len(synthetic.ITL) != 5 {
		t.Fatalf("whole text: %d ITLs, synthetic outputs: %d, want 5", len(whole.ITL), len(synthetic.ITL))
	}
	// The first chunk comes with token 4, three steps after token 1.
	steps := whole.ITL[0] + whole.ITL[1] + whole.ITL[2]
	if held.TTFT() != whole.TTFT()+steps {
		t.Errorf("held TTFT %d, want %d + %d", held.TTFT(), whole.TTFT(), steps)
	}
	if len(held.ITL) != 2 || held.E2E() != whole.E2E() || held.OutputTokens != 3 {
		t.Errorf("held: ITLs %v, E2E %d (whole %d), %d chunks; want 2 gaps, the same E2E, 3 chunks", held.ITL, held.E2E(), whole.E2E(), held.OutputTokens)
	}
	// Held in the middle: tokens 2 and 3 come in one chunk, one gap of
	// two steps.
	recs[0].OutputTokens = []int32{3733, 0xC3, 0xA9, 3733, 3733, 3733}
	mid := run(llamacpp.TokenTextByteLevel, true)
	if len(mid.ITL) != 4 || mid.ITL[0] != whole.ITL[0]+whole.ITL[1] || mid.TTFT() != whole.TTFT() {
		t.Errorf("held mid-stream: TTFT %d ITLs %v; want TTFT %d and a first gap of %d", mid.TTFT(), mid.ITL, whole.TTFT(), whole.ITL[0]+whole.ITL[1])
	}
	if synthetic.TTFT() != whole.TTFT() {
		t.Errorf("synthetic outputs: TTFT %d, want %d", synthetic.TTFT(), whole.TTFT())
	}
}
