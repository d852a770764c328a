package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// micro is a shape small enough to write in microseconds, with GQA.
var micro = Shape{Embd: 32, Layers: 2, Heads: 4, KVHeads: 2, FF: 48, Vocab: 300, Context: 1024}

func write(t *testing.T, o Options) []byte {
	t.Helper()
	var b bytes.Buffer
	n, err := Write(&b, o)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if n != int64(b.Len()) {
		t.Fatalf("Write returned %d bytes, buffer has %d", n, b.Len())
	}
	return b.Bytes()
}

func TestWriteReadRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"f16 tied", Options{Shape: micro, Seed: 1}},
		{"f32 untied nobos", Options{Shape: micro, Seed: 2, F32: true, Untied: true, NoBOS: true, Name: "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := write(t, tc.o)
			f, err := Read(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if !reflect.DeepEqual(f.Metadata, tc.o.Metadata()) {
				t.Fatalf("metadata read back differs from written")
			}
			want := tc.o.tensors()
			if len(f.Tensors) != len(want) {
				t.Fatalf("%d tensors, want %d", len(f.Tensors), len(want))
			}
			var end uint64
			for i, ti := range f.Tensors {
				w := want[i]
				if ti.Name != w.name || !reflect.DeepEqual(ti.Dims, w.dims) || ti.Type != tc.o.typeOf(w) {
					t.Fatalf("tensor %d = %s %v %d, want %s %v %d", i, ti.Name, ti.Dims, ti.Type, w.name, w.dims, tc.o.typeOf(w))
				}
				if ti.Offset != end {
					t.Fatalf("tensor %s at %d, want %d (packed, aligned)", ti.Name, ti.Offset, end)
				}
				end = alignUp(ti.Offset+w.elems()*ti.Type.size(), Alignment)
				// Norm vectors are ones; matrices are N(0, 0.02) samples.
				at := f.DataOffset + ti.Offset
				vals := make([]float64, 0, w.elems())
				for k := range w.elems() {
					if ti.Type == F16 {
						vals = append(vals, float64(F16ToF32(binary.LittleEndian.Uint16(data[at+2*k:]))))
					} else {
						vals = append(vals, float64(math.Float32frombits(binary.LittleEndian.Uint32(data[at+4*k:]))))
					}
				}
				checkValues(t, ti.Name, w.norm, vals)
			}
			if got := uint64(len(data)); got != f.DataOffset+end {
				t.Fatalf("file is %d bytes, want data offset %d + %d", got, f.DataOffset, end)
			}
			if f.DataOffset%Alignment != 0 {
				t.Fatalf("data offset %d not aligned", f.DataOffset)
			}
		})
	}
}

func checkValues(t *testing.T, name string, norm bool, vals []float64) {
	t.Helper()
	if norm {
		for i, v := range vals {
			if v != 1 {
				t.Fatalf("%s[%d] = %v, want 1", name, i, v)
			}
		}
		return
	}
	var sum, sq float64
	for _, v := range vals {
		sum += v
		sq += v * v
	}
	n := float64(len(vals))
	mean, std := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n))
	// 1024+ samples: the mean is within 5 standard errors, the std within 15%.
	if math.Abs(mean) > 5*0.02/math.Sqrt(n) || math.Abs(std-0.02) > 0.003 {
		t.Fatalf("%s: mean %v std %v over %d values, want N(0, 0.02)", name, mean, std, len(vals))
	}
}

func TestWriteDeterministic(t *testing.T) {
	a := write(t, Options{Shape: micro, Seed: 7})
	b := write(t, Options{Shape: micro, Seed: 7})
	c := write(t, Options{Shape: micro, Seed: 8})
	if !bytes.Equal(a, b) {
		t.Fatal("same options gave different files")
	}
	if bytes.Equal(a, c) || len(a) != len(c) {
		t.Fatal("different seeds should give same-sized files with different weights")
	}
}

func TestTokenizer(t *testing.T) {
	md := Options{Shape: micro}.Metadata()
	var toks []string
	var types []int32
	for _, kv := range md {
		switch kv.Key {
		case "tokenizer.ggml.tokens":
			toks = kv.Value.(Array).Values.([]string)
		case "tokenizer.ggml.token_type":
			types = kv.Value.(Array).Values.([]int32)
		}
	}
	if len(toks) != micro.Vocab || len(types) != micro.Vocab {
		t.Fatalf("%d tokens, %d types, want %d", len(toks), len(types), micro.Vocab)
	}
	// GPT-2's byte map: printable ASCII maps to itself, space to U+0120 'Ġ',
	// newline to U+010A 'Ċ'; all 256 distinct.
	seen := map[string]bool{}
	for b := range 256 {
		if seen[toks[b]] {
			t.Fatalf("byte %d token %q repeated", b, toks[b])
		}
		seen[toks[b]] = true
	}
	if toks['A'] != "A" || toks[' '] != "Ġ" || toks['\n'] != "Ċ" {
		t.Fatalf("byte tokens A, space, newline = %q %q %q", toks['A'], toks[' '], toks['\n'])
	}
	if toks[BOS] != "<|startoftext|>" || toks[EOS] != "<|endoftext|>" || types[BOS] != tokenControl || types[EOS] != tokenControl {
		t.Fatalf("BOS/EOS = %q/%q types %d/%d", toks[BOS], toks[EOS], types[BOS], types[EOS])
	}
	if toks[299] != "[299]" || types[299] != tokenNormal {
		t.Fatalf("padding token 299 = %q type %d", toks[299], types[299])
	}
}

func TestPresets(t *testing.T) {
	tiny, err := Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	// 4096*256 embedding + 4 layers * (2*256 norms + 4*256*256 attention +
	// 3*256*1024 FF) + 256 = 5,245,184.
	if got := tiny.Params(true); got != 5_245_184 {
		t.Fatalf("tiny params = %d, want 5245184", got)
	}
	if got := tiny.KVBytesPerToken(2); got != 4096 {
		t.Fatalf("tiny KV = %d B/token, want 4096 (2 * 4 heads * 64 * 4 layers * 2 B)", got)
	}
	smol, err := Preset("smol135m")
	if err != nil {
		t.Fatal(err)
	}
	// SmolLM-135M has 134.5M parameters with its tied embedding.
	if got := smol.Params(true); got < 134_000_000 || got > 135_000_000 {
		t.Fatalf("smol135m params = %d, want about 134.5M", got)
	}
	if got := smol.KVBytesPerToken(2); got != 23040 {
		t.Fatalf("smol135m KV = %d B/token, want 23040 (2 * 3 * 64 * 30 * 2)", got)
	}
	if _, err := Preset("huge"); err == nil || !strings.Contains(err.Error(), "smol135m, tiny") {
		t.Fatalf("Preset(huge) = %v, want an error listing the presets", err)
	}
}

func TestShapeValidate(t *testing.T) {
	bad := Shape{Embd: 30, Layers: 0, Heads: 4, KVHeads: 3, FF: 1, Vocab: 10, Context: 1}
	err := bad.Validate()
	for _, want := range []string{"layers: must be > 0", "vocab: must be >= 260", "embd: must be a multiple of heads 4", "heads: must be a multiple of kv_heads 3"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate() = %v, want it to mention %q", err, want)
		}
	}
	if _, err := Write(&bytes.Buffer{}, Options{Shape: bad}); err == nil {
		t.Fatal("Write accepted an invalid shape")
	}
}

func TestF32ToF16(t *testing.T) {
	for _, tc := range []struct {
		in   float32
		want uint16
	}{
		{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800}, {65504, 0x7bff},
		{65520, 0x7c00},                 // rounds up to Inf
		{float32(math.Inf(-1)), 0xfc00}, //
		{5.960464477539063e-08, 0x0001}, // smallest subnormal
		{2.980232238769531e-08, 0x0000}, // half of it: ties to even (0)
		{8.940696716308594e-08, 0x0002}, // 1.5 subnormal ulps: ties to even (2)
		{6.097555160522461e-05, 0x03ff}, // largest subnormal
		{1.0009765625, 0x3c01},          // 1 + 2^-10
		{1.00048828125, 0x3c00},         // 1 + 2^-11: tie, to even
		{1.00146484375, 0x3c02},         // 1 + 3*2^-11: tie, to even
	} {
		if got := F32ToF16(tc.in); got != tc.want {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
	if h := F32ToF16(float32(math.NaN())); F16ToF32(h) == F16ToF32(h) {
		t.Errorf("NaN converted to %#04x, not a NaN", h)
	}
}

// TestPropF16Nearest: the conversion picks the nearest half (ties to even),
// checked against the neighbours of the result.
func TestPropF16Nearest(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		x := rapid.Float32Range(-70000, 70000).Draw(t, "x")
		h := F32ToF16(x)
		got := float64(F16ToF32(h))
		if math.IsInf(got, 0) {
			if math.Abs(float64(x)) < 65520 {
				t.Fatalf("%g overflowed", x)
			}
			return
		}
		d := math.Abs(got - float64(x))
		for _, n := range []uint16{h - 1, h + 1} {
			if n&0x7c00 == 0x7c00 {
				continue
			}
			if dn := math.Abs(float64(F16ToF32(n)) - float64(x)); dn < d || (dn == d && h&1 == 1) {
				t.Fatalf("F32ToF16(%g) = %#04x (%g) but %#04x (%g) is nearer or an even tie", x, h, got, n, F16ToF32(n))
			}
		}
	})
}

func TestReadErrors(t *testing.T) {
	good := write(t, Options{Shape: micro})
	corrupt := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "offset 0: need 4 bytes, 0 left"},
		{"magic", corrupt(func(b []byte) []byte { b[0] = 'X'; return b }), `offset 4: magic "XGUF"`},
		{"version", corrupt(func(b []byte) []byte { b[4] = 2; return b }), "offset 8: version 2, want 3"},
		{"huge counts", corrupt(func(b []byte) []byte { b[15] = 0x7f; return b }), "cannot fit"},
		{"truncated data", good[:len(good)-1], "past the end of the file"},
		{"truncated header", good[:1000], " left"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(bytes.NewReader(tc.data), int64(len(tc.data)))
			if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Read = %v, want ErrFormat mentioning %q", err, tc.want)
			}
		})
	}
}

func FuzzRead(f *testing.F) {
	var b bytes.Buffer
	if _, err := Write(&b, Options{Shape: Shape{Embd: 8, Layers: 1, Heads: 2, KVHeads: 1, FF: 8, Vocab: 260, Context: 16}}); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Read(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		if file.DataOffset > uint64(len(data)) && len(file.Tensors) > 0 {
			t.Fatalf("data offset %d past %d bytes with tensors", file.DataOffset, len(data))
		}
	})
}
