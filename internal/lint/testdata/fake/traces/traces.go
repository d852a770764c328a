package traces

import "math/rand"

var _ = rand.Intn
