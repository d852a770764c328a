package configs

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/sim/llamacpp"
)

// The bundled llama-server file loads, maps every key onto
// sim/llamacpp.Config and builds a CPU cost model; the SGLang builder
// refuses it.
func TestLlamaCppTinyLoads(t *testing.T) {
	f := mustLoad(t, "llamacpp/tiny.toml")
	if !f.IsLlamaCpp() {
		t.Fatal("tiny.toml is not a llama-server file")
	}
	b := must(t, f.BuildLlama)
	want := llamacpp.DefaultConfig()
	want.TokenText = llamacpp.TokenTextByteLevel // the tiny model's tokenizer
	if b.Config != want {
		t.Errorf("config %+v, want the server defaults with byte-level text %+v", b.Config, want)
	}
	if b.Cost.Prefill[1] <= 0 || b.Cost.Decode[0] <= 0 {
		t.Errorf("cost %+v", b.Cost)
	}
	if _, err := f.Build(); err == nil || !strings.Contains(err.Error(), "llama-server") {
		t.Errorf("Build of a llama-server file: %v", err)
	}
	if _, err := Default().BuildLlama(); err == nil {
		t.Error("BuildLlama of the SGLang default succeeded")
	}
}

// Every [llamacpp] key reaches the simulator's Config.
func TestLlamaCppKeys(t *testing.T) {
	f := mustParse(t, []byte(`[engine]
kind = "llamacpp"
[llamacpp]
parallel = 2
ctx_size = 1024
batch_size = 256
slot_prompt_similarity = 0.5
cache_ram = -1
no_cache_idle_slots = true
state_bytes_per_token = 100
token_text = "byte-level"
ubatch_size = 128
[llamacpp.cost]
prefill = [1.0, 2.0, 3.0, 4.0]
decode = [5.0, 6.0, 7.0]
state_copy_ns_per_byte = 0.75
state_restore_ns_per_byte = 0.25
state_fresh_ns_per_byte = 0.5
small_call_tokens = 32
small_call_pair_ns = 500.0
medium_call_tokens = 100
medium_call_pair_ns = 250.0
request_delay_ns = 800000
after_prompt_ns = 1100000.0
after_prompt_decay = 0.5
[workload]
trace = "x.jsonl"
`), "mem.toml")
	b := must(t, f.BuildLlama)
	c := b.Config
	if c.Slots != 2 || c.Context != 1024 || c.Batch != 256 || c.SlotPromptSimilarity != 0.5 || c.CacheRAMMiB != -1 || !c.NoCacheIdleSlots || c.StateBytesPerToken != 100 || c.TokenText != "byte-level" || c.Ubatch != 128 {
		t.Errorf("config %+v", c)
	}
	if b.Cost.Prefill != [4]float64{1, 2, 3, 4} || b.Cost.Decode != [3]float64{5, 6, 7} || b.Cost.StateCopy != 0.75 || b.Cost.StateRestore != 0.25 || b.Cost.StateFresh != 0.5 || b.Cost.SmallCall != 32 || b.Cost.SmallPair != 500 || b.Cost.MediumCall != 100 || b.Cost.MediumPair != 250 || b.Cost.Delay != 800000 || !reflect.DeepEqual(b.Cost.AfterPromptCurve, []llamacpp.AfterPromptPoint{{Ns: 1.1e6, Decay: 0.5}}) {
		t.Errorf("cost %+v", b.Cost)
	}
	if f.Workload.Trace != "x.jsonl" {
		t.Errorf("workload %+v", f.Workload)
	}
}
