package replay

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvsim/kvsim/internal/enum"
)

// API selects the HTTP interface an HTTPTarget speaks.
type API int

const (
	// APISGLang is SGLang's native POST /generate with input_ids.
	APISGLang API = 1 + iota
	// APIOpenAI is the OpenAI-compatible POST /v1/completions with the
	// prompt as a token-id array (SGLang, vLLM, lmdeploy).
	APIOpenAI
	// APIOpenAIChat is POST /v1/chat/completions. Chat takes text, so the
	// prompt's token ids are rendered as words (see wordsText).
	APIOpenAIChat
)

var apiNames = enum.New[API]("API", "api", "sglang", "openai", "openai-chat")

// String returns the API's command-line name.
func (a API) String() string { return apiNames.String(a) }

// ParseAPI parses "sglang", "openai" or "openai-chat".
func ParseAPI(s string) (API, error) {
	if a, ok := apiNames.Lookup(s); ok {
		return a, nil
	}
	return 0, fmt.Errorf("expected %s, found %q", apiNames.List(), s)
}

// HTTPConfig configures an HTTPTarget.
type HTTPConfig struct {
	// BaseURL is the server's root, e.g. http://127.0.0.1:30000.
	BaseURL string
	// API is the interface to speak (default APISGLang).
	API API
	// Model is the model name sent to the OpenAI APIs; "" means the one
	// Info discovers from /v1/models (or none).
	Model string
	// APIKey is sent as a Bearer token when not empty.
	APIKey string
	// Extra holds a JSON object whose fields are added to every request
	// body; a field with the name of one kvsim sets replaces it (like the
	// benchmarks' --extra-request-body).
	Extra json.RawMessage
	// ChatText must be "words" for APIOpenAIChat: it acknowledges that the
	// prompt is sent as words standing for the token ids (wordsText).
	ChatText string
	// MaxConns is the number of connections kept open to the server
	// (default 1024; it should be at least the replay's concurrency).
	MaxConns int
	// Client replaces the tuned client (tests).
	Client *http.Client
}

// HTTPTarget is a Target that talks to a real server over HTTP, streaming
// every response. It is safe for concurrent use.
type HTTPTarget struct {
	cfg    HTTPConfig
	base   string
	client *http.Client
	fresh  *http.Client // for a resend after a stale connection: never reuses one
	clock  Clock
	extra  []extraField
	path   string

	mu    sync.Mutex
	model string
}

type extraField struct {
	key string
	val json.RawMessage
}

var _ Target = (*HTTPTarget)(nil)
var _ Flusher = (*HTTPTarget)(nil)
var _ Describer = (*HTTPTarget)(nil)

// NewHTTPTarget checks cfg and builds the client. It does not contact the
// server.
func NewHTTPTarget(cfg HTTPConfig, clock Clock) (*HTTPTarget, error) {
	if cfg.API == 0 {
		cfg.API = APISGLang
	}
	var errs []error
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("target: expected a base URL like http://127.0.0.1:30000, found %q", cfg.BaseURL))
	}
	if !apiNames.Valid(cfg.API) {
		errs = append(errs, fmt.Errorf("api: must be %s (got %d)", apiNames.List(), int(cfg.API)))
	}
	if cfg.API == APIOpenAIChat && cfg.ChatText != "words" {
		errs = append(errs, errors.New("api openai-chat: chat takes text and kvsim has no tokenizer; choose --chat-text words to send each token id as a word (see docs/replay.md)"))
	}
	if cfg.API != APIOpenAIChat && cfg.ChatText != "" {
		errs = append(errs, fmt.Errorf("chat-text: only for api openai-chat (api is %s)", cfg.API))
	}
	var extra []extraField
	if len(cfg.Extra) > 0 {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(cfg.Extra, &m); err != nil {
			errs = append(errs, fmt.Errorf("extra-request-body: expected a JSON object: %w", err))
		}
		for k, v := range m {
			extra = append(extra, extraField{k, v})
		}
		sort.Slice(extra, func(i, j int) bool { return extra[i].key < extra[j].key })
	}
	if cfg.MaxConns < 0 {
		errs = append(errs, fmt.Errorf("max-conns: must be >= 0 (got %d)", cfg.MaxConns))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 1024
	}
	t := &HTTPTarget{cfg: cfg, base: strings.TrimRight(cfg.BaseURL, "/"), clock: clock, extra: extra, model: cfg.Model}
	t.client, t.fresh = cfg.Client, cfg.Client
	if t.client == nil {
		t.client = &http.Client{Transport: newTransport(cfg.MaxConns)}
		t.fresh = &http.Client{Transport: freshTransport()}
	}
	switch cfg.API {
	case APISGLang:
		t.path = "/generate"
	case APIOpenAI:
		t.path = "/v1/completions"
	case APIOpenAIChat:
		t.path = "/v1/chat/completions"
	}
	return t, nil
}

// newTransport returns a transport for many concurrent long streams: one
// HTTP/1.1 connection per stream (HTTP/2 would multiplex the streams over
// one connection and serialise them behind its flow control), enough idle
// connections kept to reuse them, no transparent gzip (it would buffer
// the event stream), no proxy from the environment (benchmarks talk to
// the server directly).
func newTransport(maxConns int) *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		IdleConnTimeout:     idleConnTimeout,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
		TLSHandshakeTimeout: 10 * time.Second,
		WriteBufferSize:     32 << 10,
		ReadBufferSize:      32 << 10,
	}
}

// freshTransport opens a new connection for every request (a resend after
// a stale connection, see doRetrying).
func freshTransport() *http.Transport {
	tr := newTransport(1)
	tr.DisableKeepAlives = true
	return tr
}

// CloseIdle closes the idle connections of the target's client.
func (t *HTTPTarget) CloseIdle() { t.client.CloseIdleConnections() }

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}
var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// body writes the request body for req into b.
func (t *HTTPTarget) body(b *bytes.Buffer, req *Request) {
	var scratch [24]byte
	has := func(k string) bool {
		for _, e := range t.extra {
			if e.key == k {
				return true
			}
		}
		return false
	}
	sep := func() {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
	}
	key := func(k string) bool {
		if has(k) {
			return false
		}
		sep()
		b.WriteByte('"')
		b.WriteString(k)
		b.WriteString(`":`)
		return true
	}
	ids := func() {
		b.WriteByte('[')
		for i, x := range req.Tokens {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(strconv.AppendInt(scratch[:0], int64(x), 10))
		}
		b.WriteByte(']')
	}
	float := func(x float64) { b.Write(strconv.AppendFloat(scratch[:0], x, 'g', -1, 64)) }
	integer := func(x int) { b.Write(strconv.AppendInt(scratch[:0], int64(x), 10)) }
	b.WriteByte('{')
	model := t.Model()
	switch t.cfg.API {
	case APISGLang:
		if key("input_ids") {
			ids()
		}
		if key("sampling_params") {
			b.WriteString(`{"temperature":`)
			float(req.Temperature)
			b.WriteString(`,"max_new_tokens":`)
			integer(req.MaxNewTokens)
			b.WriteString(`,"ignore_eos":`)
			b.WriteString(strconv.FormatBool(req.IgnoreEOS))
			if req.TopP != 0 {
				b.WriteString(`,"top_p":`)
				float(req.TopP)
			}
			if req.TopK != 0 {
				b.WriteString(`,"top_k":`)
				integer(req.TopK)
			}
			b.WriteByte('}')
		}
	case APIOpenAI, APIOpenAIChat:
		if model != "" && key("model") {
			appendJSONString(b, model)
		}
		if t.cfg.API == APIOpenAI {
			if key("prompt") {
				ids()
			}
		} else if key("messages") {
			b.WriteString(`[{"role":"user","content":`)
			appendJSONString(b, wordsText(req.Tokens))
			b.WriteString(`}]`)
		}
		if key("max_tokens") {
			integer(req.MaxNewTokens)
		}
		if key("temperature") {
			float(req.Temperature)
		}
		if req.TopP != 0 && key("top_p") {
			float(req.TopP)
		}
		if req.TopK != 0 && key("top_k") {
			integer(req.TopK)
		}
		if key("ignore_eos") {
			b.WriteString(strconv.FormatBool(req.IgnoreEOS))
		}
		if key("stream_options") {
			b.WriteString(`{"include_usage":true}`)
		}
	}
	if key("stream") {
		b.WriteString("true")
	}
	for _, e := range t.extra {
		sep()
		appendJSONString(b, e.key)
		b.WriteByte(':')
		b.Write(e.val)
	}
	b.WriteByte('}')
}

// Model returns the model name sent to the OpenAI APIs.
func (t *HTTPTarget) Model() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.model
}

func (t *HTTPTarget) newRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	hr, err := http.NewRequestWithContext(ctx, method, t.base+path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if t.cfg.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+t.cfg.APIKey)
	}
	return hr, nil
}

// SessionHeader is the HTTP header that carries a request's session
// ([Request.Session]) to the server or the load balancer in front of it.
const SessionHeader = "X-Session-Id"

// Submit implements Target.
func (t *HTTPTarget) Submit(ctx context.Context, req Request, sink Sink) (Response, error) {
	resp := Response{CachedTokens: -1}
	b := bufPool.Get().(*bytes.Buffer)
	b.Reset()
	defer bufPool.Put(b)
	t.body(b, &req)
	hres, retries, err := doRetrying(ctx, t.client, t.fresh, func(ctx context.Context) (*http.Request, error) {
		hr, err := t.newRequest(ctx, http.MethodPost, t.path, bytes.NewReader(b.Bytes()))
		if err != nil {
			return nil, &RequestError{Reason: "bad request", Err: err}
		}
		hr.Header.Set("Accept", "text/event-stream")
		if req.Session != "" {
			hr.Header.Set(SessionHeader, req.Session)
		}
		return hr, nil
	})
	resp.Retries = retries
	if err != nil {
		resp.End = t.clock.Now()
		var re *RequestError
		if errors.As(err, &re) {
			return resp, err
		}
		return resp, transportError(ctx, err)
	}
	defer hres.Body.Close()
	if hres.StatusCode != http.StatusOK {
		msg, rerr := io.ReadAll(io.LimitReader(hres.Body, 512))
		resp.End = t.clock.Now()
		detail := strings.TrimSpace(string(msg))
		if rerr != nil {
			detail += " (body cut: " + rerr.Error() + ")"
		}
		if ra := hres.Header.Get("Retry-After"); ra != "" {
			// Said, not obeyed: a replay keeps the trace's timing, and a
			// refused request is a result.
			detail += " (Retry-After: " + truncate(ra, 40) + ")"
		}
		return resp, &RequestError{Reason: "http " + strconv.Itoa(hres.StatusCode), Detail: detail}
	}
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(hres.Body)
	defer func() { br.Reset(nil); readerPool.Put(br) }()
	st := streamState{api: t.cfg.API}
	err = st.read(ctx, br, t.clock, sink, &resp)
	if err == nil {
		// Consume what follows [DONE] so that the connection is reused.
		if _, derr := io.Copy(io.Discard, io.LimitReader(br, 4096)); derr != nil {
			return resp, nil // the response is complete; a broken tail only costs the connection
		}
	}
	return resp, err
}

// transportError classifies an error of the HTTP round trip.
func transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return &RequestError{Reason: "canceled", Err: ctx.Err()}
	}
	var op *net.OpError
	if errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial") {
		return &RequestError{Reason: "connect", Err: err}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return &RequestError{Reason: "connection closed", Err: err}
	}
	return &RequestError{Reason: "transport", Err: err}
}

// Flush implements Flusher: POST /flush_cache (SGLang, either API), else
// POST /reset_prefix_cache (vLLM in development mode).
func (t *HTTPTarget) Flush(ctx context.Context) error {
	paths := []string{"/flush_cache"}
	if t.cfg.API != APISGLang {
		paths = append(paths, "/reset_prefix_cache")
	}
	for _, p := range paths {
		code, body, err := t.do(ctx, http.MethodPost, p)
		if err != nil {
			return fmt.Errorf("flush %s: %w", p, err)
		}
		switch {
		case code == http.StatusOK:
			return nil
		case code == http.StatusNotFound || code == http.StatusMethodNotAllowed:
			continue
		}
		return fmt.Errorf("flush %s: http %d: %s", p, code, truncate(strings.TrimSpace(string(body)), 200))
	}
	return fmt.Errorf("flush: %w (no /flush_cache or /reset_prefix_cache)", ErrNotSupported)
}

// Health checks GET /health.
func (t *HTTPTarget) Health(ctx context.Context) error {
	code, body, err := t.do(ctx, http.MethodGet, "/health")
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("health: http %d: %s", code, truncate(strings.TrimSpace(string(body)), 200))
	}
	return nil
}

// Info implements Describer: SGLang's GET /server_info (or the older
// /get_server_info) for the native API; GET /v1/models for the OpenAI
// ones, whose first model becomes the one sent when none was configured.
func (t *HTTPTarget) Info(ctx context.Context) (Info, error) {
	if t.cfg.API == APISGLang {
		for _, p := range []string{"/server_info", "/get_server_info"} {
			code, body, err := t.do(ctx, http.MethodGet, p)
			if err != nil {
				return Info{Server: "sglang"}, fmt.Errorf("server info: %w", err)
			}
			if code == http.StatusNotFound {
				continue
			}
			if code != http.StatusOK {
				return Info{Server: "sglang"}, fmt.Errorf("server info %s: http %d", p, code)
			}
			var si struct {
				ModelPath  string `json:"model_path"`
				ServedName string `json:"served_model_name"`
				PageSize   int    `json:"page_size"`
				Version    string `json:"version"`
			}
			if err := json.Unmarshal(body, &si); err != nil {
				return Info{Server: "sglang"}, fmt.Errorf("server info %s: %w", p, err)
			}
			return Info{Server: "sglang", Model: nameOr(si.ServedName, si.ModelPath), PageSize: si.PageSize, Raw: body}, nil
		}
		return Info{Server: "sglang"}, fmt.Errorf("server info: %w (no /server_info or /get_server_info)", ErrNotSupported)
	}
	code, body, err := t.do(ctx, http.MethodGet, "/v1/models")
	if err != nil {
		return Info{Server: "openai"}, fmt.Errorf("list models: %w", err)
	}
	if code != http.StatusOK {
		return Info{Server: "openai"}, fmt.Errorf("list models: http %d", code)
	}
	var ml struct {
		Data []struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
			Meta    *struct {
				NVocab int `json:"n_vocab"`
			} `json:"meta"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ml); err != nil {
		return Info{Server: "openai"}, fmt.Errorf("list models: %w", err)
	}
	info := Info{Server: "openai", Raw: body}
	if len(ml.Data) > 0 {
		info.Model = ml.Data[0].ID
		info.Server = nameOr(ml.Data[0].OwnedBy, "openai")
		if m := ml.Data[0].Meta; m != nil && m.NVocab > 0 {
			info.VocabSize = m.NVocab
		}
	}
	t.mu.Lock()
	if t.model == "" {
		t.model = info.Model
	}
	info.Model = nameOr(t.model, info.Model)
	t.mu.Unlock()
	return info, nil
}

func nameOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// do sends a small control request and returns its status and body (at
// most 1 MiB).
func (t *HTTPTarget) do(ctx context.Context, method, path string) (int, []byte, error) {
	hr, err := t.newRequest(ctx, method, path, nil)
	if err != nil {
		return 0, nil, err
	}
	res, err := t.client.Do(hr)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return res.StatusCode, nil, err
	}
	return res.StatusCode, body, nil
}

// appendJSONString writes s as a JSON string (invalid UTF-8 replaced).
func appendJSONString(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[r>>4])
			b.WriteByte(hex[r&15])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}
