// Package tree is clean: an injected generator, and a local variable that
// shadows the rand package.
package tree

import "math/rand/v2"

// Pick draws from an injected generator.
func Pick(r *rand.Rand) int { return r.IntN(3) }

// Shadow names its generator rand.
func Shadow(seed uint64) int {
	rand := rand.New(rand.NewPCG(seed, 1))
	return rand.IntN(3)
}
