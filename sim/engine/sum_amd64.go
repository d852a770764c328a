//go:build amd64 && !noasm && !gccgo && !safe

package engine

// sumSorted returns the sum of the n values c yields, rounded exactly
// as gonum's floats.Sum (internal/asm/f64/sum_amd64.s) rounds it for the
// same values in a slice: eight partial sums (four SSE registers of two
// lanes) take the values in turn, folded together in the assembly's order,
// with the tail added as it adds it. A slice of n >= 2 values that dist
// sorts is 16-byte aligned (Go's size classes for them are multiples of 16,
// except 24 bytes, where both alignments give the same sum), so the
// assembly's one-value alignment step does not apply.
func sumSorted(c *runCursor, n int64) float64 {
	var acc [8]float64
	m := n / 8 * 8
	for j := int64(0); j < m; j++ {
		acc[j%8] += c.next()
	}
	rem := n - m
	acc[0] += acc[6]
	acc[1] += acc[7]
	acc[2] += acc[4]
	acc[3] += acc[5]
	if rem&4 != 0 {
		acc[0] += c.next()
		acc[1] += c.next()
		acc[2] += c.next()
		acc[3] += c.next()
	}
	acc[0] += acc[2]
	acc[1] += acc[3]
	if rem&2 != 0 {
		acc[0] += c.next()
		acc[1] += c.next()
	}
	s := acc[0] + acc[1]
	if rem&1 != 0 {
		s += c.next()
	}
	return s
}
