package traces

import (
	"slices"
	"testing"
)

func TestPromptTokens(t *testing.T) {
	v := Vocab{Lo: 100, Hi: 200}
	a := Record{ID: "a", InputLen: 1100, Blocks: []uint64{7, 8, 9}, BlockSize: 512, OutputLen: 1}
	b := Record{ID: "b", InputLen: 1030, Blocks: []uint64{7, 8, 10}, BlockSize: 512, OutputLen: 1}
	c := Record{ID: "c", InputLen: 150, Blocks: []uint64{7, 8}, BlockSize: 64, OutputLen: 1} // WEKA style: 22 tokens past the blocks
	ta, err := PromptTokens(&a, v)
	if err != nil {
		t.Fatal(err)
	}
	tb, _ := PromptTokens(&b, v)
	tc, _ := PromptTokens(&c, v)
	if len(ta) != 1100 || len(tb) != 1030 || len(tc) != 150 {
		t.Fatalf("lengths %d %d %d, want the input lengths 1100 1030 150", len(ta), len(tb), len(tc))
	}
	if !slices.Equal(ta[:1024], tb[:1024]) {
		t.Fatal("equal hashes gave different tokens")
	}
	if slices.Equal(ta[1024:1030], tb[1024:1030]) {
		t.Fatal("different last blocks gave equal tokens")
	}
	for _, tok := range append(append(ta, tb...), tc...) {
		if tok < v.Lo || tok >= v.Hi {
			t.Fatalf("token %d outside %v", tok, v)
		}
	}
	again, _ := PromptTokens(&a, v)
	if !slices.Equal(ta, again) {
		t.Fatal("not deterministic")
	}
	c2 := c
	c2.ID = "c2"
	tc2, _ := PromptTokens(&c2, v)
	if !slices.Equal(tc[:128], tc2[:128]) || slices.Equal(tc[128:], tc2[128:]) {
		t.Fatal("tails past the blocks must be per request, blocks shared")
	}
	tok := Record{ID: "t", InputLen: 3, Tokens: []int32{5, 6, 7}}
	if got, _ := PromptTokens(&tok, v); !slices.Equal(got, []int32{5, 6, 7}) {
		t.Fatalf("token trace changed: %v", got)
	}
	if _, err := PromptTokens(&a, Vocab{Lo: 5, Hi: 5}); err == nil {
		t.Fatal("empty vocab accepted")
	}
}
