package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// --json carries the transfer summary and each replica's role;
// --per-request every request's prefill and decode replica and its TTFT
// split, whose parts add up to its TTFT.
func TestSimFleetPDPerRequest(t *testing.T) {
	perReq := filepath.Join(t.TempDir(), "requests.jsonl")
	var got struct {
		PD *struct {
			TransferPages int64 `json:"transfer_pages"`
		} `json:"pd"`
		Replicas []struct {
			Role string `json:"role"`
		} `json:"replicas"`
	}
	runQuietJSON(t, &got, "sim", "--config", fleetPD, "--trace", fleetTrace, "--json", "--per-request", perReq)
	var roles []string
	for _, r := range got.Replicas {
		roles = append(roles, r.Role)
	}
	if got.PD == nil || got.PD.TransferPages == 0 || strings.Join(roles, ",") != "prefill,prefill,decode,decode" {
		t.Fatalf("pd %+v, roles %v", got.PD, roles)
	}
	lines := readJSONLines[map[string]any](t, perReq)
	var pages int64
	for _, m := range lines {
		n := func(k string) int64 { return int64(m[k].(float64)) }
		sum := n("bootstrap_ns") + n("prefill_queue_ns") + n("prefill_compute_ns") + n("transfer_tail_ns") + n("first_step_ns")
		if ttft := n("first_token_ns") - n("arrival_ns"); sum != ttft {
			t.Fatalf("request %v: TTFT parts sum to %d, TTFT %d", m["id"], sum, ttft)
		}
		if p, d := n("prefill_replica"), n("decode_replica"); p > 1 || d < 2 || n("replica") != d {
			t.Fatalf("request %v: prefill replica %d, decode replica %d", m["id"], p, d)
		}
		pages += n("transfer_pages")
	}
	if len(lines) != 300 || pages != got.PD.TransferPages {
		t.Fatalf("%d lines moving %d pages; the fleet moved %d", len(lines), pages, got.PD.TransferPages)
	}
}

// With a waiting timeout shorter than transfer_latency every request is
// aborted by it: --json counts them, each per-request line says why and
// when, and the table prints the count.
func TestSimFleetPDTimeout(t *testing.T) {
	path := pdVariant(t, "waiting_timeout = 300 ", "waiting_timeout = 0.00001 ")
	perReq := filepath.Join(t.TempDir(), "requests.jsonl")
	var got struct {
		Summary struct {
			Failed int64 `json:"failed"`
		} `json:"summary"`
		PD struct {
			Waiting   int64 `json:"waiting_timeouts"`
			Bootstrap int64 `json:"bootstrap_timeouts"`
		} `json:"pd"`
	}
	runQuietJSON(t, &got, "sim", "--config", path, "--trace", fleetTrace, "--json", "--per-request", perReq)
	if got.PD.Waiting != 300 || got.PD.Bootstrap != 0 || got.Summary.Failed != 300 {
		t.Fatalf("%d waiting and %d bootstrap timeouts, %d failed", got.PD.Waiting, got.PD.Bootstrap, got.Summary.Failed)
	}
	for _, m := range readJSONLines[struct {
		ID       string `json:"id"`
		Failed   string `json:"failed"`
		FailedAt int64  `json:"failed_ns"`
	}](t, perReq) {
		if !strings.HasPrefix(m.Failed, "disaggregation: waiting timeout") || m.FailedAt == 0 {
			t.Fatalf("request %s: failed %q at %d", m.ID, m.Failed, m.FailedAt)
		}
	}
	out := runQuiet(t, "sim", "--config", path, "--trace", fleetTrace)
	if !strings.Contains(out, "Aborted by the waiting timeout:") {
		t.Fatalf("no timeout line in\n%s", out)
	}
}

// With decode_offload the decode replicas, sharing the prefill
// replicas' L3 store, write the generated pages to it; without a storage
// tier on the decode group the key is refused.
func TestSimFleetPDDecodeOffload(t *testing.T) {
	path := pdVariant(t, "[cost]", "decode_offload = true\n[storage]\nenabled = true\nshared = true\n[cost]")
	// decode_offload belongs to [disaggregation]: move it there.
	text := strings.Replace(string(testutil.ReadFile(t, path)), "decode_offload = true\n", "", 1)
	text = strings.Replace(text, `decode_cache = "chunk"`, "decode_cache = \"chunk\"\ndecode_offload = true", 1)
	writeFile(t, path, text)
	var got struct {
		Replicas []struct {
			Role string `json:"role"`
			L3   struct {
				Written int64 `json:"l3_pages_written"`
			} `json:"l3"`
		} `json:"replicas"`
		SharedL3 []struct {
			Replicas []int `json:"replicas"`
		} `json:"shared_l3"`
	}
	runQuietJSON(t, &got, "sim", "--config", path, "--trace", fleetTrace, "--json")
	if len(got.SharedL3) != 1 || len(got.SharedL3[0].Replicas) != 4 || got.Replicas[2].L3.Written == 0 || got.Replicas[3].L3.Written == 0 {
		t.Fatalf("shared stores %+v, replicas %+v", got.SharedL3, got.Replicas)
	}
	bad := pdVariant(t, `decode_cache = "chunk"`, "decode_cache = \"chunk\"\ndecode_offload = true")
	code, _, stderr := runCLI(t, "sim", "--config", bad, "--trace", fleetTrace)
	if code == 0 || !strings.Contains(stderr, "disaggregation.decode_offload: group decode (decode) has no storage tier") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

// pdVariant writes configs/fleet-pd.toml with old replaced by new (its
// trace path made absolute) and returns its path.
func pdVariant(t *testing.T, old, new string) string {
	doc := testutil.ReadFile(t, fleetPD)
	path := filepath.Join(t.TempDir(), "variant.toml")
	abs, err := filepath.Abs(filepath.Join(filepath.Dir(fleetPD), "traces"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(doc), old, new, 1)
	text = strings.Replace(text, `trace = "traces/`, `trace = "`+filepath.ToSlash(abs)+`/`, 1)
	writeFile(t, path, text)
	return path
}

// With decode_cache = "radix" the decode replicas reuse what earlier
// requests left (their hit rate is no longer 0) and the prefill replicas
// send only the pages after the decode side's hit.
func TestSimFleetPDRadix(t *testing.T) {
	path := pdVariant(t, `decode_cache = "chunk"`, `decode_cache = "radix"`)
	var got struct {
		PD struct {
			Skipped int64 `json:"skipped_pages"`
		} `json:"pd"`
		Replicas []struct {
			Role string  `json:"role"`
			Hit  float64 `json:"cache_hit_rate"`
		} `json:"replicas"`
	}
	runQuietJSON(t, &got, "sim", "--config", path, "--trace", fleetTrace, "--json")
	if got.PD.Skipped == 0 || got.Replicas[2].Hit == 0 || got.Replicas[3].Role != "decode" {
		t.Fatalf("skipped %d pages, replicas %+v", got.PD.Skipped, got.Replicas)
	}
}

// kv_aware on the prefill pool and cache_aware_oracle on a radix decode
// pool run from a fleet file: every request completes, and each pool's
// decisions are its policy's, some of them hits on the replicas' KV.
func TestSimFleetPDKVAware(t *testing.T) {
	path := pdVariant(t, `decode_cache = "chunk"`, `decode_cache = "radix"`)
	doc := strings.Replace(string(testutil.ReadFile(t, path)), `policy = "round_robin"`, `policy = "cache_aware_oracle"`, 1)
	writeFile(t, path, doc+"\n[router.prefill]\npolicy = \"kv_aware\"\n")
	var got struct {
		Summary struct {
			Completed int `json:"completed"`
		} `json:"summary"`
		Decisions []struct {
			Reason string `json:"reason"`
			Count  int64  `json:"count"`
		} `json:"decisions"`
	}
	runQuietJSON(t, &got, "sim", "--config", path, "--trace", fleetTrace, "--json")
	counts := map[string]int64{}
	for _, d := range got.Decisions {
		counts[d.Reason] += d.Count
	}
	if got.Summary.Completed != 300 || counts["prefill:kv_hit"] == 0 || counts["prefill:kv_hit"]+counts["prefill:kv_miss"] != 300 ||
		counts["decode:cache_hit"] == 0 || counts["decode:cache_hit"]+counts["decode:miss"]+counts["decode:imbalanced"] != 300 {
		t.Fatalf("completed %d, decisions %v", got.Summary.Completed, counts)
	}
}
