package replay

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvsim/kvsim/traces"
)

// CaptureConfig configures a Proxy.
type CaptureConfig struct {
	// Upstream is the server's base URL, e.g. http://127.0.0.1:30000.
	Upstream string
	// Client replaces the tuned HTTP client (tests).
	Client *http.Client
	// Clock is the time source of arrival times and measurements (default
	// WallClock).
	Clock Clock
	// MaxBodyBytes bounds a request body (default 64 MiB).
	MaxBodyBytes int64
	// TextBytesPerToken is how many bytes of a text prompt the hashes of
	// a text prompt's blocks take per token (default 4, about what the
	// usual BPE tokenizers give on English; see textBlocks).
	TextBytesPerToken float64
}

// TextBlockSize is the block size, in tokens, of the hashes capture
// records for text prompts.
const TextBlockSize = 16

// Bounds of CaptureConfig.TextBytesPerToken: a block of 1 to 16384 bytes.
const (
	MinTextBytesPerToken = 1.0 / TextBlockSize
	MaxTextBytesPerToken = 1024.0
)

// textBlocks returns the prefix hashes of a text prompt of inputLen tokens
// (the server's count) for a hash trace of TextBlockSize-token blocks,
// full blocks only: block k stands for the text's bytes up to (k+1) *
// TextBlockSize * bytesPerToken, chained (each hash covers the previous
// one), so prompts whose texts share a prefix share the blocks that prefix
// covers, whatever their lengths. The byte-per-token rate is fixed, not
// the prompt's own: a rate per prompt would shift block boundaries between
// prompts of different lengths and lose the sharing. Blocks past the
// text's end hash nothing more (they stay distinct by the chain). nil for
// a prompt under one block, without text, over traces.MaxSynthTokens
// tokens (no replay sends it), or with a rate outside
// [MinTextBytesPerToken, MaxTextBytesPerToken].
func textBlocks(text []byte, inputLen int, bytesPerToken float64) []uint64 {
	n := inputLen / TextBlockSize
	if n <= 0 || len(text) == 0 || inputLen > traces.MaxSynthTokens ||
		!(bytesPerToken >= MinTextBytesPerToken && bytesPerToken <= MaxTextBytesPerToken) {
		return nil
	}
	per := int(math.Round(TextBlockSize * bytesPerToken))
	out := make([]uint64, n)
	var prev [8]byte
	lo := 0
	h := fnv.New64a()
	for k := range n {
		hi := lo + min(per, len(text)-lo)
		h.Reset()
		h.Write([]byte("kvsim text block"))
		h.Write(prev[:])
		h.Write(text[lo:hi])
		out[k] = h.Sum64()
		binary.LittleEndian.PutUint64(prev[:], out[k])
		lo = hi
	}
	return out
}

// Proxy is a recording reverse proxy: it forwards every request to the
// upstream server unchanged, streams the response back as it comes (one
// flush per read from the upstream, so per SSE event), and writes each
// generation request (SGLang /generate, OpenAI /v1/completions and
// /v1/chat/completions) to a kvsim trace: arrival time (ns since the
// proxy started), prompt token ids (for a text prompt, the length the
// server reported and the hashes of the text's blocks, textBlocks: a hash
// trace whose shared prefixes are the texts'), sampling parameters, output length and ids (when
// SGLang returned them), and Observed: TTFT, ITL, E2E and cached tokens
// parsed from the stream exactly as a replay measures them, and the status
// ("ok" or the failure reason, as a replay names it).
//
// Records are written in arrival order, each as soon as it and every
// earlier one have finished, and flushed at once, so the file is a valid
// trace at every moment. A client that goes away cancels the upstream
// request (recorded as "canceled"); an upstream that cuts its stream cuts
// the client's the same way (recorded as "stream cut"); an upstream that
// cannot be reached gets the client a 502 (recorded as "connect").
type Proxy struct {
	cfg    CaptureConfig
	base   string
	client *http.Client
	fresh  *http.Client // resends after a stale connection
	clock  Clock
	start  time.Time

	mu      sync.Mutex
	w       *traces.Writer
	seq     int
	pending []*captured // in arrival order, not yet written
	written int
	closed  bool
	err     error
	failed  chan struct{} // closed when err is first set
	lost    []Unrecorded  // finished after err, in arrival order
}

// Unrecorded is a generation request the proxy forwarded but did not
// record, because the trace could no longer be written (Err): the client
// may have had its answer, and the trace lacks it.
type Unrecorded struct {
	// ID is the id its record would have had: records are numbered in
	// arrival order, so it falls among (or after) the ids of the trace.
	ID string
	// Arrival is its arrival_ns: ns since the proxy started.
	Arrival int64
	// Kind is generate, completions or chat.
	Kind string
	// Status is its record's observed status: "ok" when the client got
	// the whole answer, else why not ("http 503", "interrupted", ...).
	Status string
}

// captured is one recorded request.
type captured struct {
	rec  traces.Record
	done bool
}

// NewProxy checks cfg, asks the upstream what it is (GET /server_info,
// else /v1/models; a failure only leaves the header's server empty) and
// writes the trace header to out.
func NewProxy(ctx context.Context, cfg CaptureConfig, out io.Writer) (*Proxy, error) {
	u, err := url.Parse(cfg.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("upstream: expected a base URL like http://127.0.0.1:30000, found %q", cfg.Upstream)
	}
	if cfg.Clock == nil {
		cfg.Clock = WallClock{}
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 64 << 20
	}
	if cfg.TextBytesPerToken == 0 {
		cfg.TextBytesPerToken = 4
	}
	if !(cfg.TextBytesPerToken >= MinTextBytesPerToken && cfg.TextBytesPerToken <= MaxTextBytesPerToken) {
		return nil, fmt.Errorf("text bytes per token: expected a number from %g to %g, found %v", MinTextBytesPerToken, MaxTextBytesPerToken, cfg.TextBytesPerToken)
	}
	p := &Proxy{cfg: cfg, base: strings.TrimRight(cfg.Upstream, "/"), client: cfg.Client, clock: cfg.Clock, failed: make(chan struct{})}
	p.fresh = p.client
	if p.client == nil {
		p.client = &http.Client{Transport: newTransport(1024)}
		p.fresh = &http.Client{Transport: freshTransport()}
	}
	server, ver := p.probe(ctx)
	h := traces.Header{
		Format: "kvsim", Source: "kvsim capture of " + p.base, Server: server, ServerVersion: ver,
		Note: "captured by kvsim capture: arrival_ns from the proxy's start; observed holds what the proxy measured",
	}
	w, err := traces.NewWriter(out, h)
	if err != nil {
		return nil, err
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	p.w = w
	p.start = p.clock.Now()
	return p, nil
}

// probe names the upstream server and its version.
func (p *Proxy) probe(ctx context.Context) (server, version string) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	get := func(path string) []byte {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
		if err != nil {
			return nil
		}
		res, err := p.client.Do(req)
		if err != nil {
			return nil
		}
		defer res.Body.Close()
		b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		if err != nil || res.StatusCode != http.StatusOK {
			return nil
		}
		return b
	}
	var si struct {
		Version string `json:"version"`
	}
	for _, path := range []string{"/server_info", "/get_server_info"} {
		if b := get(path); b != nil && json.Unmarshal(b, &si) == nil {
			return "sglang", si.Version
		}
	}
	var ml struct {
		Data []struct {
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	if b := get("/v1/models"); b != nil && json.Unmarshal(b, &ml) == nil && len(ml.Data) > 0 {
		return nameOr(ml.Data[0].OwnedBy, "openai"), ""
	}
	return "", ""
}

// Failed is closed as soon as a record cannot be written (a full disk, an
// I/O error). From then on the proxy refuses every new request with 503
// and a reason rather than forward what it cannot record; Err says why,
// and Unrecorded names the requests forwarded that the trace lacks.
func (p *Proxy) Failed() <-chan struct{} { return p.failed }

// Err returns the first error writing the trace, if any.
func (p *Proxy) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// InFlight returns the number of generation requests being forwarded.
func (p *Proxy) InFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.pending {
		if !c.done {
			n++
		}
	}
	return n
}

// Records returns the number of records written so far.
func (p *Proxy) Records() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.written
}

// Unrecorded returns, in arrival order, the generation requests forwarded
// and finished (or recorded as interrupted by Close) that were not
// recorded because the trace could not be written: the record whose
// write failed, and every one after it. Requests are forwarded until the
// failure is known, and a record waits for every earlier request to
// finish, so a client can have had several answers that no record holds;
// these name them.
func (p *Proxy) Unrecorded() []Unrecorded {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lost)
}

// Close writes the records still pending (requests in flight are recorded
// with status "interrupted") and flushes. Later requests are forwarded but
// not recorded.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.pending {
		if !c.done {
			if c.rec.InputLen == 0 { // the body was not read yet
				c.rec.InputLen = 1
			}
			c.rec.Observed = &traces.Observed{CachedTokens: -1, Status: "interrupted"}
			c.done = true
		}
	}
	p.writeReady()
	p.closed = true
	return p.err
}

// enter registers a request arriving now.
func (p *Proxy) enter() (*captured, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	p.seq++
	c := &captured{rec: traces.Record{ID: strconv.Itoa(p.seq), Arrival: max(int64(now.Sub(p.start)), 0)}}
	if !p.closed {
		p.pending = append(p.pending, c)
	}
	return c, now
}

// leave marks c finished and writes what can be written.
func (p *Proxy) leave(c *captured) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.done = true
	p.writeReady()
}

// writeReady writes the finished records at the head of the queue (mu
// held), flushing after each.
func (p *Proxy) writeReady() {
	k := 0
	for k < len(p.pending) && p.pending[k].done {
		rec := &p.pending[k].rec
		if p.err == nil {
			err := p.w.Write(*rec)
			if err == nil {
				err = p.w.Flush()
			}
			if err != nil {
				p.err = err
				close(p.failed)
			} else {
				p.written++
			}
		}
		if p.err != nil {
			u := Unrecorded{ID: rec.ID, Arrival: rec.Arrival, Kind: rec.Kind}
			if rec.Observed != nil {
				u.Status = rec.Observed.Status
			}
			p.lost = append(p.lost, u)
		}
		p.pending[k] = nil
		k++
	}
	p.pending = p.pending[k:]
}

// hop-by-hop headers are not forwarded (RFC 9110 7.6.1).
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		if hopHeaders[k] {
			continue
		}
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

// captureAPI says which API a path belongs to (0: not a generation).
func captureAPI(path string) API {
	switch path {
	case "/generate":
		return APISGLang
	case "/v1/completions":
		return APIOpenAI
	case "/v1/chat/completions":
		return APIOpenAIChat
	}
	return 0
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := p.Err(); err != nil {
		w.Header().Set("Connection", "close")
		http.Error(w, "kvsim capture: not recording, so not forwarding: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	api := API(0)
	if r.Method == http.MethodPost {
		api = captureAPI(r.URL.Path)
	}
	var c *captured
	var start time.Time
	if api != 0 {
		c, start = p.enter()
		defer p.leave(c)
	}
	body, err := readBody(w, r, p.cfg.MaxBodyBytes)
	if err != nil {
		if c != nil {
			p.mu.Lock()
			if !c.done {
				c.rec.InputLen, c.rec.Observed = 1, &traces.Observed{CachedTokens: -1, Status: "bad request"}
			}
			p.mu.Unlock()
		}
		http.Error(w, "kvsim capture: reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var in capturedInput
	if c != nil {
		in = parseCaptured(api, body)
		resp := &Response{CachedTokens: -1}
		pr := p.prompt(&in, resp)
		p.mu.Lock()
		if !c.done {
			p.record(c, &in, pr, resp, &recorder{start: start}, &RequestError{Reason: "interrupted"}, start)
		}
		p.mu.Unlock()
	}
	// A request that meets a connection the upstream had closed is
	// resent once on a fresh one (doRetrying), as a replay does.
	res, retries, err := doRetrying(r.Context(), p.client, p.fresh, func(ctx context.Context) (*http.Request, error) {
		out, err := http.NewRequestWithContext(ctx, r.Method, p.base+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		copyHeaders(out.Header, r.Header)
		out.ContentLength = int64(len(body))
		return out, nil
	})
	if err != nil {
		rerr := transportError(r.Context(), err)
		if c != nil {
			p.finishRecord(c, &in, &Response{CachedTokens: -1, End: p.clock.Now(), Retries: retries}, &recorder{start: start}, rerr, start)
		}
		if r.Context().Err() == nil {
			http.Error(w, "kvsim capture: upstream: "+err.Error(), http.StatusBadGateway)
		}
		return
	}
	defer res.Body.Close()
	copyHeaders(w.Header(), res.Header)
	w.WriteHeader(res.StatusCode)
	var tap *streamTap
	if c != nil {
		tap = &streamTap{st: streamState{api: api}, resp: Response{CachedTokens: -1, Retries: retries}, rc: recorder{start: start}, status: res.StatusCode}
		tap.sse = strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream")
	}
	rerr := p.relay(r.Context(), w, res.Body, tap)
	if tap != nil {
		err := tap.finish(rerr, p.clock.Now())
		p.finishRecord(c, &in, &tap.resp, &tap.rc, err, start)
	}
	if rerr != nil && Reason(rerr) == "stream cut" {
		// Cut the client's stream as the upstream cut ours.
		panic(http.ErrAbortHandler)
	}
}

// relay copies the upstream's response body to the client as it comes,
// flushing each read, and feeds it to tap (if recording). It returns why
// it stopped early: the client gone, or the upstream's stream cut.
func (p *Proxy) relay(ctx context.Context, w http.ResponseWriter, body io.Reader, tap *streamTap) error {
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if tap != nil {
				tap.feed(buf[:n], p.clock.Now())
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return &RequestError{Reason: "client gone", Err: werr}
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			rerr := transportError(ctx, err)
			if Reason(rerr) == "connection closed" || Reason(rerr) == "transport" {
				rerr = &RequestError{Reason: "stream cut", Err: err}
			}
			return rerr
		}
	}
}

// capturedInput is what the proxy read from a generation request.
type capturedInput struct {
	tokens    []int32
	text      []byte // a text prompt (chat: roles and contents)
	textWords int
	maxNew    int
	model     string
	kind      string
	sampling  *traces.Sampling
	bad       string
}

// parseCaptured reads the fields a trace records from a request body.
func parseCaptured(api API, body []byte) capturedInput {
	var b struct {
		Text     json.RawMessage `json:"text"`
		InputIDs json.RawMessage `json:"input_ids"`
		Prompt   json.RawMessage `json:"prompt"`
		Model    string          `json:"model"`
		Sampling samplingFields  `json:"sampling_params"`
		Messages []chatMessage   `json:"messages"`
		samplingFields
		MaxTokens           *int `json:"max_tokens"`
		MaxCompletionTokens *int `json:"max_completion_tokens"`
	}
	in := capturedInput{kind: map[API]string{APISGLang: "generate", APIOpenAI: "completions", APIOpenAIChat: "chat"}[api]}
	if err := json.Unmarshal(body, &b); err != nil {
		in.bad = err.Error()
		return in
	}
	in.model = b.Model
	sf := b.samplingFields
	switch api {
	case APISGLang:
		sf = b.Sampling
		if ids, err := tokenIDs(b.InputIDs, "input_ids"); err == nil && len(ids) > 0 {
			in.tokens = ids
		} else {
			in.words(b.Text)
		}
	case APIOpenAI:
		if ids, err := tokenIDs(b.Prompt, "prompt"); err == nil && len(ids) > 0 {
			in.tokens = ids
		} else {
			in.words(b.Prompt)
		}
	case APIOpenAIChat:
		in.chat(b.Messages)
	}
	switch {
	case sf.MaxNewTokens != nil:
		in.maxNew = *sf.MaxNewTokens
	case b.MaxTokens != nil:
		in.maxNew = *b.MaxTokens
	case b.MaxCompletionTokens != nil:
		in.maxNew = *b.MaxCompletionTokens
	}
	in.sampling = sf.sampling()
	return in
}

type samplingFields struct {
	MaxNewTokens *int     `json:"max_new_tokens"`
	Temperature  *float64 `json:"temperature"`
	TopP         *float64 `json:"top_p"`
	TopK         *int     `json:"top_k"`
	IgnoreEOS    *bool    `json:"ignore_eos"`
}

// chatMessage is a message of a chat completion request.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// words reads a text prompt: a string, or a list of one string (a batch
// of one); a longer batch keeps its length only. The text is kept in
// place in the decoded body (jsonText) and its words counted without
// splitting it, so a large prompt costs its bytes once more, not a slice
// per word.
func (in *capturedInput) words(raw json.RawMessage) {
	s, ok := jsonText(raw)
	if !ok {
		var one []string
		if json.Unmarshal(raw, &one) != nil || len(one) != 1 {
			return
		}
		s = []byte(one[0])
	}
	in.textWords += countWords(s)
	in.text = s
}

// chat reads a chat request's messages.
func (in *capturedInput) chat(messages []chatMessage) {
	// The conversation as one text, each message its role and its
	// content, each length-prefixed, so that a shared history is a
	// shared prefix and nothing in a content reads as a boundary.
	// Content that is not text (an image part) goes in as its JSON,
	// so that conversations that differ only there differ.
	contents := make([][]byte, len(messages))
	size := 0
	for i, m := range messages {
		if t, err := messageText(m.Content); err == nil {
			in.textWords += countWords(t)
			contents[i] = t
		} else {
			contents[i] = m.Content
		}
		size += 2*binary.MaxVarintLen64 + len(m.Role) + len(contents[i])
	}
	text := make([]byte, 0, size) // one copy of the conversation
	part := func(b []byte) {
		text = binary.AppendUvarint(text, uint64(len(b)))
		text = append(text, b...)
	}
	for i, m := range messages {
		part([]byte(m.Role))
		part(contents[i])
	}
	in.text = text
}

// sampling returns the request's sampling parameters, or nil if it set
// none.
func (sf samplingFields) sampling() *traces.Sampling {
	if sf.Temperature == nil && sf.TopP == nil && sf.TopK == nil && sf.IgnoreEOS == nil {
		return nil
	}
	s := &traces.Sampling{}
	if sf.Temperature != nil {
		s.Temperature = *sf.Temperature
	}
	if sf.TopP != nil {
		s.TopP = *sf.TopP
	}
	if sf.TopK != nil {
		s.TopK = *sf.TopK
	}
	if sf.IgnoreEOS != nil {
		s.IgnoreEOS = *sf.IgnoreEOS
	}
	return s
}

// finishRecord fills c's record unless Close already wrote it.
func (p *Proxy) finishRecord(c *captured, in *capturedInput, resp *Response, rc *recorder, err error, start time.Time) {
	pr := p.prompt(in, resp)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !c.done {
		p.record(c, in, pr, resp, rc, err, start)
	}
}

// capturedPrompt is a record's prompt length and, for a text prompt, its
// block hashes.
type capturedPrompt struct {
	inputLen int
	blocks   []uint64
}

// prompt works out the record's prompt from the request and the
// response, before the lock: the ids' count, else the server's count,
// else the text's words; and a text prompt's blocks (textBlocks).
func (p *Proxy) prompt(in *capturedInput, resp *Response) capturedPrompt {
	var pr capturedPrompt
	switch {
	case in.tokens != nil:
		return capturedPrompt{inputLen: len(in.tokens)}
	case resp.PromptTokens > 0:
		pr.inputLen = resp.PromptTokens
	default:
		pr.inputLen = max(in.textWords, 1)
	}
	pr.blocks = textBlocks(in.text, pr.inputLen, p.cfg.TextBytesPerToken)
	return pr
}

// record fills c's record from the request and what was measured (mu
// held). Before the response it is called with an "interrupted" error, so
// that Close can write a complete record of a request in flight.
func (p *Proxy) record(c *captured, in *capturedInput, pr capturedPrompt, resp *Response, rc *recorder, err error, start time.Time) {
	rec := &c.rec
	rec.Model, rec.Kind, rec.Sampling = in.model, in.kind, in.sampling
	rec.Tokens, rec.InputLen, rec.Blocks, rec.BlockSize = in.tokens, pr.inputLen, pr.blocks, 0
	if pr.blocks != nil {
		rec.BlockSize = TextBlockSize
	}
	out := rc.lastTokens
	if rc.first.IsZero() {
		out = resp.CompletionTokens
	}
	obs := &traces.Observed{CachedTokens: resp.CachedTokens, Status: "ok", Retries: resp.Retries}
	end := resp.End
	if end.IsZero() || end.Before(start) {
		end = start
	}
	obs.E2E = int64(end.Sub(start))
	if err != nil {
		obs.Status = Reason(err)
		if in.bad != "" && obs.Status == "http 400" {
			obs.Status = "bad request"
		}
		rec.OutputLen = max(in.maxNew, 0)
	} else {
		rec.OutputLen = out
		if !rc.first.IsZero() {
			obs.TTFT = int64(rc.first.Sub(start))
			obs.ITL = rc.itl
		}
		if ids := resp.OutputIDs; len(ids) == out && out > 0 {
			rec.OutputTokens = ids
		}
	}
	rec.Observed = obs
}

// streamTap keeps a response as it streams through, with the time each
// line was read, and parses it once the response is over, so that parsing
// adds nothing to what the client waits for.
type streamTap struct {
	st      streamState
	resp    Response
	rc      recorder
	sse     bool
	status  int
	partial []byte // the line being read
	data    []byte // complete lines, back to back
	ends    []int  // end offset of each line in data
	times   []time.Time
	whole   []byte // a non-streamed body
}

// feed keeps the bytes read at now.
func (t *streamTap) feed(b []byte, now time.Time) {
	if t.status != http.StatusOK {
		if len(t.whole) < 4096 {
			t.whole = append(t.whole, b[:min(len(b), 4096-len(t.whole))]...)
		}
		return
	}
	if !t.sse {
		if len(t.whole) < 64<<20 {
			t.whole = append(t.whole, b...)
		}
		return
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			t.partial = append(t.partial, b...)
			return
		}
		t.data = append(t.data, t.partial...)
		t.data = append(t.data, b[:i]...)
		t.partial = t.partial[:0]
		t.ends = append(t.ends, len(t.data))
		t.times = append(t.times, now)
		b = b[i+1:]
	}
}

// finish parses what was kept: readErr is how the copy ended (nil: EOF).
func (t *streamTap) finish(readErr error, now time.Time) error {
	if t.status != http.StatusOK {
		t.resp.End = now
		return &RequestError{Reason: "http " + strconv.Itoa(t.status), Detail: strings.TrimSpace(string(t.whole))}
	}
	if !t.sse {
		t.resp.End = now
		if readErr != nil {
			return readErr
		}
		// A whole JSON response reads like one event.
		if _, err := t.st.line(append([]byte("data: "), bytes.TrimSpace(t.whole)...), now, &t.rc, &t.resp); err != nil {
			return err
		}
		t.rc = recorder{start: t.rc.start} // not streamed: no TTFT or ITL
		t.st.finish(&t.resp, t.st.lastIDs)
		return nil
	}
	if len(t.partial) > 0 && readErr == nil {
		t.data = append(t.data, t.partial...)
		t.ends = append(t.ends, len(t.data))
		t.times = append(t.times, now)
	}
	from := 0
	for k, end := range t.ends {
		line := bytes.TrimRight(t.data[from:end], "\r")
		from = end
		if done, err := t.st.line(line, t.times[k], &t.rc, &t.resp); done || err != nil {
			if err == nil && readErr != nil {
				t.resp.End = now
			}
			return err // complete ([DONE]), or broken
		}
	}
	t.resp.End = now
	if readErr != nil {
		return readErr
	}
	return t.st.end(io.EOF, &t.resp)
}
