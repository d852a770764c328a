package main

import (
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/replay"
	"github.com/kvsim/kvsim/sim/engine"
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

// simtrace drops dependencies and sends records as the replay's pacer
// does: gap apart without a slot limit or durations; at concurrency c,
// record k waits for a slot freed by an earlier request's end (each
// request taking its previous round's time), never sooner than gap after
// the one before; a record waits for its Parent and WaitFor records' ends,
// queueing behind records already ready.
func TestSimTrace(t *testing.T) {
	recs := []traces.Record{
		{ID: "a", Arrival: 5, InputLen: 1},
		{ID: "b", Arrival: 5, InputLen: 1, Parent: "a", WaitFor: []string{"a"}, ThinkTime: 3},
		{ID: "c", Arrival: 9, InputLen: 1},
		{ID: "d", Arrival: 9, InputLen: 1},
	}
	// arrivals are the records' arrivals in the input's order.
	arrivals := func(rs []traces.Record, in ...traces.Record) []int64 {
		if in == nil {
			in = recs
		}
		at := map[string]int64{}
		for i, r := range rs {
			if i > 0 && r.Arrival < rs[i-1].Arrival {
				t.Errorf("record %s arrives at %d, before the record above it", r.ID, r.Arrival)
			}
			at[r.ID] = r.Arrival
		}
		var out []int64
		for _, r := range in {
			if a, ok := at[r.ID]; ok {
				out = append(out, a)
			}
		}
		return out
	}
	took := func(ds ...int64) map[string]simRequest {
		m := map[string]simRequest{}
		for i, d := range ds {
			id := string(rune('a' + i))
			m[id] = simRequest{ID: id, Arrival: 1000, Finish: 1000 + d}
		}
		return m
	}
	// No durations: b (after a, which takes no time) is ready when a is
	// sent, behind c and d.
	got := simTrace(recs, nil, 0, time.Second)
	if a := arrivals(got); !slices.Equal(a, []int64{0, 3e9, 1e9, 2e9}) {
		t.Errorf("open: arrivals %v, want [0 3e9 1e9 2e9]", a)
	}
	for _, r := range got {
		if r.Parent != "" || r.WaitFor != nil || r.ThinkTime != 0 {
			t.Errorf("dependencies kept: %+v", r)
		}
	}
	if recs[1].Parent != "a" {
		t.Error("simTrace changed its input")
	}
	// Two slots, a taking 300 and c 95: a at 0, c at 5 (b waits for a),
	// c ends at 100 and d takes its slot; a ends at 300 and b follows.
	if a := arrivals(simTrace(recs, took(300, 50, 95, 400), 2, 5)); !slices.Equal(a, []int64{0, 300, 5, 100}) {
		t.Errorf("closed: arrivals %v, want [0 300 5 100]", a)
	}
	// a ends at 3, before the gap after c allows d (at 10): b is ready at
	// 3, but d was queued first.
	if a := arrivals(simTrace(recs, took(3, 1, 100, 1), 0, 5)); !slices.Equal(a, []int64{0, 15, 5, 10}) {
		t.Errorf("dependencies: arrivals %v, want [0 15 5 10]", a)
	}
	// A Parent that is a later record is ignored, as the pacer does.
	cyc := []traces.Record{{ID: "x", Parent: "y", InputLen: 1}, {ID: "y", Parent: "x", InputLen: 1}}
	if a := arrivals(simTrace(cyc, map[string]simRequest{"x": {Finish: 50}}, 1, 5), cyc...); !slices.Equal(a, []int64{0, 50}) {
		t.Errorf("a parent later in the trace: arrivals %v, want [0 50]", a)
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
// hit rate within the bound at the slot count, whatever the pace.
func TestGateFleet(t *testing.T) {
	ok := fleetCmp{n: 30, exact: 30, routed: 30, routedSame: 30, realHit: 0.5, simHit: 0.51, slowdown: 1.1}
	var g gateError
	for _, c := range []struct {
		name     string
		c        fleetCmp
		exact    bool
		maxPP    float64
		wantGate bool
	}{
		{"all met", ok, true, 2, false},
		{"one inexact", fleetCmp{n: 30, exact: 29, realHit: 0.5, simHit: 0.5}, true, -1, true},
		{"one routed elsewhere", fleetCmp{n: 30, exact: 30, routed: 30, routedSame: 29}, true, -1, true},
		{"nothing compared", fleetCmp{}, false, 2, true},
		{"hit rate off", fleetCmp{n: 30, exact: 20, realHit: 0.1, simHit: 0.3, slowdown: 1.2}, false, 2, true},
		{"hit rate off, machine slow", fleetCmp{n: 30, exact: 20, realHit: 0.1, simHit: 0.3, slowdown: 4}, false, 2, true},
		{"hit rate off, no gate", fleetCmp{n: 30, exact: 20, realHit: 0.1, simHit: 0.3, slowdown: 4}, false, -1, false},
	} {
		err := gateFleet(c.c, c.name, c.exact, c.maxPP)
		if errors.As(err, &g) != c.wantGate || (err == nil) == c.wantGate {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// chain makes each record's Parent the previous record of its session and
// drops other dependencies.
func TestChainSessions(t *testing.T) {
	recs := []traces.Record{
		{ID: "1", Session: "A", InputLen: 1, Parent: "9", WaitFor: []string{"9"}, ThinkTime: 4},
		{ID: "2", Session: "B", InputLen: 1},
		{ID: "3", Session: "A", InputLen: 1},
		{ID: "4", InputLen: 1, Parent: "3"},
		{ID: "5", Session: "A", InputLen: 1},
	}
	var got []string
	for _, r := range chainSessions(recs) {
		got = append(got, r.Parent)
		if r.WaitFor != nil || r.ThinkTime != 0 {
			t.Errorf("%s: WaitFor %v, ThinkTime %d kept", r.ID, r.WaitFor, r.ThinkTime)
		}
	}
	if want := []string{"", "", "1", "", "3"}; !slices.Equal(got, want) {
		t.Errorf("parents %q, want %q", got, want)
	}
	if recs[0].Parent != "9" {
		t.Error("chainSessions changed its input")
	}
}

// e2e/nginx.sh's closed loop is the replay's: simTrace and the fleet
// simulator run in turn until the arrivals stop changing send every
// request when kvsim replay --target sim (the pacer itself, in virtual
// time) sends it, on a two-replica round-robin fleet of the llama-server
// config and the chained shared-prefix trace, at concurrency 8 (the
// chains bound what is in flight) and at 2 (the slots do).
func TestSimTraceIsTheReplaysClosedLoop(t *testing.T) {
	base, err := os.ReadFile("../../configs/llamacpp/tiny.toml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "fleet.toml")
	fleetTOML := string(base) + "\n[[fleet.groups]]\nname = \"llama-server\"\ncount = 2\n\n[router]\npolicy = \"nginx_round_robin\"\nupstreams = [\"a:1\", \"b:2\"]\n"
	if err := os.WriteFile(path, []byte(fleetTOML), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := configs.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := f.BuildFleet(configs.ServerOptions{NoTimeline: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := traces.GenerateSharedPrefix(traces.SharedPrefixConfig{
		Questions: []int{6, 6, 6}, SystemPromptLength: 300, QuestionLength: 40, OutputLength: 8,
		Rate: math.Inf(1), Seed: 8, Vocab: traces.Vocab{Lo: 1, Hi: 256},
	})
	if err != nil {
		t.Fatal(err)
	}
	recs := chainSessions(docs)
	const gap = 5 * time.Millisecond
	for _, c := range []int{8, 2} {
		target, err := replay.NewSimTarget(replay.SimConfig{Engine: fb.Factory})
		if err != nil {
			t.Fatal(err)
		}
		cfg := replay.Default()
		cfg.MaxConcurrency, cfg.SendGap, cfg.Vocab = c, gap, traces.Vocab{Lo: 1, Hi: 256}
		rep, err := replay.New(cfg, target, replay.WallClock{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := rep.Run(t.Context(), recs)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{}
		for _, r := range res.Requests {
			want[r.ID] = r.Start
		}
		got := closedLoop(t, fb.Factory, recs, c, gap)
		if len(got) != len(recs) || len(want) != len(recs) {
			t.Fatalf("concurrency %d: %d records, %d simulated, %d replayed", c, len(recs), len(got), len(want))
		}
		for _, r := range got {
			if r.Arrival != want[r.ID] {
				t.Errorf("concurrency %d: %s arrives at %d, the replay sends it at %d", c, r.ID, r.Arrival, want[r.ID])
			}
		}
	}
}

// closedLoop is e2e/nginx.sh's closed_loop in process: simTrace and a
// fresh simulation of what it gives, in turn, until the arrivals repeat.
func closedLoop(t *testing.T, fa engine.Factory, recs []traces.Record, c int, gap time.Duration) []traces.Record {
	t.Helper()
	var prev map[string]simRequest
	arr := simTrace(recs, prev, c, gap)
	for range 100 {
		e, err := fa.New()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range arr {
			if err := e.Submit(r); err != nil {
				t.Fatal(err)
			}
		}
		res, err := e.Finish()
		if err != nil {
			t.Fatal(err)
		}
		prev = map[string]simRequest{}
		for _, r := range res.Requests {
			prev[r.ID] = simRequest{ID: r.ID, Arrival: int64(r.Arrival), Finish: int64(r.Finish)}
		}
		next := simTrace(recs, prev, c, gap)
		if slices.EqualFunc(arr, next, func(a, b traces.Record) bool { return a.ID == b.ID && a.Arrival == b.Arrival }) {
			return arr
		}
		arr = next
	}
	t.Fatal("arrivals still changing after 100 simulations")
	return nil
}
