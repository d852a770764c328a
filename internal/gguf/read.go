package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
)

// File is what [Read] parses: everything but the tensor data.
type File struct {
	Version  uint32
	Metadata []KV
	Tensors  []TensorInfo
	// Alignment is general.alignment (32 when absent).
	Alignment uint64
	// DataOffset is where the tensor data section starts.
	DataOffset uint64
}

// TensorInfo describes one tensor.
type TensorInfo struct {
	Name string
	// Dims are in ggml order, innermost first.
	Dims []uint64
	Type TensorType
	// Offset is from the start of the data section.
	Offset uint64
}

// Get returns the value of key, if present.
func (f *File) Get(key string) (any, bool) {
	for _, kv := range f.Metadata {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// ErrFormat is wrapped by every error about a malformed file.
var ErrFormat = errors.New("gguf: malformed file")

// maxDims is ggml's GGML_MAX_DIMS.
const maxDims = 4

// Read parses a GGUF file of size bytes from r: header, metadata and tensor
// infos, and checks that every tensor's data (f32 or f16) lies inside the
// file. Errors wrap [ErrFormat] and give the byte offset.
func Read(r io.Reader, size int64) (*File, error) {
	p := &parser{r: bufio.NewReader(r), size: uint64(max(size, 0))}
	f, err := p.file()
	if err != nil {
		return nil, fmt.Errorf("%w: offset %d: %w", ErrFormat, p.pos, err)
	}
	return f, nil
}

// parser reads the file front to back. Its reads keep the first error
// (err) and do nothing after it, returning zero values, so that a run of
// reads is checked once; pos stays where the failing read started.
type parser struct {
	r    *bufio.Reader
	pos  uint64
	size uint64
	buf  [8]byte
	err  error
}

func (p *parser) left() uint64 { return p.size - min(p.pos, p.size) }

// fail records err unless an earlier error is recorded.
func (p *parser) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

func (p *parser) read(n int) []byte {
	if p.err != nil {
		return nil
	}
	if uint64(n) > p.left() {
		p.fail(fmt.Errorf("need %d bytes, %d left", n, p.left()))
		return nil
	}
	b := p.buf[:n]
	if _, err := io.ReadFull(p.r, b); err != nil {
		p.fail(err)
		return nil
	}
	p.pos += uint64(n)
	return b
}

func (p *parser) u32() uint32 {
	if b := p.read(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (p *parser) u64() uint64 {
	if b := p.read(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (p *parser) str() string {
	n := p.u64()
	if p.err != nil {
		return ""
	}
	if n > p.left() {
		p.fail(fmt.Errorf("string of %d bytes, %d left", n, p.left()))
		return ""
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(p.r, b); err != nil {
		p.fail(err)
		return ""
	}
	p.pos += n
	return string(b)
}

func (p *parser) file() (*File, error) {
	m := p.read(4)
	if p.err != nil {
		return nil, p.err
	}
	if string(m) != Magic {
		return nil, fmt.Errorf("magic %q, want %q", m, Magic)
	}
	f := &File{Alignment: Alignment, Version: p.u32()}
	if p.err != nil {
		return nil, p.err
	}
	if f.Version != Version {
		return nil, fmt.Errorf("version %d, want %d", f.Version, Version)
	}
	nt, nkv := p.u64(), p.u64()
	if p.err != nil {
		return nil, p.err
	}
	// Each entry takes at least 12 bytes (key length + type); each tensor
	// info at least 24 (name length, dims, type, offset).
	if nkv > p.left()/12 || nt > p.left()/24 {
		return nil, fmt.Errorf("%d metadata entries and %d tensors cannot fit in %d bytes", nkv, nt, p.left())
	}
	for range nkv {
		at := p.pos
		key, typ := p.str(), p.u32()
		if p.err != nil {
			return nil, p.err
		}
		v, err := p.value(ValueType(typ))
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", key, err)
		}
		if _, dup := f.Get(key); dup {
			return nil, fmt.Errorf("key %q (at %d) repeated", key, at)
		}
		f.Metadata = append(f.Metadata, KV{key, v})
	}
	if a, ok := f.Get("general.alignment"); ok {
		u, isU32 := a.(uint32)
		if !isU32 || u == 0 || u&(u-1) != 0 {
			return nil, fmt.Errorf("general.alignment %v is not a power of two uint32", a)
		}
		f.Alignment = uint64(u)
	}
	for range nt {
		t, err := p.tensorInfo(f.Alignment)
		if err != nil {
			return nil, err
		}
		f.Tensors = append(f.Tensors, t)
	}
	f.DataOffset = alignUp(p.pos, f.Alignment)
	for _, t := range f.Tensors {
		n := uint64(1)
		for _, d := range t.Dims {
			n *= d
		}
		end := t.Offset + n*t.Type.size()
		if end < t.Offset || f.DataOffset+end > p.size || f.DataOffset+end < f.DataOffset {
			return nil, fmt.Errorf("tensor %q: data [%d, %d) past the end of the file (%d bytes)", t.Name, f.DataOffset+t.Offset, f.DataOffset+end, p.size)
		}
	}
	return f, nil
}

// tensorInfo reads one tensor's name, dimensions, type and offset (which
// must be a multiple of alignment).
func (p *parser) tensorInfo(alignment uint64) (TensorInfo, error) {
	t := TensorInfo{Name: p.str()}
	nd := p.u32()
	if p.err != nil {
		return t, p.err
	}
	if nd == 0 || nd > maxDims {
		return t, fmt.Errorf("tensor %q: %d dimensions", t.Name, nd)
	}
	elems := uint64(1)
	for range nd {
		d := p.u64()
		if p.err != nil {
			return t, p.err
		}
		if d == 0 || d > math.MaxUint64/elems/4 {
			return t, fmt.Errorf("tensor %q: dimension %d", t.Name, d)
		}
		elems *= d
		t.Dims = append(t.Dims, d)
	}
	typ := p.u32()
	if p.err != nil {
		return t, p.err
	}
	t.Type = TensorType(typ)
	if t.Type != F32 && t.Type != F16 {
		return t, fmt.Errorf("tensor %q: type %d is not f32 or f16", t.Name, typ)
	}
	if t.Offset = p.u64(); p.err != nil {
		return t, p.err
	}
	if t.Offset%alignment != 0 {
		return t, fmt.Errorf("tensor %q: offset %d not aligned to %d", t.Name, t.Offset, alignment)
	}
	return t, nil
}

// value reads one value of type t (arrays: of scalars or strings, not
// nested).
func (p *parser) value(t ValueType) (any, error) {
	switch {
	case int(t) < len(scalars) && scalars[t] != nil:
		return p.scalar(t)
	case t == TypeString:
		s := p.str()
		return s, p.err
	case t == TypeArray:
		return p.array()
	}
	return nil, fmt.Errorf("unknown value type %d", t)
}

// scalar reads a value of the scalar type t.
func (p *parser) scalar(t ValueType) (any, error) {
	z := scalars[t]
	b := p.read(binary.Size(z))
	if p.err != nil {
		return nil, p.err
	}
	if t == TypeBool && b[0] > 1 {
		return nil, fmt.Errorf("bool %d", b[0])
	}
	v := reflect.New(reflect.TypeOf(z))
	if _, err := binary.Decode(b, binary.LittleEndian, v.Interface()); err != nil {
		panic("gguf: " + err.Error())
	}
	return v.Elem().Interface(), nil
}

// array reads an array's element type, length and elements.
func (p *parser) array() (any, error) {
	et, n := p.u32(), p.u64()
	if p.err != nil {
		return nil, p.err
	}
	if n > p.left() { // every element takes at least one byte
		return nil, fmt.Errorf("array of %d elements, %d bytes left", n, p.left())
	}
	switch ValueType(et) {
	case TypeString:
		return readArray(p, TypeString, n, n, p.str)
	case TypeInt32:
		if n > p.left()/4 {
			return nil, fmt.Errorf("array of %d int32, %d bytes left", n, p.left())
		}
		return readArray(p, TypeInt32, n, n, func() int32 { return int32(p.u32()) })
	case TypeArray:
		return nil, errors.New("nested arrays are not supported")
	}
	return readArray(p, ValueType(et), n, min(n, 1<<16), func() any {
		v, err := p.value(ValueType(et))
		p.fail(err)
		return v
	})
}

// readArray reads an array of n elements of type et with read, into a
// slice of capacity hint at first.
func readArray[T any](p *parser, et ValueType, n, hint uint64, read func() T) (any, error) {
	vs := make([]T, 0, hint)
	for range n {
		v := read()
		if p.err != nil {
			return nil, p.err
		}
		vs = append(vs, v)
	}
	return Array{et, vs}, nil
}
