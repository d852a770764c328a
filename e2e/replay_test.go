//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// buildKVSim builds the kvsim binary into a temporary folder.
func buildKVSim(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kvsim")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/kvsim")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestReplayLosesNothing: with default flags, kvsim replay loses no
// request of a multi-turn chat against llama-server, which closes its
// connection after every streamed response (docs/replay.md, "Stale
// connections"): 20 replays in a row, every request completed, resends
// counted apart. Without --vocab, the synthesised prompts of a hash-block
// trace keep inside the vocabulary the server reports (4096 ids).
func TestReplayLosesNothing(t *testing.T) {
	s := startServer(t, serverOpts{NP: 2, Ctx: 16384})
	bin := buildKVSim(t)
	dir := t.TempDir()
	mt := filepath.Join(dir, "mt.jsonl")
	if out, err := exec.Command(bin, "trace", "gen", "multiturn", "--clients", "4", "--rounds", "3", "--request-length", "300",
		"--output-length", "8", "--vocab", "1:4000", "--seed", "3", "--out", mt).CombinedOutput(); err != nil {
		t.Fatalf("trace gen: %v\n%s", err, out)
	}
	hashes := filepath.Join(dir, "hashes.jsonl")
	var b strings.Builder
	for i := 0; i < 12; i++ {
		// Mooncake records: 600-token prompts of two 512-token blocks, the
		// first shared by all.
		b.WriteString(`{"timestamp":` + strconv.Itoa(i*50) + `,"input_length":600,"output_length":8,"hash_ids":[1,` + strconv.Itoa(2+i%3) + `]}` + "\n")
	}
	os.WriteFile(hashes, []byte(b.String()), 0o644)
	type summary struct {
		Completed int              `json:"completed"`
		Failed    int              `json:"failed"`
		Reasons   map[string]int64 `json:"failed_reasons"`
		Retried   int              `json:"retried_requests"`
	}
	replay := func(trace string) (summary, string) {
		cmd := exec.Command(bin, "replay", "--trace", trace, "--target", s.URL, "--api", "openai", "--max-concurrency", "2", "--json")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kvsim replay %s: %v\n%s", trace, err, stderr.String())
		}
		var sum summary
		if err := json.Unmarshal(out, &sum); err != nil {
			t.Fatalf("replay JSON: %v\n%s", err, out)
		}
		return sum, stderr.String()
	}
	retried := 0
	for run := 1; run <= 20; run++ {
		sum, _ := replay(mt)
		if sum.Completed != 12 || sum.Failed != 0 {
			t.Errorf("run %d: completed %d of 12, failed %d %v", run, sum.Completed, sum.Failed, sum.Reasons)
		}
		retried += sum.Retried
	}
	t.Logf("20 replays of 12 requests: %d requests resent on a fresh connection, none lost", retried)
	sum, stderr := replay(hashes)
	if sum.Completed != 12 || !strings.Contains(stderr, "vocabulary has 4096 token ids") {
		t.Errorf("hash-block trace without --vocab: %+v\n%s", sum, stderr)
	}
}
