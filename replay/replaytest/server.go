// Package replaytest provides a fake LLM server for tests of the replay
// path: it speaks SGLang's native /generate and the OpenAI completions and
// chat APIs with streaming, keeps a tiny page-aligned prefix cache so that
// cached_tokens are meaningful, and serves /flush_cache, /server_info,
// /get_server_info, /health and /v1/models. It listens on loopback only.
//
// Its cache is exact and unbounded: a request's cached_tokens is the
// longest page-aligned prefix of its prompt that an earlier request's
// prompt plus output (minus the last output token, whose KV is never
// computed, as in SGLang) covered. Output tokens are a deterministic
// function of the prompt.
package replaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Server.
type Config struct {
	// PageSize is the cache granularity in tokens (default 1).
	PageSize int
	// FirstDelay is the wait before the first token; TokenDelay the wait
	// before each later event.
	FirstDelay, TokenDelay time.Duration
	// StreamInterval is the number of tokens per streamed event (default
	// 1), like SGLang's --stream-interval.
	StreamInterval int
	// NoCacheReport leaves cached_tokens out of the OpenAI usage (as
	// SGLang without --enable-cache-report does).
	NoCacheReport bool
	// NoOutputIDs leaves output_ids out of /generate events.
	NoOutputIDs bool
	// Model is the model name (default "fake-model").
	Model string
	// Vocab, when > 0, is the model's vocabulary: a prompt holding an id
	// outside [0, Vocab) is answered 400 "Prompt contains invalid tokens",
	// as llama-server answers it.
	Vocab int
	// ReportVocab reports Vocab in GET /v1/models as data[0].meta.n_vocab,
	// as llama-server does (SGLang and vLLM report no vocabulary).
	ReportVocab bool
	// Fault makes the server misbehave (the fault suite).
	Fault Fault
}

// Fault is how a Server misbehaves with generation requests. The zero
// value is a well-behaved server.
type Fault struct {
	// DropAfter, when > 0, closes a keep-alive connection, answering
	// nothing, when a request comes on it after DropAfter answered ones:
	// what a client meets when the server closed the connection a moment
	// before (llama-server closes it after every stream: DropAfter 1).
	DropAfter int
	// IdleTimeout closes connections idle that long (uvicorn and
	// cpp-httplib: 5 s).
	IdleTimeout time.Duration
	// Status, when non-zero, answers every Every-th generation request
	// (every one if Every <= 1) with that HTTP status and a JSON error,
	// with RetryAfter as the Retry-After header when it is not empty.
	Status, Every int
	RetryAfter    string
	// CutAfter, when > 0, aborts the connection after that many events.
	CutAfter int
	// Malformed, when not empty, is sent as a line of its own after the
	// first event.
	Malformed string
	// StallHeaders holds the response (headers included) that long;
	// StallStream stalls that long after the first event.
	StallHeaders, StallStream time.Duration
	// HugeEvent, when > 0, sends after the first event one data line of
	// that many bytes.
	HugeEvent int
}

// Server is the fake server. Close it when done.
type Server struct {
	*httptest.Server
	cfg Config

	mu     sync.Mutex
	cache  map[uint64]struct{} // rolling hashes of cached page-aligned prefixes
	prompt []int               // prompt lengths seen, in arrival order

	requests    atomic.Int64
	generations atomic.Int64 // generation requests arrived, faulty ones included
	dropped     atomic.Int64
	flushes     atomic.Int64
	inFlight    atomic.Int64
	maxIn       atomic.Int64
}

// NewServer starts a server on a loopback port.
func NewServer(cfg Config) *Server {
	if cfg.PageSize <= 0 {
		cfg.PageSize = 1
	}
	if cfg.StreamInterval <= 0 {
		cfg.StreamInterval = 1
	}
	if cfg.Model == "" {
		cfg.Model = "fake-model"
	}
	s := &Server{cfg: cfg, cache: map[uint64]struct{}{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /generate", s.faulty(s.generate))
	mux.HandleFunc("POST /v1/completions", s.faulty(s.completions))
	mux.HandleFunc("POST /v1/chat/completions", s.faulty(s.completions))
	mux.HandleFunc("/flush_cache", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		clear(s.cache)
		s.mu.Unlock()
		s.flushes.Add(1)
		fmt.Fprintln(w, "Cache flushed.")
	})
	info := func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"model_path":%q,"page_size":%d,"version":"fake"}`, cfg.Model, cfg.PageSize)
	}
	mux.HandleFunc("GET /server_info", info)
	mux.HandleFunc("GET /get_server_info", info)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		meta := ""
		if cfg.ReportVocab {
			meta = fmt.Sprintf(`,"meta":{"vocab_type":2,"n_vocab":%d,"n_ctx":8192}`, cfg.Vocab)
		}
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","owned_by":"kvsim-fake"%s}]}`, cfg.Model, meta)
	})
	s.Server = httptest.NewUnstartedServer(mux)
	s.Server.Config.IdleTimeout = cfg.Fault.IdleTimeout
	s.Server.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, new(atomic.Int64))
	}
	s.Server.Start()
	return s
}

// connKey keys a connection's count of generation requests.
type connKey struct{}

// faulty wraps a generation handler with the configured faults.
func (s *Server) faulty(h http.HandlerFunc) http.HandlerFunc {
	f := s.cfg.Fault
	return func(w http.ResponseWriter, r *http.Request) {
		// Read the body first: only then does net/http notice a client
		// that goes away (and cancel r.Context(), which ends the stalls).
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		n := s.generations.Add(1)
		if f.DropAfter > 0 {
			if c, ok := r.Context().Value(connKey{}).(*atomic.Int64); ok && c.Add(1) > int64(f.DropAfter) {
				s.dropped.Add(1)
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					conn.Close()
				}
				return
			}
		}
		sleep(r, f.StallHeaders)
		if f.Status != 0 && (f.Every <= 1 || n%int64(f.Every) == 0) {
			io.Copy(io.Discard, r.Body)
			if f.RetryAfter != "" {
				w.Header().Set("Retry-After", f.RetryAfter)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(f.Status)
			fmt.Fprintf(w, `{"error":{"code":%d,"message":"fault: status %d"}}`, f.Status, f.Status)
			return
		}
		h(w, r)
	}
}

// afterEvent applies the mid-stream faults after event k (1-based) was
// sent; it returns false when the handler must stop.
func (s *Server) afterEvent(w http.ResponseWriter, r *http.Request, k int) bool {
	f := s.cfg.Fault
	fl := w.(http.Flusher)
	if k == 1 {
		if f.Malformed != "" {
			fmt.Fprintf(w, "%s\n\n", f.Malformed)
			fl.Flush()
		}
		if f.HugeEvent > 0 {
			io.WriteString(w, "data: {\"text\":\"")
			chunk := strings.Repeat("x", 64<<10)
			for left := f.HugeEvent; left > 0 && r.Context().Err() == nil; left -= len(chunk) {
				if _, err := io.WriteString(w, chunk[:min(len(chunk), left)]); err != nil {
					return false
				}
			}
			io.WriteString(w, "\"}\n\n")
			fl.Flush()
		}
		sleep(r, f.StallStream)
	}
	if f.CutAfter > 0 && k >= f.CutAfter {
		panic(http.ErrAbortHandler)
	}
	return r.Context().Err() == nil
}

// Dropped returns the number of requests dropped by Fault.DropAfter.
func (s *Server) Dropped() int64 { return s.dropped.Load() }

// Requests returns the number of generation requests received.
func (s *Server) Requests() int64 { return s.requests.Load() }

// Flushes returns the number of /flush_cache calls.
func (s *Server) Flushes() int64 { return s.flushes.Load() }

// MaxInFlight returns the largest number of generation requests that were
// being served at once.
func (s *Server) MaxInFlight() int64 { return s.maxIn.Load() }

// PromptLens returns the prompt lengths received, in arrival order.
func (s *Server) PromptLens() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.prompt...)
}

const hashMul = 1099511628211

// admit returns the cached prefix length of prompt, and records prompt +
// output[:len-1] in the cache.
func (s *Server) admit(prompt, output []int) int {
	ps := s.cfg.PageSize
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prompt = append(s.prompt, len(prompt))
	var h uint64 = 14695981039346656037
	cached := 0
	for i, t := range prompt {
		h = h*hashMul + uint64(t) + 1
		if (i+1)%ps == 0 {
			if _, ok := s.cache[h]; !ok {
				break
			}
			cached = i + 1
		}
	}
	seq := append(append([]int(nil), prompt...), output...)
	seq = seq[:len(seq)-1]
	h = 14695981039346656037
	for i, t := range seq {
		h = h*hashMul + uint64(t) + 1
		if (i+1)%ps == 0 {
			s.cache[h] = struct{}{}
		}
	}
	return cached
}

// invalidTokens answers 400 as llama-server does when prompt holds an id
// outside the vocabulary, and reports whether it did.
func (s *Server) invalidTokens(w http.ResponseWriter, prompt []int) bool {
	if s.cfg.Vocab <= 0 {
		return false
	}
	for _, t := range prompt {
		if t < 0 || t >= s.cfg.Vocab {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"code":400,"message":"Prompt contains invalid tokens","type":"invalid_request_error"}}`)
			return true
		}
	}
	return false
}

// startStream answers a generation request for n tokens of prompt: it
// refuses a prompt with invalid tokens (ok false, answered), or admits it
// and starts an event stream, returning the output tokens, how many
// prompt tokens were cached and the stream's flusher.
func (s *Server) startStream(w http.ResponseWriter, prompt []int, n int) (out []int, cached int, fl http.Flusher, ok bool) {
	if s.invalidTokens(w, prompt) {
		return nil, 0, nil, false
	}
	out = outputFor(prompt, n)
	cached = s.admit(prompt, out)
	w.Header().Set("Content-Type", "text/event-stream")
	return out, cached, w.(http.Flusher), true
}

// waitToken sleeps until output token k is due (FirstDelay for the first,
// TokenDelay for the others) and reports whether the client is still
// there.
func (s *Server) waitToken(r *http.Request, k int) bool {
	d := s.cfg.TokenDelay
	if k == 0 {
		d = s.cfg.FirstDelay
	}
	sleep(r, d)
	return r.Context().Err() == nil
}

// outputFor returns n output tokens determined by the prompt.
func outputFor(prompt []int, n int) []int {
	f := fnv.New64a()
	for _, t := range prompt {
		f.Write([]byte{byte(t), byte(t >> 8), byte(t >> 16), byte(t >> 24)})
	}
	h := f.Sum64()
	out := make([]int, n)
	for i := range out {
		h ^= h << 13
		h ^= h >> 7
		h ^= h << 17
		out[i] = 1000 + int(h%29000)
	}
	return out
}

func (s *Server) enter() func() {
	s.requests.Add(1)
	n := s.inFlight.Add(1)
	for {
		m := s.maxIn.Load()
		if n <= m || s.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { s.inFlight.Add(-1) }
}

type generateReq struct {
	InputIDs       []int  `json:"input_ids"`
	Text           string `json:"text"`
	SamplingParams struct {
		MaxNewTokens int  `json:"max_new_tokens"`
		IgnoreEOS    bool `json:"ignore_eos"`
	} `json:"sampling_params"`
	Stream bool `json:"stream"`
}

func (s *Server) generate(w http.ResponseWriter, r *http.Request) {
	defer s.enter()()
	req, ok := decodeBody[generateReq](w, r)
	if !ok {
		return
	}
	prompt := req.InputIDs
	if prompt == nil {
		prompt = tokenizeWords(req.Text)
	}
	n := req.SamplingParams.MaxNewTokens
	if len(prompt) == 0 || n <= 0 {
		http.Error(w, `{"error":{"message":"empty prompt or max_new_tokens <= 0"}}`, http.StatusBadRequest)
		return
	}
	out, cached, fl, ok := s.startStream(w, prompt, n)
	if !ok {
		return
	}
	var text strings.Builder
	type meta struct {
		ID               string `json:"id"`
		PromptTokens     int    `json:"prompt_tokens"`
		CompletionTokens int    `json:"completion_tokens"`
		CachedTokens     int    `json:"cached_tokens"`
		FinishReason     any    `json:"finish_reason"`
	}
	type event struct {
		Text      string `json:"text"`
		OutputIDs []int  `json:"output_ids,omitempty"`
		MetaInfo  meta   `json:"meta_info"`
	}
	for k := 0; k < n; {
		if !s.waitToken(r, k) {
			return
		}
		step := min(s.cfg.StreamInterval, n-k)
		for _, t := range out[k : k+step] {
			text.WriteString(" w")
			text.WriteString(fmt.Sprint(t))
		}
		k += step
		ev := event{Text: text.String(), MetaInfo: meta{ID: "x", PromptTokens: len(prompt), CompletionTokens: k, CachedTokens: cached}}
		if !s.cfg.NoOutputIDs {
			ev.OutputIDs = out[:k]
		}
		if k == n {
			ev.MetaInfo.FinishReason = map[string]any{"type": "length", "length": n}
		}
		b, err := json.Marshal(ev)
		if err != nil {
			panic("replaytest: " + err.Error())
		}
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
		if !s.afterEvent(w, r, k/s.cfg.StreamInterval+min(1, k%s.cfg.StreamInterval)) {
			return
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

type completionReq struct {
	Model    string `json:"model"`
	Prompt   []int  `json:"prompt"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens     int  `json:"max_tokens"`
	Stream        bool `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	defer s.enter()()
	req, ok := decodeBody[completionReq](w, r)
	if !ok {
		return
	}
	chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
	prompt := req.Prompt
	if chat {
		prompt = nil
		for _, m := range req.Messages {
			prompt = append(prompt, tokenizeWords(m.Content)...)
		}
	}
	n := req.MaxTokens
	if len(prompt) == 0 || n <= 0 {
		http.Error(w, `{"error":{"message":"empty prompt or max_tokens <= 0"}}`, http.StatusBadRequest)
		return
	}
	if req.Model != s.cfg.Model {
		http.Error(w, `{"error":{"message":"unknown model"}}`, http.StatusNotFound)
		return
	}
	out, cached, fl, ok := s.startStream(w, prompt, n)
	if !ok {
		return
	}
	for k := 0; k < n; k++ {
		if !s.waitToken(r, k) {
			return
		}
		fin := "null"
		if k == n-1 {
			fin = `"length"`
		}
		piece := fmt.Sprintf("%q", fmt.Sprintf(" w%d", out[k]))
		if chat {
			fmt.Fprintf(w, `data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%s},"finish_reason":%s}]}`+"\n\n", piece, fin)
		} else {
			fmt.Fprintf(w, `data: {"object":"text_completion","choices":[{"index":0,"text":%s,"finish_reason":%s}]}`+"\n\n", piece, fin)
		}
		fl.Flush()
		if !s.afterEvent(w, r, k+1) {
			return
		}
	}
	if req.StreamOptions.IncludeUsage {
		details := ""
		if !s.cfg.NoCacheReport {
			details = fmt.Sprintf(`,"prompt_tokens_details":{"cached_tokens":%d}`, cached)
		}
		fmt.Fprintf(w, `data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d%s}}`+"\n\n",
			len(prompt), n, len(prompt)+n, details)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// tokenizeWords is the fake tokenizer of text prompts: one token per
// whitespace-separated word, the word's FNV hash in [1000, 30000).
func tokenizeWords(s string) []int {
	var out []int
	for _, w := range strings.Fields(s) {
		f := fnv.New32a()
		f.Write([]byte(w))
		out = append(out, 1000+int(f.Sum32()%29000))
	}
	return out
}

func sleep(r *http.Request, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

// decodeBody reads the whole body (only then does net/http notice a client
// that goes away) and decodes it, or answers 400 Bad Request with the
// error and reports false.
func decodeBody[T any](w http.ResponseWriter, r *http.Request) (T, bool) {
	var v T
	b, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(b, &v)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return v, false
	}
	return v, true
}
