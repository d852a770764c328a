package planner

// SetMaxBuckets sets the bucket limit of the planner's queue and returns a
// function that restores it, so that tests can force coarse and clamped
// bucket layouts on small snapshots.
func SetMaxBuckets(n int) (restore func()) {
	old := maxBuckets
	maxBuckets = n
	return func() { maxBuckets = old }
}
