//go:build !amd64 || noasm || gccgo || safe

package engine

// sumSorted returns the sum of the n values c yields, in order, as
// gonum's floats.Sum adds a slice on this platform (one running sum).
func sumSorted(c *runCursor, n int64) float64 {
	var s float64
	for range n {
		s += c.next()
	}
	return s
}
