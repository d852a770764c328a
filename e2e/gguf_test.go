//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kvsim/kvsim/internal/gguf"
)

// TestGGUFLoads: the real llama-server loads a model written by
// internal/gguf (f16 and f32), reports its shape, tokenizes token ids as
// bytes and generates.
func TestGGUFLoads(t *testing.T) {
	needServer(t, "tiny.gguf")
	for _, f32 := range []bool{false, true} {
		name := "e2e-gguf-f16.gguf"
		if f32 {
			name = "e2e-gguf-f32.gguf"
		}
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(llamaRoot(), "models", name)
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(path) })
			shape := gguf.Shape{Embd: 128, Layers: 2, Heads: 4, KVHeads: 2, FF: 256, Vocab: 1000, Context: 4096}
			if _, err := gguf.Write(f, gguf.Options{Shape: shape, Seed: 3, F32: f32}); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			s := startServer(t, serverOpts{Model: name, NP: 1, Ctx: 512})
			var props struct {
				FType string `json:"model_ftype"`
				Slots int    `json:"total_slots"`
			}
			if err := s.get("/props", &props); err != nil {
				t.Fatal(err)
			}
			want := "F16"
			if f32 {
				want = "all F32"
			}
			if props.FType != want || props.Slots != 1 {
				t.Errorf("/props: ftype %q slots %d, want %s and 1", props.FType, props.Slots, want)
			}
			r := s.complete([]int32{'h', 'e', 'l', 'l', 'o'}, 4, nil)
			if r.Status != 200 || r.Timings.PromptN != 5 || len(r.Tokens) != 4 {
				t.Fatalf("completion: HTTP %d prompt_n %d tokens %v %s", r.Status, r.Timings.PromptN, r.Tokens, r.Body)
			}
			for _, id := range r.Tokens {
				if id < 0 || int(id) >= shape.Vocab {
					t.Errorf("generated id %d outside the vocabulary", id)
				}
			}
			t.Logf("loaded %s (%s), generated %v", name, props.FType, r.Tokens)
		})
	}
}
