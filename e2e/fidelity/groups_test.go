package main

import (
	"fmt"
	"strings"
	"testing"
)

// perRequest writes a per-request file whose requests all arrive at 0 with
// the given first-token times in ms (a negative time: no first token).
func perRequest(write func(name, body string) string, name string, ft map[string]float64) string {
	var b strings.Builder
	b.WriteString(`{"kvsim_trace":1,"format":"kvsim"}` + "\n")
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		ttft := ""
		if ft[id] >= 0 {
			ttft = fmt.Sprintf(`"ttft_ns":%d,`, int64(ft[id]*1e6))
		}
		fmt.Fprintf(&b, `{"id":%q,"arrival_ns":0,"input_len":10,"output_len":2,"observed":{"cached_tokens":0,%s"e2e_ns":40000000,"status":"ok"}}`+"\n", id, ttft)
	}
	return write(name, b.String())
}

// groups finds the pairs whose first tokens came together, counts them over
// the real runs, lists those the simulator grouped otherwise, and splits
// the TTFT MAPE between their requests and the rest. A request without a
// first token in some run takes no part.
func TestGroups(t *testing.T) {
	write := tempWriter(t)
	reals := []string{
		perRequest(write, "r1.jsonl", map[string]float64{"a": 10, "b": 10.2, "c": 20, "d": 20.3, "e": -1, "f": 30}),
		perRequest(write, "r2.jsonl", map[string]float64{"a": 10, "b": 10.1, "c": 20, "d": 25, "e": 30.2, "f": 30}),
		perRequest(write, "r3.jsonl", map[string]float64{"a": 10, "b": 15, "c": 20, "d": 26, "e": 30.1, "f": 30}),
	}
	pred := perRequest(write, "p.jsonl", map[string]float64{"a": 10, "b": 14, "c": 20, "d": 20.1, "e": 33.2, "f": 33})
	var out strings.Builder
	if err := groups(append([]string{"-name", "chat at concurrency 4", "-predicted", pred}, reals...), &out); err != nil {
		t.Fatal(err)
	}
	// TTFT errors against the per-request medians (as kvsim compare takes
	// them: e's over the two runs that had one, 30.1 the lower middle):
	// b 14 against 10.2, d 20.1 against 25, e 33.2 against 30.1, f 33
	// against 30.
	eb, ed, ee, ef := 3.8/10.2, 4.9/25, 3.1/30.1, 0.1
	for _, want := range []string{
		"chat at concurrency 4: requests whose first tokens came within 500µs of each other (one prompt call), 3 real run(s) against the simulator",
		"1 pair(s) shared a call in most real runs; the simulator put 0 of them together, and 1 pair(s) that most real runs did not",
		fmt.Sprintf("the 4 request(s) of the 2 pair(s) grouped differently carry %.1f pp of the %.1f%% TTFT MAPE (their own MAPE %.1f%%, the other 2 requests' %.1f%%)",
			100*(eb+ed)/6, 100*(eb+ed+ee+ef)/6, 100*(eb+ed)/4, 100*(ee+ef)/2),
		"    a and b: together in 2 of 3 real runs, apart in the simulator\n    c and d: together in 1 of 3 real runs, together in the simulator\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "e and f") {
		t.Errorf("e has no first token in one run but was paired:\n%s", out.String())
	}
	// A wider tolerance joins b with a in the third run's prediction too.
	out.Reset()
	if err := groups(append([]string{"-tol", "5ms", "-predicted", pred}, reals...), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "the simulator put 2 of them together") {
		t.Errorf("-tol 5ms:\n%s", out.String())
	}
	for _, bad := range [][]string{
		{"-predicted", pred},
		{reals[0]},
		{"-tol", "-1ms", "-predicted", pred, reals[0]},
		{"-predicted", write("empty.jsonl", `{"kvsim_trace":1,"format":"kvsim"}`+"\n"), reals[0]},
		{"-predicted", pred, write("bad.jsonl", "{\n")},
	} {
		if err := groups(bad, &out); err == nil {
			t.Errorf("groups %q: no error", bad)
		}
	}
}
