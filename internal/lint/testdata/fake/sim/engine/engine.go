package engine

// Time is imported by sim, which is above it.
type Time int64
