package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvsim/kvsim/replay/replaytest"
	"github.com/kvsim/kvsim/traces"
)

// sharedPrefixTrace has two groups of three questions: a 32-token system
// prompt and 8-token questions.
func sharedPrefixTrace(t *testing.T) []traces.Record {
	t.Helper()
	recs, err := traces.GenerateSharedPrefix(traces.SharedPrefixConfig{
		Questions: []int{3, 3}, SystemPromptLength: 32, QuestionLength: 8, OutputLength: 4,
		Rate: 1e9, Seed: 1, Vocab: traces.DefaultVocab,
	})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// fakeServer starts a fake SGLang server of cfg, closed when the test
// ends, and returns it with a target that speaks api to it (newTarget).
func fakeServer(t testing.TB, cfg replaytest.Config, api API) (*replaytest.Server, *HTTPTarget) {
	t.Helper()
	srv := replaytest.NewServer(cfg)
	t.Cleanup(srv.Close)
	return srv, newTarget(t, srv.URL, api)
}

func newTarget(t testing.TB, url string, api API) *HTTPTarget {
	t.Helper()
	cfg := HTTPConfig{BaseURL: url, API: api}
	if api == APIOpenAIChat {
		cfg.ChatText = "words"
	}
	tg, err := NewHTTPTarget(cfg, WallClock{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.CloseIdle)
	return tg
}

func TestHTTPTargetsReportCachedTokens(t *testing.T) {
	for _, api := range []API{APISGLang, APIOpenAI, APIOpenAIChat} {
		t.Run(api.String(), func(t *testing.T) {
			srv, tg := fakeServer(t, replaytest.Config{TokenDelay: 200 * time.Microsecond}, api)
			info, err := tg.Info(t.Context())
			if err != nil || info.Model != "fake-model" {
				t.Fatalf("Info() = %+v, %v", info, err)
			}
			if err := tg.Flush(t.Context()); err != nil || srv.Flushes() != 1 {
				t.Fatalf("Flush() = %v (flushes %d)", err, srv.Flushes())
			}
			cfg := Default()
			cfg.MaxConcurrency = 1 // the hits below depend on the order
			recs := sharedPrefixTrace(t)
			res := runReplay(t, tg, cfg, recs)
			var cached []int
			for _, rr := range res.Requests {
				if rr.Failed != "" {
					t.Fatalf("%s failed: %s %s", rr.ID, rr.Failed, rr.Detail)
				}
				if rr.OutputTokens != 4 || len(rr.ITL) != 3 || rr.TTFT() <= 0 || rr.E2E() < rr.TTFT() {
					t.Errorf("%s: output %d itl %v ttft %d e2e %d", rr.ID, rr.OutputTokens, rr.ITL, rr.TTFT(), rr.E2E())
				}
				cached = append(cached, rr.CachedTokens)
			}
			// The first question of a group misses; the others hit the
			// system prompt (and words map 1:1 to the fake's tokens).
			if want := []int{0, 32, 32, 0, 32, 32}; !slices.Equal(cached, want) {
				t.Errorf("cached tokens %v, want %v", cached, want)
			}
			s := Summarize(res.Requests)
			if s.CacheHitRate == nil || *s.CacheHitRate != 128.0/240 {
				t.Errorf("hit rate %v, want %v", s.CacheHitRate, 128.0/240)
			}
			if s.Completed != 6 || s.TotalInput != 240 || s.TotalOutput != 24 {
				t.Errorf("summary %+v", s)
			}
		})
	}
}

func TestHTTPTargetOpenAIWithoutCacheReport(t *testing.T) {
	_, tg := fakeServer(t, replaytest.Config{NoCacheReport: true}, APIOpenAI)
	if _, err := tg.Info(t.Context()); err != nil {
		t.Fatal(err)
	}
	res := runReplay(t, tg, Default(), sharedPrefixTrace(t)[:2])
	s := Summarize(res.Requests)
	if s.Completed != 2 || s.CacheHitRate != nil || res.Requests[0].CachedTokens != -1 {
		t.Fatalf("completed %d hit rate %v cached %d; want 2, nil, -1", s.Completed, s.CacheHitRate, res.Requests[0].CachedTokens)
	}
}

func TestSGLangOutputIDsAndStreamInterval(t *testing.T) {
	_, tg := fakeServer(t, replaytest.Config{StreamInterval: 3}, APISGLang)
	var rc recorder
	resp, err := tg.Submit(t.Context(), Request{ID: "x", Tokens: []int32{5, 6, 7}, MaxNewTokens: 7, IgnoreEOS: true}, &rc)
	if err != nil {
		t.Fatal(err)
	}
	// Events carry 3, 6 and 7 tokens: TTFT at the first, 3 ITLs for the
	// second and 1 for the last.
	if len(resp.OutputIDs) != 7 || resp.CompletionTokens != 7 || resp.PromptTokens != 3 || resp.FinishReason != "length" || len(rc.itl) != 4 || rc.lastTokens != 7 {
		t.Fatalf("resp %+v, itl %v", resp, rc.itl)
	}
}

func TestRequestBodyExtraFieldsOverride(t *testing.T) {
	for _, tc := range []struct {
		api   API
		extra string
		want  map[string]string
	}{
		{APISGLang, `{"sampling_params":{"max_new_tokens":1},"lora_path":"a\"b"}`,
			map[string]string{"input_ids": "[1,2]", "sampling_params": `{"max_new_tokens":1}`, "stream": "true", "lora_path": `"a\"b"`}},
		{APISGLang, ``,
			map[string]string{"input_ids": "[1,2]", "sampling_params": `{"temperature":0,"max_new_tokens":3,"ignore_eos":true,"top_p":0.9}`, "stream": "true"}},
		{APIOpenAI, `{"temperature":0.5}`,
			map[string]string{"model": `"m"`, "prompt": "[1,2]", "max_tokens": "3", "temperature": "0.5", "top_p": "0.9", "ignore_eos": "true",
				"stream_options": `{"include_usage":true}`, "stream": "true"}},
	} {
		tg, err := NewHTTPTarget(HTTPConfig{BaseURL: "http://127.0.0.1:1", API: tc.api, Model: "m", Extra: json.RawMessage(tc.extra)}, WallClock{})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		tg.body(&b, &Request{Tokens: []int32{1, 2}, MaxNewTokens: 3, IgnoreEOS: true, TopP: 0.9})
		var got map[string]json.RawMessage
		if err := json.Unmarshal(b.Bytes(), &got); err != nil {
			t.Fatalf("%s body %s: %v", tc.api, b.Bytes(), err)
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s body %s: want keys %v", tc.api, b.Bytes(), tc.want)
		}
		for k, v := range tc.want {
			if string(got[k]) != v {
				t.Errorf("%s body[%s] = %s, want %s", tc.api, k, got[k], v)
			}
		}
	}
}

func TestNewHTTPTargetRejectsBadConfig(t *testing.T) {
	_, err := NewHTTPTarget(HTTPConfig{BaseURL: "localhost:30000", API: APIOpenAIChat, Extra: json.RawMessage(`[1]`)}, WallClock{})
	if err == nil {
		t.Fatal("NewHTTPTarget accepted a bad config")
	}
	for _, want := range []string{"base URL", "chat-text words", "extra-request-body"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestLineReaderLongLines(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	in := "data: a\r\n\n" + long + "\ntail"
	lr := lineReader{br: bufio.NewReaderSize(strings.NewReader(in), 16)}
	var got []string
	for {
		l, err := lr.next()
		if err != nil {
			break
		}
		got = append(got, string(l))
	}
	if len(got) != 4 || got[0] != "data: a" || got[1] != "" || got[2] != long || got[3] != "tail" {
		t.Fatalf("lines: %d, first %q", len(got), got[0])
	}
}

// faultServer serves /generate with handler h.
func faultServer(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body as real servers do; only then does net/http notice
		// a client that goes away (and cancel r.Context()).
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func sseEvent(w http.ResponseWriter, tokens int, finish bool) {
	fr := "null"
	if finish {
		fr = `{"type":"length","length":` + fmt.Sprint(tokens) + `}`
	}
	fmt.Fprintf(w, `data: {"text":"%s","meta_info":{"prompt_tokens":4,"completion_tokens":%d,"cached_tokens":0,"finish_reason":%s}}`+"\n\n",
		strings.Repeat("x", tokens), tokens, fr)
	w.(http.Flusher).Flush()
}

func TestFaultsFailRequestsWithReasons(t *testing.T) {
	cases := []struct {
		name   string
		url    string
		reason string
	}{
		{"refused", "", "connect"}, // url set below
		{"503", faultServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		}), "http 503"},
		{"400", faultServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":"bad input_ids"}`, http.StatusBadRequest)
		}), "http 400"},
		{"stall", faultServer(t, func(w http.ResponseWriter, r *http.Request) {
			sseEvent(w, 1, false)
			<-r.Context().Done()
		}), "timeout"},
		{"stall before headers", faultServer(t, func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		}), "timeout"},
		{"cut midway", faultServer(t, func(w http.ResponseWriter, r *http.Request) {
			sseEvent(w, 1, false)
			sseEvent(w, 2, false)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}), "stream cut"},
		{"ends without done", faultServer(t, func(w http.ResponseWriter, r *http.Request) {
			sseEvent(w, 1, false)
		}), "stream cut"},
		{"malformed json", faultServer(t, func(w http.ResponseWriter, r *http.Request) {
			sseEvent(w, 1, false)
			fmt.Fprint(w, "data: {\"text\": \"x\", \n\n")
		}), "malformed event"},
		{"not sse", faultServer(t, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "<html>gateway</html>\n")
		}), "malformed event"},
		{"error event", faultServer(t, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `data: {"error":{"message":"out of memory"}}`+"\n\n")
		}), "server error"},
		{"abort", faultServer(t, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `data: {"text":"","meta_info":{"prompt_tokens":4,"completion_tokens":0,"finish_reason":{"type":"abort","message":"too long"}}}`+"\n\n")
		}), "aborted"},
	}
	// A port found by listening and closing was now and then handed by
	// the kernel to one of the fault servers, which then answered the
	// "refused" requests.
	cases[0].url = replaytest.RefusedURL(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tg := newTarget(t, tc.url, APISGLang)
			cfg := Default()
			cfg.Timeout = 300 * time.Millisecond
			start := time.Now()
			res := runReplay(t, tg, cfg, []traces.Record{rec("a", 0, 4, 3), rec("b", 0, 4, 3)})
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("run took %v", d)
			}
			s := Summarize(res.Requests)
			if s.Failed != 2 || s.FailedReasons[tc.reason] != 2 {
				t.Fatalf("failed %d reasons %v (detail %q), want 2 x %q", s.Failed, s.FailedReasons, res.Requests[0].Detail, tc.reason)
			}
		})
	}
}

func TestPerRequestTraceRoundTrips(t *testing.T) {
	srv, tg := fakeServer(t, replaytest.Config{}, APISGLang)
	recs := sharedPrefixTrace(t)
	recs = append(recs, traces.Record{ID: "hash", InputLen: 40, Blocks: []uint64{7, 8}, BlockSize: 16, OutputLen: 2})
	cfg := Default()
	cfg.MaxConcurrency = 1
	res := runReplay(t, tg, cfg, recs)
	var buf bytes.Buffer
	w, err := traces.NewWriter(&buf, PerRequestHeader("test", Info{Server: "sglang"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := WritePerRequest(w, recs, res); err != nil {
		t.Fatal(err)
	}
	rd, err := traces.NewReader(&buf, "per-request", traces.FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		got, err := rd.Next()
		if err != nil {
			break
		}
		want := res.Requests[n]
		o := got.Observed
		if got.ID != want.ID || o == nil || o.Status != "ok" || o.CachedTokens != want.CachedTokens || o.TTFT != want.TTFT() || o.E2E != want.E2E() || !slices.Equal(o.ITL, want.ITL) {
			t.Fatalf("record %d: %+v %+v, want %+v", n, got, o, want)
		}
		n++
	}
	if n != len(recs) || srv.PromptLens()[6] != 40 {
		t.Fatalf("read %d records, want %d; hash prompt sent as %d tokens", n, len(recs), srv.PromptLens()[6])
	}
}

// A replay sends each record's session as X-Session-Id (what nginx's
// `hash $http_x_session_id consistent` keys on), and no header for a
// record without one.
func TestHTTPTargetSendsSession(t *testing.T) {
	srv := replaytest.NewServer(replaytest.Config{})
	defer srv.Close()
	var mu sync.Mutex
	got := map[string][]string{}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get(SessionHeader)] = append(got[r.Header.Get(SessionHeader)], r.Header.Values(SessionHeader)...)
		mu.Unlock()
		httputil.NewSingleHostReverseProxy(mustURL(t, srv.URL)).ServeHTTP(w, r)
	}))
	defer front.Close()
	recs := sharedPrefixTrace(t)
	recs[5].Session = ""
	r, err := New(Default(), newTarget(t, front.URL, APIOpenAI), WallClock{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{recs[0].Session: {recs[0].Session, recs[0].Session, recs[0].Session}, recs[3].Session: {recs[3].Session, recs[3].Session}, "": nil}
	if len(got) != len(want) || !slices.Equal(got[recs[0].Session], want[recs[0].Session]) || !slices.Equal(got[recs[3].Session], want[recs[3].Session]) || len(got[""]) != 0 {
		t.Errorf("X-Session-Id values by session: %q, want %q", got, want)
	}
	if _, ok := got[""]; !ok {
		t.Error("the record without a session was not sent without the header")
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
