package replay

import (
	"container/heap"
	"io"
	"path/filepath"
	"testing"

	"github.com/kvsim/kvsim/traces"
)

// pacerStarts runs the pacer in virtual time with request i taking
// service(i) and returns every request's send time.
func pacerStarts(t *testing.T, cfg Config, recs []traces.Record, service func(i int) int64) []int64 {
	t.Helper()
	p, err := newPacer(cfg, recs)
	if err != nil {
		t.Fatal(err)
	}
	starts := make([]int64, len(recs))
	var done waitHeap
	var seq uint64
	now := int64(0)
	for !p.allGranted() || len(done) > 0 {
		for _, g := range p.poll(now) {
			starts[g.idx] = g.slot
			seq++
			heap.Push(&done, wait{at: g.slot + service(g.idx), seq: seq, idx: g.idx})
		}
		// Finishes at now come first, then the next wake.
		if len(done) > 0 && done[0].at <= now {
			w := heap.Pop(&done).(wait)
			p.finish(w.idx, w.at)
			continue
		}
		next, ok := p.nextWake()
		if len(done) > 0 && (!ok || done[0].at < next) {
			next, ok = done[0].at, true
		}
		if !ok {
			break
		}
		now = max(now, next)
	}
	return starts
}

// TestPacerReproducesWEKARecording: replayed with their recorded service
// times (api_time), the shared sub-agent files send every request at its
// recorded t.
func TestPacerReproducesWEKARecording(t *testing.T) {
	for _, name := range []string{"trace_0003.json", "trace_0010.json"} {
		p := filepath.Join("../../shared/data/traces/weka_kv_cache_tester_subagents", name)
		r, err := traces.OpenFiles([]string{p}, traces.FormatWEKA)
		if err != nil {
			t.Skipf("shared trace not available: %v", err)
		}
		var recs []traces.Record
		for {
			rec, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, rec)
		}
		r.Close()
		cfg := Default()
		cfg.Pacing = PaceTimestamps
		starts := pacerStarts(t, cfg, recs, func(i int) int64 {
			if o := recs[i].Observed; o != nil {
				return o.E2E
			}
			return 0
		})
		for i, s := range starts {
			if d := s - recs[i].Arrival; d < 0 || d > 1e6 {
				t.Fatalf("%s: %s sent at %d ns, recorded at %d ns", name, recs[i].ID, s, recs[i].Arrival)
			}
		}
	}
}
