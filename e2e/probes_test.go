//go:build e2e

package e2e

import (
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every probe logs what it sent and what came back (go test -v); the
// findings are written up in e2e/llama/PROBES.md.

func expect(t *testing.T, what string, r result, slot, cached int) {
	t.Helper()
	if r.Status != 200 {
		t.Fatalf("%s: HTTP %d: %s", what, r.Status, r.Body)
	}
	t.Logf("%s: slot %d, cache_n %d, prompt_n %d, tokens_cached %d", what, r.Slot, r.Cached, r.Timings.PromptN, r.TokensCached)
	if (slot >= 0 && r.Slot != slot) || r.Cached != cached {
		t.Errorf("%s: slot %d cached %d, want slot %d cached %d", what, r.Slot, r.Cached, slot, cached)
	}
}

// TestProbeSlotChoice: a request goes to the idle slot with the longest
// common prefix if that prefix is more than --slot-prompt-similarity (0.10)
// of the new prompt, else to the least recently used slot (never-used slots
// first, lowest id on ties); a full hit re-evaluates the last prompt token;
// the OpenAI usage reports the same count as timings.cache_n.
func TestProbeSlotChoice(t *testing.T) {
	s := startServer(t, serverOpts{NP: 2, Extra: []string{"-lv", "4"}})
	a, b := tokens(1, 200), tokens(2, 200)
	expect(t, "A (200, fresh server)", s.complete(a, 3, nil), 0, 0)
	expect(t, "B (200, unrelated)", s.complete(b, 3, nil), 1, 0)
	expect(t, "A again (full hit)", s.complete(a, 3, nil), 0, 199)
	oai := s.completeOAI(a, 3)
	t.Logf("A again over /v1/completions: usage.cached_tokens %d, prompt_tokens %d, timings.cache_n %d, prompt_n %d",
		oai.UsageCached, oai.UsagePrompt, oai.Timings.CacheN, oai.Timings.PromptN)
	if oai.UsageCached != 199 || oai.Timings.CacheN != 199 || oai.UsagePrompt != 200 || oai.Timings.PromptN != 1 {
		t.Errorf("OpenAI full hit: usage cached %d prompt %d, timings cache_n %d prompt_n %d; want 199 200 199 1",
			oai.UsageCached, oai.UsagePrompt, oai.Timings.CacheN, oai.Timings.PromptN)
	}
	// D shares exactly 10% with A's slot: not above the threshold, so LRU:
	// slot 1 (B), whose content D does not share.
	d := slices.Concat(a[:20], tokens(3, 180))
	expect(t, "D = A[:20]+180 new (sim 0.10, not > 0.10)", s.complete(d, 3, nil), 1, 0)
	// E shares 11% with A's slot 0: chosen by similarity although slot 1 (D)
	// is now the least recently used... no: slot 0 was used before D, so
	// LRU would also give 0. Make the LRU slot the other one first.
	expect(t, "A again (slot 0 becomes most recent)", s.complete(a, 3, nil), 0, 199)
	e := slices.Concat(a[:22], tokens(4, 178))
	expect(t, "E = A[:22]+178 new (sim 0.11 with slot 0, 0.10 with slot 1 (D), LRU is slot 1)", s.complete(e, 3, nil), 0, 22)
	// F shares 20 with D (slot 1) and 40 with E (slot 0): the longer wins
	// even though slot 1 is the least recently used.
	f := slices.Concat(e[:40], tokens(5, 160))
	expect(t, "F = E[:40]+160 new (LCP 40 with slot 0, 20 with slot 1)", s.complete(f, 3, nil), 0, 40)
	// A substring that is not a prefix does not count.
	g := slices.Concat(tokens(6, 10), f[:190])
	expect(t, "G = 10 new + F[:190] (F as a substring, not a prefix)", s.complete(g, 3, nil), 1, 0)
	if lg := s.log(); !strings.Contains(lg, "selected slot by LCP similarity") || !strings.Contains(lg, "selected slot by LRU") {
		t.Errorf("server log lacks the slot selection lines")
	}
}

// TestProbeSlotKeepsOutput: after a request the slot holds prompt + output
// - 1 tokens (the last sampled token is never decoded); a follow-up whose
// prompt is the previous prompt plus the whole output hits all of those.
func TestProbeSlotKeepsOutput(t *testing.T) {
	s := startServer(t, serverOpts{NP: 1})
	a := tokens(10, 100)
	r := s.complete(a, 5, nil)
	expect(t, "A (100) with 5 output tokens", r, 0, 0)
	if r.TokensCached != 104 || len(r.Tokens) != 5 {
		t.Fatalf("tokens_cached %d, %d tokens returned; want 104 and 5", r.TokensCached, len(r.Tokens))
	}
	t.Logf("output ids %v", r.Tokens)
	expect(t, "A + its 5 output ids (105)", s.complete(slices.Concat(a, r.Tokens), 2, nil), 0, 104)
}

// TestProbeLRUClock: a slot's last-used time is set when it is released,
// not when its task started.
func TestProbeLRUClock(t *testing.T) {
	s := startServer(t, serverOpts{NP: 2, Extra: []string{"-lv", "4"}})
	// The long request must still run when the short one ends: 1000
	// prompt tokens and 400 outputs take well over a second here, the
	// short one a few milliseconds; the end times are checked.
	long, short := tokens(20, 1000), tokens(21, 10)
	var wg sync.WaitGroup
	var rl result
	var longEnd time.Time
	wg.Go(func() { rl = s.complete(long, 400, nil); longEnd = time.Now() })
	time.Sleep(100 * time.Millisecond)
	rs := s.complete(short, 2, nil)
	shortEnd := time.Now()
	wg.Wait()
	if !shortEnd.Before(longEnd) {
		t.Skipf("the long request ended first (%v before the short one): no conclusion", shortEnd.Sub(longEnd))
	}
	t.Logf("long (1000, 400 out) on slot %d, short (10, 2 out) started later on slot %d and finished %v earlier", rl.Slot, rs.Slot, longEnd.Sub(shortEnd).Round(time.Millisecond))
	c := s.complete(tokens(22, 50), 2, nil)
	t.Logf("C (unrelated) went to slot %d", c.Slot)
	if c.Slot != rs.Slot {
		t.Errorf("C went to slot %d, want the short request's slot %d (released first)", c.Slot, rs.Slot)
	}
	for _, l := range regexp.MustCompile(`.*selected slot by LRU.*`).FindAllString(s.log(), -1) {
		t.Log(strings.TrimSpace(l))
	}
}

// TestProbeRAMCache: a slot state that is overwritten goes to the host-RAM
// prompt cache (idle slots are saved there too at every new task) and is
// restored into the slot when a new prompt keeps at least a quarter of it
// (f_keep >= 0.25) and improves on the slot's own; its capacity is
// --cache-ram MiB, oldest state removed first.
func TestProbeRAMCache(t *testing.T) {
	t.Run("restore", func(t *testing.T) {
		s := startServer(t, serverOpts{NP: 1, Extra: []string{"-lv", "4"}})
		x, y := tokens(30, 400), tokens(31, 100)
		expect(t, "X (400)", s.complete(x, 3, nil), 0, 0)
		expect(t, "Y (100, unrelated: LRU, X saved to RAM)", s.complete(y, 3, nil), 0, 0)
		expect(t, "X again (restored from RAM, full hit)", s.complete(x, 3, nil), 0, 399)
		expect(t, "Y again (restored)", s.complete(y, 3, nil), 0, 99)
		z := slices.Concat(x[:80], tokens(32, 20))
		expect(t, "Z = X[:80]+20 (f_keep 80/402 < 0.25: X not restored)", s.complete(z, 3, nil), 0, 0)
		expect(t, "U (unrelated 50)", s.complete(tokens(33, 50), 3, nil), 0, 0)
		w := slices.Concat(x[:130], tokens(34, 10))
		expect(t, "W = X[:130]+10 (f_keep 130/402 >= 0.25: X restored)", s.complete(w, 3, nil), 0, 130)
		for _, l := range regexp.MustCompile(`.*(found better prompt|saving prompt with|already in the cache|removing).*`).FindAllString(s.log(), -1) {
			t.Log(strings.TrimSpace(l))
		}
	})
	t.Run("capacity", func(t *testing.T) {
		s := startServer(t, serverOpts{NP: 1, Extra: []string{"-lv", "4", "--cache-ram", "1"}})
		p := [][]int32{tokens(40, 100), tokens(41, 100), tokens(42, 100), tokens(43, 100)}
		for i, pr := range p {
			expect(t, "P"+string(rune('1'+i))+" (100, unrelated)", s.complete(pr, 2, nil), 0, 0)
		}
		expect(t, "P1 again (evicted: 3 states of 0.39 MiB exceed 1 MiB)", s.complete(p[0], 2, nil), 0, 0)
		expect(t, "P4 again (restored)", s.complete(p[3], 2, nil), 0, 99)
		for _, l := range regexp.MustCompile(`.*(saving prompt with|cache state|removing|limit).*`).FindAllString(s.log(), -1) {
			t.Log(strings.TrimSpace(l))
		}
	})
}

// TestProbeBatching: continuous batching, counted with the server's own
// llama_decode counter (/metrics llamacpp:n_decode_total), which wall-clock
// gaps on a shared 2-core machine cannot show reliably. A prompt is
// processed in chunks of at most -b tokens, one llama_decode call each; a
// prompt that arrives while another slot decodes rides in that slot's
// decode calls (prompt chunk and decode token in one batch) and adds no
// call of its own.
func TestProbeBatching(t *testing.T) {
	s := startServer(t, serverOpts{NP: 2, Extra: []string{"-b", "256", "-ub", "256"}})
	m0 := s.metrics()
	r := s.complete(tokens(51, 1024), 1, nil)
	m1 := s.metrics()
	calls := m1["llamacpp:n_decode_total"] - m0["llamacpp:n_decode_total"]
	t.Logf("B alone (1024 prompt, 1 output, -b 256): %v llama_decode calls, prompt_ms %.0f", calls, r.Timings.PromptMs)
	if calls != 4 {
		t.Errorf("B alone took %v calls, want 4 (1024 / 256)", calls)
	}
	const n = 300
	var wg sync.WaitGroup
	var ra result
	var aEnd, bEnd time.Time
	wg.Go(func() { ra = s.completeOAI(tokens(50, 20), n); aEnd = time.Now() })
	time.Sleep(50 * time.Millisecond)
	rb := s.complete(tokens(52, 1024), 2, nil)
	bEnd = time.Now()
	wg.Wait()
	m2 := s.metrics()
	calls = m2["llamacpp:n_decode_total"] - m1["llamacpp:n_decode_total"]
	t.Logf("A (20 prompt, %d output) with B (1024 prompt, 2 output) sent 50 ms later: %v calls; B cache_n %d prompt_ms %.0f, B ended %v before A; n_busy_slots_per_decode %.3f, n_tokens_max %v",
		n, calls, rb.Cached, rb.Timings.PromptMs, aEnd.Sub(bEnd).Round(time.Millisecond), m2["llamacpp:n_busy_slots_per_decode"], m2["llamacpp:n_tokens_max"])
	if !bEnd.Before(aEnd) {
		t.Skipf("B did not finish inside A's run (machine too slow?); no conclusion")
	}
	if calls != n {
		t.Errorf("A and B together took %v calls, want %d (A's 1 prompt call + %d decode calls, B riding along)", calls, n, n-1)
	}
	if len(ra.Chunks) == 0 {
		t.Errorf("A streamed nothing")
	}
}

// TestProbeContext: prompts longer than a slot's context are refused;
// generation stops when the slot's context is full.
func TestProbeContext(t *testing.T) {
	s := startServer(t, serverOpts{NP: 2, Ctx: 512})
	r := s.complete(tokens(60, 300), 2, nil)
	t.Logf("prompt 300 > n_ctx_slot 256: HTTP %d %s", r.Status, trim(r.Body))
	if r.Status == 200 {
		t.Errorf("a 300-token prompt in a 256-token slot was accepted")
	}
	r = s.complete(tokens(61, 200), 100, nil)
	t.Logf("prompt 200 + 100 output in a 256-token slot: HTTP %d, %d tokens generated, tokens_cached %d %s", r.Status, len(r.Tokens), r.TokensCached, trim(r.Body))
}

func trim(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
