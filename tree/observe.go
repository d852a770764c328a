package tree

// ResidencyFunc is told every change of a node's residency: n has just
// gained (on) or lost (!on) its device copy (device) or its host copy
// (!device). A node that splits reports nothing: both halves keep the
// residency the node had, page for page. The node is still linked to its
// parent when it loses its last copy, so its path can be read.
type ResidencyFunc func(n *Node, device, on bool)

// ObserveResidency makes the tree call f at every change of a node's
// device or host residency (nil: none, the default, at the cost of one
// nil test per change). f must not change the tree.
func (t *Tree) ObserveResidency(f ResidencyFunc) { t.residency = f }

// observe reports a residency change to the observer, if any.
func (t *Tree) observe(n *Node, device, on bool) {
	if t.residency != nil {
		t.residency(n, device, on)
	}
}
