package planner

// Reference computes the plan with the plain greedy loop of the contract: at
// every step it rescans every node, scores each eligible one from scratch,
// and takes the smallest score. It costs O(steps * nodes * cp) and is kept
// as the executable specification that [Planner.Plan] is tested against; use
// a [Planner] in the simulator.
//
// cp is len(deficits). Reference validates its input like [Planner.Plan] and
// returns an [*InputError] for malformed input.
func Reference(nodes []Node, deficits []int64) (Plan, error) {
	var s snapshot
	if err := s.load(nodes, deficits); err != nil {
		return Plan{}, err
	}
	for s.positive > 0 {
		best := int32(-1)
		var bestC, bestU int64
		for i := int32(1); i < int32(s.n); i++ {
			if !s.eligible(i) {
				continue
			}
			c, u := s.contribution(i), s.unlock(i)
			if best < 0 || s.better(c, u, i, bestC, bestU, best) {
				best, bestC, bestU = i, c, u
			}
		}
		if best < 0 || (bestC == 0 && bestU == 0) {
			break // nothing eligible, or nothing eligible helps
		}
		s.choose(best)
	}
	return s.result(), nil
}

// better reports whether node i with contribution c and unlock u has a
// smaller score than node j with contribution cj and unlock uj. The score is
// (-contribution, -unlock, SLRU priority, id), compared lexicographically.
func (s *snapshot) better(c, u int64, i int32, cj, uj int64, j int32) bool {
	if c != cj {
		return c > cj
	}
	if u != uj {
		return u > uj
	}
	if k := s.slru[i].Compare(s.slru[j]); k != 0 {
		return k < 0
	}
	return s.id[i] < s.id[j]
}
