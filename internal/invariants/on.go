//go:build invariants

package invariants

// Enabled reports whether the binary was built with -tags invariants.
const Enabled = true
