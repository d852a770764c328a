package replay

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvsim/kvsim/replay/replaytest"
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/traces"
)

// startServer runs a Server on a loopback port until the test ends.
func startServer(t testing.TB, deviceTokens int64, scale float64) (string, *Server) {
	t.Helper()
	cost := testFitted
	srv, err := NewServer(ServeConfig{Sim: SimConfig{Engine: &sim.Factory{Config: testSimConfig(deviceTokens), Cost: &cost}, Model: "sim-model"}, TimeScale: scale, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + serve(t, srv), srv
}

// serve runs srv on a loopback port until the test ends, failing the test
// if Serve fails, and returns the port's address (host:port).
func serve(t testing.TB, srv *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func sharedTrace(t testing.TB) []traces.Record {
	t.Helper()
	recs, err := traces.GenerateSharedPrefix(traces.SharedPrefixConfig{
		Questions: []int{4, 3, 5}, SystemPromptLength: 300, QuestionLength: 40, OutputLength: 6,
		Order: "shuffled", Rate: math.Inf(1), Seed: 9, Vocab: traces.DefaultVocab,
	})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// The acceptance check of kvsim serve: a closed-loop replay (concurrency 1)
// against the server at time scale 0 gets, request by request, the cached
// tokens of the in-process simulator target, on a multi-turn trace and a
// shared-prefix trace, through each API; with a small device pool, so
// that eviction and host hits take part.
func TestServeMatchesSimTarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		recs []traces.Record
		api  API
	}{
		{"chat-sglang", chatTrace(t, 8, 4), APISGLang},
		{"shared-sglang", sharedTrace(t), APISGLang},
		{"shared-openai", sharedTrace(t), APIOpenAI},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const device = 700
			url, _ := startServer(t, device, 0)
			cfg := Default()
			cfg.MaxConcurrency = 1
			tg := newTarget(t, url, tc.api)
			if _, err := tg.Info(t.Context()); err != nil {
				t.Fatal(err)
			}
			got := runReplay(t, tg, cfg, tc.recs)
			want := runReplay(t, newSimTarget(t, device), cfg, tc.recs)
			var g, w []int
			for i := range tc.recs {
				if got.Requests[i].Failed != "" || want.Requests[i].Failed != "" {
					t.Fatalf("%s failed: %q / %q", tc.recs[i].ID, got.Requests[i].Detail, want.Requests[i].Detail)
				}
				g = append(g, got.Requests[i].CachedTokens)
				w = append(w, want.Requests[i].CachedTokens)
			}
			if !slices.Equal(g, w) {
				t.Fatalf("cached tokens via serve %v\nin process          %v", g, w)
			}
			if s := Summarize(want.Requests); s.CacheHitRate == nil || *s.CacheHitRate == 0 {
				t.Fatalf("no hits at all: the check is vacuous")
			}
		})
	}
}

// A client that echoes SGLang's output_ids gets its previous turn back
// from the cache, through the server as in process.
func TestServeEchoedOutputIDsHit(t *testing.T) {
	url, _ := startServer(t, 100000, 0)
	tg := newTarget(t, url, APISGLang)
	prompt := OutputTokens([]int32{5}, 100, traces.DefaultVocab)
	var sink recorder
	resp, err := tg.Submit(t.Context(), Request{Tokens: prompt, MaxNewTokens: 10, IgnoreEOS: true}, &sink)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.OutputIDs) != 10 || resp.CachedTokens != 0 || resp.PromptTokens != 100 || resp.FinishReason != "length" {
		t.Fatalf("first turn: %+v", resp)
	}
	next := append(append(slices.Clone(prompt), resp.OutputIDs...), 1, 2, 3)
	resp2, err := tg.Submit(t.Context(), Request{Tokens: next, MaxNewTokens: 4, IgnoreEOS: true}, &sink)
	if err != nil {
		t.Fatal(err)
	}
	if resp2.CachedTokens != 109 {
		t.Fatalf("second turn cached %d, want 109", resp2.CachedTokens)
	}
}

// httpDo is replaytest.Do.
var httpDo = replaytest.Do

// waitMetrics polls the server's /metrics every 10 ms until it contains
// every line of want, failing with why and the last metrics after timeout.
func waitMetrics(t *testing.T, url string, timeout time.Duration, why string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, m := httpDo(t, "GET", url+"/metrics", "")
		if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(m, w) }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s:\n%s", why, m)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Every endpoint answers in its API's shape; bad requests get 400 with a
// message; non-streaming requests get one JSON object.
func TestServeEndpoints(t *testing.T) {
	url, _ := startServer(t, 100000, 0)
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		want                     []string
	}{
		{"health", "GET", "/health", "", 200, nil},
		{"models", "GET", "/v1/models", "", 200, []string{`"id":"sim-model"`, `"owned_by":"kvsim"`}},
		{"info", "GET", "/server_info", "", 200, []string{`"page_size":1`, `"version":"kvsim-test"`, `"max_total_num_tokens":100000`}},
		{"old info", "GET", "/get_server_info", "", 200, []string{`"served_model_name":"sim-model"`}},
		{"generate whole", "POST", "/generate", `{"input_ids":[1,2,3,4],"sampling_params":{"max_new_tokens":3}}`, 200,
			[]string{`"completion_tokens":3`, `"cached_tokens":0`, `"finish_reason":{"type":"length","length":3}`, `"output_ids":[`}},
		{"generate text", "POST", "/generate", `{"text":"hello there world","sampling_params":{"max_new_tokens":2},"stream":true}`, 200,
			[]string{`"prompt_tokens":3`, "data: [DONE]"}},
		{"completions whole", "POST", "/v1/completions", `{"model":"sim-model","prompt":[5,6,7],"max_tokens":2}`, 200,
			[]string{`"object":"text_completion"`, `"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":`}},
		{"chat stream", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a b c"}],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`, 200,
			[]string{`"delta":{"role":"assistant","content":`, `"finish_reason":"length"`, `"prompt_tokens_details":{"cached_tokens":`, "data: [DONE]"}},
		{"bad json", "POST", "/generate", `{"input_ids":[1,2`, 400, []string{"invalid JSON body", "at byte"}},
		{"wrong type", "POST", "/v1/completions", `{"prompt":[1],"max_tokens":"many"}`, 400, []string{`invalid JSON body: max_tokens: expected an integer, found a string`}},
		{"no prompt", "POST", "/generate", `{"sampling_params":{}}`, 400, []string{"either text or input_ids"}},
		{"batch", "POST", "/generate", `{"input_ids":[[1,2],[3]]}`, 400, []string{"batches"}},
		{"zero tokens", "POST", "/generate", `{"input_ids":[1],"sampling_params":{"max_new_tokens":0}}`, 400, []string{"max_new_tokens: must be in"}},
		{"unknown model", "POST", "/v1/completions", `{"model":"gpt-9","prompt":[1]}`, 404, []string{"does not exist"}},
		{"n > 1", "POST", "/v1/completions", `{"prompt":[1],"n":2}`, 400, []string{"only 1"}},
		{"too long", "POST", "/generate", `{"input_ids":[` + strings.Repeat("7,", 100000) + `7]}`, 400, []string{"exceeds the KV pool"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := httpDo(t, tc.method, url+tc.path, tc.body)
			if code != tc.code {
				t.Fatalf("status %d, want %d: %s", code, tc.code, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("body lacks %s:\n%s", w, body)
				}
			}
		})
	}
	code, body := httpDo(t, "GET", url+"/metrics", "")
	for _, w := range []string{"kvsim_requests_total 5", "kvsim_requests_failed_total 1", `kvsim_cache_hit_tokens_total{tier="host"}`, "# TYPE kvsim_virtual_time_seconds gauge"} {
		if code != 200 || !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %q:\n%s", w, body)
		}
	}
}

// /flush_cache empties the cache when the server is idle, and refuses
// with 400 while a request is in it (time scale 1, so one is).
func TestServeFlushOnlyWhenIdle(t *testing.T) {
	url, _ := startServer(t, 100000, 1)
	gen := `{"input_ids":[1,2,3,4,5,6,7,8],"sampling_params":{"max_new_tokens":2}}`
	if code, body := httpDo(t, "POST", url+"/generate", gen); code != 200 || !strings.Contains(body, `"cached_tokens":0`) {
		t.Fatalf("first: %d %s", code, body)
	}
	if code, body := httpDo(t, "POST", url+"/generate", gen); code != 200 || !strings.Contains(body, `"cached_tokens":7`) {
		t.Fatalf("second: %d %s", code, body)
	}
	if code, body := httpDo(t, "POST", url+"/flush_cache", ""); code != 200 || body != "Cache flushed.\n" {
		t.Fatalf("flush: %d %q", code, body)
	}
	if code, body := httpDo(t, "POST", url+"/generate", gen); code != 200 || !strings.Contains(body, `"cached_tokens":0`) {
		t.Fatalf("after flush: %d %s", code, body)
	}
	// A long request (200 decode steps of 2 ms at time scale 1) keeps the
	// server busy while we flush.
	long := make(chan error, 1)
	go func() {
		res, err := http.Post(url+"/generate", "application/json", strings.NewReader(`{"input_ids":[9],"sampling_params":{"max_new_tokens":200}}`))
		if err == nil {
			_, err = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		long <- err
	}()
	defer func() {
		if err := <-long; err != nil {
			t.Errorf("long request: %v", err)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := httpDo(t, "GET", url+"/flush_cache", "")
		if code == 400 && strings.Contains(body, "running or waiting") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flush while busy: %d %q", code, body)
		}
	}
}

// Time scale 1: tokens come when their simulated time comes (2 ms steps).
func TestServeRealTimeStreaming(t *testing.T) {
	url, _ := startServer(t, 100000, 1)
	tg := newTarget(t, url, APISGLang)
	var rc recorder
	rc.start = time.Now()
	resp, err := tg.Submit(t.Context(), Request{Tokens: []int32{1, 2, 3}, MaxNewTokens: 20}, &rc)
	if err != nil {
		t.Fatal(err)
	}
	e2e := resp.End.Sub(rc.start)
	// 1 ms prefill + 19 decode steps of 2 ms = 39 ms simulated.
	if e2e < 38*time.Millisecond || e2e > 2*time.Second || len(rc.itl) != 19 {
		t.Fatalf("e2e %v with %d ITLs; want about 39 ms and 19", e2e, len(rc.itl))
	}
}

// A client that disconnects mid-stream stops its stream only: the
// simulator finishes the request (its output is then cached) and the
// server keeps serving.
func TestServeClientDisconnect(t *testing.T) {
	url, _ := startServer(t, 100000, 1)
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/generate", strings.NewReader(`{"input_ids":[4,4,4,4],"sampling_params":{"max_new_tokens":50},"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(res.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel()
	res.Body.Close()
	var st struct {
		MaxTotal int `json:"max_total_num_tokens"`
	}
	waitMetrics(t, url, 5*time.Second, "the simulator did not finish the abandoned request", "kvsim_generation_tokens_total 50", "kvsim_requests_in_server 0")
	code, body := httpDo(t, "GET", url+"/server_info", "")
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.MaxTotal != 100000 {
		t.Fatalf("server_info after disconnect: %d %s", code, body)
	}
}

// BenchmarkServeLoopback measures kvsim serve's throughput at time scale 0:
// the replay client (64 in flight) against the server on loopback, both on
// the same CPUs; 1000 requests of 128-token prompts sharing a 64-token
// prefix, 8 output tokens each, per iteration.
func BenchmarkServeLoopback(b *testing.B) {
	url, _ := startServer(b, 1<<20, 0)
	tg := newTarget(b, url, APISGLang)
	cfg := Default()
	cfg.MaxConcurrency = 64
	r := newWallRunner(b, cfg, tg)
	const n = 1000
	shared := OutputTokens([]int32{1}, 64, traces.DefaultVocab)
	recs := make([]traces.Record, n)
	for i := range recs {
		p := append(slices.Clone(shared), OutputTokens([]int32{int32(i), 2}, 64, traces.DefaultVocab)...)
		recs[i] = traces.Record{ID: fmt.Sprint(i), InputLen: len(p), Tokens: p, OutputLen: 8}
	}
	total := benchReplay(b, r, recs, nil)
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "req/s")
	b.ReportMetric(float64(8*n*b.N)/total.Seconds(), "tokens/s")
}

// A client that stops reading holds neither the simulator nor other
// clients: requests from others complete at once, the simulator finishes
// the stalled request, and after WriteStall the server drops the stalled
// connection.
func TestServeSlowClient(t *testing.T) {
	cost := testFitted
	srv, err := NewServer(ServeConfig{Sim: SimConfig{Engine: &sim.Factory{Config: testSimConfig(1 << 20), Cost: &cost}, Model: "sim-model"}, WriteStall: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)
	url := "http://" + addr
	// The stalled client: a stream of 600,000 tokens (40 MB, more than the
	// sockets' buffers hold), of which it reads nothing.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"model":"sim-model","prompt":[1,2,3],"max_tokens":600000,"stream":true}`
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	start := time.Now()
	for i := 0; i < 5; i++ {
		if code, b := httpDo(t, "POST", url+"/generate", `{"input_ids":[9,9,9],"sampling_params":{"max_new_tokens":4}}`); code != 200 {
			t.Fatalf("another client: %d %s", code, b)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("5 short requests took %v beside a stalled client", d)
	}
	waitMetrics(t, url, 10*time.Second, "the simulator did not finish the stalled request", "kvsim_requests_in_server 0", "kvsim_generation_tokens_total 600020")
	// The server gave up on the stalled connection after WriteStall and
	// closed it: reading it now gets what the sockets held, then the end,
	// well short of the stream's 40 MB.
	time.Sleep(time.Second)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if err != nil || n > 30<<20 {
		t.Fatalf("the stalled connection gave %d bytes, then %v; want the end of a cut stream", n, err)
	}
}
