//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// probeClient opens a fresh connection for every request: llama-server may
// close an idle keep-alive connection at any time, and a POST sent on a
// connection it just closed fails with EOF (net/http does not retry
// non-idempotent requests), which made the probes flaky.
var probeClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// llamaRoot is the chroot setup.sh made.
func llamaRoot() string {
	if r := os.Getenv("KVSIM_LLAMA_ROOT"); r != "" {
		return r
	}
	return "/opt/kvsim-llama"
}

// needServer skips the test when the chroot or the model is missing.
func needServer(t *testing.T, model string) {
	t.Helper()
	root := llamaRoot()
	if _, err := os.Stat(filepath.Join(root, "usr/bin/llama-server")); err != nil {
		t.Skipf("no llama-server in %s (run e2e/llama/setup.sh as root, or set KVSIM_LLAMA_ROOT): %v", root, err)
	}
	if _, err := os.Stat(filepath.Join(root, "models", model)); err != nil {
		t.Skipf("no model %s in %s/models (run e2e/llama/setup.sh): %v", model, root, err)
	}
}

// server is one llama-server started by start.sh.
type server struct {
	URL   string
	State string // start.sh's state directory (pid, port, server.log)
	t     *testing.T
}

// serverOpts are the start.sh settings of a probe.
type serverOpts struct {
	Model string   // default tiny.gguf
	NP    int      // -np (default 1)
	Ctx   int      // -c (default 2048 per slot)
	Extra []string // further llama-server flags
}

// startServer starts llama-server and stops it when the test ends.
func startServer(t *testing.T, o serverOpts) *server {
	t.Helper()
	if o.Model == "" {
		o.Model = "tiny.gguf"
	}
	if o.NP == 0 {
		o.NP = 1
	}
	if o.Ctx == 0 {
		o.Ctx = 2048 * o.NP
	}
	needServer(t, o.Model)
	state := t.TempDir()
	args := append([]string{"-m", o.Model, "-d", state, "--"}, o.Extra...)
	cmd := exec.Command(filepath.Join("llama", "start.sh"), args...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("NP=%d", o.NP), fmt.Sprintf("CTX=%d", o.Ctx), "TIMEOUT=60")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Cleanup(func() {
		stop := exec.Command(filepath.Join("llama", "stop.sh"), state)
		if b, err := stop.CombinedOutput(); err != nil {
			t.Errorf("stop.sh: %v: %s", err, b)
		}
	})
	if err != nil {
		t.Fatalf("start.sh: %v\n%s", err, stderr.String())
	}
	s := &server{URL: strings.TrimSpace(string(out)), State: state, t: t}
	t.Logf("llama-server %s at %s, -np %d -c %d %v", s.version(), s.URL, o.NP, o.Ctx, o.Extra)
	return s
}

// version returns the server's build as /props reports it.
func (s *server) version() string {
	var p struct {
		BuildInfo string `json:"build_info"`
	}
	if err := s.get("/props", &p); err != nil || p.BuildInfo == "" {
		return "(version not reported)"
	}
	return p.BuildInfo
}

// log returns the server's log so far.
func (s *server) log() string {
	b, err := os.ReadFile(filepath.Join(s.State, "server.log"))
	if err != nil {
		s.t.Fatalf("read server log: %v", err)
	}
	return string(b)
}

// logSince returns the log lines written after the first n bytes.
func (s *server) logSince(n int) string { return s.log()[n:] }

func (s *server) get(path string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+path, nil)
	if err != nil {
		return err
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// timings is llama-server's per-request timing block.
type timings struct {
	CacheN      int     `json:"cache_n"`
	PromptN     int     `json:"prompt_n"`
	PromptMs    float64 `json:"prompt_ms"`
	PredictedN  int     `json:"predicted_n"`
	PredictedMs float64 `json:"predicted_ms"`
}

// result is what a probe request brought back.
type result struct {
	Slot         int     // id_slot (native API)
	Cached       int     // timings.cache_n
	TokensCached int     // native tokens_cached: the slot's tokens after the request
	Tokens       []int32 // generated ids (native API with return_tokens)
	Timings      timings
	// OpenAI streaming only:
	UsageCached int       // usage.prompt_tokens_details.cached_tokens
	UsagePrompt int       // usage.prompt_tokens
	Chunks      []float64 // ms from send to each chunk with text
	Status      int
	Body        string // the body of a non-200 answer
}

func (s *server) post(ctx context.Context, path string, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", s.URL+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return probeClient.Do(req)
}

// complete sends a native POST /completion (not streamed) with a token-id
// prompt and n output tokens, ignore_eos, greedy.
func (s *server) complete(prompt []int32, n int, extra map[string]any) result {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	body := map[string]any{"prompt": prompt, "n_predict": n, "ignore_eos": true, "temperature": 0, "return_tokens": true, "cache_prompt": true}
	for k, v := range extra {
		body[k] = v
	}
	resp, err := s.post(ctx, "/completion", body)
	if err != nil {
		s.t.Fatalf("POST /completion: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("read /completion: %v", err)
	}
	if resp.StatusCode != 200 {
		return result{Status: resp.StatusCode, Body: string(raw)}
	}
	var r struct {
		IDSlot       int     `json:"id_slot"`
		TokensCached int     `json:"tokens_cached"`
		Tokens       []int32 `json:"tokens"`
		Timings      timings `json:"timings"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		s.t.Fatalf("decode /completion: %v: %s", err, raw)
	}
	return result{Status: 200, Slot: r.IDSlot, Cached: r.Timings.CacheN, TokensCached: r.TokensCached, Tokens: r.Tokens, Timings: r.Timings}
}

// completeOAI sends POST /v1/completions, streamed with usage, and records
// when each chunk with text arrived.
func (s *server) completeOAI(prompt []int32, n int) result {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	body := map[string]any{"prompt": prompt, "max_tokens": n, "ignore_eos": true, "temperature": 0,
		"stream": true, "stream_options": map[string]any{"include_usage": true}}
	start := time.Now()
	resp, err := s.post(ctx, "/v1/completions", body)
	if err != nil {
		s.t.Fatalf("POST /v1/completions: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		return result{Status: resp.StatusCode, Body: string(raw)}
	}
	res := result{Status: 200, Slot: -1}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var ev struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
			Timings *timings `json:"timings"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			s.t.Fatalf("decode stream event %q: %v", line, err)
		}
		if len(ev.Choices) > 0 && ev.Choices[0].Text != "" {
			res.Chunks = append(res.Chunks, float64(time.Since(start).Microseconds())/1e3)
		}
		if ev.Usage != nil {
			res.UsageCached = ev.Usage.PromptTokensDetails.CachedTokens
			res.UsagePrompt = ev.Usage.PromptTokens
		}
		if ev.Timings != nil {
			res.Timings = *ev.Timings
			res.Cached = ev.Timings.CacheN
		}
	}
	if err := sc.Err(); err != nil {
		s.t.Fatalf("read stream: %v", err)
	}
	return res
}

// tokens returns n prompt ids in 1..255 (byte tokens of the generated
// vocabulary) from a generator seeded by seed.
func tokens(seed uint64, n int) []int32 {
	rng := rand.New(rand.NewPCG(seed, 0x6532655f70726f62)) // "e2e_prob"
	out := make([]int32, n)
	for i := range out {
		out[i] = 1 + int32(rng.IntN(255))
	}
	return out
}

var savingRE = regexp.MustCompile(`saving prompt with length (\d+)`)

// count returns how many times re matches in s.
func count(re *regexp.Regexp, s string) int { return len(re.FindAllString(s, -1)) }

// metrics returns /metrics' samples by name.
func (s *server) metrics() map[string]float64 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+"/metrics", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		s.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			s.t.Fatalf("/metrics line %q: %v", sc.Text(), err)
		}
		out[name] = v
	}
	return out
}
