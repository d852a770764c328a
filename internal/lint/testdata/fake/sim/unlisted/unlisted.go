package unlisted

import "example.com/fake/sim/hw"

var _ = hw.X
