package sim

import "example.com/fake/replay"

var _ = replay.Name
