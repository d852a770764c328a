package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/kvsim/kvsim/internal/jsonerr"
	"github.com/kvsim/kvsim/traces"
)

// Handler returns the server's HTTP handler: SGLang's POST /generate,
// /flush_cache, GET /server_info, /get_server_info, /get_model_info,
// /health, /health_generate; OpenAI's POST /v1/completions, /v1/chat/completions and
// GET /v1/models; and GET /metrics (Prometheus text format).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /generate", s.handleGenerate)
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("POST /v1/chat/completions", s.handleCompletions)
	mux.HandleFunc("/flush_cache", s.handleFlush)
	mux.HandleFunc("GET /server_info", s.handleInfo)
	mux.HandleFunc("GET /get_server_info", s.handleInfo)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /health_generate", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /get_model_info", s.handleModelInfo)
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	return mux
}

// Limits of a request.
const (
	maxNewTokensLimit = 1 << 20
	defaultGenerate   = 128 // SGLang's default max_new_tokens
	defaultCompletion = 16  // OpenAI's default max_tokens for completions
	defaultChat       = 128
)

// apiError writes an error in the OpenAI shape SGLang and vLLM both use.
func apiError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	var b bytes.Buffer
	b.WriteString(`{"object":"error","error":{"message":`)
	appendJSONString(&b, msg)
	b.WriteString(`,"type":`)
	appendJSONString(&b, http.StatusText(code))
	fmt.Fprintf(&b, `,"code":%d},"message":`, code)
	appendJSONString(&b, msg)
	b.WriteString("}\n")
	w.Write(b.Bytes())
}

// decode reads a JSON body into v, with a 400-worthy message on failure.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			apiError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", mb.Limit))
			return false
		}
		apiError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return false
	}
	// The request is in: lift the read deadline that bounded it, so that a
	// long stream is not cut by it (net/http would cancel the request).
	http.NewResponseController(w).SetReadDeadline(time.Time{})
	if len(bytes.TrimSpace(body)) == 0 {
		apiError(w, http.StatusBadRequest, "invalid JSON body: empty body")
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		apiError(w, http.StatusBadRequest, "invalid JSON body: "+jsonerr.Describe(err))
		return false
	}
	return true
}

// readBody reads a request body of at most limit bytes into one buffer
// sized by Content-Length when the client sent it, so that a large body is
// not copied while it grows.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	if n := r.ContentLength; n > 0 && n <= limit {
		buf := make([]byte, n+1) // one more byte to see the end
		k, err := io.ReadFull(rd, buf)
		switch {
		case err == io.ErrUnexpectedEOF || (err == nil && k == len(buf)):
			// Shorter than announced (net/http reports that), or longer:
			// read on as io.ReadAll would.
			rest, err := io.ReadAll(rd)
			return append(buf[:k], rest...), err
		case err != nil:
			return nil, err
		}
		return buf[:k], nil
	}
	return io.ReadAll(rd)
}

// jsonText is the text of the JSON string raw (a value of a document that
// json.Unmarshal accepted): its bytes in place when it has no escapes and
// is valid UTF-8 (the common case, and no copy of a large prompt), else the
// unquoted copy. ok is false when raw is not a string.
func jsonText(raw []byte) (text []byte, ok bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return nil, false
	}
	if in := raw[1 : len(raw)-1]; bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
		return in, true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return nil, false
	}
	return []byte(s), true
}

// isSpace is unicode.IsSpace, the separator of strings.Fields.
func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiSpace[r]
	}
	return unicode.IsSpace(r)
}

var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// nextWord returns the first whitespace-separated word of b (as
// strings.Fields splits) and what follows it; word is empty at the end.
func nextWord(b []byte) (word, rest []byte) {
	i := 0
	for i < len(b) {
		r, n := rune(b[i]), 1
		if r >= utf8.RuneSelf {
			r, n = utf8.DecodeRune(b[i:])
		}
		if !isSpace(r) {
			break
		}
		i += n
	}
	j := i
	for j < len(b) {
		r, n := rune(b[j]), 1
		if r >= utf8.RuneSelf {
			r, n = utf8.DecodeRune(b[j:])
		}
		if isSpace(r) {
			break
		}
		j += n
	}
	return b[i:j], b[j:]
}

// countWords is len(strings.Fields(b)) without allocating.
func countWords(b []byte) int {
	n := 0
	for w, rest := nextWord(b); len(w) > 0; w, rest = nextWord(rest) {
		n++
	}
	return n
}

// textTokens is serve's tokenizer for text prompts: one token per
// whitespace-separated word, the word's FNV-1a hash mapped into v. Equal
// text prefixes give equal token prefixes. It appends to dst, growing it
// once, and allocates nothing else.
func textTokens(text []byte, v traces.Vocab, dst []int32) []int32 {
	span := uint32(v.Hi - v.Lo)
	dst = slices.Grow(dst, countWords(text))
	for w, rest := nextWord(text); len(w) > 0; w, rest = nextWord(rest) {
		h := uint32(2166136261) // FNV-1a (hash/fnv's New32a), inlined
		for _, c := range w {
			h ^= uint32(c)
			h *= 16777619
		}
		dst = append(dst, v.Lo+int32(h%span))
	}
	return dst
}

// tooLong is why the simulated server would refuse any request with a
// prompt of input tokens (whatever its output length), or "": the reasons
// the simulator gives (sim's admission check, llama-server's slot context).
// Text prompts are checked before they are tokenized, so a huge one costs
// no memory beyond its body.
func (s *Server) tooLong(input int) string {
	if r, ok := s.cfg.Sim.Engine.(refuser); ok {
		return r.Refuse(input)
	}
	return ""
}

// refuser is an engine factory that knows which prompts its server
// refuses outright (sim.Factory, llamacpp.Factory): Refuse says why, or
// returns "".
type refuser interface {
	Refuse(input int) string
}

// rejected answers a request with a prompt that the
// simulated server would refuse (tooLong), as serveGen does, and counts it
// in /metrics as the simulator would have: a request that failed, whose
// prompt tokens are not counted.
func (s *Server) rejected(w http.ResponseWriter, why string) {
	s.statsMu.Lock()
	s.stats.Requests++
	s.stats.Failed++
	s.statsMu.Unlock()
	apiError(w, http.StatusBadRequest, "the simulated server rejected the request: "+why)
}

// tokenIDs reads a JSON array of token ids (not a batch).
func tokenIDs(raw json.RawMessage, field string) ([]int32, error) {
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err != nil {
		var batch [][]int64
		if json.Unmarshal(raw, &batch) == nil {
			return nil, fmt.Errorf("%s: batches (a list of lists) are not supported; send one request per prompt", field)
		}
		found := jsonerr.Kind(raw)
		if p := jsonerr.Explain(err); found == "an array" && p.Msg != "" {
			_, found, _ = strings.Cut(p.Msg, "found ")
			found = "an array holding " + found
		}
		return nil, fmt.Errorf("%s: expected an array of token ids (integers), found %s", field, found)
	}
	out := make([]int32, len(ids))
	for i, x := range ids {
		if x < 0 || x > 1<<31-1 {
			return nil, fmt.Errorf("%s[%d]: token id %d out of range", field, i, x)
		}
		out[i] = int32(x)
	}
	return out, nil
}

// idCount is how many elements the JSON array raw has at most (its commas
// plus one), counted without decoding it.
func idCount(raw []byte) int { return bytes.Count(raw, []byte{','}) + 1 }

// wantTokens checks a requested output length.
func wantTokens(v *int, def int, field string) (int, error) {
	if v == nil {
		return def, nil
	}
	if *v < 1 || *v > maxNewTokensLimit {
		return 0, fmt.Errorf("%s: must be in [1, %d] (got %d)", field, maxNewTokensLimit, *v)
	}
	return *v, nil
}

type generateBody struct {
	Text           json.RawMessage `json:"text"`
	InputIDs       json.RawMessage `json:"input_ids"`
	SamplingParams struct {
		MaxNewTokens *int `json:"max_new_tokens"`
	} `json:"sampling_params"`
	Stream bool            `json:"stream"`
	RID    json.RawMessage `json:"rid"`
}

func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request) {
	var body generateBody
	if !s.decode(w, r, &body) {
		return
	}
	v := s.cfg.Sim.OutputVocab
	var prompt []int32
	var err error
	switch {
	case len(body.InputIDs) > 0 && string(body.InputIDs) != "null":
		if n := idCount(body.InputIDs); body.InputIDs[0] == '[' && body.InputIDs[1] != '[' && s.tooLong(n) != "" {
			s.rejected(w, s.tooLong(n))
			return
		}
		prompt, err = tokenIDs(body.InputIDs, "input_ids")
	case len(body.Text) > 0 && string(body.Text) != "null":
		text, ok := jsonText(body.Text)
		if !ok {
			err = fmt.Errorf("text: expected a string (batches are not supported), found %s", jsonerr.Kind(body.Text))
			break
		}
		if n := countWords(text); s.tooLong(n) != "" {
			s.rejected(w, s.tooLong(n))
			return
		}
		prompt = textTokens(text, v, nil)
	default:
		err = errors.New("either text or input_ids should be provided")
	}
	if err == nil && len(prompt) == 0 {
		err = errors.New("the prompt is empty")
	}
	n := 0
	if err == nil {
		n, err = wantTokens(body.SamplingParams.MaxNewTokens, defaultGenerate, "sampling_params.max_new_tokens")
	}
	if err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	rid := s.rid("")
	var rs string
	if json.Unmarshal(body.RID, &rs) == nil && rs != "" {
		rid = rs
	}
	g := &genStream{api: APISGLang, rid: rid, stream: body.Stream}
	s.serveGen(w, r, prompt, n, g)
}

type completionBody struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
	var body completionBody
	if !s.decode(w, r, &body) {
		return
	}
	if body.Model != "" && body.Model != s.model() {
		apiError(w, http.StatusNotFound, fmt.Sprintf("the model `%s` does not exist (this server serves %q)", body.Model, s.model()))
		return
	}
	v := s.cfg.Sim.OutputVocab
	var prompt []int32
	var err error
	if chat {
		if len(body.Messages) == 0 {
			err = errors.New("messages: expected at least one message")
		}
		texts := make([][]byte, len(body.Messages))
		words := 0
		for i, m := range body.Messages {
			text, cerr := messageText(m.Content)
			if cerr != nil {
				err = fmt.Errorf("messages[%d].content: %v", i, cerr)
				break
			}
			texts[i] = text
			words += countWords([]byte("<|"+m.Role+"|>")) + countWords(text)
		}
		if err == nil && s.tooLong(words) != "" {
			s.rejected(w, s.tooLong(words))
			return
		}
		if err == nil {
			prompt = make([]int32, 0, words)
		}
		for i, m := range body.Messages {
			if err != nil {
				break
			}
			// A role marker, then the content's words: equal message
			// prefixes give equal token prefixes.
			prompt = textTokens([]byte("<|"+m.Role+"|>"), v, prompt)
			prompt = textTokens(texts[i], v, prompt)
		}
	} else {
		text, isText := jsonText(body.Prompt)
		switch {
		case len(body.Prompt) == 0 || string(body.Prompt) == "null":
			err = errors.New("prompt: required")
		case isText:
			if n := countWords(text); s.tooLong(n) != "" {
				s.rejected(w, s.tooLong(n))
				return
			}
			prompt = textTokens(text, v, nil)
		default:
			if n := idCount(body.Prompt); body.Prompt[0] == '[' && body.Prompt[1] != '[' && body.Prompt[1] != '"' && s.tooLong(n) != "" {
				s.rejected(w, s.tooLong(n))
				return
			}
			prompt, err = tokenIDs(body.Prompt, "prompt")
			if err != nil {
				var texts []string
				if json.Unmarshal(body.Prompt, &texts) == nil {
					err = errors.New("prompt: lists of prompts are not supported; send one request per prompt")
				}
			}
		}
	}
	if err == nil && len(prompt) == 0 {
		err = errors.New("the prompt is empty")
	}
	if err == nil && body.N != nil && *body.N != 1 {
		err = fmt.Errorf("n: only 1 is supported (got %d)", *body.N)
	}
	n := 0
	if err == nil {
		mt, def := body.MaxTokens, defaultCompletion
		if chat {
			def = defaultChat
			if mt == nil {
				mt = body.MaxCompletionTokens
			}
		}
		n, err = wantTokens(mt, def, "max_tokens")
	}
	if err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	api := APIOpenAI
	if chat {
		api = APIOpenAIChat
	}
	g := &genStream{api: api, rid: s.rid("cmpl-"), stream: body.Stream, usage: body.StreamOptions.IncludeUsage || !body.Stream, model: s.model()}
	s.serveGen(w, r, prompt, n, g)
}

// messageText reads a chat message's content: a string or a list of
// {"type": "text", "text": ...} parts.
func messageText(raw json.RawMessage) ([]byte, error) {
	if s, ok := jsonText(raw); ok {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, fmt.Errorf("expected a string or a list of text parts, found %s", jsonerr.Kind(raw))
	}
	var b []byte
	for _, p := range parts {
		if p.Type != "text" {
			return nil, fmt.Errorf("content part of type %q is not supported", p.Type)
		}
		b = append(b, p.Text...)
		b = append(b, ' ')
	}
	return b, nil
}

func (s *Server) model() string {
	if s.cfg.Sim.Model == "" {
		return "kvsim"
	}
	return s.cfg.Sim.Model
}

func (s *Server) rid(prefix string) string {
	s.ridMu.Lock()
	s.nextRID++
	n := s.nextRID
	s.ridMu.Unlock()
	return prefix + strconv.FormatUint(n, 16)
}

// SMGRoutingKeyHeader is SGLang's model gateway's routing-key header,
// consistent_hash's key there (fleet-spec 1.5).
const SMGRoutingKeyHeader = "X-SMG-Routing-Key"

// sessionKey is a request's session for a fleet's router: the
// X-Session-Id header that kvsim replay sends and nginx_hash hashes, else
// SMG's X-SMG-Routing-Key; empty without either.
func sessionKey(r *http.Request) string {
	if k := r.Header.Get(SessionHeader); k != "" {
		return k
	}
	return r.Header.Get(SMGRoutingKeyHeader)
}

// serveGen submits a generation and streams (or returns) its result.
func (s *Server) serveGen(w http.ResponseWriter, r *http.Request, prompt []int32, n int, g *genStream) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	j := &job{prompt: prompt, n: n, out: OutputTokens(prompt, n, s.cfg.Sim.OutputVocab), session: sessionKey(r), notify: make(chan struct{}, 1)}
	ctx := r.Context()
	if err := s.submit(ctx, j); err != nil {
		return // the client went away
	}
	g.job = j
	g.words = outputWords(j.out)
	rc := http.NewResponseController(w)
	// write sends b, giving up on a client that has not taken it within
	// WriteStall (it stopped reading): the simulator never waits for it.
	write := func(b []byte) error {
		rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteStall))
		_, err := w.Write(b)
		if err == nil {
			err = rc.Flush()
		}
		return err
	}
	sent := 0
	var buf bytes.Buffer
	for {
		select {
		case <-j.notify:
		case <-ctx.Done():
			return // stop streaming; the simulator goes on
		}
		j.mu.Lock()
		tokens, done := j.tokens, j.done
		res := j.res
		g.cached = j.cached
		j.mu.Unlock()
		if done && res.Failed != "" {
			if sent == 0 {
				code := http.StatusServiceUnavailable
				if strings.Contains(res.Failed, "exceeds") {
					code = http.StatusBadRequest
				}
				apiError(w, code, "the simulated server rejected the request: "+res.Failed)
				return
			}
			buf.Reset()
			buf.WriteString(`data: {"error":{"message":`)
			appendJSONString(&buf, res.Failed)
			buf.WriteString("}}\n\ndata: [DONE]\n\n")
			write(buf.Bytes())
			return
		}
		if !g.stream {
			if done {
				g.cached = int(res.CachedTokens)
				g.e2e = (res.Finish - res.Arrival).Seconds()
				w.Header().Set("Content-Type", "application/json")
				buf.Reset()
				g.whole(&buf)
				write(buf.Bytes())
				return
			}
			continue
		}
		if sent == 0 && tokens > 0 {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
		}
		buf.Reset()
		if done {
			g.cached = int(res.CachedTokens)
			g.e2e = (res.Finish - res.Arrival).Seconds()
		}
		for k := sent + 1; k <= tokens; k++ {
			g.chunk(&buf, k, done && k == tokens)
		}
		sent = tokens
		if done {
			g.tail(&buf)
		}
		if buf.Len() > 0 {
			if err := write(buf.Bytes()); err != nil {
				return
			}
		}
		if done {
			return
		}
	}
}

// outputWords renders output ids as text pieces (" word" each, see
// wordsText).
func outputWords(ids []int32) []string {
	out := make([]string, len(ids))
	for i, x := range ids {
		out[i] = " " + words[int(uint32(x))%len(words)]
	}
	return out
}

// genStream writes one generation in its API's format.
type genStream struct {
	api    API
	rid    string
	model  string
	stream bool
	usage  bool
	job    *job
	words  []string
	cached int
	e2e    float64 // virtual seconds
}

func (g *genStream) appendIDs(b *bytes.Buffer, k int) {
	b.WriteByte('[')
	for i, x := range g.job.out[:k] {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(x)))
	}
	b.WriteByte(']')
}

// meta writes SGLang's meta_info after k tokens; last marks the final one.
func (g *genStream) meta(b *bytes.Buffer, k int, last bool) {
	b.WriteString(`"meta_info":{"id":`)
	appendJSONString(b, g.rid)
	if last {
		fmt.Fprintf(b, `,"finish_reason":{"type":"length","length":%d}`, k)
	} else {
		b.WriteString(`,"finish_reason":null`)
	}
	// cached_tokens is in every event, as SGLang sends it (the benchmarks
	// read it from the first chunk).
	fmt.Fprintf(b, `,"prompt_tokens":%d,"completion_tokens":%d,"cached_tokens":%d`, len(g.job.prompt), k, g.cached)
	if last {
		fmt.Fprintf(b, `,"e2e_latency":%s`, strconv.FormatFloat(g.e2e, 'g', -1, 64))
	}
	b.WriteByte('}')
}

func (g *genStream) usageJSON(b *bytes.Buffer) {
	p, c := len(g.job.prompt), g.job.n
	fmt.Fprintf(b, `{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}`, p, c, p+c, g.cached)
}

// openAIHead writes an OpenAI response object's start, up to its first
// choice's fields: {"id":...,"object":object,"created":0,"model":...,"choices":[{"index":0,
func (g *genStream) openAIHead(b *bytes.Buffer, object string) {
	b.WriteString(`{"id":`)
	appendJSONString(b, g.rid)
	b.WriteString(`,"object":"` + object + `","created":0,"model":`)
	appendJSONString(b, g.model)
	b.WriteString(`,"choices":[{"index":0,`)
}

// chunk writes the streamed event of token k.
func (g *genStream) chunk(b *bytes.Buffer, k int, last bool) {
	b.WriteString("data: ")
	switch g.api {
	case APISGLang:
		b.WriteString(`{"text":`)
		appendJSONString(b, strings.Join(g.words[:k], ""))
		b.WriteString(`,"output_ids":`)
		g.appendIDs(b, k)
		b.WriteByte(',')
		g.meta(b, k, last)
		b.WriteString(`,"index":0}`)
	case APIOpenAI, APIOpenAIChat:
		if g.api == APIOpenAI {
			g.openAIHead(b, "text_completion")
			b.WriteString(`"text":`)
			appendJSONString(b, g.words[k-1])
			b.WriteString(`,"logprobs":null`)
		} else {
			g.openAIHead(b, "chat.completion.chunk")
			b.WriteString(`"delta":{`)
			if k == 1 {
				b.WriteString(`"role":"assistant",`)
			}
			b.WriteString(`"content":`)
			appendJSONString(b, g.words[k-1])
			b.WriteString(`},"logprobs":null`)
		}
		if last {
			b.WriteString(`,"finish_reason":"length"}]}`)
		} else {
			b.WriteString(`,"finish_reason":null}]}`)
		}
	}
	b.WriteString("\n\n")
}

// tail writes what follows the last token: the usage chunk and [DONE].
func (g *genStream) tail(b *bytes.Buffer) {
	if g.api != APISGLang && g.usage {
		b.WriteString(`data: {"id":`)
		appendJSONString(b, g.rid)
		b.WriteString(`,"object":"`)
		if g.api == APIOpenAI {
			b.WriteString("text_completion")
		} else {
			b.WriteString("chat.completion.chunk")
		}
		b.WriteString(`","created":0,"model":`)
		appendJSONString(b, g.model)
		b.WriteString(`,"choices":[],"usage":`)
		g.usageJSON(b)
		b.WriteString("}\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
}

// whole writes a non-streamed response.
func (g *genStream) whole(b *bytes.Buffer) {
	n := g.job.n
	text := strings.Join(g.words, "")
	switch g.api {
	case APISGLang:
		b.WriteString(`{"text":`)
		appendJSONString(b, text)
		b.WriteString(`,"output_ids":`)
		g.appendIDs(b, n)
		b.WriteByte(',')
		g.meta(b, n, true)
		b.WriteString("}\n")
	default:
		if g.api == APIOpenAI {
			g.openAIHead(b, "text_completion")
			b.WriteString(`"text":`)
			appendJSONString(b, text)
		} else {
			g.openAIHead(b, "chat.completion")
			b.WriteString(`"message":{"role":"assistant","content":`)
			appendJSONString(b, text)
			b.WriteByte('}')
		}
		b.WriteString(`,"finish_reason":"length"}],"usage":`)
		g.usageJSON(b)
		b.WriteString("}\n")
	}
}

func (s *Server) handleFlush(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		apiError(w, http.StatusMethodNotAllowed, "use GET or POST")
		return
	}
	if err := s.flush(r.Context()); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "Cache not flushed: %v. (When there are running or waiting requests, the operation will not be performed.)\n", err)
		return
	}
	io.WriteString(w, "Cache flushed.\n")
}

// serverInfoer is an engine factory that reports server arguments for
// /server_info (sim.Factory: SGLang's fields).
type serverInfoer interface {
	ServerInfo() map[string]any
}

func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) {
	info := map[string]any{}
	for k, v := range s.cfg.Info {
		info[k] = v
	}
	if si, ok := s.cfg.Sim.Engine.(serverInfoer); ok {
		for k, v := range si.ServerInfo() {
			info[k] = v
		}
	}
	for k, v := range map[string]any{
		"model_path": s.model(), "served_model_name": s.model(), "version": "kvsim-" + s.cfg.Version,
		"kvsim_time_scale": s.cfg.TimeScale,
	} {
		info[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	if err := enc.Encode(info); err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
	}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	var b bytes.Buffer
	b.WriteString(`{"object":"list","data":[{"id":`)
	appendJSONString(&b, s.model())
	b.WriteString(`,"object":"model","created":0,"owned_by":"kvsim","root":`)
	appendJSONString(&b, s.model())
	b.WriteString("}]}\n")
	w.Write(b.Bytes())
}

// handleModelInfo answers SGLang's /get_model_info: the served model's
// name as its path and tokenizer's path, a generation model.
func (s *Server) handleModelInfo(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	var b bytes.Buffer
	b.WriteString(`{"model_path":`)
	appendJSONString(&b, s.model())
	b.WriteString(`,"tokenizer_path":`)
	appendJSONString(&b, s.model())
	b.WriteString(`,"is_generation":true}` + "\n")
	w.Write(b.Bytes())
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	reply := make(chan simMetrics, 1)
	sm, err := ask(r.Context(), s, command{kind: cmdMetrics, metrics: reply}, reply)
	if err != nil {
		apiError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	s.statsMu.Lock()
	st := s.stats
	s.statsMu.Unlock()
	var b bytes.Buffer
	described := map[string]bool{} // the names whose HELP and TYPE are written
	put := func(name, help, kind, labels string, v float64) {
		if labels == "" || !described[name] {
			described[name] = true
			fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
		}
		fmt.Fprintf(&b, "%s%s %s\n", name, labels, strconv.FormatFloat(v, 'g', -1, 64))
	}
	put("kvsim_requests_total", "Generation requests received.", "counter", "", float64(st.Requests))
	put("kvsim_requests_failed_total", "Requests the simulated server rejected.", "counter", "", float64(st.Failed))
	put("kvsim_prompt_tokens_total", "Prompt tokens of the requests served (a refused or failed request's not counted, as SGLang counts them at the end of a request).", "counter", "", float64(st.PromptTokens))
	put("kvsim_generation_tokens_total", "Output tokens generated.", "counter", "", float64(st.GenTokens))
	put("kvsim_cached_tokens_total", "Prompt tokens served from the prefix cache (SGLang's cached_tokens), over finished requests.", "counter", "", float64(st.Cached))
	put("kvsim_cache_hit_tokens_total", "Cached prompt tokens by the tier they were found in.", "counter", `{tier="device"}`, float64(st.CachedDevice))
	put("kvsim_cache_hit_tokens_total", "", "counter", `{tier="host"}`, float64(st.CachedHost))
	put("kvsim_cache_hit_tokens_total", "", "counter", `{tier="storage"}`, float64(st.CachedStorage))
	put("kvsim_requests_in_server", "Requests submitted and not finished.", "gauge", "", float64(st.InSystem))
	put("kvsim_requests_before_first_token", "Requests queued or in prefill (no token yet).", "gauge", "", float64(st.Waiting))
	put("kvsim_cache_flushes_total", "Successful /flush_cache calls.", "counter", "", float64(st.Flushes))
	put("kvsim_virtual_time_seconds", "The simulated clock.", "gauge", "", float64(sm.virtualNs)/1e9)
	// By name; a fleet's series of one name stay in replica order.
	sort.SliceStable(sm.extra, func(i, j int) bool { return sm.extra[i].name < sm.extra[j].name })
	for _, m := range sm.extra {
		put(m.name, m.help, m.kind, m.labels, m.value)
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	w.Write(b.Bytes())
}
