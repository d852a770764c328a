package sim

import "example.com/fake/sim/engine"

var _ engine.Time
