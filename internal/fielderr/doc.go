// Package fielderr is the typed error of a configuration field: the key
// path of the field in its domain's own vocabulary ([Path]) and what is
// wrong with it ([Error]). Domain Validate methods (sim, sim/hw,
// sim/llamacpp) return these, joined with errors.Join so that every
// problem is reported at once; configs maps each domain path to the key
// of the TOML file and places it at the line and column go-toml's parser
// found it at ([At]).
//
// A Path prints as TOML writes a key, with array indices in brackets:
// cache.eviction, llamacpp.cost.after_prompt[2].ns, sweep."cache.cp". The
// package knows nothing of TOML files or positions' sources: it is
// vocabulary, not parsing.
package fielderr
