package llamacpp

import (
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// The chat trace's turn c6/1 on llama-server b11669 generated 0xED (the
// lead byte of a 3-byte character) 21 times, then "[3733]": the client's
// first chunk came with the 22nd token, then one per token (11 chunks).
func TestStreamHoldsBackSplitUTF8(t *testing.T) {
	s, err := NewStream(TokenTextByteLevel)
	if err != nil {
		t.Fatal(err)
	}
	var sent []int
	for i := range 32 {
		id := int32(3733)
		if i < 21 {
			id = 0xED
		}
		if s.Add(id) {
			sent = append(sent, i+1)
		}
	}
	if len(sent) != 11 || sent[0] != 22 || sent[10] != 32 {
		t.Errorf("chunks after tokens %v, want 22, 23, ..., 32", sent)
	}
	for _, c := range []struct {
		ids  []int32
		want []bool
	}{
		{[]int32{'a', 'b'}, []bool{true, true}},
		{[]int32{0xC3, 0xA9, 'x'}, []bool{false, true, true}},                // é: sent once complete
		{[]int32{0xE2, 0x82, 0xAC}, []bool{false, false, true}},              // €
		{[]int32{0xF0, 0x9F, 0x98, 0x80}, []bool{false, false, false, true}}, // 😀
		{[]int32{0xE2, 'A'}, []bool{false, true}},                            // an ASCII byte ends the scan
		{[]int32{0x80}, []bool{true}},                                        // a stray continuation byte is sent
		{[]int32{258, 0xC3, 258, 0xA9}, []bool{false, false, false, true}},   // EOS has no text
		{[]int32{256}, []bool{true}},                                         // 0xFE 0xFF: invalid, not a lead byte
		{[]int32{0xE2, 300}, []bool{false, true}},                            // "[300]" completes the scan
		{[]int32{-5}, []bool{true}},                                          // synthetic ids are whole text
	} {
		s, _ := NewStream(TokenTextByteLevel)
		for i, id := range c.ids {
			if got := s.Add(id); got != c.want[i] {
				t.Errorf("%v: token %d sent %t, want %t", c.ids, i, got, c.want[i])
			}
		}
	}
	whole, _ := NewStream(TokenTextWhole)
	if !whole.Add(0xED) {
		t.Error("whole-text stream held a token back")
	}
	if _, err := NewStream("utf-16"); err == nil {
		t.Error("unknown token text accepted")
	}
}

// Stream keeps only the last four bytes; a model that keeps the whole
// generated text, runs validate_utf8 over all of it and sends what is not
// sent yet makes the same decisions.
func TestStreamMatchesWholeText(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ids := rapid.SliceOfN(rapid.OneOf(
			rapid.Int32Range(0, 258),
			rapid.Int32Range(0x80, 0xFF),
			rapid.Int32Range(259, 5000),
		), 1, 40).Draw(t, "ids")
		s, _ := NewStream(TokenTextByteLevel)
		var text []byte
		sent := 0
		for i, id := range ids {
			switch {
			case id < 256:
				text = append(text, byte(id))
			case id == 256:
				text = append(text, 0xFE, 0xFF)
			case id > 258:
				text = append(text, "["+strconv.Itoa(int(id))+"]"...)
			}
			want := false
			if v := validUTF8Len(text); v == len(text) && len(text) > sent {
				want, sent = true, len(text)
			}
			if got := s.Add(id); got != want {
				t.Fatalf("token %d (%d): sent %t, want %t (text % x)", i, id, got, want, text)
			}
		}
	})
}

// validUTF8Len is llama-server's validate_utf8 over the whole text.
func validUTF8Len(text []byte) int {
	n := len(text)
	for i := 1; i <= 4 && i <= n; i++ {
		c := text[n-i]
		switch {
		case c&0xE0 == 0xC0:
			if i < 2 {
				return n - i
			}
			return n
		case c&0xF0 == 0xE0:
			if i < 3 {
				return n - i
			}
			return n
		case c&0xF8 == 0xF0:
			if i < 4 {
				return n - i
			}
			return n
		case c&0x80 == 0:
			return n
		}
	}
	return n
}
