package main

import (
	"slices"
	"strings"
	"testing"
)

// refs compares the prediction and the median of the runs not chosen with
// the per-request median of every choice of k real runs, as kvsim compare
// takes a median (the lower middle value), and counts the references
// against which both MAPEs met their bounds.
func TestRefs(t *testing.T) {
	write := tempWriter(t)
	// Only a and b have a first token (perRequest gives the others a TTFT
	// of 0, which has no TTFT error); every E2E is 40 ms, so the E2E MAPE
	// is 0 and the TTFT bound alone decides.
	none := map[string]float64{"c": -1, "d": -1, "e": -1, "f": -1}
	run := func(name string, a, b float64) string {
		ft := map[string]float64{"a": a, "b": b}
		for k, v := range none {
			ft[k] = v
		}
		return perRequest(write, name, ft)
	}
	reals := []string{run("r1.jsonl", 10, 20), run("r2.jsonl", 12, 20), run("r3.jsonl", 20, 30)}
	pred := run("p.jsonl", 12, 20)
	var out strings.Builder
	if err := refs(append([]string{"-name", "chat", "-predicted", pred}, reals...), &out); err != nil {
		t.Fatal(err)
	}
	// k = 1. The simulator against r1: a 2/10, b 0: 10%; r2: 0%; r3: a
	// 8/20, b 10/30: 36.7%. The other two runs' median (the lower) against
	// r1: a 12, b 20: 10%; against r2: a 10 (2/12), b 20: 8.3%; against r3:
	// a 10 (10/20), b 20 (10/30): 41.7%.
	// k = 3: the median is a 12, b 20, the prediction exactly; no run is
	// left to set against it.
	for _, want := range []string{
		"chat: the simulator, and the median of the other real runs, against the per-request median of k of the 3 real runs (every choice of k); bounds TTFT MAPE 15%, E2E MAPE 10%",
		"| 1 | 3 | 0.0 / 15.6 / 36.7 | 0.0 / 0.0 / 0.0 | 2 of 3 (67%) | 8.3 / 20.0 / 41.7 | 0.0 / 0.0 / 0.0 | 2 of 3 (67%) |",
		"| 3 | 1 | 0.0 / 0.0 / 0.0 | 0.0 / 0.0 / 0.0 | 1 of 1 (100%) | - | - | - |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// A tighter bound: against r1 the simulator's 10% misses 9.
	out.Reset()
	if err := refs(append([]string{"-k", "1", "-max-ttft-mape", "9", "-predicted", pred}, reals...), &out); err != nil {
		t.Fatal(err)
	}
	if want := "| 1 | 3 | 0.0 / 15.6 / 36.7 | 0.0 / 0.0 / 0.0 | 1 of 3 (33%) | 8.3 / 20.0 / 41.7 | 0.0 / 0.0 / 0.0 | 1 of 3 (33%) |"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
	if strings.Contains(out.String(), "\n| 3 |") {
		t.Errorf("-k 1 printed another size:\n%s", out.String())
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-predicted", pred}, "usage: fidelity refs"},
		{append([]string{"-k", "4", "-predicted", pred}, reals...), `"4" is not a number of real runs from 1 to 3`},
		{append([]string{"-k", "1,x", "-predicted", pred}, reals...), `"x" is not a number of real runs from 1 to 3`},
		{append([]string{"-max-e2e-mape", "-1", "-predicted", pred}, reals...), "-max-e2e-mape -1: expected a percentage >= 0"},
		{append([]string{"-predicted", write("empty.jsonl", `{"kvsim_trace":1,"format":"kvsim"}`+"\n")}, reals...), "empty.jsonl: no record with observed results"},
		{append([]string{"-predicted", write("other.jsonl", `{"kvsim_trace":1,"format":"kvsim"}`+"\n"+
			`{"id":"z","arrival_ns":0,"input_len":10,"output_len":2,"observed":{"cached_tokens":0,"ttft_ns":1000000,"e2e_ns":40000000,"status":"ok"}}`+"\n")}, reals...),
			"no successful request in common"},
	} {
		err := refs(tc.args, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("refs %q: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

// choose visits every choice of k of n once, in lexicographic order.
func TestChoose(t *testing.T) {
	var got []string
	choose(4, 2, func(in []bool) {
		var b strings.Builder
		for i, c := range in {
			if c {
				b.WriteByte(byte('0' + i))
			}
		}
		got = append(got, b.String())
	})
	if want := []string{"01", "02", "03", "12", "13", "23"}; !slices.Equal(got, want) {
		t.Errorf("choose(4, 2) = %q, want %q", got, want)
	}
	n := 0
	choose(9, 5, func([]bool) { n++ })
	if n != 126 {
		t.Errorf("choose(9, 5) made %d choices, want 126", n)
	}
	if ks, err := parseKs("", 6); err != nil || !slices.Equal(ks, []int{1, 3, 5, 6}) {
		t.Errorf(`parseKs("", 6) = %v, %v; want [1 3 5 6]`, ks, err)
	}
}
