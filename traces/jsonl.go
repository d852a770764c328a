package traces

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// jsonlDecoder is the skeleton of the JSON Lines formats (Mooncake,
// Bailian, token ids, kvsim): it yields the non-blank lines with their
// positions (lineReader: any length, UTF-8 checked) and hands each to the
// format, which decodes and checks one record. What comes before (opening,
// decompression, format detection) is newReader's, the same for every
// format.
type jsonlDecoder struct {
	lines  lineReader
	format lineFormat
}

// lineFormat is what a JSON Lines format plugs into jsonlDecoder: the
// decoding of one line into a record. A *ParseError concerns that line
// only.
type lineFormat interface {
	record(l jsonLine) (Record, error)
}

// jsonLine is one non-blank line of a trace and where it is.
type jsonLine struct {
	path string
	line int // 1-based
	data []byte
}

// bad reports a problem with one field of the line (see badField).
func (l jsonLine) bad(field, format string, args ...any) error {
	return badField(l.path, l.line, l.data, field, format, args...)
}

// want is a field a record line must have: its key, whether the line has
// it, and what it holds (for the error when it does not).
type want struct {
	key  string
	ok   bool
	what string
}

// Values of want.what that several formats share.
const (
	wantCount  = "a token count"
	wantHashes = "an array of block hash ids"
)

// require reports the first of fields that the line lacks.
func (l jsonLine) require(fields ...want) error {
	for _, f := range fields {
		if !f.ok {
			return l.bad(f.key, "expected %s, found nothing (field missing)", f.what)
		}
	}
	return nil
}

// check normalizes rec and checks it (Record.check), naming a field as the
// format does (names).
func (l jsonLine) check(rec *Record, names map[string]string) error {
	rec.normalize()
	if fe := rec.check(names); fe != nil {
		return l.bad(fe.field, "%s", fe.msg)
	}
	return nil
}

func newJSONL(br *bufio.Reader, path string, f lineFormat) *jsonlDecoder {
	return &jsonlDecoder{lines: lineReader{path: path, br: br}, format: f}
}

func (d *jsonlDecoder) next() (Record, error) {
	data, err := d.lines.next()
	if err != nil {
		return Record{}, err
	}
	return d.format.record(jsonLine{path: d.lines.path, line: d.lines.line, data: data})
}

func (d *jsonlDecoder) lineNo() int { return d.lines.line }

// badField builds the ParseError for a problem with one field of a JSON
// line. The column is where the field's key starts (1 if the field is
// absent).
func badField(path string, line int, data []byte, field, format string, args ...any) *ParseError {
	return &ParseError{
		Path:  path,
		Line:  line,
		Col:   fieldCol(data, field),
		Field: field,
		Err:   fmt.Errorf(format, args...),
	}
}

// fieldCol returns the 1-based byte column of `"field"` in data, or 1.
func fieldCol(data []byte, field string) int {
	if i := bytes.Index(data, []byte(strconv.Quote(field))); i >= 0 {
		return i + 1
	}
	return 1
}

// scalarString renders a JSON string or number as a Go string.
func scalarString(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", false
	}
	if raw[0] == '"' {
		sc := newScanner(raw)
		if _, ok := sc.rawString(); ok && sc.i == len(raw) {
			return string(raw[1 : len(raw)-1]), true // no escapes
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return "", false
	}
	return n.String(), true
}

// fmtMs prints nanoseconds as milliseconds without trailing zeros.
func fmtMs(ns int64) string {
	return strconv.FormatFloat(float64(ns)/1e6, 'f', -1, 64)
}

// sessionChain numbers the turns of each session and links each request to
// the previous one of its session. Memory is one entry per session.
type sessionChain struct {
	last map[string]chainEntry
}

type chainEntry struct {
	id   string
	turn int
}

func newSessionChain() *sessionChain { return &sessionChain{last: map[string]chainEntry{}} }

// add records id as the next turn of session and returns its 1-based turn
// and the previous request's ID ("" for the first turn).
func (c *sessionChain) add(session, id string) (turn int, parent string) {
	prev := c.last[session]
	c.last[session] = chainEntry{id: id, turn: prev.turn + 1}
	return prev.turn + 1, prev.id
}
