package main

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim/policy"
	"github.com/kvsim/kvsim/traces"
)

var policySmall = filepath.Join("testdata", "policy", "small.jsonl")

// TestPolicyTable: small.jsonl is sim/policy's hand-worked case
// write_through_l1_eviction_keeps_host_copy, as a Mooncake trace (two
// requests share a timestamp and keep file order).
func TestPolicyTable(t *testing.T) {
	out := runQuiet(t, "policy", "--trace", policySmall, "--l1-pages", "2", "--l2-pages", "4")
	checkGolden(t, "policy", "small_table", out)
}

func TestPolicyJSONOnePolicy(t *testing.T) {
	code, out, errOut := runCLI(t, "policy", "--trace", policySmall, "--policy", "main_write_through",
		"--l1-pages", "2", "--l2-pages", "4", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkGolden(t, "policy", "small_main_write_through_json", out)
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	want := []string{"requests", "total_input_pages", "l1_hit_pages", "l2_hit_pages", "miss_pages", "l1_hit_rate",
		"l1_l2_hit_rate", "l1_evictions", "l2_evictions", "d_to_h_demotions", "failed_h_allocations", "d_pages",
		"h_pages", "duplicate_ratio"}
	if len(m) != len(want) {
		t.Errorf("JSON has %d keys, want exactly %d: %v", len(m), len(want), m)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	// Hand-worked in sim/policy: 2 L1 hits, 1 L2 hit, 4 L1 evictions, 1 L2
	// eviction, 2 pages on device, 4 on host, half of them duplicates.
	if m["l1_hit_pages"] != 2.0 || m["l2_hit_pages"] != 1.0 || m["l1_evictions"] != 4.0 || m["duplicate_ratio"] != 0.5 {
		t.Errorf("counters %v", m)
	}
}

// TestPolicyJSONSeveralPolicies: the default runs both policies; --json
// keys the objects by policy name. --policies is SGLang's spelling.
func TestPolicyJSONSeveralPolicies(t *testing.T) {
	out, _ := runOK(t, "policy", "--trace", policySmall, "--l1-pages", "2", "--l2-pages", "4", "--json")
	var m map[string]map[string]float64
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m["main_write_through"] == nil || m["boundary_l1_l2"] == nil {
		t.Fatalf("keys of %v", m)
	}
	code, out2, _ := runCLI(t, "policy", "--trace", policySmall, "--l1-pages", "2", "--l2-pages", "4", "--json",
		"--policies", "boundary_l1_l2, main_write_through")
	if code != exitOK || out2 != out {
		t.Fatalf("--policies gave exit %d:\n%s\nwant\n%s", code, out2, out)
	}
}

// TestPolicyBelady: on small.jsonl ([1 2 3] [1 2 3] [4] [5]) with 2 pages,
// Belady keeps 1 and 2 (used again next) and evicts 3 (never used again):
// 2 hits. LRU (main_write_through without L2) evicts leaves only, so it
// keeps 1 and 2 as well; package sim/policy's properties compare them on
// random traces.
func TestPolicyBelady(t *testing.T) {
	out := runQuiet(t, "policy", "--trace", policySmall, "--policy", "belady", "--l1-pages", "2")
	checkGolden(t, "policy", "small_belady_table", out)
	code, out, errOut := runCLI(t, "policy", "--trace", policySmall, "--policy", "belady,main_write_through",
		"--l1-pages", "2", "--l2-pages", "0", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkGolden(t, "policy", "small_belady_lru_json", out)
	var m map[string]policy.Result
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	if b, l := m["belady"], m["main_write_through"]; b.L1HitPages != 2 || l.L1HitPages != 2 || b.TotalInputPages != 8 || b.DPages != 2 {
		t.Errorf("belady %+v\nlru %+v", b, l)
	}
}

func TestPolicyMaxRequests(t *testing.T) {
	code, out, errOut := runCLI(t, "policy", "--trace", policySmall, "--policy", "main_write_through",
		"--l1-pages", "2", "--l2-pages", "4", "--max-requests", "2", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r policy.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Requests != 2 || r.TotalInputPages != 6 {
		t.Errorf("--max-requests 2: %+v", r)
	}
}

func TestPolicyErrors(t *testing.T) {
	dir := filepath.Join("testdata", "policy")
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no_trace", []string{"--l1-pages", "1", "--l2-pages", "1"}, exitUsage, "kvsim policy: --trace is required\n"},
		{"no_l1", []string{"--trace", policySmall, "--l2-pages", "1"}, exitUsage, "kvsim policy: --l1-pages is required\n"},
		{"no_l2", []string{"--trace", policySmall, "--l1-pages", "1"}, exitUsage, "kvsim policy: --l2-pages is required\n"},
		{"bad_policy", []string{"--trace", policySmall, "--l1-pages", "1", "--l2-pages", "1", "--policy", "lru"}, exitUsage,
			"kvsim policy: --policy: unknown policy \"lru\" (want one of main_write_through, boundary_l1_l2, belady)\n"},
		{"belady_l2", []string{"--trace", policySmall, "--l1-pages", "1", "--l2-pages", "2", "--policy", "belady"}, exitUsage,
			"kvsim policy: --l2-pages: must be 0 under belady, which models L1 only (got 2)\n"},
		{"belady_and_lru_no_l2", []string{"--trace", policySmall, "--l1-pages", "1", "--policy", "belady,main_write_through"}, exitUsage,
			"kvsim policy: --l2-pages is required\n"},
		{"bad_sizes", []string{"--trace", policySmall, "--l1-pages", "-2", "--l2-pages", "1", "--write-through-threshold", "0"}, exitUsage,
			"kvsim policy: --l1-pages: must be >= 0 (got -2); --write-through-threshold: must be > 0 (got 0)\n"},
		{"bad_format", []string{"--trace", policySmall, "--l1-pages", "1", "--l2-pages", "1", "--format", "csv"}, exitUsage, "--format: unknown trace format"},
		{"extra_arg", []string{"--trace", policySmall, "--l1-pages", "1", "--l2-pages", "1", "x"}, exitUsage, "unexpected argument \"x\""},
		{"bad_record", []string{"--trace", filepath.Join(dir, "bad.jsonl"), "--l1-pages", "1", "--l2-pages", "1"}, exitFail,
			"kvsim policy: " + filepath.Join(dir, "bad.jsonl") + ":2:76: hash_ids[1]: expected an integer >= 0, found a string\n"},
		{"no_blocks", []string{"--trace", filepath.Join(dir, "tokens.jsonl"), "--l1-pages", "1", "--l2-pages", "1"}, exitFail,
			"no block hashes: policy mode needs a block-hash trace (tokens has none)"},
		{"missing_file", []string{"--trace", filepath.Join(dir, "nope.jsonl"), "--l1-pages", "1", "--l2-pages", "1"}, exitFail, "nope.jsonl"},
		// sim/policy's TestBoundaryAbort as a trace: SGLang aborts at the
		// third request under boundary_l1_l2.
		{"abort", []string{"--trace", filepath.Join(dir, "abort.jsonl"), "--l1-pages", "1", "--l2-pages", "1"}, exitFail,
			"kvsim policy: boundary_l1_l2: " + filepath.Join(dir, "abort.jsonl") + ": request \"2\" (replayed as number 3): SGLang's policy simulator aborts on this input (AssertionError: Refusing to delete a non-D-only leaf); SGLang reports no results\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"policy"}, c.args...)...)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, c.code, errOut)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			if strings.HasSuffix(c.msg, "\n") && errOut != c.msg || !strings.Contains(errOut, c.msg) {
				t.Errorf("stderr = %q, want %q", errOut, c.msg)
			}
		})
	}
}

func TestPolicyHelp(t *testing.T) {
	code, _, errOut := runCLI(t, "policy", "-h")
	if code != exitOK || !strings.Contains(errOut, "usage: kvsim policy") || !strings.Contains(errOut, "-write-through-threshold") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// TestPolicyMooncakeMatchesPackage runs the command on the shared Mooncake
// conversation trace and checks its JSON against policy.Run on the records
// read directly (whose figures sim/policy's golden file pins).
func TestPolicyMooncakeMatchesPackage(t *testing.T) {
	p := testutil.SharedTrace(t, "mooncake_fast25/conversation_trace.jsonl")
	rd, err := traces.Open(p, traces.FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var reqs []policy.Request
	for _, rec := range testutil.ReadAll(t, rd.Next) {
		reqs = append(reqs, policy.Request{Timestamp: rec.Arrival, Pages: rec.Blocks})
	}
	cfg := policy.Config{Policy: policy.BoundaryL1L2, L1Pages: 9139, L2Pages: 18278, WriteThroughThreshold: 1}
	want, err := policy.Run(cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := runOK(t, "policy", "--trace", p, "--policy", "boundary_l1_l2", "--l1-pages", "9139", "--l2-pages", "18278", "--json")
	var got policy.Result
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	got.Policy, got.DedupL2Evictions, got.DeletedL2Evictions, got.DHPages, got.UniqueCachedPages =
		want.Policy, want.DedupL2Evictions, want.DeletedL2Evictions, want.DHPages, want.UniqueCachedPages
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CLI %+v\nRun %+v", got, want)
	}
	if want.L1HitPages != 56479 || want.L2HitPages != 33599 {
		t.Errorf("hits %d/%d, want 56479/33599 (sim/policy/testdata/mooncake_conversation.golden)", want.L1HitPages, want.L2HitPages)
	}
}

// TestPolicyStreamsAsRun checks the streamed replay (batches through the
// online simulators) against policy.Run over the whole trace in memory, on
// a trace of several batches, for every online policy and both a small and
// a large cache.
func TestPolicyStreamsAsRun(t *testing.T) {
	p := testutil.SharedTrace(t, "mooncake_fast25/conversation_trace.jsonl")
	reqs, _, err := policyReadTrace(p, traces.FormatAuto, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l1 := range []int{500, 18279} {
		var cfgs []policy.Config
		for _, pol := range policy.Policies() {
			c := policy.Default()
			c.Policy, c.L1Pages, c.L2Pages = pol, l1, 2*l1
			cfgs = append(cfgs, c)
		}
		got, errs, _, n, err := policyReplay(p, traces.FormatAuto, 0, cfgs)
		if err != nil || n != len(reqs) {
			t.Fatalf("streamed: %d requests, %v", n, err)
		}
		for i, cfg := range cfgs {
			want, werr := policy.Run(cfg, reqs)
			if !reflect.DeepEqual(got[i], want) || (errs[i] == nil) != (werr == nil) {
				t.Errorf("%v L1 %d streamed:\n%+v (%v)\nwant policy.Run's:\n%+v (%v)", cfg.Policy, l1, got[i], errs[i], want, werr)
			}
		}
	}
}
