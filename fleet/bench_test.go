package fleet_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// benchTrace is n requests, one every 20 ms, each a 0 to 600-token prefix
// of one of 8 system prompts and 1 to 400 tokens of its own, 1 to 30
// tokens out.
func benchTrace(n int) []traces.Record {
	rng := rand.New(rand.NewPCG(1, 2))
	recs := make([]traces.Record, n)
	for i := range recs {
		prefix, plen, own := rng.IntN(8), rng.IntN(601), 1+rng.IntN(400)
		toks := make([]int32, 0, plen+own)
		for j := range plen {
			toks = append(toks, int32(1000*prefix+j))
		}
		for j := range own {
			toks = append(toks, int32(100000+1000*i+j))
		}
		recs[i] = traces.Record{ID: fmt.Sprint(i), Arrival: int64(i) * 20e6, InputLen: len(toks), Tokens: toks, OutputLen: 1 + rng.IntN(30)}
	}
	return recs
}

// BenchmarkFleet runs 1,000 requests on a fleet of N small SGLang
// replicas behind round_robin (Fleet), and the same requests as the N
// single-server runs of round_robin's sub-traces (Singles): the fleet's
// loop costs Fleet - Singles. It reports ns per request.
func BenchmarkFleet(b *testing.B) {
	recs := benchTrace(1000)
	cfg := router.Default()
	cfg.Policy = router.RoundRobin
	for _, n := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("Fleet/replicas=%d", n), func(b *testing.B) {
			for b.Loop() {
				reps := make([]fleet.Replica, n)
				for i := range reps {
					reps[i] = fleet.Replica{Group: "g", Factory: sglang()}
				}
				f, err := fleet.New(reps, cfg, 1)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := f.Run(engine.NewSliceSource(recs)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(recs)), "ns/request")
		})
		b.Run(fmt.Sprintf("Singles/replicas=%d", n), func(b *testing.B) {
			subs := make([][]traces.Record, n)
			for i, r := range recs {
				subs[i%n] = append(subs[i%n], r)
			}
			for b.Loop() {
				for _, sub := range subs {
					if _, err := sglang().Run(engine.NewSliceSource(sub)); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(recs)), "ns/request")
		})
	}
}
