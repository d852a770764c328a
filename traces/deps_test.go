package traces

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvsim/kvsim/internal/testutil"

	"github.com/kvsim/kvsim/internal/golden"
)

// recordedStarts schedules recs by the dependency rules (see deps.go) with
// every request taking its recorded service time (Observed.E2E, 0 when not
// recorded): a request starts at max(Arrival, its Parent's end + ThinkTime,
// its WaitFor gates' ends). It is the model the replay pacer and the
// simulator's tracker follow, without concurrency cap or speedup.
func recordedStarts(recs []Record) []int64 {
	idx := make(map[string]int, len(recs))
	end := make([]int64, len(recs))
	start := make([]int64, len(recs))
	for i := range recs {
		r := &recs[i]
		s := r.Arrival
		if j, ok := idx[r.Parent]; ok {
			s = max(s, end[j]+r.ThinkTime)
		}
		for _, w := range r.WaitFor {
			if j, ok := idx[w]; ok {
				s = max(s, end[j])
			}
		}
		start[i] = s
		end[i] = s
		if r.Observed != nil {
			end[i] += r.Observed.E2E
		}
		idx[r.ID] = i
	}
	return start
}

// fataler is what the checks need of *testing.T and *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// checkReproduced fails unless every start is within 1 ms of its arrival.
func checkReproduced(t fataler, name string, recs []Record) {
	t.Helper()
	late, worst := 0, int64(0)
	for i, s := range recordedStarts(recs) {
		if d := s - recs[i].Arrival; d > 1e6 || d < 0 {
			late++
			worst = max(worst, d)
		}
	}
	if late > 0 {
		t.Fatalf("%s: %d of %d requests start more than 1 ms off their recorded t (worst %d ns late)", name, late, len(recs), worst)
	}
}

func readWEKAFile(t fataler, path string) []Record {
	t.Helper()
	r, err := OpenFiles([]string{path}, FormatWEKA)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return testutil.ReadAll(t, r.Next)
}

// TestWEKAReproducesRecording: with the recorded service times, the
// schedule sends every request of every shared WEKA file at its recorded t.
func TestWEKAReproducesRecording(t *testing.T) {
	for _, dir := range []string{"weka_kv_cache_tester", "weka_kv_cache_tester_subagents"} {
		d := testutil.SharedTrace(t, dir)
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			p := filepath.Join(d, e.Name())
			checkReproduced(t, p, readWEKAFile(t, p))
		}
	}
}

// TestWEKASubagentJoinsGolden pins where the two shared sub-agent files
// join their sub-agents, which run in the background, and every request's
// dependencies and delay.
func TestWEKASubagentJoinsGolden(t *testing.T) {
	for _, name := range []string{"trace_0003", "trace_0010"} {
		t.Run(name, func(t *testing.T) {
			p := testutil.SharedTrace(t, "weka_kv_cache_tester_subagents/"+name+".json")
			recs := readWEKAFile(t, p)
			checkReproduced(t, p, recs)
			var b bytes.Buffer
			gated := map[string]string{}
			last := map[string]string{}
			var subs []string
			for _, r := range recs {
				for _, w := range r.WaitFor {
					gated[w] = r.ID
				}
				if _, ok := last[r.Session]; !ok && strings.Contains(r.Session, "/sa") {
					subs = append(subs, r.Session)
				}
				last[r.Session] = r.ID
			}
			for _, s := range subs {
				if by, ok := gated[last[s]]; ok {
					fmt.Fprintf(&b, "sub-agent %s: joined by %s\n", s, by)
				} else {
					fmt.Fprintf(&b, "sub-agent %s: background\n", s)
				}
			}
			for _, r := range recs {
				fmt.Fprintf(&b, "%s t=%.3f parent=%s delay=%.3f", r.ID, float64(r.Arrival)/1e9, r.Parent, float64(r.ThinkTime)/1e9)
				if r.WaitFor != nil {
					fmt.Fprintf(&b, " wait_for=%s", strings.Join(r.WaitFor, ","))
				}
				b.WriteByte('\n')
			}
			golden.Check(t, filepath.Join("testdata", "agentic", name+".golden"), b.Bytes())
		})
	}
}

// wekaGen draws a WEKA conversation: whole-second or fractional starts,
// recorded service times (sometimes missing), sub-agents launched in
// groups from one turn, with or without duration_ms, nested one level,
// and now and then a request sent before its parent's recorded end.
func wekaGen(t *rapid.T) []byte {
	type req = map[string]any
	clock := 0.0
	var mainReqs []any
	n := rapid.IntRange(1, 12).Draw(t, "turns")
	hash := 0
	mk := func(at float64, label string) req {
		hash++
		q := req{"t": at, "type": "s", "in": 64, "out": 1, "hash_ids": []int{hash}}
		if rapid.IntRange(0, 9).Draw(t, label+"noapi") > 0 {
			q["api_time"] = float64(rapid.IntRange(0, 5000).Draw(t, label+"api")) / 1000
		}
		if rapid.Bool().Draw(t, label+"think") {
			q["think_time"] = float64(rapid.IntRange(0, 3000).Draw(t, label+"thinkv")) / 1000
		}
		return q
	}
	for i := range n {
		label := fmt.Sprint("m", i)
		clock += float64(rapid.IntRange(0, 8).Draw(t, label+"gap"))
		if rapid.Bool().Draw(t, label+"frac") {
			clock += float64(rapid.IntRange(0, 999).Draw(t, label+"fracv")) / 1000
		}
		mainReqs = append(mainReqs, mk(clock, label))
		for k := range rapid.IntRange(0, 2).Draw(t, label+"subs") {
			sl := fmt.Sprint(label, "s", k)
			launch := clock + float64(rapid.IntRange(0, 3000).Draw(t, sl+"launch"))/1000
			// Inner times are offsets from the launch, or on the
			// conversation's clock.
			rel := rapid.Bool().Draw(t, sl+"rel")
			at := launch
			if rel {
				at = 0
			}
			var inner []any
			for j := range rapid.IntRange(1, 4).Draw(t, sl+"n") {
				at += float64(rapid.IntRange(0, 5).Draw(t, fmt.Sprint(sl, j, "gap")))
				inner = append(inner, mk(at, fmt.Sprint(sl, j)))
			}
			sa := req{"type": "subagent", "t": launch, "requests": inner}
			if rapid.IntRange(0, 3).Draw(t, sl+"dur") > 0 {
				sa["duration_ms"] = rapid.IntRange(0, 30000).Draw(t, sl+"durv")
			} else {
				sa["duration_ms"] = nil
			}
			mainReqs = append(mainReqs, sa)
		}
	}
	doc, err := json.Marshal(map[string]any{"id": "g", "block_size": 64, "requests": mainReqs})
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestWEKAReproducesRecordingProperty: for any conversation, the recorded
// starts are reproduced with the recorded service times.
func TestWEKAReproducesRecordingProperty(t *testing.T) {
	dir := t.TempDir()
	rapid.Check(t, func(t *rapid.T) {
		doc, recs := drawWEKA(t, dir)
		checkReproduced(t, string(doc), recs)
	})
}

// drawWEKA draws a conversation document (wekaGen), writes it to dir and
// returns it with its records as the reader reads them.
func drawWEKA(t *rapid.T, dir string) ([]byte, []Record) {
	doc := wekaGen(t)
	p := filepath.Join(dir, "g.json")
	if err := os.WriteFile(p, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	return doc, readWEKAFile(t, p)
}
