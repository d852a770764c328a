package traces

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The kvsim trace format is JSON Lines: a header object on the first
// non-blank line, then one request object per line in arrival order.
// docs/trace-formats.md gives the grammar; the field names are the JSON
// tags of Header and Record.
//
// A record's block_size may be omitted when it equals the header's.

// wireRecord is Record as written: block_size is a pointer so that "same as
// the header" (absent) and an explicit 0 can be told apart.
type wireRecord struct {
	*recordAlias
	BlockSize *int `json:"block_size,omitempty"`
}

type recordAlias Record

// readRecord is Record as read: the required keys are pointers, so that a
// missing one is an error rather than a silent zero. Its fields shadow the
// embedded ones of the same JSON name.
type readRecord struct {
	*recordAlias
	ID        *string `json:"id"`
	Arrival   *int64  `json:"arrival_ns"`
	InputLen  *int    `json:"input_len"`
	OutputLen *int    `json:"output_len"`
	BlockSize *int    `json:"block_size"`
}

// Writer writes a trace in the kvsim format. It checks every record, so a
// file it wrote always reads back.
type Writer struct {
	w    *bufio.Writer
	hdr  Header
	last int64
	n    int
	err  error
}

// NewWriter writes the header line (with Version set to KVSimVersion) and
// returns a Writer for the records. Call Flush at the end.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	h.Version = KVSimVersion
	if h.BlockSize < 0 {
		return nil, fmt.Errorf("write kvsim trace: header block_size: expected >= 0, found %d", h.BlockSize)
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	line, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("write kvsim trace header: %w", err)
	}
	bw.Write(line)
	if err := bw.WriteByte('\n'); err != nil {
		return nil, fmt.Errorf("write kvsim trace header: %w", err)
	}
	return &Writer{w: bw, hdr: h}, nil
}

// Write appends one record. Records must come in non-decreasing Arrival
// order and be consistent (see Record); otherwise Write returns an error
// and writes nothing.
func (w *Writer) Write(r Record) error {
	if w.err != nil {
		return w.err
	}
	if r.ID == "" {
		return fmt.Errorf("write record %d: id: expected a non-empty id, found none", w.n)
	}
	if fe := r.check(nil); fe != nil {
		return fmt.Errorf("write record %q: %w", r.ID, fe)
	}
	if r.Arrival < w.last {
		return fmt.Errorf("write record %q: arrival_ns: expected >= the previous record's %d, found %d", r.ID, w.last, r.Arrival)
	}
	wr := wireRecord{recordAlias: (*recordAlias)(&r)}
	if r.BlockSize != w.hdr.BlockSize {
		bs := r.BlockSize
		wr.BlockSize = &bs
	}
	line, err := json.Marshal(wr)
	if err != nil {
		return fmt.Errorf("write record %q: %w", r.ID, err)
	}
	w.w.Write(line)
	if err := w.w.WriteByte('\n'); err != nil {
		w.err = fmt.Errorf("write kvsim trace: %w", err)
		return w.err
	}
	w.last = r.Arrival
	w.n++
	return nil
}

// Flush writes any buffered data to the underlying writer.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if err := w.w.Flush(); err != nil {
		w.err = fmt.Errorf("write kvsim trace: %w", err)
	}
	return w.err
}

var kvsimNames = map[string]string{
	"input_len":  "input_len",
	"output_len": "output_len",
	"arrival":    "arrival_ns",
	"think_time": "think_ns",
	"blocks":     "blocks",
	"tokens":     "tokens",
	"block_size": "block_size",
}

type kvsimFormat struct {
	hdr     Header
	last    int64
	scratch scratch // the scanner's working space
	slow    bool    // decode with encoding/json only (tests)
}

// scratch is the scanner's working space: what the required fields of a
// readRecord point to (valid until the next line) and the arrays being
// read.
type scratch struct {
	id          string
	arrival     int64
	in, out, bs int
	u64         []uint64
	i32         []int32
}

// newKVSim reads the header line and returns the decoder of the records
// and the header.
func newKVSim(br *bufio.Reader, path string) (*jsonlDecoder, Header, error) {
	d := newJSONL(br, path, nil)
	h, err := readKVSimHeader(&d.lines)
	if err != nil {
		return nil, Header{}, err
	}
	d.format = &kvsimFormat{hdr: h}
	return d, h, nil
}

func readKVSimHeader(lines *lineReader) (Header, error) {
	path := lines.path
	data, err := lines.next()
	if err == io.EOF {
		return Header{}, &ParseError{Path: path, Line: 1, Col: 1, Field: "kvsim_trace", Err: errors.New("expected a header line, found an empty file")}
	}
	var pe *ParseError
	if errors.As(err, &pe) {
		return Header{}, err
	}
	if err != nil {
		return Header{}, &readError{path: path, line: lines.line + 1, err: err}
	}
	line := lines.line
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var raw struct {
		Header
		Version *int `json:"kvsim_trace"`
	}
	if err := dec.Decode(&raw); err != nil {
		return Header{}, strictJSONError(path, line, data, err)
	}
	switch {
	case raw.Version == nil:
		return Header{}, badField(path, line, data, "kvsim_trace", "expected the header's format version (%d), found nothing (field missing)", KVSimVersion)
	case *raw.Version != KVSimVersion:
		return Header{}, badField(path, line, data, "kvsim_trace", "expected format version %d, found %d", KVSimVersion, *raw.Version)
	case raw.BlockSize < 0:
		return Header{}, badField(path, line, data, "block_size", "expected a non-negative block size, found %d", raw.BlockSize)
	}
	h := raw.Header
	h.Version = *raw.Version
	return h, nil
}

// strictJSONError maps an unknown-field error of a strict decoder, and
// otherwise defers to jsonError.
func strictJSONError(path string, line int, data []byte, err error) *ParseError {
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		field := strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
		return badField(path, line, data, field, "expected one of the kvsim fields (see docs/trace-formats.md), found an unknown field")
	}
	return jsonError(path, line, data, err)
}

func (d *kvsimFormat) record(l jsonLine) (Record, error) {
	var rec Record
	wr := readRecord{recordAlias: (*recordAlias)(&rec)}
	if d.slow || !scanKVSim(l.data, &wr, &d.scratch) {
		var err error
		if rec, wr, err = decodeKVSimLine(l.path, l.line, l.data); err != nil {
			return Record{}, err
		}
	}
	if err := l.require(
		want{"id", wr.ID != nil, "a request id (a string)"},
		want{"arrival_ns", wr.Arrival != nil, "nanoseconds since the trace start"},
		want{"input_len", wr.InputLen != nil, wantCount},
		want{"output_len", wr.OutputLen != nil, wantCount},
	); err != nil {
		return Record{}, err
	}
	bad := l.bad
	rec.ID, rec.Arrival, rec.InputLen, rec.OutputLen = *wr.ID, *wr.Arrival, *wr.InputLen, *wr.OutputLen
	if wr.BlockSize != nil {
		rec.BlockSize = *wr.BlockSize
	} else {
		rec.BlockSize = d.hdr.BlockSize
	}
	if rec.ID == "" {
		return Record{}, bad("id", "expected a non-empty request id, found an empty string")
	}
	if err := l.check(&rec, kvsimNames); err != nil {
		return Record{}, err
	}
	if rec.Arrival < d.last {
		return Record{}, bad("arrival_ns", "expected a time >= the previous record's (%d ns), found %d ns", d.last, rec.Arrival)
	}
	d.last = rec.Arrival
	return rec, nil
}

// decodeKVSimLine decodes a record line with encoding/json. wr's embedded
// record is a copy: use the returned one.
func decodeKVSimLine(path string, line int, data []byte) (Record, readRecord, error) {
	var rec Record
	wr := readRecord{recordAlias: (*recordAlias)(&rec)}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&wr); err != nil {
		return Record{}, wr, strictJSONError(path, line, data, err)
	}
	if dec.More() {
		return Record{}, wr, &ParseError{Path: path, Line: line, Col: int(dec.InputOffset()) + 1, Err: errors.New("expected one JSON object per line, found more")}
	}
	return rec, wr, nil
}

// scanKVSim decodes a record line into wr as the strict json.Decoder of
// next would, or returns false when the line is outside the scanner's
// subset (see scanner); wr and its record are then partly filled and must
// be reset. Sampling and observed, rare and nested, go to encoding/json.
func scanKVSim(data []byte, wr *readRecord, sc *scratch) bool {
	s := newScanner(data)
	rec := (*Record)(wr.recordAlias)
	return s.object(func(key []byte) uint32 {
		switch string(key) {
		case "id":
			sc.id = s.str()
			wr.ID = &sc.id
			return 1 << 0
		case "arrival_ns":
			sc.arrival = s.int(64)
			wr.Arrival = &sc.arrival
			return 1 << 1
		case "session":
			rec.Session = s.str()
			return 1 << 2
		case "turn":
			rec.Turn = int(s.int(64))
			return 1 << 3
		case "parent":
			rec.Parent = s.str()
			return 1 << 4
		case "wait_for":
			rec.WaitFor = s.strs()
			return 1 << 5
		case "think_ns":
			rec.ThinkTime = s.int(64)
			return 1 << 6
		case "input_len":
			wr.InputLen = s.intTo(&sc.in)
			return 1 << 7
		case "tokens":
			rec.Tokens = s.int32s(&sc.i32)
			return 1 << 8
		case "blocks":
			rec.Blocks = s.uint64s(&sc.u64)
			return 1 << 9
		case "block_size":
			wr.BlockSize = s.intTo(&sc.bs)
			return 1 << 10
		case "output_len":
			wr.OutputLen = s.intTo(&sc.out)
			return 1 << 11
		case "output_tokens":
			rec.OutputTokens = s.int32s(&sc.i32)
			return 1 << 12
		case "model":
			rec.Model = s.str()
			return 1 << 13
		case "kind":
			rec.Kind = s.str()
			return 1 << 14
		case "sampling":
			var v *Sampling // a new variable, so that rec stays on the stack
			s.decodeValue(&v, true)
			rec.Sampling = v
			return 1 << 15
		case "observed":
			var v *Observed
			s.decodeValue(&v, true)
			rec.Observed = v
			return 1 << 16
		}
		return 0
	})
}
