package tree

import "fmt"

// LaneTokens adds to dst[o], for every lane o, the number of tokens at
// positions [from, to) of a sequence that lane o owns, and returns dst.
// Positions are token offsets from the start of the sequence. dst must have
// CP elements.
func (t *Tree) LaneTokens(from, to int64, dst []int64) []int64 {
	addLaneTokens(t.cfg.Lanes, int64(t.cfg.PageSize), int64(t.cfg.CP), from, to, dst)
	return dst
}

// addLaneTokens implements LaneTokens in closed form: O(cp), independent of
// the span's length.
func addLaneTokens(mode LaneMode, pageSize, cp, from, to int64, dst []int64) {
	if to <= from {
		return
	}
	unit := pageSize // tokens per striping unit
	if mode == LaneTokens {
		unit = 1
	}
	if cp == 1 {
		dst[0] += to - from
		return
	}
	for o := int64(0); o < cp; o++ {
		dst[o] += laneCountBelow(to, unit, cp, o) - laneCountBelow(from, unit, cp, o)
	}
}

// laneCountBelow is the number of positions p in [0, x) with (p/unit)%cp == o.
func laneCountBelow(x, unit, cp, o int64) int64 {
	q, rem := x/unit, x%unit
	var full int64
	if q > o {
		full = (q - o + cp - 1) / cp
	}
	n := full * unit
	if q%cp == o {
		n += rem
	}
	return n
}

// takeLanes subtracts lanes from pool, panicking (a caller's bug) if a lane
// would go below zero; name is the public method and what the pool holds.
func takeLanes(pool, lanes []int64, name, what string) {
	for o, v := range lanes {
		if v < 0 || pool[o] < v {
			panic(fmt.Sprintf("tree: %s of %d tokens on lane %d, %d %s", name, v, o, pool[o], what))
		}
		pool[o] -= v
	}
}
