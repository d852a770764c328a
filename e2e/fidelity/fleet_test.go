package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/replay"
	"github.com/kvsim/kvsim/traces"
)

// fakeBalancer answers each request with the name of the upstream a round
// robin over names would pick, whatever the session header says.
func fakeBalancer(t *testing.T, names []string) string {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Write([]byte(names[n%len(names)] + "\n"))
		n++
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// route passes when the balancer answers as kvsim's router predicts and
// fails, naming the first differences, when it does not.
func TestRouteCheck(t *testing.T) {
	names := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	client := &http.Client{Timeout: 5 * time.Second}
	cfg := router.Default()
	cfg.Nginx.Upstreams = names
	cfg.Policy = router.NginxRoundRobin
	var out strings.Builder
	if err := routeCheck(client, fakeBalancer(t, names), cfg, 50, &out); err != nil {
		t.Fatalf("round robin against a round robin: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "50 of 50 requests routed as kvsim's router predicts") {
		t.Errorf("output: %s", out.String())
	}
	cfg.Policy = router.NginxHash
	out.Reset()
	var g gateError
	if err := routeCheck(client, fakeBalancer(t, names), cfg, 50, &out); !errors.As(err, &g) {
		t.Fatalf("hash against a round robin: %v, want a gate error\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "nginx chose") {
		t.Errorf("output names no difference: %s", out.String())
	}
}

// simtrace drops dependencies and sets arrivals gap apart without a slot
// limit; at concurrency c, record k >= c arrives when the (k-c+1)-th
// request ends, never sooner than gap after the one before, and never if
// no request ends (too few end times).
func TestSimTrace(t *testing.T) {
	recs := []traces.Record{
		{ID: "a", Arrival: 5, InputLen: 1},
		{ID: "b", Arrival: 5, InputLen: 1, Parent: "a", WaitFor: []string{"a"}, ThinkTime: 3},
		{ID: "c", Arrival: 9, InputLen: 1},
		{ID: "d", Arrival: 9, InputLen: 1},
	}
	arrivals := func(rs []traces.Record) []int64 {
		var out []int64
		for _, r := range rs {
			out = append(out, r.Arrival)
		}
		return out
	}
	got := simTrace(recs, nil, 0, time.Second)
	if a := arrivals(got); !slices.Equal(a, []int64{0, 1e9, 2e9, 3e9}) {
		t.Errorf("open: arrivals %v", a)
	}
	for _, r := range got {
		if r.Parent != "" || r.WaitFor != nil || r.ThinkTime != 0 {
			t.Errorf("dependencies kept: %+v", r)
		}
	}
	if recs[1].Parent != "a" {
		t.Error("simTrace changed its input")
	}
	// Two slots: c waits for the first end (100), d for the second (103),
	// but no sooner than 5 after c.
	if a := arrivals(simTrace(recs, []int64{300, 100, 103, 400}, 2, 5)); !slices.Equal(a, []int64{0, 5, 100, 105}) {
		t.Errorf("closed: arrivals %v, want [0 5 100 105]", a)
	}
	if a := arrivals(simTrace(recs, []int64{100}, 2, 5)); a[2] != 100 || a[3] < 1<<60 {
		t.Errorf("one end for two waiting records: arrivals %v", a)
	}
}

// fleetcmp counts exact requests, both hit rates and (at concurrency 1)
// the requests routed where the simulator routed them, in send order.
func TestCompareFleet(t *testing.T) {
	real := []replay.RequestResult{
		{ID: "b", Sent: true, Start: 20, End: 60, PromptTokens: 100, CachedTokens: 50},
		{ID: "a", Sent: true, Start: 10, End: 20, PromptTokens: 100, CachedTokens: 0},
		{ID: "c", Sent: false},
	}
	sim := []simRequest{
		{ID: "a", PromptTokens: 100, CachedTokens: 0, Replica: 0, Arrival: 0, Finish: 5},
		{ID: "b", PromptTokens: 100, CachedTokens: 40, Replica: 1, Arrival: 0, Finish: 20},
	}
	c, err := compareFleet(real, sim, []string{"x:1", "x:1"}, []string{"x:1", "x:2"})
	if err != nil {
		t.Fatal(err)
	}
	if c.n != 2 || c.exact != 1 || c.realHit != 0.25 || c.simHit != 0.2 || c.routed != 2 || c.routedSame != 1 || c.slowdown != 2 {
		t.Errorf("compareFleet = %+v", c)
	}
	if len(c.firstDiff) != 1 || c.firstDiff[0] != "b: real 50, simulated 40" {
		t.Errorf("differences %q", c.firstDiff)
	}
	if _, err := compareFleet(real, sim[:1], nil, nil); err == nil {
		t.Error("a request missing from the simulator's output: no error")
	}
}

// The gates: every request exact and routed alike at concurrency 1; the
// hit rate within the bound at the slot count, a miss on a machine off the
// calibration's pace being a slowError (exit 3), not a gateError.
func TestGateFleet(t *testing.T) {
	ok := fleetCmp{n: 30, exact: 30, routed: 30, routedSame: 30, realHit: 0.5, simHit: 0.51, slowdown: 1.1}
	var g gateError
	var s slowError
	for _, c := range []struct {
		name            string
		c               fleetCmp
		exact           bool
		maxPP, maxSlow  float64
		wantGate, wantS bool
	}{
		{"all met", ok, true, 2, 1.5, false, false},
		{"one inexact", fleetCmp{n: 30, exact: 29, realHit: 0.5, simHit: 0.5}, true, -1, 0, true, false},
		{"one routed elsewhere", fleetCmp{n: 30, exact: 30, routed: 30, routedSame: 29}, true, -1, 0, true, false},
		{"nothing compared", fleetCmp{}, false, 2, 0, true, false},
		{"hit rate off on pace", fleetCmp{n: 30, exact: 20, realHit: 0.1, simHit: 0.3, slowdown: 1.2}, false, 2, 1.5, true, false},
		{"hit rate off, machine slow", fleetCmp{n: 30, exact: 20, realHit: 0.1, simHit: 0.3, slowdown: 4}, false, 2, 1.5, false, true},
		{"hit rate off, machine fast", fleetCmp{n: 30, exact: 20, realHit: 0.1, simHit: 0.3, slowdown: 0.5}, false, 2, 1.5, false, true},
		{"hit rate off, no pace guard", fleetCmp{n: 30, exact: 20, realHit: 0.1, simHit: 0.3, slowdown: 4}, false, 2, 0, true, false},
	} {
		err := gateFleet(c.c, c.name, c.exact, c.maxPP, c.maxSlow)
		if errors.As(err, &g) != c.wantGate || errors.As(err, &s) != c.wantS || (err == nil) != (!c.wantGate && !c.wantS) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
