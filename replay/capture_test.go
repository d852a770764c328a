package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/replay/replaytest"
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/traces"
)

// syncBuffer is a bytes.Buffer safe for the proxy's writer and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) records(t testing.TB) (traces.Header, []traces.Record) {
	t.Helper()
	s.mu.Lock()
	data := slices.Clone(s.b.Bytes())
	s.mu.Unlock()
	rd, err := traces.NewReader(bytes.NewReader(data), "capture.jsonl", traces.FormatKVSim)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("captured trace:\n%s", data) // shown only if reading it back fails
	recs := testutil.ReadAll(t, rd.Next)
	return rd.Header(), recs
}

// startProxy runs a capturing proxy to upstream on a loopback port.
func startProxy(t testing.TB, upstream string) (string, *Proxy, *syncBuffer) {
	t.Helper()
	out := &syncBuffer{}
	p, err := NewProxy(t.Context(), CaptureConfig{Upstream: upstream}, out)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv.URL, p, out
}

// A replay through the proxy measures what it would directly, and the
// trace records every request with the replay's own measurements.
// waitInFlight waits (at most 10 s) until the proxy has exactly n requests
// it has not finished recording. A client can hold a whole response before
// the proxy's handler has recorded it, so a test that closes the proxy
// right after its last response would race with that handler.
func waitInFlight(t *testing.T, p *Proxy, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		p.mu.Lock()
		inFlight := 0
		for _, c := range p.pending {
			if !c.done {
				inFlight++
			}
		}
		p.mu.Unlock()
		if inFlight == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests still in flight in the proxy after 10 s, want %d", inFlight, n)
		}
	}
}

func TestCaptureRecordsAReplay(t *testing.T) {
	for _, api := range []API{APISGLang, APIOpenAI, APIOpenAIChat} {
		t.Run(api.String(), func(t *testing.T) {
			up := replaytest.NewServer(replaytest.Config{TokenDelay: 100 * time.Microsecond})
			defer up.Close()
			url, p, out := startProxy(t, up.URL)
			tg := newTarget(t, url, api)
			if _, err := tg.Info(t.Context()); err != nil {
				t.Fatal(err)
			}
			cfg := Default()
			cfg.MaxConcurrency = 1
			recs := sharedPrefixTrace(t)
			res := runReplay(t, tg, cfg, recs)
			waitInFlight(t, p, 0)
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			hdr, got := out.records(t)
			if hdr.Server != "sglang" && hdr.Server != "kvsim-fake" {
				t.Errorf("header server %q", hdr.Server)
			}
			if len(got) != len(recs) {
				t.Fatalf("captured %d records, want %d", len(got), len(recs))
			}
			for i, g := range got {
				rr := res.Requests[i]
				o := g.Observed
				if o == nil || o.Status != "ok" || o.CachedTokens != rr.CachedTokens || g.OutputLen != rr.OutputTokens || len(o.ITL) != len(rr.ITL) {
					t.Fatalf("record %d: %+v observed %+v; replay measured cached %d output %d itl %d", i, g, o, rr.CachedTokens, rr.OutputTokens, len(rr.ITL))
				}
				if o.TTFT <= 0 || o.TTFT > rr.TTFT() || o.E2E <= 0 || o.E2E > rr.E2E() {
					t.Errorf("record %d: proxy ttft %d e2e %d, client %d %d (the proxy sits inside the client's span)", i, o.TTFT, o.E2E, rr.TTFT(), rr.E2E())
				}
				if api != APIOpenAIChat && !slices.Equal(g.Tokens, recs[i].Tokens) {
					t.Errorf("record %d: tokens differ from the prompt sent", i)
				}
				if api == APISGLang && len(g.OutputTokens) != g.OutputLen {
					t.Errorf("record %d: output ids %d of %d", i, len(g.OutputTokens), g.OutputLen)
				}
				if g.Sampling == nil || !g.Sampling.IgnoreEOS {
					t.Errorf("record %d: sampling %+v", i, g.Sampling)
				}
			}
		})
	}
}

// The client receives exactly the bytes the upstream sent.
func TestCaptureStreamsThroughUnchanged(t *testing.T) {
	body := `{"input_ids":[5,6,7,8,9],"sampling_params":{"max_new_tokens":6},"stream":true}`
	get := func(url string) string {
		_, b := httpDo(t, http.MethodPost, url+"/generate", body)
		return b
	}
	a := replaytest.NewServer(replaytest.Config{})
	defer a.Close()
	b := replaytest.NewServer(replaytest.Config{})
	defer b.Close()
	url, _, _ := startProxy(t, b.URL)
	if direct, proxied := get(a.URL), get(url); direct != proxied || !strings.Contains(direct, "[DONE]") {
		t.Fatalf("proxied body differs:\n%s\n%s", direct, proxied)
	}
}

// An upstream that cannot be reached: the client gets 502, the trace
// records "connect". An upstream that cuts its stream: the client's stream
// is cut too, and the trace records "stream cut".
func TestCaptureFaults(t *testing.T) {
	t.Run("upstream down", func(t *testing.T) {
		down := replaytest.RefusedURL(t)
		url, p, out := startProxy(t, down)
		code, body := httpDo(t, "POST", url+"/generate", `{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":4}}`)
		if code != http.StatusBadGateway || !strings.Contains(body, "upstream") {
			t.Fatalf("status %d body %q", code, body)
		}
		waitInFlight(t, p, 0)
		p.Close()
		_, recs := out.records(t)
		if len(recs) != 1 || recs[0].Observed.Status != "connect" || recs[0].InputLen != 3 || recs[0].OutputLen != 4 {
			t.Fatalf("records %+v", recs)
		}
	})
	t.Run("stream cut", func(t *testing.T) {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			for k := 1; k <= 2; k++ {
				fmt.Fprintf(w, "data: {\"text\":\"w\",\"output_ids\":[%d],\"meta_info\":{\"prompt_tokens\":3,\"completion_tokens\":%d,\"cached_tokens\":0,\"finish_reason\":null}}\n\n", k, k)
				w.(http.Flusher).Flush()
			}
			panic(http.ErrAbortHandler)
		}))
		defer up.Close()
		url, p, out := startProxy(t, up.URL)
		tg := newTarget(t, url, APISGLang)
		var rc recorder
		_, err := tg.Submit(t.Context(), Request{Tokens: []int32{1, 2, 3}, MaxNewTokens: 8, IgnoreEOS: true}, &rc)
		if Reason(err) != "stream cut" {
			t.Fatalf("client saw %v, want a stream cut", err)
		}
		waitInFlight(t, p, 0)
		p.Close()
		_, recs := out.records(t)
		if len(recs) != 1 || recs[0].Observed.Status != "stream cut" || recs[0].OutputLen != 8 {
			t.Fatalf("records %+v %+v", recs, recs[0].Observed)
		}
	})
	t.Run("upstream error status", func(t *testing.T) {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":"overloaded"}`, http.StatusServiceUnavailable)
		}))
		defer up.Close()
		url, p, out := startProxy(t, up.URL)
		code, body := httpDo(t, "POST", url+"/v1/completions", `{"prompt":[1,2],"max_tokens":3}`)
		if code != 503 || !strings.Contains(body, "overloaded") {
			t.Fatalf("status %d body %q", code, body)
		}
		waitInFlight(t, p, 0)
		p.Close()
		_, recs := out.records(t)
		if len(recs) != 1 || recs[0].Observed.Status != "http 503" {
			t.Fatalf("records %+v", recs)
		}
	})
}

// fullWriter takes room bytes, then fails as a full disk does.
type fullWriter struct {
	syncBuffer
	room int
}

func (f *fullWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	n := min(len(p), f.room)
	f.room -= n
	f.mu.Unlock()
	f.syncBuffer.Write(p[:n])
	if n < len(p) {
		return n, fmt.Errorf("write rec.jsonl: %w", syscall.ENOSPC)
	}
	return n, nil
}

// A recorder that cannot record says so at once and stops forwarding:
// requests after the failure get 503 with the reason, not a response that
// nobody will ever see in the trace.
func TestCaptureDiskFull(t *testing.T) {
	up := replaytest.NewServer(replaytest.Config{})
	defer up.Close()
	out := &fullWriter{room: 700} // the header and a record or two
	p, err := NewProxy(t.Context(), CaptureConfig{Upstream: up.URL}, out)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	ok := 0
	for i := 0; i < 20; i++ {
		code, body := httpDo(t, "POST", srv.URL+"/generate", `{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":2}}`)
		switch code {
		case http.StatusOK:
			ok++
		case http.StatusServiceUnavailable:
			if !strings.Contains(body, "no space left") {
				t.Fatalf("503 without the reason: %q", body)
			}
		default:
			t.Fatalf("status %d: %q", code, body)
		}
		if ok > 0 && code == http.StatusServiceUnavailable {
			break
		}
	}
	select {
	case <-p.Failed():
	default:
		t.Fatal("20 requests into a 700-byte disk and the proxy has not failed")
	}
	if ok == 0 || ok >= 20 {
		t.Fatalf("%d requests forwarded, want some before the disk filled and none after", ok)
	}
	waitInFlight(t, p, 0)
	if err := p.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Close = %v, want the disk's error", err)
	}
	if p.Records() >= ok {
		t.Fatalf("%d records written of %d forwarded: the failed one was counted", p.Records(), ok)
	}
	// Every answer is in the trace or named as missing from it.
	lost := p.Unrecorded()
	if p.Records()+len(lost) != ok {
		t.Fatalf("%d answered, %d recorded, %d named unrecorded (%+v)", ok, p.Records(), len(lost), lost)
	}
	for i, u := range lost {
		if u.Status != "ok" || u.Kind != "generate" || u.ID != strconv.Itoa(p.Records()+1+i) {
			t.Errorf("unrecorded %d: %+v, want id %d, generate, ok", i, u, p.Records()+1+i)
		}
	}
}

// slowUpstream is a fake SGLang server that answers every /generate at
// once but the one whose body holds "slow": arrived is closed when that
// one comes, and it is answered when release is closed (or dropped when
// its client goes). The server closes when the test ends.
func slowUpstream(t *testing.T) (up *httptest.Server, arrived <-chan struct{}, release chan struct{}) {
	release, came := make(chan struct{}), make(chan struct{})
	up = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if bytes.Contains(b, []byte(`"slow"`)) {
			close(came)
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprint(w, `{"text":"x","output_ids":[1],"meta_info":{"prompt_tokens":1,"completion_tokens":1,"cached_tokens":0,"finish_reason":{"type":"length"}}}`)
	}))
	t.Cleanup(up.Close)
	return up, came, release
}

// A record waits for every earlier request, so a disk found full only
// when a slow first request finishes had let later ones be answered
// already: the proxy names each request it answered and did not record
// (it used to drop them silently), then refuses the next.
func TestCaptureDiskFullNamesAnsweredRequests(t *testing.T) {
	up, arrived, release := slowUpstream(t)
	out := &fullWriter{room: 1 << 20}
	p, err := NewProxy(t.Context(), CaptureConfig{Upstream: up.URL}, out)
	if err != nil {
		t.Fatal(err)
	}
	out.mu.Lock()
	out.room = 0 // the header fits, no record does
	out.mu.Unlock()
	srv := httptest.NewServer(p)
	defer srv.Close()
	slow := make(chan int, 1)
	go func() {
		res, err := http.Post(srv.URL+"/generate", "application/json", strings.NewReader(`{"input_ids":[1],"rid":"slow"}`))
		if err != nil {
			slow <- 0
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		slow <- res.StatusCode
	}()
	<-arrived
	for range 2 {
		if code, body := httpDo(t, "POST", srv.URL+"/generate", `{"input_ids":[2]}`); code != 200 {
			t.Fatalf("fast request: %d %s", code, body)
		}
	}
	waitInFlight(t, p, 1)
	close(release)
	if code := <-slow; code != 200 {
		t.Fatalf("slow request: %d", code)
	}
	<-p.Failed()
	if code, _ := httpDo(t, "POST", srv.URL+"/generate", `{"input_ids":[3]}`); code != http.StatusServiceUnavailable {
		t.Fatalf("a request after the failure: %d, want 503", code)
	}
	p.Close()
	var got []string
	for _, u := range p.Unrecorded() {
		got = append(got, u.ID+" "+u.Kind+" "+u.Status)
	}
	if want := []string{"1 generate ok", "2 generate ok", "3 generate ok"}; p.Records() != 0 || !slices.Equal(got, want) {
		t.Fatalf("%d records, unrecorded %q, want 0 and %q", p.Records(), got, want)
	}
}

// Records are written in arrival order as soon as all earlier ones are
// done; Close records what is still in flight as interrupted, and the file
// reads back at every step.
func TestCaptureOrderAndInterrupt(t *testing.T) {
	up, arrived, release := slowUpstream(t)
	defer close(release)
	url, p, out := startProxy(t, up.URL)
	ctx, cancel := context.WithCancel(t.Context())
	slowDone := make(chan struct{})
	go func() {
		defer close(slowDone)
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/generate", strings.NewReader(`{"input_ids":[1],"rid":"slow"}`))
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	<-arrived
	if code, _ := httpDo(t, "POST", url+"/generate", `{"input_ids":[2]}`); code != 200 {
		t.Fatalf("fast request: %d", code)
	}
	waitInFlight(t, p, 1) // only the slow request
	if _, recs := out.records(t); len(recs) != 0 {
		t.Fatalf("a record was written before an earlier request finished: %+v", recs)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_, recs := out.records(t)
	if len(recs) != 2 || recs[0].Observed.Status != "interrupted" || recs[1].Observed.Status != "ok" {
		var st []string
		for _, r := range recs {
			st = append(st, r.ID+": "+r.Observed.Status)
		}
		t.Fatalf("records %v, want 1 interrupted and 2 ok", st)
	}
	cancel()
	<-slowDone
}

// BenchmarkCaptureOverhead measures the latency the proxy adds to a
// streamed request: the same sequential requests (16-token prompts, 16
// output tokens in 16 events) against the fake server on loopback,
// directly and through the proxy.
func BenchmarkCaptureOverhead(b *testing.B) {
	up := replaytest.NewServer(replaytest.Config{})
	defer up.Close()
	url, p, _ := startProxy(b, up.URL)
	defer p.Close()
	req := Request{Tokens: make([]int32, 16), MaxNewTokens: 16, IgnoreEOS: true}
	for i := range req.Tokens {
		req.Tokens[i] = int32(1000 + i)
	}
	direct := newTarget(b, up.URL, APISGLang)
	proxied := newTarget(b, url, APISGLang)
	// measure returns the mean E2E and TTFT of n requests.
	measure := func(tg *HTTPTarget, n int) (e2e, ttft time.Duration) {
		for range n {
			rc := recorder{start: time.Now()}
			if _, err := tg.Submit(b.Context(), req, &rc); err != nil {
				b.Fatal(err)
			}
			e2e += time.Since(rc.start)
			ttft += rc.first.Sub(rc.start)
		}
		return e2e / time.Duration(n), ttft / time.Duration(n)
	}
	measure(direct, 50)
	measure(proxied, 50)
	var d, pr, dt, pt time.Duration
	b.ResetTimer()
	for b.Loop() {
		// Interleaved, so that load changes hit both alike.
		e, f := measure(direct, 100)
		d, dt = d+e, dt+f
		e, f = measure(proxied, 100)
		pr, pt = pr+e, pt+f
	}
	us := func(x time.Duration) float64 { return float64(x.Nanoseconds()) / 1e3 / float64(b.N) }
	b.ReportMetric(us(d), "µs/direct-e2e")
	b.ReportMetric(us(pr-d), "µs/added-e2e")
	b.ReportMetric(us(pt-dt), "µs/added-ttft")
}

// Text prompts that share a prefix share the blocks the prefix covers:
// block k covers the text's first (k+1)*64 bytes at 4 bytes per token.
func TestTextBlocks(t *testing.T) {
	a := bytes.Repeat([]byte("abcdefgh"), 40) // 320 bytes: 5 blocks of 64
	b := append(slices.Clone(a[:200]), bytes.Repeat([]byte("X"), 120)...)
	ba, bb := textBlocks(a, 100, 4), textBlocks(b, 100, 4)
	if len(ba) != 6 || len(bb) != 6 { // 100 tokens: 6 full blocks of 16
		t.Fatalf("%d and %d blocks, want 6", len(ba), len(bb))
	}
	// 200 common bytes: blocks 0-2 (up to byte 192) shared, block 3 not.
	for k := range 6 {
		if (ba[k] == bb[k]) != (k < 3) {
			t.Errorf("block %d: shared %v, want %v", k, ba[k] == bb[k], k < 3)
		}
	}
	// Past the text's end the blocks stay distinct (block 5 covers no byte).
	if ba[5] == ba[4] || slices.Contains(ba[:5], ba[5]) {
		t.Errorf("blocks past the text repeat: %x", ba)
	}
	// The same text at a longer prompt keeps its first blocks: the
	// boundaries do not depend on the prompt's length.
	if long := textBlocks(a, 400, 4); !slices.Equal(long[:6], ba) {
		t.Errorf("blocks moved with the prompt's length")
	}
	if textBlocks(a, 15, 4) != nil || textBlocks(nil, 100, 4) != nil {
		t.Error("blocks for a prompt under one block, or without text")
	}
	// At 2 bytes per token a block is 32 bytes: a change at byte 40 keeps
	// block 0 and changes block 1.
	c := slices.Clone(a)
	c[40] = 'Z'
	ha, hc := textBlocks(a, 32, 2), textBlocks(c, 32, 2)
	if len(ha) != 2 || ha[0] != hc[0] || ha[1] == hc[1] || ha[0] == ba[0] {
		t.Errorf("2 bytes per token: %x and %x, want 2 blocks of 32 bytes", ha, hc)
	}
	// Absurd inputs give no blocks instead of a panic or gigabytes: a
	// count beyond what any replay sends, or a rate out of bounds.
	for _, tc := range []struct {
		n   int
		bpt float64
	}{{traces.MaxSynthTokens + 16, 4}, {1 << 62, 4}, {100, 1e17}, {100, 1e300}, {100, 0.01}, {100, math.NaN()}} {
		if got := textBlocks(a, tc.n, tc.bpt); got != nil {
			t.Errorf("textBlocks(%d tokens, %g bytes per token): %d blocks, want none", tc.n, tc.bpt, len(got))
		}
	}
	if one := textBlocks(a, 32, MinTextBytesPerToken); len(one) != 2 || one[0] == ha[0] {
		t.Errorf("1/16 byte per token: %x, want 2 blocks of one byte", one)
	}
}

// What text a request's prompt is: a string, a one-string batch; not a
// longer batch; chat messages length-prefixed with their roles, a
// non-text part by its JSON.
func TestCapturedText(t *testing.T) {
	for _, tc := range []struct {
		api        API
		body, text string
	}{
		{APISGLang, `{"text":"a b"}`, "a b"},
		{APISGLang, `{"text":["a b"]}`, "a b"},
		{APISGLang, `{"text":["a","b"]}`, ""},
		{APIOpenAI, `{"prompt":["x y z"]}`, "x y z"},
		{APIOpenAI, `{"prompt":[1,2]}`, ""},
		{APIOpenAIChat, `{"messages":[{"role":"user","content":"hi"}]}`, "\x04user\x02hi"},
		{APIOpenAIChat, `{"messages":[{"role":"user","content":"a\u0000b"}]}`, "\x04user\x03a\x00b"},
		{APIOpenAIChat, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, "\x04user\x2e[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]"},
	} {
		if got := string(parseCaptured(tc.api, []byte(tc.body)).text); got != tc.text {
			t.Errorf("%v %s: text %q, want %q", tc.api, tc.body, got, tc.text)
		}
	}
}

// A captured chat conversation is a hash trace whose turns share the
// history's blocks; replayed against the simulator, the later turns hit
// the cache (a length-only capture would have hit nothing).
func TestCaptureTextPromptsKeepPrefixes(t *testing.T) {
	up := replaytest.NewServer(replaytest.Config{})
	defer up.Close()
	url, p, out := startProxy(t, up.URL)
	system := func(s string) string {
		return `{"role":"system","content":"` + strings.Repeat(s, 20) + `"},{"role":"user","content":"first question about caches"}`
	}
	history := system("You are a careful assistant who answers briefly. ")
	bodies := []string{
		`{"model":"m","max_tokens":4,"messages":[` + history + `]}`,
		`{"model":"m","max_tokens":4,"messages":[` + history + `,{"role":"assistant","content":"an answer"},{"role":"user","content":"a second question"}]}`,
		// Another conversation: nothing in common with the first.
		`{"model":"m","max_tokens":4,"messages":[` + system("You are a terse assistant who answers at length. ") + `]}`,
	}
	for _, body := range bodies {
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		waitInFlight(t, p, 0)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_, got := out.records(t)
	if len(got) != 3 {
		t.Fatalf("%d records", len(got))
	}
	for i, g := range got {
		if g.Tokens != nil || g.BlockSize != TextBlockSize || len(g.Blocks) != g.InputLen/TextBlockSize || len(g.Blocks) < 3 {
			t.Fatalf("record %d: input %d, %d blocks of %d, tokens %v", i, g.InputLen, len(g.Blocks), g.BlockSize, g.Tokens)
		}
	}
	shared := 0
	for shared < len(got[0].Blocks) && got[0].Blocks[shared] == got[1].Blocks[shared] {
		shared++
	}
	// The fake server counts a word a token: about 165 tokens, 10 blocks
	// covering 640 bytes, all within the 1000-byte system prompt.
	if shared < 10 {
		t.Errorf("the turns share %d blocks: %x / %x", shared, got[0].Blocks, got[1].Blocks)
	}
	if got[2].Blocks[0] == got[0].Blocks[0] {
		t.Errorf("another conversation shares the first block")
	}
	st, err := NewSimTarget(SimConfig{Engine: &sim.Factory{Config: sim.Default(400000), Cost: &hw.Fitted{Prefill: [4]float64{1e6, 1e4, 0, 0}, Decode: [3]float64{1e6, 0, 0}}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.MaxConcurrency = 1
	for i := range got {
		got[i].Observed, got[i].Arrival = nil, 0
	}
	res := runReplay(t, st, cfg, got)
	if c := res.Requests[1].CachedTokens; c != shared*TextBlockSize {
		t.Errorf("the second turn hit %d cached tokens in the simulator, want %d (its shared blocks)", c, shared*TextBlockSize)
	}
	if c := res.Requests[2].CachedTokens; c != 0 {
		t.Errorf("another conversation hit %d cached tokens, want 0", c)
	}
}

// Any request body parses without a panic, and a text prompt's blocks
// always make a valid hash-trace record of the server's length.
func FuzzParseCaptured(f *testing.F) {
	f.Add(0, []byte(`{"text":"hello world","sampling_params":{"max_new_tokens":4}}`), 40, 4.0)
	f.Add(1, []byte(`{"prompt":"a b c","max_tokens":3,"temperature":0.5}`), 17, 0.1)
	f.Add(2, []byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":2}`), 64, 1e17)
	f.Add(1, []byte(`{"prompt":[1,2,3]}`), 3, 4.0)
	f.Add(0, []byte(`{"text":["x"]}`), 1<<40, 4.0)
	f.Fuzz(func(t *testing.T, api int, body []byte, promptTokens int, bpt float64) {
		a := []API{APISGLang, APIOpenAI, APIOpenAIChat}[uint(api)%3]
		in := parseCaptured(a, body)
		n := max(promptTokens, 1)
		rec := traces.Record{ID: "x", InputLen: n, OutputLen: 1}
		if rec.Blocks = textBlocks(in.text, n, bpt); rec.Blocks != nil {
			rec.BlockSize = TextBlockSize
			if len(rec.Blocks) != n/TextBlockSize {
				t.Fatalf("%d blocks for %d tokens", len(rec.Blocks), n)
			}
		}
		if n > 1<<16 {
			return // a valid record, too long to synthesise in a fuzz run
		}
		if _, err := traces.PromptTokens(&rec, traces.DefaultVocab); err != nil {
			t.Fatalf("record of a captured text prompt: %v", err)
		}
	})
}

// A request that meets an upstream connection the server had closed is
// resent on a fresh one, not lost, and its record says so.
func TestCaptureResendsOnStaleUpstream(t *testing.T) {
	up := replaytest.NewServer(replaytest.Config{Fault: replaytest.Fault{DropAfter: 1}})
	defer up.Close()
	url, p, out := startProxy(t, up.URL)
	for i := 0; i < 6; i++ {
		if code, body := httpDo(t, "POST", url+"/generate", `{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":2}}`); code != 200 {
			t.Fatalf("request %d through capture: %d %s", i, code, body)
		}
	}
	waitInFlight(t, p, 0)
	p.Close()
	_, recs := out.records(t)
	retried := 0
	for _, r := range recs {
		if r.Observed.Status != "ok" {
			t.Errorf("record %s: %+v", r.ID, r.Observed)
		}
		retried += r.Observed.Retries
	}
	if len(recs) != 6 || retried == 0 || int64(retried) > up.Dropped() {
		t.Fatalf("%d records with %d resends; the upstream dropped %d", len(recs), retried, up.Dropped())
	}
}
