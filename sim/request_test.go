package sim

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/tree"
	"pgregory.net/rapid"
)

// admissionError fails what SGLang rejects at the request level: a prompt
// of context_len tokens or more, a prompt and output reaching it, and a
// request larger than the KV pool.
func TestAdmissionError(t *testing.T) {
	cfg := Config{Cache: CacheConfig{DeviceTokens: 10000}, Scheduler: SchedulerConfig{ContextLen: 1024}}
	for _, c := range []struct {
		ctx, input, maxNew int64
		want               string
	}{
		{1024, 1000, 23, ""},
		{1024, 1024, 1, "prompt of 1024 tokens exceeds the model's context length of 1024 tokens"},
		{1024, 1100, 10, "prompt of 1100 tokens exceeds the model's context length of 1024 tokens"},
		{1024, 1000, 24, "prompt of 1000 tokens plus 24 output tokens exceeds the model's context length of 1024 tokens"},
		{0, 9000, 1000, ""},
		{0, 9000, 1001, "prompt of 9000 tokens plus 1001 output tokens exceeds the KV pool of 10000 tokens"},
		{1 << 20, 9000, 1001, "prompt of 9000 tokens plus 1001 output tokens exceeds the KV pool of 10000 tokens"},
	} {
		cfg.Scheduler.ContextLen = c.ctx
		got := admissionError(&cfg, 1, c.input, c.maxNew)
		if got != c.want {
			t.Errorf("admissionError(context_len %d, %d + %d) = %q, want %q", c.ctx, c.input, c.maxNew, got, c.want)
		}
		if got != "" && !strings.Contains(got, "exceeds") {
			t.Errorf("%q does not say exceeds (replay's server answers 400 on it)", got)
		}
	}
}

// TestPropKeepRunsRoundTrip checks that a request's pages, kept as runs or
// as a slice, come back unchanged with room for the output's pages, on keys
// made of long block-like runs, short ones, or a mix.
func TestPropKeepRunsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var pages []tree.PageID
		var runs []tree.PageRun
		for range rapid.IntRange(0, 30).Draw(t, "pieces") {
			first := tree.PageID(rapid.Uint64Range(1, 1<<40).Draw(t, "first"))
			n := rapid.IntRange(1, 600).Draw(t, "len")
			runs = append(runs, tree.PageRun{First: first, N: int64(n)})
			for k := range n {
				pages = append(pages, first+tree.PageID(k))
			}
		}
		capacity := len(pages) + rapid.IntRange(0, 50).Draw(t, "room")
		var r request
		r.keepRuns(runs, len(pages), capacity)
		if r.runs != nil && r.pages != nil {
			t.Fatal("kept both runs and pages")
		}
		if r.runs != nil {
			if len(r.runs)*16 > len(pages)*2 {
				t.Fatalf("%d runs kept for %d pages", len(r.runs), len(pages))
			}
			r.expandPages()
		}
		if !slices.Equal(r.pages, pages) {
			t.Fatalf("pages came back as %v, want %v", r.pages, pages)
		}
		if len(pages) > 0 && cap(r.pages) < capacity {
			t.Fatalf("capacity %d, want at least %d", cap(r.pages), capacity)
		}
	})
}
