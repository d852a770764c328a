package llamacpp

import "fmt"

// Token texts: how a model's token ids decode to the bytes llama-server
// streams (Config.TokenText).
const (
	// TokenTextWhole: every token decodes to whole text, so every sampled
	// token is streamed at once (the default; the effect of split UTF-8
	// sequences is then not modelled).
	TokenTextWhole = ""
	// TokenTextByteLevel is the byte-level vocabulary of kvsim's GGUF
	// models (internal/gguf): ids 0-255 are the bytes 0x00-0xFF, 256 the
	// merge 0xFE 0xFF, 257 and 258 BOS and EOS (no text when streamed),
	// and every other id the text "[id]". Negative ids (the simulator's
	// synthetic outputs) count as whole text.
	TokenTextByteLevel = "byte-level"
)

// validTokenText reports whether v is a known Config.TokenText.
func validTokenText(v string) bool { return v == TokenTextWhole || v == TokenTextByteLevel }

// Stream follows what llama-server streams of one request's output. The
// server appends each sampled token's text to the request's generated
// text and sends the part not yet sent only when the text does not end in
// an incomplete UTF-8 sequence (tools/server's validate_utf8: scanning
// back over the last four bytes to the first lead or ASCII byte, a lead
// byte with fewer bytes after it than its sequence needs). Until then the
// client receives nothing: with a byte-level vocabulary a token that is
// the lead byte of a 3-byte character, repeated, holds back the whole
// stream, and the client's first token comes with the first token after
// the run. The zero Stream (TokenTextWhole) sends every token.
type Stream struct {
	byteLevel bool
	tail      [4]byte // the last bytes of the generated text, tail[n-1] the last
	n         int
	unsent    bool // generated text not sent yet
}

// NewStream returns the stream of one request under Config.TokenText kind.
func NewStream(kind string) (*Stream, error) {
	if !validTokenText(kind) {
		return nil, fmt.Errorf("llamacpp: unknown token_text %q (want %q or %q)", kind, TokenTextWhole, TokenTextByteLevel)
	}
	return &Stream{byteLevel: kind == TokenTextByteLevel}, nil
}

// Add appends sampled token id and reports whether the server sends text
// now (all the generated text not sent before).
func (s *Stream) Add(id int32) bool {
	if !s.byteLevel {
		return true
	}
	switch {
	case id >= 0 && id < 256:
		s.push(byte(id))
	case id == 256:
		s.push(0xFE)
		s.push(0xFF)
	case id == 257 || id == 258:
		// BOS and EOS: no text.
	default:
		// "[id]" ends in an ASCII byte, which ends validate_utf8's scan:
		// the bytes before it do not matter.
		s.push(']')
	}
	if !s.unsent || incompleteUTF8(s.tail[:s.n]) {
		return false
	}
	s.unsent = false
	return true
}

func (s *Stream) push(b byte) {
	if s.n == len(s.tail) {
		copy(s.tail[:], s.tail[1:])
		s.n--
	}
	s.tail[s.n] = b
	s.n++
	s.unsent = true
}

// incompleteUTF8 reports whether text (its last four bytes suffice) ends
// in an incomplete UTF-8 sequence as llama-server's validate_utf8 decides
// it: from the last byte back, the first lead byte found ends the scan,
// incomplete when fewer bytes follow it than its sequence needs; an ASCII
// byte ends the scan, complete; continuation and invalid bytes are passed
// over.
func incompleteUTF8(text []byte) bool {
	for i := 1; i <= 4 && i <= len(text); i++ {
		c := text[len(text)-i]
		switch {
		case c&0xE0 == 0xC0:
			return i < 2
		case c&0xF0 == 0xE0:
			return i < 3
		case c&0xF8 == 0xF0:
			return i < 4
		case c&0x80 == 0:
			return false
		}
	}
	return false
}
