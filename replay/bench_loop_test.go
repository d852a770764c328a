package replay

import (
	"math"
	"testing"

	"github.com/kvsim/kvsim/replay/replaytest"
	"github.com/kvsim/kvsim/traces"
)

func TestWarmCacheSweepHitsTheSharedPrefix(t *testing.T) {
	srv, tg := fakeServer(t, replaytest.Config{}, APISGLang)
	cfg := WarmCacheConfig{TotalTokens: 64, NumPrompts: 4, OutputLen: 3, MaxConcurrency: 2, Pcts: []int{0, 50, 99}, Seed: 42, Vocab: traces.DefaultVocab}
	var rows []WarmCacheRow
	err := WarmCache(t.Context(), cfg, tg, WallClock{}, func(r WarmCacheRow) error { rows = append(rows, r); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || srv.Flushes() != 3 {
		t.Fatalf("%d rows, %d flushes; want 3, 3", len(rows), srv.Flushes())
	}
	// The warm-up caches the prefix; the suffixes are unique.
	for i, want := range []float64{0, 0.5, 63.0 / 64} {
		r := rows[i]
		if r.PrefixLen != 64*r.Pct/100 || r.SuffixLen != 64-r.PrefixLen || r.Summary.Completed != 4 {
			t.Errorf("pct %d: prefix %d suffix %d completed %d", r.Pct, r.PrefixLen, r.SuffixLen, r.Summary.Completed)
		}
		if h := r.Summary.CacheHitRate; h == nil || *h != want {
			t.Errorf("pct %d: hit rate %v, want %v", r.Pct, h, want)
		}
	}
	// Warm-ups (for 50% and 99%, none for 0%) reach the server but are not measured.
	if got := srv.Requests(); got != 14 {
		t.Errorf("server saw %d requests, want 12 prompts + 2 warm-ups", got)
	}
}

func TestMultiTurnGrowsHistoryAndHitsPreviousTurns(t *testing.T) {
	for _, ids := range []bool{true, false} {
		srv, tg := fakeServer(t, replaytest.Config{NoOutputIDs: !ids}, APISGLang)
		cfg := MultiTurnConfig{Clients: 3, MaxParallel: 2, RequestLength: 16, OutputLength: 4, Rounds: 3, SubQuestionLength: 8,
			Rate: math.Inf(1), Seed: 1, Vocab: traces.DefaultVocab}
		res, err := MultiTurn(t.Context(), cfg, tg, WallClock{})
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Requests) != 9 || srv.MaxInFlight() > 2 {
			t.Fatalf("%d requests, max in flight %d", len(res.Requests), srv.MaxInFlight())
		}
		st := RoundStats(res)
		// Round k+1's prompt = round k's prompt + 4 outputs + 8 question
		// tokens; the fake caches prompt + output minus the last token.
		want := []float64{0, 19.0 / 28, 31.0 / 40}
		if !ids {
			// Synthetic outputs differ from the server's: only the
			// previous prompt hits.
			want = []float64{0, 16.0 / 28, 28.0 / 40}
		}
		for k, w := range want {
			if st[k].Requests != 3 || st[k].CacheHit == nil || math.Abs(*st[k].CacheHit-w) > 1e-12 {
				t.Errorf("ids %v round %d: %d requests, hit %v, want %v", ids, k+1, st[k].Requests, st[k].CacheHit, w)
			}
		}
		if missing := res.OutputIDsMissing; (missing == 0) != ids {
			t.Errorf("ids %v: %d turns without output ids", ids, missing)
		}
	}
}
