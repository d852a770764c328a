// Command mkgguf writes a LLaMA-architecture GGUF with random weights for
// llama.cpp's llama-server (see package internal/gguf).
//
//	go run ./internal/gguf/cmd/mkgguf -preset tiny -o tiny.gguf
//	go run ./internal/gguf/cmd/mkgguf -preset smol135m -seed 7 -o smol.gguf
//	go run ./internal/gguf/cmd/mkgguf -dump tiny.gguf
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kvsim/kvsim/internal/gguf"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mkgguf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	preset := fs.String("preset", "tiny", "model shape: "+strings.Join(gguf.PresetNames(), ", "))
	out := fs.String("o", "", "output file (required unless -dump)")
	seed := fs.Uint64("seed", 0, "seed of the random weights")
	f32 := fs.Bool("f32", false, "store matrices as f32 instead of f16")
	untied := fs.Bool("untied", false, "write a separate LM head instead of tying it to the embedding")
	ctx := fs.Int("ctx", 0, "trained context length written to the file (0: the preset's)")
	dump := fs.String("dump", "", "print the header, metadata and tensors of an existing GGUF file and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dump != "" {
		if err := dumpFile(*dump, stdout); err != nil {
			fmt.Fprintln(stderr, "mkgguf:", err)
			return 1
		}
		return 0
	}
	if *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "mkgguf: give -o FILE (and no positional arguments)")
		return 2
	}
	shape, err := gguf.Preset(*preset)
	if err != nil {
		fmt.Fprintln(stderr, "mkgguf:", err)
		return 2
	}
	if *ctx > 0 {
		shape.Context = *ctx
	}
	f, err := os.Create(*out)
	if err != nil {
		fmt.Fprintln(stderr, "mkgguf:", err)
		return 1
	}
	o := gguf.Options{Shape: shape, Seed: *seed, F32: *f32, Untied: *untied}
	n, err := gguf.Write(f, o)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(stderr, "mkgguf:", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s: %d bytes, n_embd=%d n_layer=%d n_head=%d n_kv_head=%d n_ff=%d vocab=%d params=%.1fM kv=%d B/token (f16)\n",
		*out, n, shape.Embd, shape.Layers, shape.Heads, shape.KVHeads, shape.FF, shape.Vocab,
		float64(shape.Params(!*untied))/1e6, shape.KVBytesPerToken(2))
	return 0
}

func dumpFile(path string, w io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	g, err := gguf.Read(f, st.Size())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fmt.Fprintf(w, "GGUF v%d, %d metadata entries, %d tensors, alignment %d, data at %d\n",
		g.Version, len(g.Metadata), len(g.Tensors), g.Alignment, g.DataOffset)
	for _, kv := range g.Metadata {
		switch v := kv.Value.(type) {
		case gguf.Array:
			fmt.Fprintf(w, "  %s = array[%d] of %d\n", kv.Key, arrayLen(v), v.Elem)
		default:
			fmt.Fprintf(w, "  %s = %v\n", kv.Key, v)
		}
	}
	for _, t := range g.Tensors {
		fmt.Fprintf(w, "  tensor %s %v type %d at %d\n", t.Name, t.Dims, t.Type, t.Offset)
	}
	return nil
}

func arrayLen(a gguf.Array) int {
	switch v := a.Values.(type) {
	case []string:
		return len(v)
	case []int32:
		return len(v)
	case []any:
		return len(v)
	}
	return 0
}
