// Package enginetest holds the small servers that the tests of the engine
// seam (sim/engine) and of the fleet run on: a cost model with round
// coefficients ([Fitted]), and an SGLang server and a llama-server small
// enough that requests queue, evict and reuse prefixes ([SGLang],
// [Llama]).
//
// Only tests import it (internal/lint checks). It imports both server
// models, so that their own package-internal tests cannot use it.
package enginetest
