package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"
)

// The event stream of both APIs is Server-Sent Events: lines "data: X"
// separated by blank lines, X a JSON object, the last one "data: [DONE]".
// Other SSE fields (event:, id:, retry:) and comments (":") are skipped.

// maxEventLine bounds one line of an event stream. SGLang's cumulative
// text and output_ids make long lines (about 11 bytes a generated token:
// 128k tokens are 1.4 MB), so the bound is generous; a server that sends
// more in one line fails that request ("malformed event") rather than the
// client's memory.
const maxEventLine = 4 << 20

// errLineTooLong is lineReader's error for a line over maxEventLine.
var errLineTooLong = errors.New("an event line longer than 4 MiB")

// lineReader returns the lines of a stream without their line ending. A
// line longer than the bufio.Reader's buffer is assembled in scratch, up to
// maxEventLine bytes.
type lineReader struct {
	br      *bufio.Reader
	scratch []byte
}

func (l *lineReader) next() ([]byte, error) {
	line, err := l.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		l.scratch = append(l.scratch[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(l.scratch) > maxEventLine {
				l.scratch = nil
				return nil, errLineTooLong
			}
			line, err = l.br.ReadSlice('\n')
			l.scratch = append(l.scratch, line...)
		}
		line = l.scratch
	}
	if err != nil && (err != io.EOF || len(line) == 0) {
		return nil, err
	}
	line = bytes.TrimRight(line, "\r\n")
	return line, nil
}

// streamState parses one response stream.
type streamState struct {
	api      API
	chunks   int             // OpenAI: chunks with text, the token count when usage is absent
	lastIDs  json.RawMessage // SGLang: the last cumulative output_ids
	finished bool            // an event carried a finish reason
}

// sglangEvent holds the fields of a /generate event that the replay uses.
// Text and OutputIDs are cumulative by default; only whether they are
// empty matters while streaming.
type sglangEvent struct {
	Text      json.RawMessage `json:"text"`
	OutputIDs json.RawMessage `json:"output_ids"`
	MetaInfo  *struct {
		PromptTokens     int             `json:"prompt_tokens"`
		CompletionTokens int             `json:"completion_tokens"`
		CachedTokens     *int            `json:"cached_tokens"`
		FinishReason     json.RawMessage `json:"finish_reason"`
	} `json:"meta_info"`
	Error json.RawMessage `json:"error"`
}

// openAIEvent holds the fields of a completions or chat chunk.
type openAIEvent struct {
	Choices []struct {
		Text  *string `json:"text"`
		Delta *struct {
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// read consumes the stream up to [DONE], reporting chunks to sink and the
// final counts in resp. It returns nil only for a complete stream: one
// that reached [DONE], or ended after an event that carried a finish
// reason.
func (s *streamState) read(ctx context.Context, br *bufio.Reader, clock Clock, sink Sink, resp *Response) error {
	lr := lineReader{br: br}
	for {
		line, err := lr.next()
		now := clock.Now()
		if err != nil {
			resp.End = now
			if ctx.Err() != nil {
				return &RequestError{Reason: "canceled", Err: ctx.Err()}
			}
			if err == errLineTooLong {
				return &RequestError{Reason: "malformed event", Detail: err.Error()}
			}
			return s.end(err, resp)
		}
		done, err := s.line(line, now, sink, resp)
		if done || err != nil {
			return err
		}
	}
}

// end handles the end of the byte stream (err is io.EOF or the read
// error) before [DONE].
func (s *streamState) end(err error, resp *Response) error {
	if err == io.EOF && s.finished {
		s.finish(resp, s.lastIDs)
		return nil
	}
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return &RequestError{Reason: "stream cut", Detail: "the stream ended before [DONE]"}
	}
	return &RequestError{Reason: "stream cut", Err: err}
}

// line parses one line of the stream (without its line ending), read at
// now. done reports the end of the stream ([DONE]); an error ends it too.
func (s *streamState) line(line []byte, now time.Time, sink Sink, resp *Response) (done bool, err error) {
	if len(line) == 0 || line[0] == ':' {
		return false, nil
	}
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		if field, _, ok := bytes.Cut(line, []byte(":")); ok && (string(field) == "event" || string(field) == "id" || string(field) == "retry") {
			return false, nil
		}
		resp.End = now
		return true, &RequestError{Reason: "malformed event", Detail: "not an SSE data line: " + truncate(string(line), 120)}
	}
	data = bytes.TrimSpace(data)
	resp.End = now
	if string(data) == "[DONE]" {
		s.finish(resp, s.lastIDs)
		return true, nil
	}
	switch s.api {
	case APISGLang:
		var ev sglangEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return true, &RequestError{Reason: "malformed event", Detail: truncate(string(data), 120), Err: err}
		}
		if len(ev.Error) > 0 && string(ev.Error) != "null" {
			return true, &RequestError{Reason: "server error", Detail: errorMessage(ev.Error)}
		}
		m := ev.MetaInfo
		if m == nil {
			return true, &RequestError{Reason: "malformed event", Detail: "no meta_info: " + truncate(string(data), 120)}
		}
		resp.PromptTokens = m.PromptTokens
		resp.CompletionTokens = m.CompletionTokens
		if m.CachedTokens != nil {
			resp.CachedTokens = *m.CachedTokens
		}
		if fr, msg := finishReason(m.FinishReason); fr != "" {
			resp.FinishReason = fr
			s.finished = true
			if fr == "abort" {
				return true, &RequestError{Reason: "aborted", Detail: msg}
			}
		}
		if len(ev.OutputIDs) > 2 {
			s.lastIDs = append(s.lastIDs[:0], ev.OutputIDs...)
		}
		hasText := len(ev.Text) > 2 // a non-empty JSON string
		if hasText || (len(ev.Text) == 0 && len(ev.OutputIDs) > 2) {
			sink.Chunk(now, m.CompletionTokens)
		}
	default:
		var ev openAIEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return true, &RequestError{Reason: "malformed event", Detail: truncate(string(data), 120), Err: err}
		}
		if len(ev.Error) > 0 && string(ev.Error) != "null" {
			return true, &RequestError{Reason: "server error", Detail: errorMessage(ev.Error)}
		}
		if u := ev.Usage; u != nil {
			resp.PromptTokens = u.PromptTokens
			resp.CompletionTokens = u.CompletionTokens
			if d := u.PromptTokensDetails; d != nil && d.CachedTokens != nil {
				resp.CachedTokens = *d.CachedTokens
			}
		}
		if len(ev.Choices) > 0 {
			c := &ev.Choices[0]
			text := c.Text
			if c.Delta != nil {
				text = c.Delta.Content
			}
			if text != nil && *text != "" {
				s.chunks++
				n := s.chunks
				if ev.Usage != nil && ev.Usage.CompletionTokens > 0 {
					n = ev.Usage.CompletionTokens
					s.chunks = n
				}
				sink.Chunk(now, n)
			}
			if c.FinishReason != nil && *c.FinishReason != "" {
				resp.FinishReason = *c.FinishReason
				s.finished = true
				if *c.FinishReason == "abort" {
					return true, &RequestError{Reason: "aborted"}
				}
			}
		}
	}
	return false, nil
}

// finish completes resp at the end of a stream.
func (s *streamState) finish(resp *Response, lastIDs json.RawMessage) {
	if s.api != APISGLang && resp.CompletionTokens == 0 {
		resp.CompletionTokens = s.chunks
	}
	if len(lastIDs) > 0 {
		var ids []int32
		if json.Unmarshal(lastIDs, &ids) == nil {
			resp.OutputIDs = ids
		}
	}
}

// finishReason reads SGLang's finish_reason: null, a string, or an object
// {"type": "length", ...} (with "message" for an abort).
func finishReason(raw json.RawMessage) (reason, message string) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, ""
	}
	var o struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Type != "" {
		return o.Type, o.Message
	}
	return "unknown", string(raw)
}

// errorMessage extracts "message" from an error value (object or string).
func errorMessage(raw json.RawMessage) string {
	var o struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Message != "" {
		return truncate(o.Message, 200)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return truncate(s, 200)
	}
	return truncate(string(raw), 200)
}
