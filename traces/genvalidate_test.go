package traces

import (
	"strings"
	"testing"
)

// Each generator's Validate names an empty list, each bad element, and a
// trace too large to build, and skips the size check while a length is bad.
func TestGenValidateMessages(t *testing.T) {
	big := MaxGenLength
	for _, c := range []struct {
		name string
		err  error
		want []string
		not  string
	}{
		{"roundrobin empty", (&RoundRobinConfig{QuestionLength: 1, OutputLength: 1, Rate: 1}).Validate(),
			[]string{"rounds: must list at least one conversation"}, "token ids"},
		{"roundrobin bad", (&RoundRobinConfig{Rounds: []int{2, 0}, QuestionLength: 1, OutputLength: 1, Rate: 1}).Validate(),
			[]string{"rounds[1]: must be from 1 to"}, "token ids"},
		{"roundrobin big", (&RoundRobinConfig{Rounds: []int{big}, QuestionLength: big, OutputLength: 1, Rate: 1}).Validate(),
			[]string{"lower the rounds or the lengths"}, "rounds:"},
		{"sharedprefix empty", (&SharedPrefixConfig{SystemPromptLength: 1, QuestionLength: 1, OutputLength: 1, Rate: 1}).Validate(),
			[]string{"questions: must list at least one group"}, "token ids"},
		{"sharedprefix big", (&SharedPrefixConfig{Questions: []int{big}, SystemPromptLength: big, QuestionLength: 1, OutputLength: 1, Rate: 1}).Validate(),
			[]string{"lower the questions or the lengths"}, "questions:"},
		{"chat big", (&ChatConfig{Clients: big, Rounds: big, RequestLength: big, OutputLength: 1, Rate: 1}).Validate(),
			[]string{"lower --clients, --rounds or the lengths"}, "clients:"},
		{"chat bad", (&ChatConfig{Clients: big, Rounds: big, RequestLength: 0, OutputLength: 1, Rate: 1}).Validate(),
			[]string{"request-length: must be from 1 to"}, "token ids"},
		{"warmcache big", (&WarmCacheConfig{Pcts: []int{0, 50}, NumPrompts: big, TotalTokens: big, OutputLength: 1}).Validate(),
			[]string{"lower --num-prompts, --total-tokens or the percentages"}, "pcts"},
	} {
		if c.err == nil {
			t.Errorf("%s: Validate() = nil", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("%s: Validate() = %q, want it to say %q", c.name, c.err, w)
			}
		}
		if strings.Contains(c.err.Error(), c.not) {
			t.Errorf("%s: Validate() = %q, want nothing about %q", c.name, c.err, c.not)
		}
	}
}
