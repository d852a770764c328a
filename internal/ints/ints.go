// Package ints holds the small integer helpers that several packages of the
// simulator core need (the tree's lanes, the simulator's, the planner's).
package ints

// Sum returns the sum of xs (0 for none).
func Sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}
