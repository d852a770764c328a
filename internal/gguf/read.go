package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
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

type parser struct {
	r    *bufio.Reader
	pos  uint64
	size uint64
	buf  [8]byte
}

func (p *parser) left() uint64 { return p.size - min(p.pos, p.size) }

func (p *parser) read(n int) ([]byte, error) {
	if uint64(n) > p.left() {
		return nil, fmt.Errorf("need %d bytes, %d left", n, p.left())
	}
	b := p.buf[:n]
	if _, err := io.ReadFull(p.r, b); err != nil {
		return nil, err
	}
	p.pos += uint64(n)
	return b, nil
}

func (p *parser) u8() (uint8, error) {
	b, err := p.read(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (p *parser) u16() (uint16, error) {
	b, err := p.read(2)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(b), nil
}

func (p *parser) u32() (uint32, error) {
	b, err := p.read(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (p *parser) u64() (uint64, error) {
	b, err := p.read(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (p *parser) str() (string, error) {
	n, err := p.u64()
	if err != nil {
		return "", err
	}
	if n > p.left() {
		return "", fmt.Errorf("string of %d bytes, %d left", n, p.left())
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(p.r, b); err != nil {
		return "", err
	}
	p.pos += n
	return string(b), nil
}

func (p *parser) file() (*File, error) {
	m, err := p.read(4)
	if err != nil {
		return nil, err
	}
	if string(m) != Magic {
		return nil, fmt.Errorf("magic %q, want %q", m, Magic)
	}
	f := &File{Alignment: Alignment}
	if f.Version, err = p.u32(); err != nil {
		return nil, err
	}
	if f.Version != Version {
		return nil, fmt.Errorf("version %d, want %d", f.Version, Version)
	}
	nt, err := p.u64()
	if err != nil {
		return nil, err
	}
	nkv, err := p.u64()
	if err != nil {
		return nil, err
	}
	// Each entry takes at least 12 bytes (key length + type); each tensor
	// info at least 24 (name length, dims, type, offset).
	if nkv > p.left()/12 || nt > p.left()/24 {
		return nil, fmt.Errorf("%d metadata entries and %d tensors cannot fit in %d bytes", nkv, nt, p.left())
	}
	for range nkv {
		at := p.pos
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		typ, err := p.u32()
		if err != nil {
			return nil, err
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
		var t TensorInfo
		if t.Name, err = p.str(); err != nil {
			return nil, err
		}
		nd, err := p.u32()
		if err != nil {
			return nil, err
		}
		if nd == 0 || nd > maxDims {
			return nil, fmt.Errorf("tensor %q: %d dimensions", t.Name, nd)
		}
		elems := uint64(1)
		for range nd {
			d, err := p.u64()
			if err != nil {
				return nil, err
			}
			if d == 0 || d > math.MaxUint64/elems/4 {
				return nil, fmt.Errorf("tensor %q: dimension %d", t.Name, d)
			}
			elems *= d
			t.Dims = append(t.Dims, d)
		}
		typ, err := p.u32()
		if err != nil {
			return nil, err
		}
		t.Type = TensorType(typ)
		if t.Type != F32 && t.Type != F16 {
			return nil, fmt.Errorf("tensor %q: type %d is not f32 or f16", t.Name, typ)
		}
		if t.Offset, err = p.u64(); err != nil {
			return nil, err
		}
		if t.Offset%f.Alignment != 0 {
			return nil, fmt.Errorf("tensor %q: offset %d not aligned to %d", t.Name, t.Offset, f.Alignment)
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

// value reads one value of type t (arrays: of scalars or strings, not
// nested).
func (p *parser) value(t ValueType) (any, error) {
	switch t {
	case TypeUint8:
		return p.u8()
	case TypeInt8:
		v, err := p.u8()
		return int8(v), err
	case TypeUint16:
		return p.u16()
	case TypeInt16:
		v, err := p.u16()
		return int16(v), err
	case TypeUint32:
		return p.u32()
	case TypeInt32:
		v, err := p.u32()
		return int32(v), err
	case TypeFloat32:
		v, err := p.u32()
		return math.Float32frombits(v), err
	case TypeBool:
		v, err := p.u8()
		if err == nil && v > 1 {
			return nil, fmt.Errorf("bool %d", v)
		}
		return v == 1, err
	case TypeString:
		return p.str()
	case TypeUint64:
		return p.u64()
	case TypeInt64:
		v, err := p.u64()
		return int64(v), err
	case TypeFloat64:
		v, err := p.u64()
		return math.Float64frombits(v), err
	case TypeArray:
		et, err := p.u32()
		if err != nil {
			return nil, err
		}
		n, err := p.u64()
		if err != nil {
			return nil, err
		}
		if n > p.left() { // every element takes at least one byte
			return nil, fmt.Errorf("array of %d elements, %d bytes left", n, p.left())
		}
		switch ValueType(et) {
		case TypeString:
			vs := make([]string, 0, n)
			for range n {
				s, err := p.str()
				if err != nil {
					return nil, err
				}
				vs = append(vs, s)
			}
			return Array{TypeString, vs}, nil
		case TypeInt32:
			if n > p.left()/4 {
				return nil, fmt.Errorf("array of %d int32, %d bytes left", n, p.left())
			}
			vs := make([]int32, 0, n)
			for range n {
				v, err := p.u32()
				if err != nil {
					return nil, err
				}
				vs = append(vs, int32(v))
			}
			return Array{TypeInt32, vs}, nil
		case TypeArray:
			return nil, errors.New("nested arrays are not supported")
		default:
			vs := make([]any, 0, min(n, 1<<16))
			for range n {
				v, err := p.value(ValueType(et))
				if err != nil {
					return nil, err
				}
				vs = append(vs, v)
			}
			return Array{ValueType(et), vs}, nil
		}
	}
	return nil, fmt.Errorf("unknown value type %d", t)
}
