package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/sim/engine"
)

// A prefill server reports every prefill forward of a request with the
// prompt tokens computed so far (the cached prefix included), the last
// one flagged, and generates one token whatever max_new_tokens says.
func TestPrefillModeChunks(t *testing.T) {
	cfg := Default(10000)
	cfg.Scheduler.ChunkedPrefillSize = 64
	o, err := NewOnline(cfg, linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := o.SetPrefillMode(func(id string, at engine.Time, computed int64, last bool) {
		got = append(got, fmt.Sprintf("%s:%d:%v", id, computed, last))
	}); err != nil {
		t.Fatal(err)
	}
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

// A decode server preallocates in queue order while prompt + reserved
// fits beside the reservations of the requests it holds, starts a
// request only when its KV is ready, emits its first token 1 ns later
// and decodes the rest; Abort fails a waiting request and frees its KV.
func TestDecodeModePrealloc(t *testing.T) {
	cfg := Default(1000)
	if o, _ := NewOnline(cfg, linearCost{}); o.SetDecodeMode(10, func(string, engine.Time) {}) == nil {
		t.Fatal("SetDecodeMode with the radix cache on = nil")
	}
	cfg.Cache.Disable = true
	o, err := NewOnline(cfg, linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	var pre []string
	if err := o.SetDecodeMode(100, func(id string, at engine.Time) { pre = append(pre, fmt.Sprintf("%s@%d", id, at)) }); err != nil {
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
	for {
		at, ok := o.Next()
		if !ok {
			break
		}
		e, err := o.RunUntil(at)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e...)
		if slices.ContainsFunc(e, func(ev engine.Event) bool { return ev.ID == "a" && ev.Done }) {
			break
		}
	}
	// b fails at 10; a's first token at 11, two decode steps after.
	if evs[0].ID != "b" || !evs[0].Done || evs[0].Result.Failed != "prefill failed" || evs[1].ID != "a" || evs[1].Time != 11 {
		t.Fatalf("events %+v", evs)
	}
	// b's abort freed its 400 tokens: c is preallocated at once.
	if strings.Join(pre, " ") != "a@0 b@0 c@10" || len(evs) != 5 || !evs[4].Done || evs[4].Result.OutputTokens != 3 {
		t.Fatalf("preallocated %v", pre)
	}
}
