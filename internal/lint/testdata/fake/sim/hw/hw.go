package hw

import "example.com/fake/sim"

var _ = sim.Run

// X is imported by sim/unlisted, which SubLayers does not list.
var X int
