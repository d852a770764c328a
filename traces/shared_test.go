package traces

import (
	"path/filepath"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

func TestSharedTraceCounts(t *testing.T) {
	cases := []struct {
		rel    string
		format Format
		n      int
	}{
		{"mooncake_fast25/conversation_trace.jsonl", FormatMooncake, 12031},
		{"mooncake_fast25/synthetic_trace.jsonl", FormatMooncake, 3993},
		{"azure_llm_2023/AzureLLMInferenceTrace_code.csv", FormatAzure, 8819},
		{"azure_llm_2023/AzureLLMInferenceTrace_conv.csv", FormatAzure, 19366},
		{"llmservingsim/sharegpt-llama-3.1-8b-300-sps10.jsonl", FormatTokens, 300},
		{"llmservingsim/example_trace.jsonl", FormatTokens, 10},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.rel), func(t *testing.T) {
			p := testutil.SharedTrace(t, c.rel)
			r, err := Open(p, FormatAuto)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.Format() != c.format {
				t.Fatalf("detected %v, want %v", r.Format(), c.format)
			}
			recs, errs := readAll(t, r)
			if len(errs) > 0 {
				t.Fatalf("%d errors, first: %v", len(errs), errs[0])
			}
			if len(recs) != c.n {
				t.Fatalf("%d records, want %d", len(recs), c.n)
			}
		})
	}
}

func TestSharedWEKA(t *testing.T) {
	dir := testutil.SharedTrace(t, "weka_kv_cache_tester")
	r, err := Open(dir, FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recs, errs := readAll(t, r)
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
	if len(recs) != 302 {
		t.Fatalf("%d records, want 302", len(recs))
	}
	sessions := map[string]bool{}
	for i, rec := range recs {
		sessions[rec.Session] = true
		if i > 0 && rec.Arrival < recs[i-1].Arrival {
			t.Fatalf("record %d arrives before record %d", i, i-1)
		}
	}
	if len(sessions) != 10 {
		t.Fatalf("%d sessions, want 10", len(sessions))
	}
}
