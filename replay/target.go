package replay

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/kvsim/kvsim/traces"
)

// Request is one generation request as a Target receives it.
type Request struct {
	// ID is the trace record's ID (unique within a run).
	ID string
	// Session is the trace record's session (traces.Record.Session: the
	// conversation, agent session or shared-prefix group), or "". The
	// HTTP target sends it as the X-Session-Id header, the key a load
	// balancer in front of several servers can hash on (nginx's
	// `hash $http_x_session_id consistent`).
	Session string
	// Tokens holds exactly the prompt token ids to send. The slice is
	// owned by the caller and must not be modified or retained after
	// Submit returns.
	Tokens []int32
	// MaxNewTokens is the number of tokens to generate (>= 1).
	MaxNewTokens int
	// IgnoreEOS asks the server to generate exactly MaxNewTokens tokens.
	IgnoreEOS bool
	// Temperature, TopP and TopK are sent when non-zero (Temperature is
	// always sent, 0 meaning greedy, as SGLang's benchmarks do).
	Temperature float64
	TopP        float64
	TopK        int
}

// Sink receives a request's streamed progress from a Target.
//
// Chunk is called, in order, for every streamed event that carries new
// output: at is when the event was read, tokens is the cumulative number
// of completion tokens so far as the server reports it (or as counted by
// the target when the server does not report it). Chunk is called from the
// goroutine that called Submit, never after Submit returns.
type Sink interface {
	Chunk(at time.Time, tokens int)
}

// Response is what a Target reports at the end of a request.
type Response struct {
	// PromptTokens is the server's prompt length in tokens; 0 when not
	// reported.
	PromptTokens int
	// CompletionTokens is the number of generated tokens the server
	// reported last.
	CompletionTokens int
	// CachedTokens is the number of prompt tokens the server served from
	// its prefix cache (SGLang's meta_info.cached_tokens, OpenAI's
	// usage.prompt_tokens_details.cached_tokens); -1 when not reported.
	CachedTokens int
	// FinishReason is the server's stop reason ("length", "stop", ...), or
	// "" when not reported.
	FinishReason string
	// OutputIDs holds the generated token ids when the server returned
	// them (SGLang's cumulative output_ids), else nil. The slice belongs to
	// the caller.
	OutputIDs []int32
	// End is when the response ended: the time the last line of the
	// stream (the [DONE] marker included) was read.
	End time.Time
	// Retries counts the times the request was resent because the
	// connection it went out on had been closed by the server before any
	// byte of the response arrived (a stale keep-alive connection; see
	// doRetrying). A resent request that then succeeds is not a failure.
	Retries int
}

// Target is a server (or a simulator) that serves generation requests.
//
// Submit sends req, reports every streamed chunk to sink, and returns the
// final response. It must be safe to call from many goroutines at once.
// When the request fails, Submit returns an error and a Response holding
// whatever was measured (End set to when the failure was noticed); the
// error is a *RequestError, whose Reason is a short, low-cardinality
// category used to count failures. Submit returns once ctx is done, with
// an error wrapping ctx.Err().
type Target interface {
	Submit(ctx context.Context, req Request, sink Sink) (Response, error)
}

// Flusher is a Target whose prefix cache can be emptied (SGLang's
// /flush_cache).
type Flusher interface {
	Flush(ctx context.Context) error
}

// Describer is a Target that can say what it is.
type Describer interface {
	Info(ctx context.Context) (Info, error)
}

// Info describes a target.
type Info struct {
	// Server names the server software or API ("sglang", "openai", ...).
	Server string `json:"server"`
	// Model is the served model name, when known.
	Model string `json:"model,omitempty"`
	// PageSize is the server's KV page size in tokens, when reported.
	PageSize int `json:"page_size,omitempty"`
	// VocabSize is the model's vocabulary size (token ids 0 to
	// VocabSize-1), when the server reports it: llama-server does, as
	// data[0].meta.n_vocab of GET /v1/models; SGLang and vLLM do not.
	VocabSize int `json:"vocab_size,omitempty"`
	// Raw is the server's own description (SGLang's /server_info JSON,
	// OpenAI's /v1/models), when there is one.
	Raw json.RawMessage `json:"raw,omitempty"`
}

// Clock is the time source of a replay. Measurements are taken with Now;
// pacing waits with SleepUntil. HTTP targets use WallClock (tests,
// testing/synctest's fake time); a replay of a [SimTarget] runs in the
// simulator's virtual time and does not use the clock.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// SleepUntil blocks until Now() >= t or ctx is done, and returns
	// ctx.Err() in the latter case.
	SleepUntil(ctx context.Context, t time.Time) error
}

// WallClock is the real clock (time.Now and timers). Under
// testing/synctest it runs on the bubble's fake time.
type WallClock struct{}

// Now implements Clock.
func (WallClock) Now() time.Time { return time.Now() }

// SleepUntil implements Clock.
func (WallClock) SleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RequestError is why one request failed.
type RequestError struct {
	// Reason is a short category: "connect", "http 503", "timeout",
	// "stream cut", "malformed event", "server error", "aborted",
	// "interrupted", ... Failures are counted by Reason.
	Reason string
	// Detail is the underlying message (an HTTP body excerpt, a parse
	// error), possibly empty.
	Detail string
	Err    error
}

func (e *RequestError) Error() string {
	switch {
	case e.Detail != "":
		return e.Reason + ": " + e.Detail
	case e.Err != nil:
		return e.Reason + ": " + e.Err.Error()
	}
	return e.Reason
}

func (e *RequestError) Unwrap() error { return e.Err }

// Reason returns err's failure category: a *RequestError's Reason, or
// "error" for any other error.
func Reason(err error) string {
	var re *RequestError
	if errors.As(err, &re) {
		return re.Reason
	}
	return "error"
}

// ErrNotSupported is returned when a target lacks a capability that a run
// needs (for example a flush on a server without /flush_cache).
var ErrNotSupported = errors.New("not supported by the target")

// requestFor builds the Request for a trace record: the prompt tokens come
// from traces.PromptTokens (exact ids, hash blocks turned into tokens, or
// tokens unique to the request for length-only traces).
func requestFor(rec *traces.Record, vocab traces.Vocab, disableIgnoreEOS bool) (Request, error) {
	toks, err := traces.PromptTokens(rec, vocab)
	if err != nil {
		return Request{}, err
	}
	req := Request{ID: rec.ID, Session: rec.Session, Tokens: toks, MaxNewTokens: max(rec.OutputLen, 1), IgnoreEOS: true}
	if s := rec.Sampling; s != nil {
		req.Temperature, req.TopP, req.TopK = s.Temperature, s.TopP, s.TopK
		req.IgnoreEOS = s.IgnoreEOS
	}
	if disableIgnoreEOS {
		req.IgnoreEOS = false
	}
	return req, nil
}
