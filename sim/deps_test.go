package sim

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

func runClosed(t *testing.T, recs ...traces.Record) *engine.Result {
	t.Helper()
	_, res := simulate(t, Default(1<<20), (*Sim).RunClosedLoop, recs)
	return res
}

// TestClosedLoopRelease: a request goes to the server when its parent has
// finished plus its delay, a wait_for gate adds no delay, and a request
// whose dependencies finished long ago goes at its arrival.
func TestClosedLoopRelease(t *testing.T) {
	a := rec("a", 0, tokens(1000, 0), 4)
	c := rec("c", 500e3, tokens(300, 5000), 1)
	c.WaitFor, c.ThinkTime = []string{"a"}, 5e6 // no parent: the delay does not apply
	b := rec("b", 1e6, tokens(1200, 0), 2)
	b.Parent, b.ThinkTime = "a", 5e6
	d := rec("d", 10e9, tokens(100, 9000), 1)
	d.Parent, d.WaitFor, d.ThinkTime = "b", []string{"c", "unknown"}, 1e6
	res := runClosed(t, a, c, b, d)
	got := byID(res)
	switch {
	case got["a"].Release != 0 || got["a"].DepWait != 0:
		t.Fatalf("a: release %d, dep wait %d; want 0, 0", got["a"].Release, got["a"].DepWait)
	case got["c"].Release != got["a"].Finish:
		t.Fatalf("c: release %d, want a's finish %d (a gate adds no delay)", got["c"].Release, got["a"].Finish)
	case got["b"].Release != got["a"].Finish+5e6:
		t.Fatalf("b: release %d, want a's finish + 5 ms = %d", got["b"].Release, got["a"].Finish+5e6)
	case got["b"].DepWait != got["b"].Release-1e6:
		t.Fatalf("b: dep wait %d, want %d", got["b"].DepWait, got["b"].Release-1e6)
	case got["d"].Release != 10e9 || got["d"].DepWait != 0:
		t.Fatalf("d: release %d, dep wait %d; want its arrival", got["d"].Release, got["d"].DepWait)
	}
	// TTFT and E2E count from the release.
	if r := got["b"]; r.TTFT() != r.FirstToken-r.Release || r.E2E() != r.Finish-r.Release {
		t.Fatalf("b: TTFT %d, E2E %d do not count from the release %d", r.TTFT(), r.E2E(), r.Release)
	}
	// Open loop: every request at its arrival.
	open := byID(runSim(t, Default(1<<20), a, c, b, d))
	if open["b"].Admitted >= got["b"].Admitted {
		t.Fatalf("b admitted at %d open-loop, %d closed-loop: want earlier open-loop", open["b"].Admitted, got["b"].Admitted)
	}
	if !reflect.DeepEqual(res, runClosed(t, a, c, b, d)) {
		t.Fatal("two closed-loop runs differ")
	}
}

// TestClosedLoopWithoutDependencies: a trace without dependencies runs
// closed-loop exactly as open-loop.
func TestClosedLoopWithoutDependencies(t *testing.T) {
	var recs []traces.Record
	for i := range 50 {
		recs = append(recs, rec(string(rune('A'+i)), int64(i)*3e6, tokens(200+10*i, int32(i%3)*1000), 3))
	}
	closed, open := runClosed(t, recs...), runSim(t, Default(1<<20), recs...)
	for i := range closed.Requests {
		c, o := closed.Requests[i], open.Requests[i]
		if c.Release != c.Arrival || c.DepWait != 0 {
			t.Fatalf("%s: release %d, dep wait %d; want its arrival", c.ID, c.Release, c.DepWait)
		}
		c.Release = 0
		if c != o {
			t.Fatalf("closed loop %+v\n open loop %+v", c, o)
		}
	}
	if closed.Summary != open.Summary {
		t.Fatalf("summaries differ:\n%+v\n%+v", closed.Summary, open.Summary)
	}
}

func TestClosedLoopRepeatedID(t *testing.T) {
	s, err := New(Default(1<<20), linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.RunClosedLoop(engine.NewSliceSource([]traces.Record{rec("x", 0, tokens(10, 0), 1), rec("x", 1, tokens(10, 0), 1)}))
	if err == nil || !strings.Contains(err.Error(), `request "x"`) {
		t.Fatalf("err = %v, want one naming the repeated id", err)
	}
}

// BenchmarkClosedLoop runs the bundled Mooncake trace (no dependencies)
// open- and closed-loop on the default server without storage: the cost of
// tracking every record's completion.
//
//	go test ./sim -run '^$' -bench ClosedLoop -benchtime 1x
func BenchmarkClosedLoop(b *testing.B) {
	testutil.RunBool(b, "open", "closed", func(b *testing.B, closed bool) {
		cfg, cost := defaultStorageConfig(b)
		cfg.Storage.Enabled = false
		run := (*Sim).Run
		if closed {
			run = (*Sim).RunClosedLoop
		}
		res := benchConversation(b, cfg, cost, run)
		b.ReportMetric(res.Summary.CacheHitRate, "hit-rate")
	})
}

// A dependency that names no earlier request is counted, and the request
// runs without it.
func TestIgnoredDependencies(t *testing.T) {
	s, err := New(Default(10000), linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	b := rec("b", 0, tokens(10, 1), 2)
	b.Parent = "nobody"
	b.WaitFor = []string{"a", "later"}
	res, err := s.RunClosedLoop(engine.NewSliceSource([]traces.Record{rec("a", 0, tokens(10, 1), 2), b, rec("later", 0, tokens(10, 1), 2)}))
	if err != nil {
		t.Fatal(err)
	}
	if res.IgnoredDeps != 2 || len(res.Requests) != 3 {
		t.Fatalf("ignored %d, %d requests; want 2 and 3", res.IgnoredDeps, len(res.Requests))
	}
}

// TestRecordEndsMatchMap checks the tracker's compact table of finish
// times against a plain map: every ID added is found, with the time it
// finished at (or none yet), every other ID is not, whatever mix of dense,
// scattered, non-canonical and other IDs arrives.
func TestRecordEndsMatchMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := recordEnds{named: map[string]int32{}}
		type state struct {
			end  engine.Time
			done bool
		}
		model := map[string]*state{}
		var added []string
		id := rapid.OneOf(
			rapid.Map(rapid.IntRange(0, 3000), strconv.Itoa),
			rapid.Map(rapid.IntRange(0, 1<<40), strconv.Itoa),
			rapid.Map(rapid.IntRange(0, 50), func(n int) string { return "0" + strconv.Itoa(n) }),
			rapid.Map(rapid.IntRange(0, 50), func(n int) string { return "+" + strconv.Itoa(n) }),
			rapid.StringMatching(`[a-c0-9#]{0,4}`),
		)
		check := func(x string) {
			j, ok := r.find(x)
			m, wok := model[x]
			if ok != wok {
				t.Fatalf("find(%q) found %v, want %v", x, ok, wok)
			}
			if !ok {
				return
			}
			if end, done := r.end(j); done != m.done || (done && end != m.end) {
				t.Fatalf("end(%q) = %d, %v; want %d, %v", x, end, done, m.end, m.done)
			}
		}
		for range rapid.IntRange(0, 400).Draw(t, "n") {
			if len(added) > 0 && rapid.IntRange(0, 2).Draw(t, "finish") == 0 {
				x := added[rapid.IntRange(0, len(added)-1).Draw(t, "which")]
				end := rapid.OneOf(
					rapid.Int64Range(0, 1e15),        // kept in the table (below 2^48-3)
					rapid.Int64Range(1<<48-5, 1<<48), // either side of its limit
					rapid.Int64Range(0, math.MaxInt64),
				).Draw(t, "end")
				j, _ := r.find(x)
				r.finish(j, engine.Time(end))
				*model[x] = state{end: engine.Time(end), done: true}
				check(x)
				continue
			}
			x := id.Draw(t, "id")
			check(x)
			if _, ok := model[x]; !ok {
				r.add(x)
				model[x] = &state{}
				added = append(added, x)
				check(x)
			}
		}
		for x := range model {
			check(x)
		}
	})
}
