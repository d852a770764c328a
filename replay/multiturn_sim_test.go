package replay

import (
	"context"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kvsim/kvsim/sim"
)

func defaultSimTarget(t *testing.T) *SimTarget {
	t.Helper()
	fitted := testFitted
	st, err := NewSimTarget(SimConfig{Engine: &sim.Factory{Config: sim.Default(400000), Cost: &fitted}})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// runTwiceSame runs cfg on two fresh simulators and checks the results are
// identical.
func runTwiceSame(t *testing.T, cfg MultiTurnConfig) *MultiTurnResult {
	t.Helper()
	a, err := defaultSimTarget(t).MultiTurn(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := defaultSimTarget(t).MultiTurn(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs of the same config differ")
	}
	return a
}

// The benchmark in virtual time is deterministic, keeps at most
// MaxParallel turns in flight, sends every client's rounds in order, and
// each later turn hits the cache on the history the simulator served.
func TestSimMultiTurnVirtualTime(t *testing.T) {
	cfg := MultiTurnConfig{Clients: 12, MaxParallel: 4, RequestLength: 300, OutputLength: 16, Rounds: 3,
		SubQuestionLength: 40, Rate: 40, Seed: 3}
	a := runTwiceSame(t, cfg)
	if len(a.Requests) != cfg.Clients*cfg.Rounds || a.Interrupted || a.OutputIDsMissing != 0 {
		t.Fatalf("%d requests (want %d), interrupted %v, %d without output ids", len(a.Requests), cfg.Clients*cfg.Rounds, a.Interrupted, a.OutputIDsMissing)
	}
	// In flight at once: never more than the cap, and the cap is reached.
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, rr := range a.Requests {
		if rr.Failed != "" {
			t.Fatalf("%s failed: %s %s", rr.ID, rr.Failed, rr.Detail)
		}
		edges = append(edges, edge{rr.Start, 1}, edge{rr.End, -1})
	}
	slices.SortFunc(edges, func(x, y edge) int {
		if x.at != y.at {
			return int(x.at - y.at)
		}
		return x.delta - y.delta // ends before starts at one instant
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	if most != cfg.MaxParallel {
		t.Errorf("at most %d turns in flight, want the cap %d", most, cfg.MaxParallel)
	}
	// Every client's turns in order, each sent after the previous ended,
	// with the previous prompt and its output ids as its prefix.
	byID := map[string]int{}
	for i, rec := range a.Records {
		byID[rec.ID] = i
	}
	for i, rec := range a.Records {
		if rec.Parent == "" {
			continue
		}
		p, ok := byID[rec.Parent]
		if !ok {
			t.Fatalf("%s: parent %s never ran", rec.ID, rec.Parent)
		}
		prev, rr := a.Records[p], a.Requests[i]
		if rr.Start < a.Requests[p].End {
			t.Errorf("%s sent at %d, before %s ended at %d", rec.ID, rr.Start, rec.Parent, a.Requests[p].End)
		}
		want := append(slices.Clone(prev.Tokens), a.Requests[p].OutputIDs...)
		if !slices.Equal(rec.Tokens[:len(want)], want) {
			t.Errorf("%s does not extend %s and its output", rec.ID, rec.Parent)
		}
		if rr.CachedTokens < len(prev.Tokens) {
			t.Errorf("%s: %d cached tokens, want at least the %d of %s", rec.ID, rr.CachedTokens, len(prev.Tokens), rec.Parent)
		}
	}
}

// simClock reads the simulator's time, for the wall-clock driver sending
// one request at a time through SimTarget.Submit (which reports times in
// the simulator's): it never sleeps, so only runs without gaps use it.
type simClock struct{ t *SimTarget }

func (c simClock) Now() time.Time {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return vtime(c.t.base + c.t.o.Now())
}

func (c simClock) SleepUntil(ctx context.Context, _ time.Time) error { return ctx.Err() }

// With one turn in flight and no gaps, the virtual-time driver and the
// wall-clock one (each request alone on the simulator through Submit, its
// clock the simulator's) run the same turns at the same simulated
// instants: every TTFT, E2E, ITL, cached count and output is the same.
func TestSimMultiTurnMatchesSerialSubmit(t *testing.T) {
	cfg := MultiTurnConfig{Clients: 5, MaxParallel: 1, RequestLength: 200, OutputLength: 8, Rounds: 3,
		SubQuestionLength: 30, Rate: math.Inf(1), ReadyQueue: "fifo", Seed: 9}
	virt, err := defaultSimTarget(t).MultiTurn(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	serial := defaultSimTarget(t)
	wall, err := MultiTurn(context.Background(), cfg, serial, simClock{serial})
	if err != nil {
		t.Fatal(err)
	}
	if len(virt.Requests) != len(wall.Requests) {
		t.Fatalf("%d requests in virtual time, %d in wall-clock time", len(virt.Requests), len(wall.Requests))
	}
	for i := range virt.Requests {
		v, w := virt.Requests[i], wall.Requests[i]
		if v.ID != w.ID || v.Start != w.Start || v.TTFT() != w.TTFT() || v.E2E() != w.E2E() || v.CachedTokens != w.CachedTokens || !slices.Equal(v.OutputIDs, w.OutputIDs) || !slices.Equal(v.ITL, w.ITL) {
			t.Errorf("request %d: virtual %s TTFT %d E2E %d cached %d; wall %s TTFT %d E2E %d cached %d", i, v.ID, v.TTFT(), v.E2E(), v.CachedTokens, w.ID, w.TTFT(), w.E2E(), w.CachedTokens)
		}
	}
}

// A cancelled run sends nothing.
func TestSimMultiTurnCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := defaultSimTarget(t).MultiTurn(ctx, MultiTurnConfig{Clients: 3, MaxParallel: 2, RequestLength: 10, OutputLength: 2, Rounds: 2, Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Interrupted || len(res.Requests) != 0 {
		t.Errorf("interrupted %v with %d requests, want true and 0", res.Interrupted, len(res.Requests))
	}
}

// Per-request timeouts apply in virtual time: a turn past its deadline
// fails as "timeout" after exactly the timeout and ends its client; the
// run still ends, the same way every time. (Here the first round's turns
// take 209 ms and the second's would take 242: at 220 ms every second turn
// times out.)
func TestSimMultiTurnTimeout(t *testing.T) {
	cfg := MultiTurnConfig{Clients: 8, MaxParallel: 8, RequestLength: 2000, OutputLength: 16, Rounds: 3,
		Rate: math.Inf(1), Seed: 4, Timeout: 220 * time.Millisecond}
	a := runTwiceSame(t, cfg)
	ended := map[string]bool{}
	timeouts := 0
	for i, rr := range a.Requests {
		rec := a.Records[i]
		if ended[rec.Session] {
			t.Errorf("%s sent after its client timed out", rec.ID)
		}
		if rr.Failed == "timeout" {
			timeouts++
			ended[rec.Session] = true
			if d := rr.End - rr.Start; d != int64(cfg.Timeout) {
				t.Errorf("%s timed out after %d ns, want %d", rec.ID, d, cfg.Timeout)
			}
		}
	}
	if timeouts == 0 || timeouts == len(a.Requests) {
		t.Errorf("%d of %d turns timed out: the test wants some", timeouts, len(a.Requests))
	}
}

// A rate beyond what whole-nanosecond gaps can carry is refused (inf sends
// without gaps).
func TestMultiTurnRateBound(t *testing.T) {
	cfg := MultiTurnConfig{Clients: 1, MaxParallel: 1, RequestLength: 1, OutputLength: 1, Rounds: 1, Rate: 1e12}
	if _, err := defaultSimTarget(t).MultiTurn(context.Background(), cfg); err == nil {
		t.Error("rate 1e12: no error")
	}
}
