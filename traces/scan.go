package traces

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// scanner is a hand-written reader of the JSON objects on one line of the
// hot formats (Mooncake and kvsim records), about ten times faster than
// encoding/json's reflection. It accepts only a strict subset of JSON: the
// keys a format knows, each once, spelled exactly; strings without escapes;
// integers without fraction or exponent that fit their type. Anything else
// (an unknown or misspelt key, an escape, a null, a float where an integer
// is wanted, a syntax error) makes it give up, and the caller decodes the
// line with encoding/json instead, which gives the records and the error
// messages with their positions that the reader has always given. So the
// scanner never decides what is an error: it only takes the common case
// faster. FuzzScanMooncake and FuzzScanKVSim check that whatever it accepts
// encoding/json decodes to the same value.
type scanner struct {
	b  []byte
	i  int
	ok bool // false once anything was outside the subset
}

func newScanner(b []byte) scanner { return scanner{b: b, ok: true} }

func (s *scanner) fail() bool { s.ok = false; return false }

// ws skips JSON whitespace.
func (s *scanner) ws() { s.i = skipWS(s.b, s.i) }

// peek returns the next non-blank byte (0 at the end).
func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// expect consumes c after blanks.
func (s *scanner) expect(c byte) bool {
	if s.peek() != c {
		return s.fail()
	}
	s.i++
	return true
}

// object scans `{ "key": value, ... }` to the end of the line, calling
// field for each key with the scanner on its value, which field consumes
// (or fails). seen guards against repeated keys: field returns the key's
// bit (one per known key), or 0 for an unknown key.
func (s *scanner) object(field func(key []byte) uint32) bool {
	if !s.expect('{') {
		return false
	}
	var seen uint32
	if s.peek() == '}' {
		s.i++
	} else {
		for {
			key, ok := s.rawString()
			if !ok || !s.expect(':') {
				return s.fail()
			}
			s.ws()
			bit := field(key)
			if bit == 0 || seen&bit != 0 || !s.ok {
				return s.fail()
			}
			seen |= bit
			c := s.peek()
			s.i++
			if c == '}' {
				break
			}
			if c != ',' {
				return s.fail()
			}
			s.ws()
		}
	}
	s.ws()
	if s.i != len(s.b) {
		return s.fail()
	}
	return s.ok
}

// rawString scans a string without escapes or control characters and
// returns its contents (a slice of the line).
func (s *scanner) rawString() ([]byte, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, s.fail()
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		c := s.b[j]
		switch {
		case c == '"':
			s.i = j + 1
			return s.b[start:j], true
		case c == '\\' || c < 0x20:
			return nil, s.fail()
		}
	}
	return nil, s.fail()
}

// str scans a string value (see rawString).
func (s *scanner) str() string {
	b, ok := s.rawString()
	if !ok {
		return ""
	}
	return string(b)
}

// intLit scans an integer literal: -?(0|[1-9][0-9]*), not followed by a
// fraction or an exponent.
func (s *scanner) intLit() []byte {
	start := s.i
	j, ok := intPart(s.b, s.i)
	if !ok || (j < len(s.b) && (s.b[j] == '.' || s.b[j] == 'e' || s.b[j] == 'E')) {
		s.fail()
		return nil
	}
	s.i = j
	return s.b[start:j]
}

// intPart scans the integer part of a JSON number at b[i:], -?(0|[1-9][0-9]*),
// and returns the index after it.
func intPart(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	d := i
	i = skipDigits(b, i)
	return i, i > d && (b[d] != '0' || i == d+1)
}

// int scans an integer that fits in bits bits.
func (s *scanner) int(bits int) int64 {
	lit := s.intLit()
	if !s.ok {
		return 0
	}
	v, err := parseInt(lit, bits)
	if err {
		s.fail()
	}
	return v
}

// intTo scans an integer into *slot and returns slot, for a record field
// that points to its value (slot is scratch space of the line's decoder).
func (s *scanner) intTo(slot *int) *int {
	*slot = int(s.int(64))
	return slot
}

// parseInt parses a valid integer literal; err when it does not fit.
func parseInt(lit []byte, bits int) (v int64, err bool) {
	digits := lit
	if lit[0] == '-' {
		digits = lit[1:]
	}
	if len(digits) > 18 { // may overflow: let strconv decide
		n, e := strconv.ParseInt(string(lit), 10, bits)
		return n, e != nil
	}
	for _, c := range digits {
		v = v*10 + int64(c-'0')
	}
	if len(digits) < len(lit) {
		v = -v
	}
	if bits < 64 && (v < -(1<<(bits-1)) || v >= 1<<(bits-1)) {
		return 0, true
	}
	return v, false
}

// number scans any JSON number literal and returns it as written.
func (s *scanner) number() json.RawMessage {
	start := s.i
	j, ok := intPart(s.b, s.i)
	if ok && j < len(s.b) && s.b[j] == '.' {
		j++
		f := j
		j = skipDigits(s.b, j)
		ok = j > f
	}
	if ok && j < len(s.b) && (s.b[j] == 'e' || s.b[j] == 'E') {
		j++
		if j < len(s.b) && (s.b[j] == '+' || s.b[j] == '-') {
			j++
		}
		e := j
		j = skipDigits(s.b, j)
		ok = j > e
	}
	if !ok {
		s.fail()
		return nil
	}
	s.i = j
	return s.b[start:j]
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// scalar scans a string (without escapes) or an integer and returns it as
// written, quotes included.
func (s *scanner) scalar() json.RawMessage {
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '"' {
		s.rawString()
	} else {
		s.intLit()
	}
	return s.b[start:s.i]
}

// array scans `[ elem, ... ]`, calling elem for each element; empty is
// true for `[]`.
func (s *scanner) array(elem func()) (empty bool) {
	if !s.expect('[') {
		return false
	}
	if s.peek() == ']' {
		s.i++
		return true
	}
	for s.ok {
		s.ws()
		elem()
		c := s.peek()
		s.i++
		if c == ']' {
			break
		}
		if c != ',' {
			s.fail()
		}
	}
	return false
}

// uint64s scans an array of non-negative integers into a new slice
// (non-nil, possibly empty), using *scratch as working space. It is the
// hot loop of the block-hash formats, so it works on the bytes directly.
func (s *scanner) uint64s(scratch *[]uint64) []uint64 {
	b, i := s.b, s.i
	if i >= len(b) || b[i] != '[' {
		s.fail()
		return nil
	}
	i = skipWS(b, i+1)
	buf := (*scratch)[:0]
	if i < len(b) && b[i] == ']' {
		i++
	} else {
		for {
			start := i
			var v uint64
			for i < len(b) {
				c := b[i] - '0'
				if c > 9 {
					break
				}
				v = v*10 + uint64(c)
				i++
			}
			n := i - start
			switch {
			case n == 0 || (b[start] == '0' && n > 1) || n > 20:
				s.fail()
				return nil
			case n == 20: // may overflow
				var err error
				if v, err = strconv.ParseUint(string(b[start:i]), 10, 64); err != nil {
					s.fail()
					return nil
				}
			}
			buf = append(buf, v)
			i = skipWS(b, i)
			if i >= len(b) {
				s.fail()
				return nil
			}
			if b[i] == ']' {
				i++
				break
			}
			if b[i] != ',' {
				s.fail() // also a fraction or an exponent
				return nil
			}
			i = skipWS(b, i+1)
		}
	}
	s.i = i
	*scratch = buf
	return append(make([]uint64, 0, len(buf)), buf...)
}

// skipWS returns the index of the first non-blank byte of b at or after i.
func skipWS(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// int32s scans an array of integers that fit in an int32.
func (s *scanner) int32s(scratch *[]int32) []int32 {
	buf := (*scratch)[:0]
	s.array(func() { buf = append(buf, int32(s.int(32))) })
	*scratch = buf
	if !s.ok {
		return nil
	}
	return append(make([]int32, 0, len(buf)), buf...)
}

// strs scans an array of strings.
func (s *scanner) strs() []string {
	out := []string{}
	s.array(func() { out = append(out, s.str()) })
	return out
}

// decodeValue decodes the value at the scanner with encoding/json into v
// (a strict decoder when strict: unknown keys are errors) and moves past
// it; any error makes the scanner give up, so that the whole line is
// decoded again by encoding/json and its error reported with its position.
func (s *scanner) decodeValue(v any, strict bool) {
	dec := json.NewDecoder(bytes.NewReader(s.b[s.i:]))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		s.fail()
		return
	}
	s.i += int(dec.InputOffset())
}
