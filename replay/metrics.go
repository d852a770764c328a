package replay

import (
	"math"
	"sort"
	"time"

	"github.com/kvsim/kvsim/sim/engine"
)

// recorder turns a stream of chunks into TTFT and ITL exactly as SGLang's
// bench_serving.py and bench_warm_cache.py do: the first chunk with output
// sets TTFT; every later chunk that adds k > 0 tokens adds k inter-token
// latencies of gap/k, where gap is the time since the previous such chunk;
// chunks that add no token are ignored.
type recorder struct {
	start      time.Time
	first      time.Time // zero until the first chunk
	recent     time.Time
	lastTokens int
	itl        []int64 // ns
}

// Chunk implements Sink.
func (r *recorder) Chunk(at time.Time, tokens int) {
	if r.first.IsZero() {
		r.first = at
		r.recent = at
		r.lastTokens = tokens
		return
	}
	n := tokens - r.lastTokens
	if n <= 0 {
		return
	}
	gap := int64(at.Sub(r.recent)) / int64(n)
	for range n {
		r.itl = append(r.itl, gap)
	}
	r.recent = at
	r.lastTokens = tokens
}

// RequestResult is what happened to one request of a replay. Times are
// nanoseconds since the run's start (the first moment a request could be
// sent).
type RequestResult struct {
	// Index is the record's position in the replayed slice.
	Index int    `json:"index"`
	ID    string `json:"id"`
	// Warmup marks records of Kind "warmup", sent but left out of the
	// metrics.
	Warmup bool `json:"warmup,omitempty"`
	// Sent reports whether the request was sent at all (an interrupted
	// run leaves later requests unsent).
	Sent bool `json:"sent"`
	// Due is when the pacing released the request: its scheduled arrival,
	// or its dependencies' completion plus think time if later.
	Due int64 `json:"due_ns"`
	// Slot is when it got a concurrency slot (>= Due).
	Slot int64 `json:"slot_ns"`
	// Start is when it was handed to the target (>= Slot); Start - Slot
	// is the client's own lateness.
	Start int64 `json:"start_ns"`
	// FirstToken is when the first chunk with output arrived; 0 if none.
	FirstToken int64 `json:"first_token_ns,omitempty"`
	// End is when the response ended.
	End int64 `json:"end_ns"`
	// PromptTokens is the prompt length sent (the client's count).
	PromptTokens int `json:"prompt_tokens"`
	// ServerPromptTokens is the server's prompt count; 0 if not reported.
	ServerPromptTokens int `json:"server_prompt_tokens,omitempty"`
	// OutputTokens is the output length: the cumulative count of the last
	// chunk with output, as the benchmarks take it.
	OutputTokens int `json:"output_tokens"`
	// CachedTokens is the server's cached_tokens; -1 when not reported.
	CachedTokens int `json:"cached_tokens"`
	// ITL holds the inter-token latencies in ns (chunk gaps spread over
	// the tokens of the chunk).
	ITL []int64 `json:"itl_ns,omitempty"`
	// FinishReason is the server's stop reason.
	FinishReason string `json:"finish_reason,omitempty"`
	// Retries counts the resends after a stale keep-alive connection
	// (Response.Retries); a request that then succeeded is not failed.
	Retries int `json:"retries,omitempty"`
	// Failed is the failure category ("" on success); Detail the message.
	Failed string `json:"failed,omitempty"`
	Detail string `json:"detail,omitempty"`
	// OutputIDs holds the generated ids when the target returned them.
	OutputIDs []int32 `json:"-"`
}

// TTFT is the time to first token in ns.
func (r *RequestResult) TTFT() int64 { return r.FirstToken - r.Start }

// E2E is the end-to-end latency in ns.
func (r *RequestResult) E2E() int64 { return r.End - r.Start }

// Summary is a replay's metric set. The JSON field names are those of
// SGLang's bench_serving.py / bench_warm_cache.py result objects (except
// the *_retokenized fields, which need the model's tokenizer and are not
// computed), followed by kvsim's additions.
type Summary struct {
	Backend        string `json:"backend"`
	DatasetName    string `json:"dataset_name"`
	RequestRate    Rate   `json:"request_rate"`
	MaxConcurrency *int   `json:"max_concurrency"`
	NumPrompts     int    `json:"num_prompts"`
	// Serving is the seed's metric set (completed ... concurrency).
	engine.Serving

	// CacheHitRate is sum(cached_tokens) / sum(server prompt_tokens) over
	// the completed requests that reported both; nil when none did.
	CacheHitRate *float64 `json:"cache_hit_rate"`
	// CachedTokens and CacheReported are the sums behind CacheHitRate.
	CachedTokens  int64 `json:"cached_tokens"`
	CacheReported int64 `json:"cache_reported_requests"`
	// Failed counts failed requests; FailedReasons splits them by reason.
	Failed        int64            `json:"failed"`
	FailedReasons map[string]int64 `json:"failed_reasons"`
	// Retried counts the requests resent on a fresh connection because
	// the server had closed the one they first went out on before any of
	// the response arrived (docs/replay.md, "Stale connections"); they are
	// not failures unless the resend failed too.
	Retried int64 `json:"retried_requests"`
	// NotSent counts requests never sent (an interrupted run).
	NotSent     int64 `json:"not_sent"`
	Interrupted bool  `json:"interrupted"`
	// Lateness is the client's own delay between the moment a request
	// could go (schedule, dependencies and concurrency slot all clear) and
	// the moment it was handed to the target, in ms.
	MeanLateness float64 `json:"mean_lateness_ms"`
	P99Lateness  float64 `json:"p99_lateness_ms"`
	MaxLateness  float64 `json:"max_lateness_ms"`
	// MeanQueueWait is the mean wait for a concurrency slot, in ms.
	MeanQueueWait float64 `json:"mean_queue_wait_ms"`
}

// Rate is a request rate in requests/s that encodes +Inf as the JSON
// string "inf" (Python's json writes a bare Infinity, which is not JSON).
type Rate float64

// MarshalJSON implements json.Marshaler.
func (r Rate) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(r), 1) {
		return []byte(`"inf"`), nil
	}
	return []byte(formatFloat(float64(r))), nil
}

// String prints the rate as the benchmarks do ("inf" or the number).
func (r Rate) String() string {
	if math.IsInf(float64(r), 1) {
		return "inf"
	}
	return formatFloat(float64(r))
}

// Summarize computes the metric set of results (warm-up records are left
// out) with engine.Summarize: TTFT, TPOT = (latency - ttft)/(output - 1) for
// outputs longer than one token, ITL, E2E, completed, token totals,
// throughputs over the time from the first send to the last completion,
// and concurrency = sum of latencies / duration. Percentiles interpolate
// linearly (numpy's default) and std is the population deviation, as in
// the benchmarks.
func Summarize(results []RequestResult) Summary {
	b := newSummaryBuilder()
	for i := range results {
		b.addITL(&results[i])
	}
	for i := range results {
		b.add(&results[i])
	}
	return b.summary()
}

// summaryBuilder computes Summarize request by request: add takes every
// record's result in record order (their ITL is not read), addITL a
// request's inter-token latencies in any order (engine.Stats' percentiles
// and sums of them do not depend on it).
type summaryBuilder struct {
	s       Summary
	st      engine.Stats
	late    []float64
	waitSum float64 // sum of the slot waits in record order, as mean adds them
	prompt  int64
}

func newSummaryBuilder() *summaryBuilder {
	return &summaryBuilder{s: Summary{FailedReasons: map[string]int64{}}}
}

// measured reports whether r counts in the metrics (sent, not a warm-up).
func measured(r *RequestResult) bool { return !r.Warmup && r.Sent }

func (b *summaryBuilder) addITL(r *RequestResult) {
	if measured(r) && r.Failed == "" {
		for _, x := range r.ITL {
			b.st.AddITL(float64(x) / 1e6)
		}
	}
}

func (b *summaryBuilder) add(r *RequestResult) {
	s := &b.s
	if r.Warmup {
		return
	}
	if !r.Sent {
		s.NotSent++
		return
	}
	s.NumPrompts++
	if r.Retries > 0 {
		s.Retried++
	}
	b.late = append(b.late, float64(r.Start-r.Slot)/1e6)
	b.waitSum += float64(r.Slot-r.Due) / 1e6
	rr := engine.RequestResult{
		ID: r.ID, Arrival: engine.Time(r.Start), FirstToken: engine.Time(r.FirstToken), Finish: engine.Time(r.End),
		PromptTokens: int64(r.PromptTokens), OutputTokens: int64(r.OutputTokens),
		Failed: r.Failed,
	}
	if r.Failed != "" {
		s.Failed++
		s.FailedReasons[r.Failed]++
		b.st.Add(rr)
		return
	}
	if r.CachedTokens >= 0 && r.ServerPromptTokens > 0 {
		rr.CachedTokens = int64(r.CachedTokens)
		s.CachedTokens += int64(r.CachedTokens)
		s.CacheReported++
		// The hit rate uses the server's prompt counts, over the
		// requests that reported a cached count.
		b.prompt += int64(r.ServerPromptTokens)
	}
	b.st.Add(rr)
}

func (b *summaryBuilder) summary() Summary {
	s := b.s
	s.Serving = b.st.Summary().Serving
	if b.prompt > 0 {
		h := float64(s.CachedTokens) / float64(b.prompt)
		s.CacheHitRate = &h
	}
	if late := b.late; len(late) > 0 {
		sort.Float64s(late)
		s.MeanLateness = mean(late)
		s.P99Lateness = engine.Percentile(late, 99)
		s.MaxLateness = late[len(late)-1]
		s.MeanQueueWait = b.waitSum / float64(len(late))
	}
	return s
}

func mean(xs []float64) float64 {
	var t float64
	for _, x := range xs {
		t += x
	}
	return t / float64(len(xs))
}
