package fleet_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
	"pgregory.net/rapid"
)

// closedSGLang is sglang() run closed loop by its factory.
func closedSGLang() *sim.Factory {
	f := sglang().(*sim.Factory)
	f.OpenLoop = false
	return f
}

// drawDepTrace is drawTrace with dependencies: each record may name an
// earlier record (or one the trace lacks) as its parent, with a think
// time, and wait for others, as agentic traces' sub-agents do.
func drawDepTrace(t *rapid.T) []traces.Record {
	recs := drawTrace(t)
	for i := range recs {
		if i == 0 {
			continue
		}
		r := &recs[i]
		if rapid.Bool().Draw(t, "has parent") {
			r.Parent = fmt.Sprintf("r%d", rapid.IntRange(0, i).Draw(t, "parent")) // r<i> itself: not earlier, ignored
			r.ThinkTime = rapid.SampledFrom([]int64{0, 0, 1e6, 37e6, 300e6}).Draw(t, "think")
		}
		for range rapid.IntRange(0, 2).Draw(t, "waits") {
			r.WaitFor = append(r.WaitFor, fmt.Sprintf("r%d", rapid.IntRange(0, i-1).Draw(t, "wait")))
		}
	}
	return recs
}

// A fleet of one SGLang replica in closed loop, under any policy, gives
// byte-identical results to the single server's closed-loop run: the
// fleet's requests (their Release and DepWait included), the replica's
// own, both summaries, and the count of dependencies naming no earlier
// request.
func TestOneReplicaIsTheServerClosedLoop(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fac := closedSGLang()
		recs := drawDepTrace(t)
		f, err := fleet.New([]fleet.Replica{{Group: "g", Factory: fac}}, drawRouter(t), 1)
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.RunClosedLoop(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		single, err := fac.Run(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		sameReplica(t, "replica 0", res.Replicas[0].Result, single)
		sameResult(t, "fleet", res.Requests, res.Summary, single)
		if res.IgnoredDeps != single.IgnoredDeps || res.EngineResult().IgnoredDeps != single.IgnoredDeps {
			t.Fatalf("ignored dependencies: fleet %d, single server %d", res.IgnoredDeps, single.IgnoredDeps)
		}
	})
}

// In a closed-loop fleet of mixed replicas under any policy, every
// request reaches the router exactly when the release rule says
// (checkReleaseRule), and the run is deterministic.
func TestClosedLoopReleaseRule(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reps := drawMixed(t, 4)
		recs := drawDepTrace(t)
		fa := fleet.Factory{Replicas: reps, Router: drawRouter(t), Seed: rapid.Uint64().Draw(t, "seed")}
		res, err := fa.RunFleet(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		checkReleaseRule(t, recs, res)
		again, err := fa.RunFleet(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		if a, b := jsonOf(t, res.Requests), jsonOf(t, again.Requests); a != b {
			t.Fatalf("two runs' requests differ")
		}
	})
}

// A disaggregated fleet runs closed loop by the same rule: a request's
// dependants are released when its decode replica finishes it.
func TestPDClosedLoopReleaseRule(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reps, cfg, _ := drawPD(t)
		recs := drawDepTrace(t)
		fa := fleet.Factory{Seed: 7, PD: &fleet.PDFactory{Config: cfg}}
		for _, r := range reps {
			fa.Replicas = append(fa.Replicas, r.Replica)
			fa.PD.Roles = append(fa.PD.Roles, r.Role)
			fa.PD.KVBytesPerToken = append(fa.PD.KVBytesPerToken, r.KVBytesPerToken)
		}
		res, err := fa.RunFleet(engine.NewSliceSource(recs)) // closed loop: not OpenLoop
		if err != nil {
			t.Fatal(err)
		}
		checkReleaseRule(t, recs, res)
		for i, d := range res.PDRequests {
			if r := res.Requests[i]; r.Failed == "" && d.Bootstrap < 0 {
				t.Fatalf("request %s: bootstrap wait %d ns: its split does not start at its release", r.ID, d.Bootstrap)
			}
		}
	})
}

// checkReleaseRule checks that every request of recs finished once and
// was released exactly at the latest of its arrival, every earlier parent
// or wait_for record's finish, and its parent's finish plus its think time
// (from the finishes res reports; not before, when a dependency failed),
// and not admitted before.
func checkReleaseRule(t *rapid.T, recs []traces.Record, res *fleet.Result) {
	finish := map[string]engine.RequestResult{}
	for _, r := range res.Requests {
		if _, dup := finish[r.ID]; dup {
			t.Fatalf("request %s finished twice", r.ID)
		}
		finish[r.ID] = r
	}
	if len(finish) != len(recs) {
		t.Fatalf("%d requests finished, want %d", len(finish), len(recs))
	}
	// end is a request's finish; a failed one reports none, and failed
	// at its release or later (a disaggregated fleet's prefill may fail it
	// after a queue): a lower bound only.
	end := func(id string) (engine.Time, bool) {
		r := finish[id]
		if r.Failed != "" {
			return r.Release, false
		}
		return r.Finish, true
	}
	seen := map[string]bool{}
	for _, rec := range recs {
		want, exact := engine.Time(rec.Arrival), true
		for _, d := range append([]string{rec.Parent}, rec.WaitFor...) {
			if seen[d] {
				e, ok := end(d)
				want, exact = max(want, e), exact && ok
			}
		}
		if seen[rec.Parent] {
			e, _ := end(rec.Parent)
			want = max(want, e+engine.Time(rec.ThinkTime))
		}
		seen[rec.ID] = true
		got := finish[rec.ID]
		if !exact && got.Release > want {
			want = got.Release
		}
		if got.Arrival != engine.Time(rec.Arrival) || got.Release != want || got.DepWait != want-got.Arrival {
			t.Fatalf("request %s (parent %q +%d ns, wait_for %v): arrival %d, release %d, wait %d; want %d, %d, %d",
				rec.ID, rec.Parent, rec.ThinkTime, rec.WaitFor, got.Arrival, got.Release, got.DepWait, rec.Arrival, want, want-engine.Time(rec.Arrival))
		}
		if got.Failed == "" && got.Admitted < want {
			t.Fatalf("request %s admitted at %d, before its release at %d", rec.ID, got.Admitted, want)
		}
	}
}

// A trace without dependencies runs closed loop as open loop, but for
// Release, which a closed loop sets to the arrival.
func TestClosedLoopWithoutDeps(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		recs := drawTrace(t)
		fa := fleet.Factory{Replicas: []fleet.Replica{{Factory: sglang()}, {Factory: llama()}}, Router: drawRouter(t), Seed: 3}
		closed, err := fa.RunFleet(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		fa.OpenLoop = true
		open, err := fa.RunFleet(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		for i := range closed.Requests {
			if r := &closed.Requests[i]; r.Release != r.Arrival || r.DepWait != 0 {
				t.Fatalf("request %s: release %d, wait %d; want its arrival %d", r.ID, r.Release, r.DepWait, r.Arrival)
			}
			closed.Requests[i].Release = 0
		}
		if a, b := jsonOf(t, closed), jsonOf(t, open); a != b {
			t.Fatalf("closed loop:\n%s\nopen loop:\n%s", a, b)
		}
		if a, b := jsonOf(t, closed.Requests), jsonOf(t, open.Requests); a != b {
			t.Fatalf("requests differ:\n%s\nopen loop:\n%s", a, b)
		}
	})
}

// When a record arrives at the very instant a held one is due, a fleet of
// one takes them in the single server's order: the one whose event the
// server scheduled first. r1 waits for r0 and is due at T; r2 arrives at
// T. Its arrival is scheduled when the record before it arrives: r1,
// before r0 finishes (r2 goes first), or r3, after r0 finished (r1 goes
// first). The idle server starts a prefill with whichever comes first.
func TestClosedLoopTieOrder(t *testing.T) {
	rec := func(id string, at int64, base int) traces.Record {
		return traces.Record{ID: id, Arrival: at, InputLen: 300, Tokens: seqTokens(base, 300), OutputLen: 5}
	}
	fac := closedSGLang()
	alone, err := fac.Run(engine.NewSliceSource([]traces.Record{rec("r0", 0, 0)}))
	if err != nil {
		t.Fatal(err)
	}
	end := alone.Requests[0].Finish
	const T = int64(2e9)
	for _, lateArrival := range []bool{false, true} {
		r1 := rec("r1", 1e6, 1000)
		r1.Parent, r1.ThinkTime = "r0", T-int64(end)
		recs := []traces.Record{rec("r0", 0, 0), r1}
		if lateArrival {
			recs = append(recs, rec("r3", int64(end)+1e6, 3000))
		}
		recs = append(recs, rec("r2", T, 2000))
		single, err := fac.Run(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		first := "r2"
		if lateArrival {
			first = "r1"
		}
		for _, r := range single.Requests {
			if r.ID == first && r.Admitted != engine.Time(T) {
				t.Fatalf("late arrival %v: the single server admitted %s at %d, not first at %d", lateArrival, first, r.Admitted, T)
			}
		}
		f, err := fleet.New([]fleet.Replica{{Group: "g", Factory: fac}}, router.Default(), 1)
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.RunClosedLoop(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		g, _ := json.Marshal(res.Requests)
		w, _ := json.Marshal(single.Requests)
		if string(g) != string(w) {
			t.Fatalf("late arrival %v: fleet of one\n%s\nsingle server\n%s", lateArrival, g, w)
		}
	}
}

// seqTokens is the n token ids base, base+1, ...
func seqTokens(base, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(base + i)
	}
	return out
}
