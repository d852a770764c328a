package traces

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func ids(recs []Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

func TestPropChatTurnsExtendHistory(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := ChatConfig{
			Clients:           rapid.IntRange(1, 5).Draw(t, "clients"),
			Rounds:            rapid.IntRange(1, 4).Draw(t, "rounds"),
			RequestLength:     rapid.IntRange(1, 40).Draw(t, "req"),
			OutputLength:      rapid.IntRange(1, 10).Draw(t, "out"),
			SubQuestionLength: rapid.IntRange(0, 20).Draw(t, "sub"),
			Rate:              rapid.SampledFrom([]float64{0.5, 8, math.Inf(1)}).Draw(t, "rate"),
			Distribution:      rapid.SampledFrom([]string{"", ArrivalPoisson, ArrivalUniform}).Draw(t, "dist"),
			Order:             rapid.SampledFrom([]string{"", "fifo"}).Draw(t, "order"),
			Seed:              rapid.Uint64().Draw(t, "seed"),
			Vocab:             DefaultVocab,
		}
		recs, err := GenerateChat(c)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != c.Clients*c.Rounds {
			t.Fatalf("%d records, want %d", len(recs), c.Clients*c.Rounds)
		}
		byID := map[string]Record{}
		sub := c.SubQuestionLength
		if sub == 0 {
			sub = c.RequestLength
		}
		for i, r := range recs {
			if i > 0 && r.Arrival < recs[i-1].Arrival {
				t.Fatalf("arrivals not sorted at %d", i)
			}
			if r.Turn == 1 {
				if r.Parent != "" || r.InputLen != c.RequestLength {
					t.Fatalf("first turn %+v", r)
				}
			} else {
				p, ok := byID[r.Parent]
				if !ok || p.Turn != r.Turn-1 || p.Session != r.Session {
					t.Fatalf("turn %s has parent %q not sent before it", r.ID, r.Parent)
				}
				hist := append(append([]int32(nil), p.Tokens...), p.OutputTokens...)
				if !slices.Equal(r.Tokens[:len(hist)], hist) || r.InputLen != len(hist)+sub {
					t.Fatalf("turn %s is not parent prompt + output + %d-token question", r.ID, sub)
				}
			}
			byID[r.ID] = r
		}
		again, _ := GenerateChat(c)
		if !reflect.DeepEqual(recs, again) {
			t.Fatal("same seed, different trace")
		}
		roundTrip(t, Header{Source: "gen"}, recs)
	})
}

func TestChatSeedMatters(t *testing.T) {
	c := ChatConfig{Clients: 4, Rounds: 3, RequestLength: 300, OutputLength: 8, Rate: 1, Seed: 3, Vocab: DefaultVocab}
	a, _ := GenerateChat(c)
	c.Seed = 4
	b, _ := GenerateChat(c)
	if reflect.DeepEqual(a, b) {
		t.Fatal("seeds 3 and 4 gave the same trace")
	}
}

func TestRoundRobinOrder(t *testing.T) {
	recs, err := GenerateRoundRobin(RoundRobinConfig{Rounds: []int{2, 3, 4}, QuestionLength: 5, OutputLength: 2, Rate: math.Inf(1), Vocab: DefaultVocab})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A/1", "B/1", "C/1", "A/2", "B/2", "C/2", "B/3", "C/3", "C/4"}
	if got := ids(recs); !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	roundTrip(t, Header{}, recs)
}

func TestSharedPrefixOrder(t *testing.T) {
	recs, err := GenerateSharedPrefix(SharedPrefixConfig{Questions: []int{2, 3, 4}, SystemPromptLength: 50, QuestionLength: 7, OutputLength: 3, Rate: 10, Seed: 1, Vocab: DefaultVocab})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A+Q1", "A+Q2", "B+Q1", "B+Q2", "B+Q3", "C+Q1", "C+Q2", "C+Q3", "C+Q4"}
	if got := ids(recs); !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	for _, r := range recs {
		first := recs[slices.IndexFunc(recs, func(x Record) bool { return x.Session == r.Session })]
		if r.InputLen != 57 || !slices.Equal(r.Tokens[:50], first.Tokens[:50]) {
			t.Fatalf("%s does not share its group's 50-token prefix", r.ID)
		}
	}
	roundTrip(t, Header{}, recs)
}

func TestWarmCachePrefixIsExact(t *testing.T) {
	recs, err := GenerateWarmCache(WarmCacheConfig{TotalTokens: 1001, Pcts: []int{0, 33, 100}, NumPrompts: 3, OutputLength: 4, Seed: 42, Vocab: DefaultVocab})
	if err != nil {
		t.Fatal(err)
	}
	// pct 0: 3 prompts; pct 33: warmup + 3; pct 100: warmup + 3.
	if len(recs) != 11 {
		t.Fatalf("%d records, want 11", len(recs))
	}
	check := func(from, to, prefix int) {
		for i := from; i < to; i++ {
			if recs[i].InputLen != 1001 {
				t.Fatalf("%s has %d tokens", recs[i].ID, recs[i].InputLen)
			}
			for j := from; j < to; j++ {
				n := 0
				for n < 1001 && recs[i].Tokens[n] == recs[j].Tokens[n] {
					n++
				}
				if i != j && n != prefix && !(prefix == 0 && n < 5) {
					t.Fatalf("%s and %s share %d tokens, want exactly %d", recs[i].ID, recs[j].ID, n, prefix)
				}
			}
		}
	}
	check(0, 3, 0)
	if w := recs[3]; w.Kind != "warmup" || w.InputLen != 330 || len(w.WaitFor) != 3 {
		t.Fatalf("warmup %+v", w)
	}
	check(4, 7, 330)
	check(8, 11, 1001)
	roundTrip(t, Header{}, recs)
}

func TestGeneratorValidateReportsAll(t *testing.T) {
	err := (&ChatConfig{Rate: -1, Distribution: "zipf", Vocab: Vocab{}}).Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{"clients", "rounds", "request-length", "output-length", "rate", "distribution", "vocab"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}
