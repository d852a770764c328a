package tools

import "example.com/fake/sim"

var _ = sim.Run
