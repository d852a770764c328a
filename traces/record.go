package traces

import "fmt"

// Record is one request of a trace.
//
// The prompt is given in one of two ways:
//   - Tokens: the exact prompt token ids (token traces, generators); then
//     len(Tokens) == InputLen.
//   - Blocks: one hash per BlockSize tokens (hash traces). Block i's hash
//     stands for the whole prefix up to and including block i, so two
//     requests share a prefix of k blocks exactly when their first k hashes
//     are equal. The last block may be partial, and formats differ on whether
//     a trailing partial block gets a hash, so len(Blocks) is
//     floor(InputLen/BlockSize) or ceil(InputLen/BlockSize). InputLen is the
//     truth for the prompt length.
//
// A record with neither (Azure) carries lengths only.
//
// Hash ids are unambiguous within one Reader's output: equal ids mean equal
// prefixes, whatever file or conversation they came from.
type Record struct {
	// ID identifies the request uniquely within the trace.
	ID string `json:"id"`
	// Arrival is when the request is sent, in nanoseconds since the start of
	// the trace. Records come out of a Reader in non-decreasing Arrival
	// order (ties keep the source order).
	Arrival int64 `json:"arrival_ns"`

	// Session is the conversation (or agent session) the request belongs
	// to; "" when the format has none.
	Session string `json:"session,omitempty"`
	// Turn is the 1-based turn within Session; 0 when unknown.
	Turn int `json:"turn,omitempty"`
	// Parent is the ID of the request whose completion this one depends on
	// (the previous turn: its prompt and output are usually a prefix of
	// this prompt); "" when none.
	Parent string `json:"parent,omitempty"`
	// WaitFor lists further request IDs that must complete before this one
	// is sent (for example the sub-agents an agent waited for).
	WaitFor []string `json:"wait_for,omitempty"`
	// ThinkTime is the client's delay, in nanoseconds, between the
	// completion of Parent and the sending of this request (WaitFor gates
	// add no delay of their own); 0 when the format does not record one
	// (then only Arrival is known). Readers set it so that a replay with
	// the recorded service times sends the request at Arrival (for WEKA:
	// t minus the parent's t + api_time); the think time the source
	// recorded, measured its own way, is Observed.ThinkTime. (A trace
	// converted from WEKA before issue 24 holds the recorded think_time
	// here, counted from the latest dependency: convert it again.)
	ThinkTime int64 `json:"think_ns,omitempty"`

	// InputLen is the prompt length in tokens (> 0).
	InputLen int `json:"input_len"`
	// Tokens holds the exact prompt token ids, or nil.
	Tokens []int32 `json:"tokens,omitempty"`
	// Blocks holds the prompt's prefix block hashes, or nil.
	Blocks []uint64 `json:"blocks,omitempty"`
	// BlockSize is the number of tokens per entry of Blocks (> 0 when
	// Blocks is set, else 0).
	BlockSize int `json:"block_size,omitempty"`

	// OutputLen is the number of tokens to generate (>= 0).
	OutputLen int `json:"output_len"`
	// OutputTokens holds the output's token ids when known (captured or
	// generated traces), else nil.
	OutputTokens []int32 `json:"output_tokens,omitempty"`

	// Model is the model name when the trace records one.
	Model string `json:"model,omitempty"`
	// Kind is the source's request type, verbatim (Bailian "text", WEKA
	// "s" for streaming or "n" for non-streaming, ...), or "".
	Kind string `json:"kind,omitempty"`

	// Sampling holds optional sampling parameters.
	Sampling *Sampling `json:"sampling,omitempty"`
	// Observed holds what a captured trace measured, or nil.
	Observed *Observed `json:"observed,omitempty"`
}

// Sampling holds optional sampling parameters of a request. Zero values
// mean "server default" except where noted.
type Sampling struct {
	Temperature float64 `json:"temperature,omitempty"`
	TopP        float64 `json:"top_p,omitempty"`
	TopK        int     `json:"top_k,omitempty"`
	// IgnoreEOS asks the server to generate exactly OutputLen tokens.
	IgnoreEOS bool `json:"ignore_eos,omitempty"`
}

// Observed holds the measured results of a request in a captured trace.
// Durations are nanoseconds; 0 means "not recorded" for durations.
type Observed struct {
	// CachedTokens is the number of prompt tokens served from the cache;
	// -1 when not recorded.
	CachedTokens int `json:"cached_tokens"`
	// TTFT is the time to first token.
	TTFT int64 `json:"ttft_ns,omitempty"`
	// ITL holds the inter-token latencies, or nil.
	ITL []int64 `json:"itl_ns,omitempty"`
	// E2E is the end-to-end latency.
	E2E int64 `json:"e2e_ns,omitempty"`
	// ThinkTime is the think time the source recorded (WEKA think_time),
	// for reference; replays apply Record.ThinkTime instead.
	ThinkTime int64 `json:"think_ns,omitempty"`
	// Status is the outcome ("ok", an HTTP status, a stop reason, ...).
	Status string `json:"status,omitempty"`
	// Retries counts the times the request was resent on a fresh
	// connection because the server had closed the one it went out on
	// before any of the response arrived (a stale keep-alive connection).
	Retries int `json:"retries,omitempty"`
}

// HasPrefixInfo reports whether the record says anything about which prompt
// prefixes it shares with other requests.
func (r *Record) HasPrefixInfo() bool { return r.Tokens != nil || r.Blocks != nil }

// check reports the first inconsistency in a decoded record. names maps
// kvsim's field names (input_len, output_len, arrival, think_time, tokens,
// blocks, block_size) to the source format's, so that messages name the
// field the user wrote.
func (r *Record) check(names map[string]string) *fieldError {
	fe := r.check1()
	if fe != nil {
		if n, ok := names[fe.field]; ok {
			fe.field = n
		}
	}
	return fe
}

func (r *Record) check1() *fieldError {
	switch {
	case r.InputLen <= 0:
		return errField("input_len", "expected a positive token count, found %d", r.InputLen)
	case r.OutputLen < 0:
		return errField("output_len", "expected a non-negative token count, found %d", r.OutputLen)
	case r.Turn < 0:
		return errField("turn", "expected a turn number >= 1 (0 or absent: unknown), found %d", r.Turn)
	case r.Arrival < 0 || r.Arrival > MaxTime:
		return errField("arrival", "expected a time from 0 to %d ns (285 years), found %d ns", int64(MaxTime), r.Arrival)
	case r.ThinkTime < 0 || r.ThinkTime > MaxTime:
		return errField("think_time", "expected a duration from 0 to %d ns (285 years), found %d ns", int64(MaxTime), r.ThinkTime)
	case r.Tokens != nil && len(r.Tokens) != r.InputLen:
		return errField("tokens", "expected %d token ids (the input length), found %d", r.InputLen, len(r.Tokens))
	case r.Blocks != nil && r.BlockSize <= 0:
		return errField("block_size", "expected a positive block size with block hashes, found %d", r.BlockSize)
	}
	for i, t := range r.Tokens {
		if t < 0 {
			return errField("tokens", "expected non-negative token ids, found %d at index %d", t, i)
		}
	}
	if r.Blocks != nil {
		lo := r.InputLen / r.BlockSize
		hi := (r.InputLen + r.BlockSize - 1) / r.BlockSize
		if n := len(r.Blocks); n < lo || n > hi {
			want := fmt.Sprint(hi)
			if lo != hi {
				want = fmt.Sprintf("%d or %d", lo, hi)
			}
			return errField("blocks", "expected %s blocks for %d input tokens in %d-token blocks, found %d", want, r.InputLen, r.BlockSize, n)
		}
	}
	return nil
}

// MaxTime bounds a record's arrival and think time: 9e18 ns (285 years),
// as the Mooncake and Bailian readers bound their timestamps, leaving a
// simulation that starts there 7 years before its clock would pass int64
// nanoseconds (past that, sim stops with an error).
const MaxTime = 9e18

// normalize replaces empty slices by nil, so that a record reads back
// identical after a round trip through JSON (which omits empty arrays).
func (r *Record) normalize() {
	if len(r.Tokens) == 0 {
		r.Tokens = nil
	}
	if len(r.Blocks) == 0 {
		r.Blocks = nil
	}
	if len(r.OutputTokens) == 0 {
		r.OutputTokens = nil
	}
	if len(r.WaitFor) == 0 {
		r.WaitFor = nil
	}
	if r.Observed != nil && len(r.Observed.ITL) == 0 {
		r.Observed.ITL = nil
	}
}
