package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/tree"
)

// chunkedPrefill returns an online prefill server of 10,000 tokens that
// prefills in chunks of 64 and appends each prefill forward it reports, as
// note writes it, to chunks.
func chunkedPrefill(t *testing.T, chunks *[]string, note func(id string, at engine.Time, computed int64, last bool) string) *Online {
	t.Helper()
	cfg := Default(10000)
	cfg.Scheduler.ChunkedPrefillSize = 64
	o, err := NewOnline(cfg, linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.SetPrefillMode(func(id string, at engine.Time, computed int64, last bool) {
		*chunks = append(*chunks, note(id, at, computed, last))
	}); err != nil {
		t.Fatal(err)
	}
	return o
}

// A prefill server reports every prefill forward of a request with the
// prompt tokens computed so far (the cached prefix included), the last
// one flagged, and generates one token whatever max_new_tokens says.
func TestPrefillModeChunks(t *testing.T) {
	var got []string
	o := chunkedPrefill(t, &got, func(id string, _ engine.Time, computed int64, last bool) string {
		return fmt.Sprintf("%s:%d:%v", id, computed, last)
	})
	if err := o.SetPrefillMode(func(string, engine.Time, int64, bool) {}); err == nil {
		t.Fatal("a second SetPrefillMode = nil")
	}
	for _, r := range []struct {
		id string
		at int64
	}{{"a", 0}, {"b", 1e9}} {
		if err := o.Submit(rec(r.id, r.at, tokens(200, 1), 50)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := o.Finish()
	if err != nil {
		t.Fatal(err)
	}
	// b shares a's prompt: 199 tokens hit (at most prompt - 1), one computed.
	want := "a:64:false a:128:false a:192:false a:200:true b:200:true"
	if strings.Join(got, " ") != want {
		t.Fatalf("chunks %v, want %s", got, want)
	}
	for _, r := range res.Requests {
		if r.OutputTokens != 1 {
			t.Fatalf("%s: %d output tokens on a prefill server", r.ID, r.OutputTokens)
		}
	}
}

// A prefill server that holds requests until sent keeps a prefilled
// request's KV and tree lock, finishing it only at KVSent; a waiting
// request the held memory keeps out waits for it instead of failing.
func TestPrefillModeHold(t *testing.T) {
	cfg := Default(300)
	o, err := NewOnline(cfg, linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.SetPrefillMode(func(string, engine.Time, int64, bool) {}); err != nil {
		t.Fatal(err)
	}
	if err := o.HoldUntilSent(); err != nil {
		t.Fatal(err)
	}
	// a takes 200 of the 300 tokens; b (200) fits only once a is sent.
	for _, id := range []string{"a", "b"} {
		if err := o.Submit(rec(id, 0, tokens(200, int32(id[0])*1000), 5)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := o.RunUntil(5e9); err != nil {
		t.Fatal(err)
	}
	if h, p := o.s.tree.Held(0)+o.s.tree.DeviceUsed(0), o.s.tree.Protected(0); h != 200 || p != 200 || o.Active() != 2 {
		t.Fatalf("before KVSent: %d tokens used, %d locked, %d active", h, p, o.Active())
	}
	if err := o.KVSent("b", 5e9); err == nil {
		t.Fatal("KVSent of a request not prefilled = nil")
	}
	if err := o.KVSent("a", 5e9); err != nil {
		t.Fatal(err)
	}
	evs, err := o.RunUntil(5e9)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].ID != "a" || !evs[0].Done || evs[0].Time != 5e9 || evs[0].Result.Failed != "" {
		t.Fatalf("events at KVSent: %+v", evs)
	}
	// b runs once a is sent (its prefill from 5 s), not failed; it is
	// held in turn until sent.
	for len(o.s.pd.inflight) == 0 {
		at, ok := o.Next()
		if !ok {
			t.Fatal("b never prefilled")
		}
		if _, err := o.RunUntil(at); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.KVSent("b", o.Now()); err != nil {
		t.Fatal(err)
	}
	res, err := o.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if b := res.Requests[1]; b.ID != "b" || b.Failed != "" || b.FirstToken <= 5e9 {
		t.Fatalf("b: %+v", b)
	}
}

// Abort on a prefill server: a request in the forward in progress fails
// at its end and reports no chunk, a waiting one fails at once, and both
// leave nothing held or locked; a finished request cannot be aborted.
func TestPrefillModeAbort(t *testing.T) {
	var chunks []string
	o := chunkedPrefill(t, &chunks, func(id string, at engine.Time, computed int64, _ bool) string {
		return fmt.Sprintf("%s:%d@%d", id, computed, at)
	})
	for _, r := range []struct {
		id   string
		base int32
	}{{"a", 1}, {"b", 5000}, {"c", 9000}} {
		if err := o.Submit(rec(r.id, 0, tokens(200, r.base), 5)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := o.RunUntil(0); err != nil {
		t.Fatal(err)
	}
	// a's first chunk (64 tokens) is in the forward [0, 1.064 ms).
	if err := o.Abort("a", 0, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := o.Abort("b", 0, "gone too"); err != nil {
		t.Fatal(err)
	}
	if err := o.Abort("zz", 0, "?"); err == nil {
		t.Fatal("Abort of an unknown request = nil")
	}
	var done []string
	testutil.Steps(t, o.Next, o.RunUntil, func(_ engine.Time, evs []engine.Event) bool {
		for _, ev := range evs {
			if ev.Done {
				done = append(done, fmt.Sprintf("%s@%d:%s", ev.ID, ev.Time, ev.Result.Failed))
			}
		}
		return true
	})
	// c starts when a's aborted forward ends: 4 chunks of 64, 64, 64, 8.
	want := "c:64@2128000 c:128@3192000 c:192@4256000 c:200@5264000"
	if strings.Join(chunks, " ") != want {
		t.Fatalf("chunks %v, want %s", chunks, want)
	}
	if d := strings.Join(done, " "); d != "b@0:gone too a@1064000:gone c@5264000:" {
		t.Fatalf("completions %s", d)
	}
	if h, p := o.s.tree.Held(0), o.s.tree.Protected(0); h != 0 || p != 0 {
		t.Fatalf("after the aborts %d tokens held, %d locked", h, p)
	}
	if err := o.Abort("c", o.Now(), "late"); err == nil {
		t.Fatal("Abort of a finished request = nil")
	}
}

// A decode server preallocates in queue order while prompt + reserved
// fits beside the reservations of the requests it holds, starts a
// request only when its KV is ready, emits its first token 1 ns later
// and decodes the rest; Abort fails a waiting request and frees its KV.
func TestDecodeModePrealloc(t *testing.T) {
	cfg := Default(1000)
	cfg.Cache.HostTokens = 1000
	if o, _ := NewOnline(cfg, linearCost{}); o.SetDecodeMode(10, func(string, engine.Time, int64) {}) == nil {
		t.Fatal("SetDecodeMode with a radix cache and a host tier = nil")
	}
	cfg.Cache.HostTokens = 0
	cfg.Cache.Disable = true
	o, err := NewOnline(cfg, linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	var pre []string
	if err := o.SetDecodeMode(100, func(id string, at engine.Time, cached int64) {
		pre = append(pre, fmt.Sprintf("%s@%d", id, at))
		if cached != 0 {
			t.Errorf("%s: %d tokens cached on a chunk cache", id, cached)
		}
	}); err != nil {
		t.Fatal(err)
	}
	// a: 400 + 100 fits in 1000; b: 400 + 100 fits in the 500 left; c
	// does not.
	for _, id := range []string{"a", "b", "c"} {
		if err := o.Submit(rec(id, 0, tokens(400, 1), 3)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := o.RunUntil(5); err != nil {
		t.Fatal(err)
	}
	if strings.Join(pre, " ") != "a@0 b@0" {
		t.Fatalf("preallocated %v, want a@0 b@0", pre)
	}
	if err := o.KVReady("c", 5); err == nil {
		t.Fatal("KVReady of a request still in the prealloc queue = nil")
	}
	if err := o.KVReady("a", 10); err != nil {
		t.Fatal(err)
	}
	if err := o.Abort("b", 10, "prefill failed"); err != nil {
		t.Fatal(err)
	}
	var evs []engine.Event
	testutil.Steps(t, o.Next, o.RunUntil, func(_ engine.Time, e []engine.Event) bool {
		evs = append(evs, e...)
		return !slices.ContainsFunc(e, func(ev engine.Event) bool { return ev.ID == "a" && ev.Done })
	})
	// b fails at 10; a's first token at 11, two decode steps after.
	if evs[0].ID != "b" || !evs[0].Done || evs[0].Result.Failed != "prefill failed" || evs[1].ID != "a" || evs[1].Time != 11 {
		t.Fatalf("events %+v", evs)
	}
	// b's abort freed its 400 tokens: c is preallocated at once.
	if strings.Join(pre, " ") != "a@0 b@0 c@10" || len(evs) != 5 || !evs[4].Done || evs[4].Result.OutputTokens != 3 {
		t.Fatalf("preallocated %v", pre)
	}
}

// A decode server with a radix cache matches a request's prompt at
// preallocation against what earlier requests left, allocates only the
// rest, and reports the hit (decode_prefix_len).
func TestDecodeModeRadix(t *testing.T) {
	o, err := NewOnline(Default(1000), linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	cached := map[string]int64{}
	at := map[string]engine.Time{}
	if err := o.SetDecodeMode(100, func(id string, now engine.Time, c int64) {
		cached[id], at[id] = c, now
		if err := o.KVReady(id, now); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	// b shares a's 300-token prompt and adds 100; it arrives after a's
	// end, so a's prompt and output (303 tokens) are in the tree. b takes
	// 100 new tokens of the 697 free, so c's 350 + 100 reserved fit
	// beside b and its reservation (597 free + 3 evictable - 100) at the
	// next iteration, after b's 1 ns prebuilt step; had b taken its whole
	// prompt, c would wait for b's end.
	prompt := tokens(300, 1)
	for _, r := range []struct {
		id     string
		at     int64
		prompt []int32
	}{{"a", 0, prompt}, {"b", 1e9, append(slices.Clone(prompt), tokens(100, 5000)...)}, {"c", 1e9, tokens(350, 9000)}} {
		if err := o.Submit(rec(r.id, r.at, r.prompt, 4)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := o.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if cached["a"] != 0 || cached["b"] != 300 || cached["c"] != 0 || at["b"] != 1e9 || at["c"] != 1e9+1 || res.Summary.Failed != 0 {
		t.Fatalf("decode hits %v at %v, %d failed", cached, at, res.Summary.Failed)
	}
}

// A decode server with the chunk cache and decode offload writes a
// finished request's pages from the one holding the prompt's end to the
// last whole page of prompt + output - 1 to storage, keyed on from the
// prompt: they are there once the write lands, the prompt's whole pages
// are not.
func TestDecodeModeOffload(t *testing.T) {
	cfg := Default(1000)
	cfg.Cache.Disable = true
	cfg.Cache.PageSize = 4
	cfg.Cache.HostTokens = 1000
	cfg.Storage.Enabled = true
	cfg.Storage.DecodeOffload = true
	o, err := NewOnline(cfg, linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.SetDecodeMode(16, func(string, engine.Time, int64) {}); err != nil {
		t.Fatal(err)
	}
	r := rec("a", 0, tokens(10, 1), 9)
	r.OutputTokens = []int32{501, 502, 503, 504, 505, 506, 507, 508, 509}
	if err := o.Submit(r); err != nil {
		t.Fatal(err)
	}
	if _, err := o.RunUntil(0); err != nil {
		t.Fatal(err)
	}
	if err := o.KVReady("a", 0); err != nil {
		t.Fatal(err)
	}
	res, err := o.Finish()
	if err != nil {
		t.Fatal(err)
	}
	// 10 + 9 - 1 = 18 tokens of KV: pages 2 (tokens 8-11) and 3 (12-15).
	if w := res.Counters.StorageWriteTokens; w != 8 || res.Requests[0].Failed != "" {
		t.Fatalf("%d tokens written, failed %q", w, res.Requests[0].Failed)
	}
	seq := append(tokens(10, 1), r.OutputTokens...)
	toks := make([]tree.Token, len(seq))
	for i, v := range seq {
		toks[i] = tree.Token(v)
	}
	path := newPathKey(o.s.pager.TokenPages(toks[:16], nil))
	if got := fmt.Sprint(o.s.st.l3.absent(path, 0, 4, nil)); got != "[{0 2}]" {
		t.Fatalf("absent spans %s, want pages 0-1 only", got)
	}
}
