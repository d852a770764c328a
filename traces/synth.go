package traces

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
)

// Vocab is a range [Lo, Hi) of token ids that synthetic prompts draw from.
type Vocab struct {
	Lo, Hi int32
}

// DefaultVocab is valid for common tokenizers (Llama, Qwen, Mistral, GPT-2
// sized vocabularies all exceed 30000 ids) and skips the low ids where
// special and byte tokens usually live.
var DefaultVocab = Vocab{Lo: 1000, Hi: 30000}

// Validate reports whether the range is usable.
func (v Vocab) Validate() error {
	if v.Lo < 0 || v.Hi <= v.Lo {
		return fmt.Errorf("vocab [%d, %d): expected 0 <= lo < hi", v.Lo, v.Hi)
	}
	return nil
}

// String prints the range as "lo:hi".
func (v Vocab) String() string { return fmt.Sprintf("%d:%d", v.Lo, v.Hi) }

// Stream constants of the seeded generators used for synthesis, so that
// block tokens, request tails and generators never share a stream.
const (
	streamBlock = 0x6b76_7369_6d5f_626c // "kvsim_bl"
	streamTail  = 0x6b76_7369_6d5f_746c // "kvsim_tl"
)

// MaxSynthTokens bounds the prompts PromptTokens synthesises (16M tokens,
// far beyond any model's context), so that a corrupt length in a trace is
// an error instead of an unbounded allocation.
const MaxSynthTokens = 1 << 24

// PromptTokens returns exactly r.InputLen prompt token ids for sending r to
// a real server:
//   - a token trace's ids as they are;
//   - for a hash trace, block i's tokens are drawn from a generator seeded
//     by block i's hash, so equal hashes give equal tokens and shared
//     prefixes stay shared; a partial last block takes the first tokens of
//     its block; tokens beyond the last block (formats that hash full
//     blocks only) are drawn from a generator seeded by the request's ID;
//   - with no prefix information, all tokens come from the ID's generator
//     (unique to the request).
//
// The result is freshly allocated. Hash ids from different block sizes are
// not mixed: the generator is seeded by (hash, block size).
func PromptTokens(r *Record, v Vocab) ([]int32, error) {
	if err := v.Validate(); err != nil {
		return nil, err
	}
	if fe := r.check(nil); fe != nil {
		return nil, fmt.Errorf("prompt for %q: %w", r.ID, fe)
	}
	if r.Tokens != nil {
		return append([]int32(nil), r.Tokens...), nil
	}
	if r.InputLen > MaxSynthTokens {
		return nil, fmt.Errorf("prompt for %q: input_len %d is over %d tokens, more than any server's context; refusing to synthesise it", r.ID, r.InputLen, MaxSynthTokens)
	}
	out := make([]int32, 0, r.InputLen)
	span := uint64(v.Hi - v.Lo)
	for _, h := range r.Blocks {
		rng := rand.New(rand.NewPCG(h, streamBlock^uint64(r.BlockSize)))
		n := min(r.BlockSize, r.InputLen-len(out))
		for range n {
			out = append(out, v.Lo+int32(rng.Uint64N(span)))
		}
	}
	if len(out) < r.InputLen {
		hf := fnv.New64a()
		hf.Write([]byte(r.ID))
		rng := rand.New(rand.NewPCG(hf.Sum64(), streamTail))
		for len(out) < r.InputLen {
			out = append(out, v.Lo+int32(rng.Uint64N(span)))
		}
	}
	return out, nil
}
