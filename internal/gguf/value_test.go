package gguf

import (
	"bufio"
	"bytes"
	"math"
	"reflect"
	"testing"
)

// Every metadata value type is written as GGUF lays it out (tag, then
// little-endian bytes) and reads back as the same Go value.
func TestValueRoundTrip(t *testing.T) {
	for _, c := range []struct {
		v    any
		want []byte // after the 4-byte tag
	}{
		{uint8(0xfe), []byte{0xfe}},
		{int8(-2), []byte{0xfe}},
		{uint16(0x0102), []byte{2, 1}},
		{int16(-2), []byte{0xfe, 0xff}},
		{uint32(0x01020304), []byte{4, 3, 2, 1}},
		{int32(-2), []byte{0xfe, 0xff, 0xff, 0xff}},
		{float32(1), []byte{0, 0, 0x80, 0x3f}},
		{true, []byte{1}},
		{false, []byte{0}},
		{"ab", []byte{2, 0, 0, 0, 0, 0, 0, 0, 'a', 'b'}},
		{uint64(1) << 56, []byte{0, 0, 0, 0, 0, 0, 0, 1}},
		{int64(-2), []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{math.Inf(-1), []byte{0, 0, 0, 0, 0, 0, 0xf0, 0xff}},
		{Array{TypeInt32, []int32{-1, 2}}, []byte{byte(TypeInt32), 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0}},
		{Array{TypeString, []string{"x"}}, []byte{byte(TypeString), 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 'x'}},
	} {
		var buf bytes.Buffer
		w := &countWriter{w: &buf}
		w.value(c.v, true)
		b := buf.Bytes()
		if w.err != nil || len(b) < 4 || !bytes.Equal(b[4:], c.want) {
			t.Errorf("value(%T %v) wrote % x (%v), want a tag and % x", c.v, c.v, b, w.err, c.want)
			continue
		}
		p := &parser{r: bufio.NewReader(bytes.NewReader(b)), size: uint64(len(b))}
		typ := p.u32()
		if p.err != nil {
			t.Fatal(p.err)
		}
		got, err := p.value(ValueType(typ))
		if err != nil || !reflect.DeepEqual(got, c.v) || p.pos != uint64(len(b)) {
			t.Errorf("read back %T %v as %T %v (%v), %d of %d bytes", c.v, c.v, got, got, err, p.pos, len(b))
		}
	}
	// A bool is 0 or 1.
	p := &parser{r: bufio.NewReader(bytes.NewReader([]byte{2})), size: 1}
	if v, err := p.value(TypeBool); err == nil {
		t.Errorf("bool byte 2 read as %v", v)
	}
}
