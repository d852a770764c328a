package fleet_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/internal/enginetest"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
	"pgregory.net/rapid"
)

// fitted is the cost model of the replicas, sglang a small SGLang server
// (requests queue, evict and reuse prefixes) and llama a small two-slot
// llama-server: the servers the engine tests run on.
var (
	fitted        = enginetest.Fitted
	sglang, llama = enginetest.SGLang, enginetest.Llama
)

// drawTrace draws requests of a few sessions sharing prompt prefixes,
// sorted by arrival, some arriving at the same instant.
func drawTrace(t *rapid.T) []traces.Record {
	n := rapid.IntRange(1, 30).Draw(t, "n")
	var recs []traces.Record
	var at int64
	for i := range n {
		at += rapid.SampledFrom([]int64{0, 1e6, 20e6, 200e6}).Draw(t, "gap")
		prefix := rapid.IntRange(0, 3).Draw(t, "prefix")
		plen := rapid.IntRange(0, 600).Draw(t, "shared")
		own := rapid.IntRange(1, 400).Draw(t, "own")
		toks := enginetest.Prompt(prefix, plen, i, own)
		recs = append(recs, traces.Record{
			ID: fmt.Sprintf("r%d", i), Arrival: at, InputLen: len(toks), Tokens: toks,
			Session:   rapid.SampledFrom([]string{"", "a", "b", "c"}).Draw(t, "session"),
			OutputLen: rapid.IntRange(1, 30).Draw(t, "out"),
		})
	}
	return recs
}

// drawRouter draws a router config of any policy the fleet runs, with
// thresholds, intervals and tree budgets small enough to matter.
func drawRouter(t *rapid.T) router.Config {
	c := router.Default()
	c.Policy = rapid.SampledFrom([]router.Policy{router.CacheAware, router.RoundRobin, router.Random, router.PowerOfTwo, router.ConsistentHash, router.PrefixHash, router.Manual, router.LeastLoad}).Draw(t, "policy")
	c.PrefixHash.TokenCount = rapid.SampledFrom([]int{1, 256}).Draw(t, "prefix_tokens")
	c.Manual.MinLoad = rapid.Bool().Draw(t, "min_load")
	c.CacheAware.CacheThreshold = rapid.SampledFrom([]float64{0, 0.3, 0.9}).Draw(t, "threshold")
	c.CacheAware.BalanceAbsThreshold = rapid.IntRange(0, 4).Draw(t, "abs")
	c.CacheAware.BalanceRelThreshold = rapid.SampledFrom([]float64{1, 1.5, math.Inf(1)}).Draw(t, "rel")
	c.CacheAware.EvictionInterval = time.Duration(rapid.SampledFrom([]int64{1e8, 1e9, 120e9}).Draw(t, "evict"))
	c.CacheAware.MaxTreeSize = rapid.SampledFrom([]int{0, 500, 1 << 26}).Draw(t, "tree")
	c.CacheAware.MissRule = rapid.SampledFrom([]router.MissRule{router.MinLoad, router.SmallestTree}).Draw(t, "miss")
	c.PowerOfTwo.LoadPollInterval = time.Duration(rapid.SampledFrom([]int64{0, 5e7, 1e9}).Draw(t, "poll"))
	c.ConsistentHash.VirtualNodes = rapid.IntRange(1, 200).Draw(t, "vnodes")
	return c
}

// identical returns n replicas of one group, each with its own factory
// from newFac.
func identical(n int, newFac func() engine.Factory) []fleet.Replica {
	var reps []fleet.Replica
	for range n {
		reps = append(reps, fleet.Replica{Group: "g", Factory: newFac()})
	}
	return reps
}

func runFleet(t *rapid.T, reps []fleet.Replica, cfg router.Config, seed uint64, recs []traces.Record) (*fleet.Fleet, *fleet.Result) {
	f, err := fleet.New(reps, cfg, seed)
	return f, runBuilt(t, f, err, recs)
}

// runBuilt runs recs on f, failing the test if building f (err) or the
// run failed.
func runBuilt(t fataler, f *fleet.Fleet, err error, recs []traces.Record) *fleet.Result {
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Run(engine.NewSliceSource(recs))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func jsonOf(t *rapid.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sameResult fails unless got (a replica's or the fleet's) and want (a
// single server's batch run) have byte-identical requests and summaries.
func sameResult(t *rapid.T, what string, gotReqs []engine.RequestResult, gotSum engine.Summary, want *engine.Result) {
	if g, w := jsonOf(t, gotReqs), jsonOf(t, want.Requests); g != w {
		t.Fatalf("%s: requests differ from the single-server run:\n%s\nsingle:\n%s", what, g, w)
	}
	if g, w := jsonOf(t, gotSum), jsonOf(t, want.Summary); g != w {
		t.Fatalf("%s: summary differs from the single-server run:\n%s\nsingle:\n%s", what, g, w)
	}
}

// sameReplica is sameResult for a replica's own result, whose summary
// keeps no inter-token latencies (the replica records them once, in the
// fleet's summary, which sameResult compares whole): its ITL figures must be 0 and
// everything else byte-identical to the single server's.
func sameReplica(t *rapid.T, what string, got, want *engine.Result) {
	s := got.Summary
	if s.MeanITL != 0 || s.MedianITL != 0 || s.StdITL != 0 || s.P90ITL != 0 || s.P99ITL != 0 {
		t.Fatalf("%s: a replica in a fleet keeps inter-token latencies: %+v", what, s)
	}
	w := want.Summary
	s.MeanITL, s.MedianITL, s.StdITL, s.P90ITL, s.P99ITL = w.MeanITL, w.MedianITL, w.StdITL, w.P90ITL, w.P99ITL
	sameResult(t, what, got.Requests, s, want)
}

// A fleet of one replica, under any policy, gives byte-identical results
// to the single-server run of the same trace: the replica's own result and
// the fleet's summary (in which the replicas record their inter-token
// latencies) alike.
func TestOneReplicaIsTheServer(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fac := rapid.SampledFrom([]func() engine.Factory{sglang, llama}).Draw(t, "model")()
		recs := drawTrace(t)
		_, res := runFleet(t, []fleet.Replica{{Group: "g", Factory: fac}}, drawRouter(t), 1, recs)
		single, err := fac.Run(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		sameReplica(t, "replica 0", res.Replicas[0].Result, single)
		sameResult(t, "fleet", res.Requests, res.Summary, single)
	})
}

// The fleet as an engine keeps the Engine contract: submitting each
// request as late as allowed, then advancing in steps of drawn lengths
// (RunUntil limits that fall anywhere, with or without events), gives
// byte-identical results to Fleet.Run; the events RunUntil reports are in
// non-decreasing time and never past its limit, a request's token events
// count its tokens one by one up to its output length, and Active counts
// the requests submitted and not finished.
func TestOnlineStepsAreRun(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 4).Draw(t, "replicas")
		var reps []fleet.Replica
		for range n {
			reps = append(reps, fleet.Replica{Group: "g", Factory: rapid.SampledFrom([]func() engine.Factory{sglang, llama}).Draw(t, "model")()})
		}
		cfg := drawRouter(t)
		recs := drawTrace(t)
		_, want := runFleet(t, reps, cfg, 7, recs)

		e, err := fleet.Factory{Replicas: reps, Router: cfg, Seed: 7}.New()
		if err != nil {
			t.Fatal(err)
		}
		o := e.(*fleet.Online)
		drop := rapid.Bool().Draw(t, "drop_results")
		if drop {
			// Everything but the per-request results is the same.
			o.DropResults()
			want.Requests, want.Replica = nil, nil
		}
		done := 0
		tokens := map[string]int64{}
		step := func(to engine.Time) {
			evs, err := o.RunUntil(to)
			if err != nil {
				t.Fatal(err)
			}
			last := engine.Time(-1)
			for _, ev := range evs {
				if ev.Time < last || ev.Time > to {
					t.Fatalf("event at %d after one at %d, limit %d", ev.Time, last, to)
				}
				last = ev.Time
				if ev.Done {
					done++
					continue
				}
				tokens[ev.ID]++
				if ev.Tokens != tokens[ev.ID] {
					t.Fatalf("request %q: token event %d says %d tokens", ev.ID, tokens[ev.ID], ev.Tokens)
				}
			}
			if o.Now() != to {
				t.Fatalf("Now() = %d after RunUntil(%d)", o.Now(), to)
			}
		}
		submitted := 0
		for _, rec := range recs {
			// Walk towards the arrival in drawn steps, then submit.
			for engine.Time(rec.Arrival) > o.Now()+1 {
				gap := int64(engine.Time(rec.Arrival) - o.Now() - 1)
				step(o.Now() + engine.Time(rapid.Int64Range(1, gap).Draw(t, "step")))
			}
			if err := o.Submit(rec); err != nil {
				t.Fatal(err)
			}
			submitted++
			if got := o.Active(); got != submitted-done {
				t.Fatalf("Active() = %d, want %d submitted - %d done", got, submitted, done)
			}
		}
		// Either FinishFleet runs what is left, or the steps see every event.
		seeAll := rapid.Bool().Draw(t, "step to the end")
		for at, ok := o.Next(); seeAll && ok; at, ok = o.Next() {
			step(at)
		}
		got, err := o.FinishFleet()
		if err != nil {
			t.Fatal(err)
		}
		if g, w := jsonOf(t, got), jsonOf(t, want); g != w {
			t.Fatalf("stepped online:\n%s\nFleet.Run:\n%s", g, w)
		}
		if g, w := jsonOf(t, got.Requests), jsonOf(t, want.Requests); g != w || drop && (got.Requests != nil || got.Replica != nil) {
			t.Fatalf("requests differ (results dropped: %v):\n%s\n%s", drop, g, w)
		}
		for _, r := range got.Requests {
			if seeAll && r.Failed == "" && tokens[r.ID] != r.OutputTokens {
				t.Fatalf("request %q: %d token events, %d output tokens", r.ID, tokens[r.ID], r.OutputTokens)
			}
		}
		// The engine cannot be used after Finish.
		if err := o.Submit(traces.Record{ID: "late", InputLen: 1, OutputLen: 1}); err == nil {
			t.Fatal("submit after Finish accepted")
		}
	})
}

// round_robin over N identical replicas is N single servers, replica k
// running the trace's records k, k+N, k+2N, ... (metamorphic).
func TestRoundRobinIsSubTraces(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		newFac := rapid.SampledFrom([]func() engine.Factory{sglang, llama}).Draw(t, "model")
		n := rapid.IntRange(1, 4).Draw(t, "replicas")
		reps := identical(n, newFac)
		cfg := drawRouter(t)
		cfg.Policy = router.RoundRobin
		recs := drawTrace(t)
		_, res := runFleet(t, reps, cfg, 1, recs)
		for k := range n {
			var sub []traces.Record
			for i := k; i < len(recs); i += n {
				sub = append(sub, recs[i])
			}
			single, err := newFac().Run(engine.NewSliceSource(sub))
			if err != nil {
				t.Fatal(err)
			}
			r := res.Replicas[k]
			sameReplica(t, fmt.Sprintf("replica %d", k), r.Result, single)
			if r.Routed != int64(len(sub)) {
				t.Fatalf("replica %d: routed %d, want %d", k, r.Routed, len(sub))
			}
		}
	})
}

// In a fleet of mixed replicas under any policy, every request is routed
// exactly once and finishes exactly once, the router's in-flight counts
// return to zero, its decisions add up to the requests, and the same run
// again gives byte-identical results.
func TestConservation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		checkConservation(t, drawMixed(t, 5), drawRouter(t), rapid.Uint64().Draw(t, "seed"), drawTrace(t))
	})
}

// drawMixed draws a fleet of 1 to most replicas, each SGLang or
// llama-server.
func drawMixed(t *rapid.T, most int) []fleet.Replica {
	n := rapid.IntRange(1, most).Draw(t, "replicas")
	var reps []fleet.Replica
	for i := range n {
		fac := rapid.SampledFrom([]func() engine.Factory{sglang, llama}).Draw(t, "model")
		reps = append(reps, fleet.Replica{Group: fmt.Sprint("g", i), Factory: fac()})
	}
	return reps
}

// checkConservation runs recs on the fleet twice: every request routed
// and finished exactly once, on the replica that reports it; the routed,
// finished and decided counts agree; nothing is left in flight; the two
// runs are byte-identical.
func checkConservation(t *rapid.T, reps []fleet.Replica, cfg router.Config, seed uint64, recs []traces.Record) {
	f, res := runFleet(t, reps, cfg, seed, recs)
	var ids []string
	owner := map[string]int{}
	for i, r := range res.Requests {
		ids = append(ids, r.ID)
		owner[r.ID] = res.Replica[i]
	}
	for k, r := range res.Replicas {
		for _, rr := range r.Result.Requests {
			if owner[rr.ID] != k {
				t.Fatalf("request %s finished on replica %d, reported on %d", rr.ID, k, owner[rr.ID])
			}
		}
	}
	var want []string
	for _, r := range recs {
		want = append(want, r.ID)
	}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("finished %v, want each of %v once", ids, want)
	}
	var routed, completed, decided int64
	for i, r := range res.Replicas {
		routed += r.Routed
		completed += r.Completed + r.Failed
		if r.Routed != r.Completed+r.Failed {
			t.Fatalf("replica %d: routed %d, finished %d", i, r.Routed, r.Completed+r.Failed)
		}
		if in := f.Router().InFlight(i); in != 0 {
			t.Fatalf("replica %d: %d in flight at the end", i, in)
		}
		if r.MaxInFlight < 0 || r.MeanInFlight > float64(r.MaxInFlight) {
			t.Fatalf("replica %d: mean in flight %v above the max %d", i, r.MeanInFlight, r.MaxInFlight)
		}
	}
	for _, d := range res.Decisions {
		decided += d.Count
	}
	if routed != int64(len(recs)) || completed != routed || decided != routed {
		t.Fatalf("%d requests: routed %d, finished %d, decided %d", len(recs), routed, completed, decided)
	}
	// The router's expectations: one per request routed on a prefix, each
	// above, below or at its hit.
	if e := res.RouterEstimate; e != nil {
		var onPrefix int64
		for _, d := range res.Decisions {
			if d.Reason == router.CacheHit.String() || d.Reason == router.KVHit.String() || d.Reason == router.KVMiss.String() {
				onPrefix += d.Count
			}
		}
		if e.Requests > onPrefix || e.Over+e.Under > e.Requests || e.Expected < 0 || e.Cached < 0 ||
			e.MeanAbsError*float64(e.Requests) < math.Abs(float64(e.Expected-e.Cached))-1e-6 {
			t.Fatalf("router estimate %+v over %d decisions on a prefix", *e, onPrefix)
		}
	}
	_, again := runFleet(t, reps, cfg, seed, recs)
	if a, b := jsonOf(t, res), jsonOf(t, again); a != b {
		t.Fatalf("two runs differ:\n%s\n%s", a, b)
	}
	if a, b := jsonOf(t, res.Requests), jsonOf(t, again.Requests); a != b {
		t.Fatalf("two runs' requests differ")
	}
}

// power_of_two polled at every decision (load_poll_interval = 0) sees each
// replica's requests in the server as of the arrival, so a burst of long
// requests, one a millisecond, alternates between two replicas whatever
// the draws; polled once for the whole burst it sees only the first
// snapshot (all idle) and the draws alone decide.
func TestPowerOfTwoPolledLoad(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(2, 40).Draw(t, "n")
		var recs []traces.Record
		for i := range n {
			recs = append(recs, traces.Record{ID: fmt.Sprint(i), Arrival: int64(i) * 1e6, InputLen: 8,
				Tokens: []int32{int32(i), 1, 2, 3, 4, 5, 6, 7}, OutputLen: 1000})
		}
		cfg := router.Default()
		cfg.Policy = router.PowerOfTwo
		cfg.PowerOfTwo.LoadPollInterval = 0
		reps := []fleet.Replica{{Group: "g", Factory: sglang()}, {Group: "g", Factory: sglang()}}
		seed := rapid.Uint64().Draw(t, "seed")
		_, fresh := runFleet(t, reps, cfg, seed, recs)
		if a, b := fresh.Replicas[0].Routed, fresh.Replicas[1].Routed; a-b > 1 || b-a > 1 {
			t.Fatalf("polled at every decision: routed %d and %d", a, b)
		}
		// Polled once, at the first arrival, for the whole run: every
		// decision compares the same snapshot (all idle), so the routes do
		// not depend on the replicas' state: one-token requests, done
		// before the next arrives, go where the long ones went.
		cfg.PowerOfTwo.LoadPollInterval = time.Hour
		_, stale := runFleet(t, reps, cfg, seed, recs)
		short := slices.Clone(recs)
		for i := range short {
			short[i].OutputLen = 1
		}
		_, other := runFleet(t, reps, cfg, seed, short)
		if a, b := routes(stale), routes(other); !maps.Equal(a, b) {
			t.Fatalf("a stale snapshot routed by the replicas' state: %v and %v", a, b)
		}
	})
}

// routes maps each request to its replica.
func routes(res *fleet.Result) map[string]int {
	m := map[string]int{}
	for i, r := range res.Requests {
		m[r.ID] = res.Replica[i]
	}
	return m
}

// Under manual, every request of a session runs on one replica: all
// replicas stay available and the trace is shorter than max_idle, so a
// session's first replica keeps it (compare consistent_hash, which would
// also, but moves sessions when the fleet grows).
func TestManualKeepsSessions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawRouter(t)
		cfg.Policy = router.Manual
		recs := drawTrace(t)
		reps := identical(rapid.IntRange(1, 4).Draw(t, "replicas"), sglang)
		_, res := runFleet(t, reps, cfg, rapid.Uint64().Draw(t, "seed"), recs)
		session := map[string]string{}
		for _, r := range recs {
			session[r.ID] = r.Session
		}
		home := map[string]int{}
		for i, rr := range res.Requests {
			s := session[rr.ID]
			if s == "" {
				continue
			}
			if h, ok := home[s]; ok && h != res.Replica[i] {
				t.Fatalf("session %q ran on replicas %d and %d", s, h, res.Replica[i])
			}
			home[s] = res.Replica[i]
		}
	})
}
