package configs

import (
	"testing"

	"github.com/pelletier/go-toml/v2"

	"github.com/kvsim/kvsim/internal/fielderr"
)

// Find places plain keys, indexed keys at their array, keys in the n-th
// element of an array of tables (its header when the key is not written
// there), dotted keys, keys of inline tables (also in arrays) and quoted
// keys, each at the start of the key as written; a top-level key does not
// match inside a table.
func TestKeyPositions(t *testing.T) {
	doc := []byte(`seed = 1
[llamacpp.cost]
prefill = [1.0, 2.0]

[[llamacpp.cost.after_prompt]]
context_tokens = 100
ns = 5.0

[[llamacpp.cost.after_prompt]]
decay = 0.5

[workload]
trace = "x"
`)
	inline := []byte("[llamacpp.cost]\nafter_prompt = [{ns = 1.0}, # one\n  {decay = 0.5}]\n")
	dotted := []byte("server.tp_size = 0\n[cache]\nstorage.x = 1\n")
	inlineTable := []byte("server = {tp_size = 0, page_size = 2}\n")
	quoted := []byte("[sweep]\n\"cache.cp\" = [1, 2]\n'a b'.c = 3\n")
	nested := []byte("[[a]]\nx = 1\n[a.b]\ny = 2\n[[a]]\n  [ a.b ]\n  y = 3\n")
	for _, tc := range []struct {
		doc       []byte
		path      fielderr.Path
		line, col int
	}{
		{doc, fielderr.Key("seed"), 1, 1},
		{doc, fielderr.Key("llamacpp"), 2, 1},
		{doc, fielderr.Key("llamacpp", "cost", "prefill").At(1), 3, 1},
		{doc, fielderr.Key("llamacpp", "cost", "after_prompt"), 5, 1},
		{doc, fielderr.Key("llamacpp", "cost", "after_prompt").At(0).Key("ns"), 7, 1},
		{doc, fielderr.Key("llamacpp", "cost", "after_prompt").At(1).Key("decay"), 10, 1},
		{doc, fielderr.Key("llamacpp", "cost", "after_prompt").At(1).Key("ns"), 9, 1}, // not written: the header
		{doc, fielderr.Key("workload", "trace"), 13, 1},
		{doc, fielderr.Key("ns"), 0, 0},
		{doc, fielderr.Key("decay"), 0, 0},
		{doc, fielderr.Key("trace"), 0, 0},
		{inline, fielderr.Key("llamacpp", "cost", "after_prompt").At(0).Key("ns"), 2, 18},
		{inline, fielderr.Key("llamacpp", "cost", "after_prompt").At(1).Key("decay"), 3, 4},
		{inline, fielderr.Key("llamacpp", "cost", "after_prompt").At(1).Key("ns"), 3, 3}, // its '{'
		{inline, fielderr.Key("llamacpp", "cost", "after_prompt").At(2).Key("ns"), 2, 1}, // no such element: the array
		{dotted, fielderr.Key("server"), 1, 1},
		{dotted, fielderr.Key("server", "tp_size"), 1, 1},
		{dotted, fielderr.Key("cache", "storage", "x"), 3, 1},
		{inlineTable, fielderr.Key("server", "tp_size"), 1, 11},
		{inlineTable, fielderr.Key("server", "page_size"), 1, 24},
		{quoted, fielderr.Key("sweep", "cache.cp"), 2, 1},
		{quoted, fielderr.Key("sweep", "a b", "c"), 3, 1},
		{nested, fielderr.Key("a").At(0).Key("b", "y"), 4, 1},
		{nested, fielderr.Key("a").At(1).Key("b"), 6, 3},
		{nested, fielderr.Key("a").At(1).Key("b", "y"), 7, 3},
	} {
		ps, err := KeyPositions(tc.doc)
		if err != nil {
			t.Fatalf("KeyPositions: %v", err)
		}
		at, ok := ps.Find(tc.path)
		if at.Line != tc.line || at.Col != tc.col || ok != (tc.line > 0) {
			t.Errorf("Find(%s) = %d:%d %v, want %d:%d", tc.path, at.Line, at.Col, ok, tc.line, tc.col)
		}
	}
}

// Every key go-toml decodes from a document has a position, and no input
// makes KeyPositions panic.
func FuzzKeyPositions(f *testing.F) {
	for _, s := range []string{
		"a = 1\n[b]\nc = 2\n",
		"server.tp_size = 0\n",
		"server = {tp_size = 0, x = {y = [1, {z = 2}]}}\n",
		"[[a.b]]\nc = 1\n[[a.b]]\n[a.b.d]\ne = 'x'\n",
		"\"q.k\" = 1\n'l' = {\"m n\" = 2}\n",
		"a = [[{b = 1}], [{c = 2}, 3]]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := KeyPositions(data)
		var doc map[string]any
		if toml.Unmarshal(data, &doc) != nil || err != nil {
			return
		}
		var walk func(p fielderr.Path, v any)
		walk = func(p fielderr.Path, v any) {
			switch x := v.(type) {
			case map[string]any:
				for k, e := range x {
					kp := p.Key(k)
					if _, ok := ps[kp.String()]; !ok {
						t.Fatalf("%s decodes but has no position in %q", kp, data)
					}
					walk(kp, e)
				}
			case []any:
				for i, e := range x {
					walk(p.At(i), e)
				}
			}
		}
		walk(nil, doc)
	})
}
