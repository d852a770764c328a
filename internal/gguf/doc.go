// Package gguf writes and reads GGUF files, the model format of llama.cpp,
// so that kvsim's end-to-end checks can give the real llama-server a model
// without downloading one.
//
// # What it writes
//
// [Write] produces a LLaMA-architecture model ("general.architecture" =
// "llama") whose weights are random (normal, standard deviation 0.02, from a
// seeded PCG generator: the same [Options] give byte-identical files) and
// whose shapes are those of a real model ([Preset]: "tiny", about 5M
// parameters, and "smol135m", SmolLM-135M's shapes). Compute cost, KV-cache
// size, batching and prefix caching in llama.cpp are therefore real; only
// the generated text is gibberish.
//
// The tokenizer is GPT-2-style byte-level BPE whose first 256 tokens are the
// 256 bytes, so token id = byte value: a client can send any id in 0..255 as
// a token-id prompt, and an ASCII prompt of N characters is N tokens. One
// merge (0xFE 0xFF, never seen in valid UTF-8) makes the BPE well formed.
// Id 256 is that merge's token, 257 BOS, 258 EOS; ids from 259 up pad the
// vocabulary to its realistic size and decode to "[id]".
//
// # The format (GGUF version 3, little-endian)
//
//	magic "GGUF", version u32, tensor count u64, metadata count u64
//	metadata: key (u64 length + bytes), value type u32, value
//	tensor infos: name, dimension count u32, dims u64 (ggml order:
//	    innermost first, so a numpy (rows, cols) matrix is [cols, rows]),
//	    ggml type u32 (0 f32, 1 f16), offset u64 from the data section
//	padding to general.alignment (32), then each tensor's data, each
//	    starting at a multiple of the alignment
//
// [Read] parses the header, metadata and tensor infos back (and checks that
// every tensor lies inside the file); it is what the tests use to check
// [Write], and a fuzz target keeps it from panicking on bad input. Errors
// name the byte offset where parsing failed.
//
// # Not done
//
// No quantized tensor types (llama-quantize in the chroot converts f16 to
// Q8_0), no architectures other than llama, no tokenizer other than the
// byte-level one above.
package gguf
