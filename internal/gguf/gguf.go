package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// Version is the GGUF version written (and the only one read).
const Version = 3

// Alignment is the alignment of the tensor data written, in bytes
// (general.alignment, GGUF's default).
const Alignment = 32

// ValueType is the type tag of a metadata value.
type ValueType uint32

// The metadata value types of GGUF.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// TensorType is a ggml tensor element type. Only the two unquantized types
// are written.
type TensorType uint32

// The tensor types written.
const (
	F32 TensorType = 0
	F16 TensorType = 1
)

// Token types of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
const (
	tokenNormal  = 1
	tokenControl = 3
)

// Special token ids of the byte-level tokenizer.
const (
	// MergeToken is the token of the single BPE merge (0xFE 0xFF).
	MergeToken = 256
	// BOS is the beginning-of-sequence token id.
	BOS = 257
	// EOS is the end-of-sequence token id.
	EOS = 258
)

// Shape is a LLaMA model's dimensions.
type Shape struct {
	Embd    int // hidden size (llama.embedding_length)
	Layers  int // transformer blocks (llama.block_count)
	Heads   int // attention heads
	KVHeads int // key/value heads (grouped-query attention when < Heads)
	FF      int // feed-forward size
	Vocab   int // vocabulary size, >= 260
	Context int // trained context length written to the file
}

// presets are the shapes of [Preset], as the recipe in
// ../shared/tools/llama-server defines them.
var presets = map[string]Shape{
	"tiny":     {Embd: 256, Layers: 4, Heads: 4, KVHeads: 4, FF: 1024, Vocab: 4096, Context: 32768},
	"smol135m": {Embd: 576, Layers: 30, Heads: 9, KVHeads: 3, FF: 1536, Vocab: 49152, Context: 32768}, // SmolLM-135M
}

// Preset returns a named shape: "tiny" (about 5M parameters, for smoke
// tests) or "smol135m" (SmolLM-135M: 576 hidden, 30 layers, 9 heads, 3 KV
// heads, 1536 FF, 49152 vocabulary).
func Preset(name string) (Shape, error) {
	s, ok := presets[name]
	if !ok {
		return Shape{}, fmt.Errorf("unknown preset %q (have %s)", name, strings.Join(PresetNames(), ", "))
	}
	return s, nil
}

// PresetNames returns the preset names, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Validate reports every invalid dimension at once.
func (s Shape) Validate() error {
	var errs []error
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0 (got %d)", name, v))
		}
	}
	pos("embd", s.Embd)
	pos("layers", s.Layers)
	pos("heads", s.Heads)
	pos("kv_heads", s.KVHeads)
	pos("ff", s.FF)
	pos("context", s.Context)
	if s.Vocab < EOS+2 {
		errs = append(errs, fmt.Errorf("vocab: must be >= %d (got %d)", EOS+2, s.Vocab))
	}
	if s.Heads > 0 && s.Embd%s.Heads != 0 {
		errs = append(errs, fmt.Errorf("embd: must be a multiple of heads %d (got %d)", s.Heads, s.Embd))
	}
	if s.KVHeads > 0 && s.Heads%s.KVHeads != 0 {
		errs = append(errs, fmt.Errorf("heads: must be a multiple of kv_heads %d (got %d)", s.KVHeads, s.Heads))
	}
	return errors.Join(errs...)
}

// HeadDim is the dimension of one attention head.
func (s Shape) HeadDim() int { return s.Embd / s.Heads }

// Params returns the parameter count; tied means the LM head shares the
// token embedding (no output.weight).
func (s Shape) Params(tied bool) int64 {
	hd := int64(s.HeadDim())
	e, v := int64(s.Embd), int64(s.Vocab)
	heads := v * e
	if !tied {
		heads *= 2
	}
	perLayer := 2*e + 2*e*int64(s.Heads)*hd + 2*e*int64(s.KVHeads)*hd + 3*e*int64(s.FF)
	return heads + int64(s.Layers)*perLayer + e
}

// KVBytesPerToken is the KV cache of one token in bytes with elemBytes per
// element (2 for llama.cpp's default f16 cache): K and V, KV heads × head
// dimension, every layer.
func (s Shape) KVBytesPerToken(elemBytes int) int64 {
	return 2 * int64(s.KVHeads) * int64(s.HeadDim()) * int64(s.Layers) * int64(elemBytes)
}

// Options say what [Write] writes.
type Options struct {
	Shape Shape
	// Name is general.name; empty gives "random-llama-<embd>x<layers>".
	Name string
	// Seed seeds the weights (PCG); equal options give identical files.
	Seed uint64
	// F32 stores the matrices as f32 instead of f16.
	F32 bool
	// Untied writes a separate LM head (output.weight) instead of tying it
	// to the token embedding.
	Untied bool
	// NoBOS sets tokenizer.ggml.add_bos_token to false. Token-id prompts
	// never get a BOS either way.
	NoBOS bool
}

// tensor is one tensor to write: ggml dims (innermost first) and whether it
// is a norm vector (ones, always f32).
type tensor struct {
	name string
	dims []uint64
	norm bool
}

func (t tensor) elems() uint64 {
	n := uint64(1)
	for _, d := range t.dims {
		n *= d
	}
	return n
}

// tensors lists the model's tensors in file order.
func (o Options) tensors() []tensor {
	s := o.Shape
	e, hd := uint64(s.Embd), uint64(s.HeadDim())
	q, kv, ff, v := uint64(s.Heads)*hd, uint64(s.KVHeads)*hd, uint64(s.FF), uint64(s.Vocab)
	// mat(rows, cols) in numpy terms is ggml dims [cols, rows].
	mat := func(name string, rows, cols uint64) tensor { return tensor{name: name, dims: []uint64{cols, rows}} }
	vec := func(name string, n uint64) tensor { return tensor{name: name, dims: []uint64{n}, norm: true} }
	ts := []tensor{mat("token_embd.weight", v, e)}
	for i := range s.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		ts = append(ts,
			vec(p+"attn_norm.weight", e),
			mat(p+"attn_q.weight", q, e),
			mat(p+"attn_k.weight", kv, e),
			mat(p+"attn_v.weight", kv, e),
			mat(p+"attn_output.weight", e, q),
			vec(p+"ffn_norm.weight", e),
			mat(p+"ffn_gate.weight", ff, e),
			mat(p+"ffn_up.weight", ff, e),
			mat(p+"ffn_down.weight", e, ff),
		)
	}
	ts = append(ts, vec("output_norm.weight", e))
	if o.Untied {
		ts = append(ts, mat("output.weight", v, e))
	}
	return ts
}

func (o Options) typeOf(t tensor) TensorType {
	if t.norm || o.F32 {
		return F32
	}
	return F16
}

func (t TensorType) size() uint64 {
	if t == F16 {
		return 2
	}
	return 4
}

// KV is one metadata entry. Value holds uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64, float64, or an
// Array.
type KV struct {
	Key   string
	Value any
}

// scalars holds a zero value of the Go type of each scalar value type (nil
// for strings and arrays). encoding/binary writes and reads them as GGUF
// does: little-endian at their natural size, a bool as one byte.
var scalars = [...]any{
	TypeUint8: uint8(0), TypeInt8: int8(0), TypeUint16: uint16(0), TypeInt16: int16(0),
	TypeUint32: uint32(0), TypeInt32: int32(0), TypeFloat32: float32(0), TypeBool: false,
	TypeUint64: uint64(0), TypeInt64: int64(0), TypeFloat64: float64(0),
}

// scalarType returns the value type of a scalar metadata value, and false
// for anything else.
func scalarType(v any) (ValueType, bool) {
	for t, z := range scalars {
		if z != nil && reflect.TypeOf(z) == reflect.TypeOf(v) {
			return ValueType(t), true
		}
	}
	return 0, false
}

// Array is a metadata array: its element type and elements (a slice of the
// Go type of that element type, e.g. []string, []int32).
type Array struct {
	Elem   ValueType
	Values any
}

// bytesToUnicode is GPT-2's reversible map from bytes to printable runes.
func bytesToUnicode() [256]rune {
	var m [256]rune
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n := 0
	for b := range 256 {
		if printable(b) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}

// Metadata returns the metadata Write writes, in order.
func (o Options) Metadata() []KV {
	s := o.Shape
	name := o.Name
	if name == "" {
		name = fmt.Sprintf("random-llama-%dx%d", s.Embd, s.Layers)
	}
	fileType := uint32(1) // MOSTLY_F16
	if o.F32 {
		fileType = 0 // ALL_F32
	}
	b2u := bytesToUnicode()
	tokens := make([]string, 0, s.Vocab)
	types := make([]int32, 0, s.Vocab)
	for b := range 256 {
		tokens = append(tokens, string(b2u[b]))
		types = append(types, tokenNormal)
	}
	tokens = append(tokens, string(b2u[0xFE])+string(b2u[0xFF]), "<|startoftext|>", "<|endoftext|>")
	types = append(types, tokenNormal, tokenControl, tokenControl)
	for len(tokens) < s.Vocab {
		tokens = append(tokens, fmt.Sprintf("[%d]", len(tokens)))
		types = append(types, tokenNormal)
	}
	u32 := func(v int) uint32 { return uint32(v) }
	return []KV{
		{"general.architecture", "llama"},
		{"general.name", name},
		{"general.alignment", uint32(Alignment)},
		{"llama.context_length", u32(s.Context)},
		{"llama.embedding_length", u32(s.Embd)},
		{"llama.block_count", u32(s.Layers)},
		{"llama.feed_forward_length", u32(s.FF)},
		{"llama.attention.head_count", u32(s.Heads)},
		{"llama.attention.head_count_kv", u32(s.KVHeads)},
		{"llama.rope.dimension_count", u32(s.HeadDim())},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.vocab_size", u32(s.Vocab)},
		{"general.file_type", fileType},
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", "default"},
		{"tokenizer.ggml.tokens", Array{TypeString, tokens}},
		{"tokenizer.ggml.token_type", Array{TypeInt32, types}},
		{"tokenizer.ggml.merges", Array{TypeString, []string{string(b2u[0xFE]) + " " + string(b2u[0xFF])}}},
		{"tokenizer.ggml.bos_token_id", uint32(BOS)},
		{"tokenizer.ggml.eos_token_id", uint32(EOS)},
		{"tokenizer.ggml.add_bos_token", !o.NoBOS},
	}
}

// weightStream is the PCG stream constant of the weights ("gguf_wts").
const weightStream = 0x6767_7566_5f77_7473

// Write writes the model o describes to w and returns the bytes written.
func Write(w io.Writer, o Options) (int64, error) {
	if err := o.Shape.Validate(); err != nil {
		return 0, fmt.Errorf("gguf: shape: %w", err)
	}
	bw := &countWriter{w: bufio.NewWriterSize(w, 1<<20)}
	ts := o.tensors()
	md := o.Metadata()

	bw.bytes([]byte(Magic))
	bw.u32(Version)
	bw.u64(uint64(len(ts)))
	bw.u64(uint64(len(md)))
	for _, kv := range md {
		bw.str(kv.Key)
		bw.value(kv.Value, true)
	}
	var off uint64
	for _, t := range ts {
		bw.str(t.name)
		bw.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			bw.u64(d)
		}
		bw.u32(uint32(o.typeOf(t)))
		bw.u64(off)
		off = alignUp(off+t.elems()*o.typeOf(t).size(), Alignment)
	}
	bw.pad(Alignment)

	rng := rand.New(rand.NewPCG(o.Seed, weightStream))
	buf := make([]byte, 0, 1<<16)
	for _, t := range ts {
		typ := o.typeOf(t)
		n := t.elems()
		for i := uint64(0); i < n; i++ {
			x := float32(1)
			if !t.norm {
				x = float32(rng.NormFloat64() * 0.02)
			}
			if typ == F16 {
				buf = binary.LittleEndian.AppendUint16(buf, F32ToF16(x))
			} else {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
			}
			if len(buf) >= 1<<16-4 {
				bw.bytes(buf)
				buf = buf[:0]
			}
		}
		bw.bytes(buf)
		buf = buf[:0]
		bw.pad(Alignment)
	}
	if bw.err == nil {
		bw.err = bw.w.(*bufio.Writer).Flush()
	}
	if bw.err != nil {
		return bw.n, fmt.Errorf("gguf: write: %w", bw.err)
	}
	return bw.n, nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// countWriter writes little-endian values and remembers the first error.
type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) bytes(b []byte) {
	if c.err != nil {
		return
	}
	k, err := c.w.Write(b)
	c.n += int64(k)
	c.err = err
}

func (c *countWriter) u32(v uint32) { c.bytes(binary.LittleEndian.AppendUint32(nil, v)) }
func (c *countWriter) u64(v uint64) { c.bytes(binary.LittleEndian.AppendUint64(nil, v)) }
func (c *countWriter) str(s string) { c.u64(uint64(len(s))); c.bytes([]byte(s)) }

func (c *countWriter) pad(a int64) {
	if r := c.n % a; r != 0 {
		c.bytes(make([]byte, a-r))
	}
}

// value writes v, preceded by its type tag when tagged.
func (c *countWriter) value(v any, tagged bool) {
	tag := func(t ValueType) {
		if tagged {
			c.u32(uint32(t))
		}
	}
	if t, ok := scalarType(v); ok {
		tag(t)
		b, err := binary.Append(nil, binary.LittleEndian, v)
		if err != nil {
			panic("gguf: " + err.Error())
		}
		c.bytes(b)
		return
	}
	switch x := v.(type) {
	case string:
		tag(TypeString)
		c.str(x)
	case Array:
		tag(TypeArray)
		c.u32(uint32(x.Elem))
		switch vs := x.Values.(type) {
		case []string:
			c.u64(uint64(len(vs)))
			for _, s := range vs {
				c.str(s)
			}
		case []int32:
			c.u64(uint64(len(vs)))
			for _, i := range vs {
				c.u32(uint32(i))
			}
		default:
			panic(fmt.Sprintf("gguf: unsupported array of %T", x.Values))
		}
	default:
		panic(fmt.Sprintf("gguf: unsupported metadata value %T", v))
	}
}

// F32ToF16 converts x to IEEE 754 half precision, rounding to nearest even
// (as numpy's astype(float16) does); overflow gives ±Inf, NaN stays NaN.
func F32ToF16(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 { // subnormal half (or zero): value = m * 2^-24
		if e < -10 {
			return sign
		}
		full := mant | 0x800000
		shift := uint(14 - e)
		r := full >> shift
		rem := full & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // a carry into the exponent is the correct rounding (up to Inf)
	}
	return sign | uint16(r)
}

// F16ToF32 converts a half-precision value to float32 exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		v := float32(mant) / (1 << 24)
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}
