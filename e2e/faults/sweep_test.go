//go:build faults

package faults

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvsim/kvsim/internal/testutil"
)

// Inputs that an adversarial sweep found to validate and then crash, hang
// or eat memory: each now stops at once with a clear error (or runs in
// bounded memory), within seconds.
func TestInputsThatUsedToCrash(t *testing.T) {
	dir := t.TempDir()
	small := testdata("small.toml")
	maxArrival := writeFile(t, dir, "maxarr.jsonl", []byte(`{"kvsim_trace":1}
{"id":"a","arrival_ns":9223372036854775000,"input_len":100,"output_len":4}
`))
	slowCfg := writeFile(t, dir, "slow.toml", []byte(strings.Replace(string(testutil.ReadFile(t, small)), "decode = [2e6, 0.0, 1.0]", "decode = [3e12, 0.0, 1.0]", 1)))
	long1 := writeFile(t, dir, "long1.jsonl", []byte(`{"kvsim_trace":1}
{"id":"a","arrival_ns":0,"input_len":100,"output_len":1000}
`))
	hugeCtx := writeFile(t, dir, "ctx.toml", []byte("[model]\npreset = \"qwen2.5-14b\"\ncontext_len = 9223372036854775807\n[gpu]\npreset = \"h200\"\n[server]\nchunked_prefill_size = -1\n[cache]\ndevice_tokens = 9223372036854775807\n"))
	for _, tc := range []struct {
		name string
		args []string
		exp  expect
	}{
		{"arrival past 9e18 ns", []string{"sim", "--config", small, "--trace", maxArrival},
			expect{code: 1, stderr: []string{`maxarr\.jsonl:2:\d+: arrival_ns: expected a time from 0 to 9000000000000000000 ns`}}},
		{"50-minute decode steps", []string{"sim", "--config", slowCfg, "--trace", long1, "--timeline", filepath.Join(dir, "tl.csv")},
			expect{code: 0, maxRSSMB: 100}},
		{"context_len past 2^30", []string{"sim", "--config", hugeCtx, "--trace", long1},
			expect{code: 2, stderr: []string{`ctx\.toml:3:1: model\.context_len: must be from 2 .* to 1073741824`}}},
		{"trace gen of a terabyte prompt", []string{"trace", "gen", "multiturn", "--clients", "1", "--rounds", "1", "--request-length", "1000000000000"},
			expect{code: 2, stderr: []string{`request-length: must be from 1 to 16777216`}, maxRSSMB: 100}},
		{"trace gen of 14 G tokens", []string{"trace", "gen", "warmcache", "--total-tokens", "1000000", "--num-prompts", "1000"},
			expect{code: 2, stderr: []string{`would hold 1\.4e\+10 token ids together`}, maxRSSMB: 100}},
		{"bench of a terabyte prompt", []string{"bench", "warm-cache", "--target", "sim", "--config", small, "--total-tokens", "1000000000000", "--num-prompts", "1"},
			expect{code: 2, stderr: []string{`total-tokens: must be from 1 to 16777216`}, maxRSSMB: 100}},
		{"plan-bench of an int64 deficit", []string{"plan-bench", "--candidates", "10", "--deficit", "9223372036854775807", "--cp", "1"},
			expect{code: 2, stderr: []string{`deficit: must be from 0 to 1099511627776`}}},
		{"calibrate --repeats 0", []string{"calibrate", "--config", filepath.Join(repo, "configs", "llamacpp", "tiny.toml"), "--gen-trace", filepath.Join(dir, "g.jsonl"), "--repeats", "0"},
			expect{code: 2, stderr: []string{`--repeats: must be from 1 to 1000`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check(t, kvsim(t, run{args: tc.args, timeout: 30 * time.Second}), tc.exp)
		})
	}
}
