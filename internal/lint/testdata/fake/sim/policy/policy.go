package policy

import "example.com/fake/replay"

var _ = replay.Name
