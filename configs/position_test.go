package configs

import "testing"

// keyPos finds plain keys, indexed keys by their array, keys in the n-th
// element of an array of tables (its header when the key is not written
// there), and an inline array's key; a top-level key does not match inside
// an array element.
func TestKeyPos(t *testing.T) {
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
	inline := []byte("[llamacpp.cost]\nafter_prompt = [{ns = 1.0}]\n")
	for _, tc := range []struct {
		doc       []byte
		path      string
		line, col int
	}{
		{doc, "seed", 1, 1},
		{doc, "llamacpp.cost.prefill[1]", 3, 1},
		{doc, "llamacpp.cost.after_prompt[0].ns", 7, 1},
		{doc, "llamacpp.cost.after_prompt[1].decay", 10, 1},
		{doc, "llamacpp.cost.after_prompt[1].ns", 9, 1}, // not written: the header
		{doc, "llamacpp.cost.after_prompt[2].ns", 0, 0},
		{doc, "workload.trace", 13, 1},
		{doc, "ns", 0, 0},
		{doc, "decay", 0, 0},
		{inline, "llamacpp.cost.after_prompt[0].ns", 2, 1},
	} {
		if line, col := keyPos(tc.doc, tc.path); line != tc.line || col != tc.col {
			t.Errorf("keyPos(%q) = %d:%d, want %d:%d", tc.path, line, col, tc.line, tc.col)
		}
	}
}
