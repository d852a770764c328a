package router

import (
	"errors"
	"slices"
	"testing"
)

// TestPD: the two pools choose independently by their own policies, both
// legs count the request in flight for its whole life whatever the policy,
// and a finish drops both.
func TestPD(t *testing.T) {
	pre, dec := Default(), Default()
	pre.Policy = CacheAware
	dec.Policy = RoundRobin
	p, err := NewPD(pre, dec, 2, 3, Deps{}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	var pairs []Pair
	for _, text := range []string{"abc", "abcd", "xyz", "abce"} {
		pair, err := p.Route(&Request{Text: text})
		if err != nil {
			t.Fatal(err)
		}
		pairs = append(pairs, pair)
	}
	gotP := []int{pairs[0].Prefill.Replica, pairs[1].Prefill.Replica, pairs[2].Prefill.Replica, pairs[3].Prefill.Replica}
	gotD := []int{pairs[0].Decode.Replica, pairs[1].Decode.Replica, pairs[2].Decode.Replica, pairs[3].Decode.Replica}
	if want := []int{0, 0, 1, 0}; !slices.Equal(gotP, want) {
		t.Fatalf("prefill replicas %v, want %v", gotP, want)
	}
	if want := []int{0, 1, 2, 0}; !slices.Equal(gotD, want) {
		t.Fatalf("decode replicas %v, want %v", gotD, want)
	}
	if p.Decode.Load(0) != 2 || p.Decode.Load(2) != 1 {
		t.Fatalf("decode loads %d, %d; PD counts round_robin too", p.Decode.Load(0), p.Decode.Load(2))
	}
	for _, pair := range pairs {
		if err := p.Finish(pair); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if p.Prefill.InFlight(i) != 0 {
			t.Fatalf("prefill %d in flight %d", i, p.Prefill.InFlight(i))
		}
	}
	if err := p.Finish(pairs[0]); err == nil {
		t.Fatal("a second Finish of the same pair = nil")
	}
	for i := range 3 {
		p.Decode.SetAvailable(i, false)
	}
	if _, err := p.Route(&Request{Text: "abc"}); !errors.Is(err, ErrNoReplica) {
		t.Fatalf("Route with no decode replica = %v", err)
	}
	if p.Prefill.InFlight(0)+p.Prefill.InFlight(1) != 0 {
		t.Fatal("a failed PD route left the prefill leg in flight")
	}
}

func TestPDConfigKeys(t *testing.T) {
	bad := Default()
	bad.CacheAware.CacheThreshold = 2
	want := "router.decode.cache_threshold: must be in [0, 1] (got 2)"
	if _, err := NewPD(Default(), bad, 1, 1, Deps{}, Deps{}); err == nil || err.Error() != want {
		t.Fatalf("NewPD = %v, want %q", err, want)
	}
}
