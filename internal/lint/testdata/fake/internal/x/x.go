// Package x is internal: importable from everywhere, and it may import
// anything.
package x

import "example.com/fake/replay"

var _ = replay.Name

// Nothing does nothing.
func Nothing() {}
