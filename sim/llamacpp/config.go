package llamacpp

import (
	"errors"
	"fmt"
	"math"

	"github.com/kvsim/kvsim/internal/fielderr"
	"github.com/kvsim/kvsim/traces"
)

// Config holds the llama-server arguments the model follows, under their
// server names.
type Config struct {
	// Slots is -np, the number of server slots, >= 1. Default 4.
	Slots int `toml:"parallel"`
	// Context is -c, the total context in tokens, >= Slots. Without
	// --kv-unified (the server's default when -np is given) each slot gets
	// Context / Slots tokens. Default 8192.
	Context int `toml:"ctx_size"`
	// Batch is -b, the most tokens one llama_decode call takes (decode
	// tokens and prompt chunks together), >= 1. Default 2048.
	Batch int `toml:"batch_size"`
	// Ubatch is -ub, the most tokens of one micro-batch (one graph
	// computation) of a call, >= 1; the server uses at most Batch. Default
	// 512. Only a cost model with tiles ([CPUCost].Tile) uses it.
	Ubatch int `toml:"ubatch_size"`
	// SlotPromptSimilarity is -sps: a request goes to the idle slot with
	// the longest common prefix only if that prefix is more than this
	// fraction of the new prompt; 0 disables the similarity choice (always
	// LRU). In [0, 1]. Default 0.10.
	SlotPromptSimilarity float64 `toml:"slot_prompt_similarity"`
	// CacheRAMMiB is --cache-ram, the host-RAM prompt cache's size limit in
	// MiB (2^20 bytes): 0 disables the cache, -1 removes the size limit
	// (the cache then holds at most Context tokens). Default 8192.
	CacheRAMMiB int64 `toml:"cache_ram"`
	// NoCacheIdleSlots is --no-cache-idle-slots: by default every idle
	// slot's state is saved to the RAM cache whenever a task starts.
	NoCacheIdleSlots bool `toml:"no_cache_idle_slots"`
	// StateBytesPerToken is the size of one token's slot state in the RAM
	// cache: the KV bytes per token (K and V of every layer, f16 by
	// default) plus 8 bytes of cell metadata (position and sequence
	// count), as llama_state_seq_get_size reports it. > 0. Default 4104,
	// the tiny model's (4096 + 8).
	StateBytesPerToken int64 `toml:"state_bytes_per_token"`
	// TokenText is how the model's token ids decode to the bytes the
	// server streams ([Stream]): "" (every token is whole text; default)
	// or "byte-level" (kvsim's GGUF models). With "byte-level", a replay
	// against the simulator whose records carry the server's output ids
	// holds back tokens that end in an incomplete UTF-8 sequence, as the
	// server does, so the client's first token and chunks are the real
	// ones.
	TokenText string `toml:"token_text"`
	// Vocab is the id range traces.PromptTokens draws synthesised prompts
	// from; it must be the one replay sends to the server, so that the
	// simulated prompts are the real ones token for token. Default
	// traces.DefaultVocab.
	Vocab traces.Vocab `toml:"-"`
}

// DefaultConfig returns the server's defaults with -np 4 -c 8192 and the
// tiny model's state size.
func DefaultConfig() Config {
	return Config{
		Slots: 4, Context: 8192, Batch: 2048, Ubatch: 512, SlotPromptSimilarity: 0.10,
		CacheRAMMiB: 8192, StateBytesPerToken: 4104, Vocab: traces.DefaultVocab,
	}
}

// UbatchSize is the micro-batch size the server uses: -ub, at most -b.
func (c Config) UbatchSize() int { return min(c.Ubatch, c.Batch) }

// SlotContext is the context of one slot in tokens.
func (c Config) SlotContext() int { return c.Context / c.Slots }

// Validate reports every invalid field at once, each a [fielderr.Error]
// at llamacpp.<key>, the server's long option name.
func (c Config) Validate() error {
	var errs []error
	bad := func(key string, v any, want string) {
		errs = append(errs, fielderr.New(fielderr.Key("llamacpp", key), "%s (got %v)", want, v))
	}
	if c.Slots < 1 {
		bad("parallel", c.Slots, "must be >= 1")
	}
	if c.Slots >= 1 && c.Context < c.Slots {
		bad("ctx_size", c.Context, fmt.Sprintf("must be >= parallel (%d)", c.Slots))
	}
	if c.Batch < 1 {
		bad("batch_size", c.Batch, "must be >= 1")
	}
	if c.Ubatch < 1 {
		bad("ubatch_size", c.Ubatch, "must be >= 1")
	}
	if !(c.SlotPromptSimilarity >= 0 && c.SlotPromptSimilarity <= 1) || math.IsNaN(c.SlotPromptSimilarity) {
		bad("slot_prompt_similarity", c.SlotPromptSimilarity, "must be in [0, 1]")
	}
	if c.CacheRAMMiB < -1 {
		bad("cache_ram", c.CacheRAMMiB, "must be -1 (no limit), 0 (off) or a size in MiB")
	}
	if c.StateBytesPerToken <= 0 {
		bad("state_bytes_per_token", c.StateBytesPerToken, "must be > 0")
	}
	if !validTokenText(c.TokenText) {
		bad("token_text", fmt.Sprintf("%q", c.TokenText), fmt.Sprintf("must be %q or %q", TokenTextWhole, TokenTextByteLevel))
	}
	if err := c.Vocab.Validate(); err != nil {
		errs = append(errs, fielderr.Wrap(fielderr.Key("llamacpp", "vocab"), err))
	}
	return errors.Join(errs...)
}

// costPath is the key path of the cost model's field key: llama-server
// files write it as llamacpp.cost.<key>.
func costPath(key string) fielderr.Path { return fielderr.Key("llamacpp", "cost", key) }

// Validate reports every invalid field of c at once, each a
// [fielderr.Error] at llamacpp.cost.<key> (the coefficients at
// llamacpp.cost.prefill[i] and decode[i], the curve's points at
// llamacpp.cost.after_prompt[i].<key>). Fields that depend on each other
// (a call-size tier's bound and rate, the tiles and the tiers) are checked
// together, each problem once.
func (c *CPUCost) Validate() error {
	var errs []error
	fitted := fielderr.Key("hw", "fitted")
	errs = append(errs, fielderr.Flatten(fielderr.Map(c.Fitted.Validate(), func(p fielderr.Path) fielderr.Path {
		return p.Replace(fitted, fielderr.Key("llamacpp", "cost"))
	}))...)
	finite := func(key string, v float64) {
		if !(v >= 0) || math.IsInf(v, 1) {
			errs = append(errs, fielderr.New(costPath(key), "must be a finite number >= 0 (got %v)", v))
		}
	}
	finite("state_copy_ns_per_byte", c.StateCopy)
	finite("state_fresh_ns_per_byte", c.StateFresh)
	finite("state_restore_ns_per_byte", c.StateRestore)
	// A call-size tier: its bound in tokens (0: off) and its rate per
	// pair, which it needs and which needs it.
	tier := func(name string, tokens int, pair float64) {
		switch {
		case tokens < 0:
			errs = append(errs, fielderr.New(costPath(name+"_tokens"), "must be >= 0 (got %d)", tokens))
		case tokens > 0 && !(pair > 0 && !math.IsInf(pair, 1)):
			errs = append(errs, fielderr.New(costPath(name+"_pair_ns"), "must be a finite number > 0 with %s_tokens (got %v)", name, pair))
		case tokens == 0 && pair != 0:
			errs = append(errs, fielderr.New(costPath(name+"_pair_ns"), "needs %s_tokens > 0 (got %v)", name, pair))
		}
	}
	tier("small_call", c.SmallCall, c.SmallPair)
	if c.MediumCall > 0 && c.MediumCall <= c.SmallCall {
		errs = append(errs, fielderr.New(costPath("medium_call_tokens"), "must be above small_call_tokens (%d) (got %d)", c.SmallCall, c.MediumCall))
	} else {
		tier("medium_call", c.MediumCall, c.MediumPair)
	}
	switch {
	case c.Tile < 0:
		errs = append(errs, fielderr.New(costPath("tile_size"), "must be >= 0 (got %d)", c.Tile))
	case c.Tile > 0 && (c.SmallCall != 0 || c.MediumCall != 0):
		errs = append(errs, fielderr.New(costPath("tile_size"), "excludes small_call_tokens and medium_call_tokens (got %d and %d): the tiles replace the call-size tiers", c.SmallCall, c.MediumCall))
	}
	switch {
	case !(c.ShortPair >= 0) || math.IsInf(c.ShortPair, 1):
		errs = append(errs, fielderr.New(costPath("short_pair_ns"), "must be a finite number >= 0 (got %v)", c.ShortPair))
	case c.Tile == 0 && c.ShortPair != 0:
		errs = append(errs, fielderr.New(costPath("short_pair_ns"), "needs tile_size > 0 (got %v)", c.ShortPair))
	}
	if c.Delay < 0 {
		errs = append(errs, fielderr.New(costPath("request_delay_ns"), "must be >= 0 (got %d)", c.Delay))
	}
	for i, p := range c.AfterPromptCurve {
		key := costPath("after_prompt").At(i)
		switch {
		case p.Context < 0:
			errs = append(errs, fielderr.New(key.Key("context_tokens"), "must be >= 0 (got %d)", p.Context))
		case i > 0 && p.Context <= c.AfterPromptCurve[i-1].Context:
			errs = append(errs, fielderr.New(key.Key("context_tokens"), "must be above the previous point's %d (got %d)", c.AfterPromptCurve[i-1].Context, p.Context))
		}
		if !(p.Ns >= 0) || math.IsInf(p.Ns, 1) {
			errs = append(errs, fielderr.New(key.Key("ns"), "must be a finite number >= 0 (got %v)", p.Ns))
		}
		if !(p.Decay >= 0 && p.Decay < 1) {
			errs = append(errs, fielderr.New(key.Key("decay"), "must be a number in [0, 1) (got %v)", p.Decay))
		}
	}
	return errors.Join(errs...)
}
