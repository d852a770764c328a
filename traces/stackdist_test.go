package traces

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// lruStatsTwoPass is the brute-force twin of ComputeStats's hit rates: it
// runs one blockLRU per capacity over the requests, as the stats did when
// they read the trace twice.
func lruStatsTwoPass(reqs [][]uint64, fractions []float64) (ideal float64, lru map[string]float64) {
	seen := map[uint64]bool{}
	hits, total := 0, 0
	for _, bl := range reqs {
		k := 0
		for k < len(bl) && seen[bl[k]] {
			k++
		}
		for _, b := range bl {
			seen[b] = true
		}
		hits += k
		total += len(bl)
	}
	lru = map[string]float64{}
	for _, f := range fractions {
		c := newBlockLRU(max(1, int(math.Floor(float64(len(seen))*f))))
		h := 0
		for _, bl := range reqs {
			k := 0
			for k < len(bl) && c.contains(bl[k]) {
				k++
			}
			h += k
			for _, b := range bl {
				c.touch(b)
			}
		}
		lru[strconv.FormatFloat(f, 'f', -1, 64)] = ratio(h, total)
	}
	return ratio(hits, total), lru
}

// The one-pass stack-distance hit rates equal an LRU simulation at every
// capacity, on random prefix-sharing traces (including repeated blocks
// within a request and enough uses to renumber the Fenwick tree).
func TestStackDistMatchesLRU(t *testing.T) {
	fractions := []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.9, 1}
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		var reqs [][]uint64
		var recs []Record
		for i := 0; i < 300; i++ {
			n := 1 + rng.IntN(12)
			bl := make([]uint64, n)
			base := uint64(rng.IntN(40)) * 100
			for j := range bl {
				if rng.IntN(4) == 0 {
					bl[j] = uint64(rng.IntN(3000)) // random, sometimes repeated
				} else {
					bl[j] = base + uint64(j)
				}
			}
			reqs = append(reqs, bl)
			recs = append(recs, Record{ID: strconv.Itoa(i), Arrival: int64(i), InputLen: n * 16, Blocks: bl, BlockSize: 16})
		}
		d := &wekaDecoder{recs: recs}
		st, err := ComputeStats(func() (*Reader, error) { return &Reader{path: "mem", dec: d, format: FormatKVSim}, nil }, StatsOptions{Fractions: fractions})
		if err != nil {
			t.Fatal(err)
		}
		ideal, lru := lruStatsTwoPass(reqs, fractions)
		if *st.IdealHitRate != ideal {
			t.Errorf("seed %d: ideal %v, want %v", seed, *st.IdealHitRate, ideal)
		}
		for k, v := range lru {
			if st.LRUHitRate[k] != v {
				t.Errorf("seed %d: LRU %s = %v, want %v", seed, k, st.LRUHitRate[k], v)
			}
		}
	}
}
