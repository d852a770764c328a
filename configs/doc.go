// Package configs reads kvsim's TOML files. A file describes a simulated
// server the way an operator would launch SGLang: a model and a GPU (presets,
// with any field overridden), the server arguments that size memory
// ([server], SGLang's names), the cache and scheduler settings, the cost
// model, the host links, and the workload. [Load] decodes a file strictly
// (unknown keys are errors with file:line:column and the key path),
// validates every section at once, and [File.Build] turns it into a
// sim.Config and a cost model. Domain packages own their settings and
// defaults; this package only composes them.
//
// docs/config.md documents every key; a test checks that it lists every key
// this package decodes, so the two cannot drift.
package configs
