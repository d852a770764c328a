//go:build !amd64 || noasm || gccgo || safe

package engine

// sumSorted returns the sum of the n values the runs hold, in order, as
// gonum's floats.Sum adds a slice on this platform (one running sum).
func sumSorted(runs []latencyRun, n int64) float64 {
	c := runCursor{runs: runs}
	var s float64
	for range n {
		s += c.next()
	}
	return s
}
