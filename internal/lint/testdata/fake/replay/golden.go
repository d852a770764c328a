package replay

import "example.com/fake/internal/golden"

var _ = golden.Check
