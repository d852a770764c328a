package configs

import "example.com/fake/nowhere"

var _ = nowhere.X
