package traces

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// KVSimVersion is the version of the kvsim trace format this package
// writes and reads.
const KVSimVersion = 1

// Header describes a trace as a whole. Readers of foreign formats fill in
// what the format implies; the kvsim format stores it in its first line.
type Header struct {
	// Version is the kvsim trace format version (KVSimVersion when written).
	Version int `json:"kvsim_trace"`
	// Format is the format the records were read from (for a kvsim file,
	// the format it was converted from, if recorded).
	Format string `json:"format,omitempty"`
	// BlockSize is the block size of the hash ids in the trace, in tokens;
	// 0 when the trace has no block hashes.
	BlockSize int `json:"block_size,omitempty"`
	// Source says where the trace came from: a file name, a public
	// dataset, or the generator and its parameters.
	Source string `json:"source,omitempty"`
	// Server and ServerVersion name the server a captured trace was
	// recorded against ("" for public or generated traces).
	Server        string `json:"server,omitempty"`
	ServerVersion string `json:"server_version,omitempty"`
	// Note is free text (licence, attribution, how it was captured).
	Note string `json:"note,omitempty"`
}

// decoder yields records of one format. A *ParseError is per record: the
// decoder can be called again to continue with the next record. Any other
// error (including io.EOF) ends the stream.
type decoder interface {
	next() (Record, error)
}

// Reader streams the records of a trace, whatever its format. It holds at
// most one record in memory, never the whole file, except for WEKA
// conversations (see OpenFiles), which are merged by arrival.
type Reader struct {
	path    string
	format  Format
	hdr     Header
	dec     decoder
	closers []io.Closer
	err     error // sticky non-record error
}

// Open opens a trace file, decompressing .gz and .zst content (detected by
// its magic bytes) and detecting the format when f is FormatAuto. A
// directory is read as a set of WEKA conversation files.
func Open(path string, f Format) (*Reader, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open trace: %w", err)
	}
	if st.IsDir() {
		return OpenFiles([]string{path}, f)
	}
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open trace: %w", err)
	}
	r, err := newReader(file, path, f)
	if err != nil {
		file.Close()
		return nil, err
	}
	r.closers = append(r.closers, file)
	return r, nil
}

// NewReader reads a trace from r. name is used in error messages (and, as a
// last resort, to detect the format). The caller closes r.
func NewReader(r io.Reader, name string, f Format) (*Reader, error) {
	return newReader(r, name, f)
}

const (
	bufSize  = 64 << 10 // read buffer; lines may be longer (lineReader)
	peekSize = 1 << 20  // enough for the leading keys of any first record
)

func newReader(r io.Reader, name string, f Format) (*Reader, error) {
	rd := &Reader{path: name}
	br, closer, err := decompress(r, name)
	if err != nil {
		return nil, err
	}
	if closer != nil {
		rd.closers = append(rd.closers, closer)
	}
	if f == FormatAuto {
		if f, br, err = sniff(br, name); err != nil {
			return nil, err
		}
	}
	rd.format = f
	rd.hdr = Header{Version: KVSimVersion, Format: f.String(), Source: name}
	switch f {
	case FormatMooncake:
		rd.dec = newMooncake(br, name)
		rd.hdr.BlockSize = MooncakeBlockSize
	case FormatBailian:
		rd.dec = newBailian(br, name)
		rd.hdr.BlockSize = BailianBlockSize
	case FormatTokens:
		rd.dec = newTokens(br, name)
	case FormatAzure:
		d, err := newAzure(br, name)
		if err != nil {
			return nil, err
		}
		rd.dec = d
	case FormatWEKA:
		data, err := io.ReadAll(br)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		d, bs, err := readWEKA([]string{name}, func(string) ([]byte, error) { return data, nil })
		if err != nil {
			return nil, err
		}
		rd.dec = d
		rd.hdr.BlockSize = bs
	case FormatKVSim:
		d, err := newKVSim(br, name)
		if err != nil {
			return nil, err
		}
		rd.dec = d
		rd.hdr = d.hdr
	default:
		return nil, fmt.Errorf("%s: %w %q", name, ErrUnknownFormat, f.String())
	}
	return rd, nil
}

// sniff detects the format from the start of br: from its first bufSize
// bytes, and only when they do not decide it and there is more, from up to
// peekSize bytes (a first record whose identifying keys come late). It
// returns the reader to go on with.
func sniff(br *bufio.Reader, name string) (Format, *bufio.Reader, error) {
	prefix, err := br.Peek(bufSize)
	if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
		return FormatAuto, nil, fmt.Errorf("read %s: %w", name, err)
	}
	f, derr := Detect(prefix, name)
	if derr == nil || len(prefix) < bufSize {
		if derr != nil {
			return FormatAuto, nil, fmt.Errorf("%s: %w", name, derr)
		}
		return f, br, nil
	}
	big := make([]byte, peekSize)
	n, err := io.ReadFull(br, big)
	if err != nil && err != io.ErrUnexpectedEOF {
		return FormatAuto, nil, fmt.Errorf("read %s: %w", name, err)
	}
	big = big[:n]
	if f, derr = Detect(big, name); derr != nil {
		return FormatAuto, nil, fmt.Errorf("%s: %w", name, derr)
	}
	return f, bufio.NewReaderSize(io.MultiReader(bytes.NewReader(big), br), bufSize), nil
}

// decompress sniffs gzip and zstd magic bytes and returns a buffered reader
// of the plain content.
func decompress(r io.Reader, name string) (*bufio.Reader, io.Closer, error) {
	br := bufio.NewReaderSize(r, bufSize)
	magic, err := br.Peek(4)
	if err != nil && err != io.EOF {
		return nil, nil, fmt.Errorf("read %s: %w", name, err)
	}
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: gzip: %w", name, err)
		}
		return bufio.NewReaderSize(zr, bufSize), zr, nil
	case len(magic) == 4 && bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: zstd: %w", name, err)
		}
		return bufio.NewReaderSize(zr, bufSize), zstdCloser{zr}, nil
	}
	return br, nil, nil
}

type zstdCloser struct{ d *zstd.Decoder }

func (z zstdCloser) Close() error { z.d.Close(); return nil }

// Next returns the next record, or io.EOF after the last one. A returned
// *ParseError concerns one record only: calling Next again continues with
// the following record (this is how validation reports every problem). Any
// other error is final and is returned again by later calls.
func (r *Reader) Next() (Record, error) {
	if r.err != nil {
		return Record{}, r.err
	}
	rec, err := r.dec.next()
	if err != nil {
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Line == 0 {
			r.err = err
		}
		return Record{}, err
	}
	return rec, nil
}

// Line returns the 1-based line of the record last returned by Next, or 0
// when the format has no per-record lines (WEKA documents, whose records
// are merged by arrival).
func (r *Reader) Line() int {
	if l, ok := r.dec.(interface{ lineNo() int }); ok {
		return l.lineNo()
	}
	return 0
}

// Path returns the name the reader reports in errors.
func (r *Reader) Path() string { return r.path }

// Format returns the format being read (detected or given).
func (r *Reader) Format() Format { return r.format }

// Header returns what is known about the trace as a whole. For the kvsim
// format it is the file's header line.
func (r *Reader) Header() Header { return r.hdr }

// Close releases the underlying files and decompressors.
func (r *Reader) Close() error {
	var errs []error
	for i := len(r.closers) - 1; i >= 0; i-- {
		if err := r.closers[i].Close(); err != nil {
			errs = append(errs, err)
		}
	}
	r.closers = nil
	return errors.Join(errs...)
}

// lineReader yields the non-blank lines of a stream with their 1-based line
// numbers. Lines may be arbitrarily long.
type lineReader struct {
	br   *bufio.Reader
	line int
	buf  []byte
}

func (l *lineReader) next() ([]byte, error) {
	for {
		l.buf = l.buf[:0]
		for {
			chunk, err := l.br.ReadSlice('\n')
			l.buf = append(l.buf, chunk...)
			if err == bufio.ErrBufferFull {
				continue
			}
			if err == io.EOF {
				if len(l.buf) == 0 {
					return nil, io.EOF
				}
				break
			}
			if err != nil {
				return nil, err
			}
			break
		}
		l.line++
		s := bytes.TrimRight(l.buf, "\r\n")
		if len(bytes.TrimSpace(s)) == 0 {
			continue
		}
		return s, nil
	}
}

// jsonError converts an encoding/json error on one line into a ParseError.
func jsonError(path string, line int, data []byte, err error) *ParseError {
	pe := &ParseError{Path: path, Line: line}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		pe.Col = max(1, int(se.Offset))
		pe.Err = fmt.Errorf("expected a JSON object, found invalid JSON (%s)", se.Error())
	case errors.As(err, &te):
		pe.Col = max(1, int(te.Offset)-len(te.Value)+1)
		pe.Field = te.Field
		pe.Err = fmt.Errorf("expected %s, found %s", describeType(te.Type), te.Value)
	default:
		pe.Col = 1
		pe.Err = fmt.Errorf("expected a JSON object, found %s", err.Error())
	}
	if pe.Col > len(data) {
		pe.Col = max(1, len(data))
	}
	return pe
}

func describeType(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return describeType(t.Elem())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		if t == reflect.TypeFor[json.Number]() {
			return "a number"
		}
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(describeType(t.Elem()), "a "), "an ") + "s"
	case reflect.Struct, reflect.Map:
		return "a JSON object"
	}
	return t.String()
}

// numberToNs converts a JSON number in units of unit nanoseconds (integer
// or decimal) to nanoseconds, rounding to the nearest nanosecond.
func numberToNs(raw json.RawMessage, unit float64) (int64, error) {
	n, err := rawNumber(raw)
	if err != nil {
		return 0, err
	}
	if i, err := n.Int64(); err == nil {
		v := float64(i) * unit
		if v > 9e18 || v < -9e18 {
			return 0, fmt.Errorf("out of range")
		}
		return i * int64(unit), nil
	}
	f, err := n.Float64()
	if err != nil {
		return 0, err
	}
	v := f * unit
	if v != v || v > 9e18 || v < -9e18 {
		return 0, fmt.Errorf("out of range")
	}
	if v < 0 {
		return int64(v - 0.5), nil
	}
	return int64(v + 0.5), nil
}

// isNull reports whether a raw JSON field is absent or null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// rawNumber accepts a JSON number literal (not a quoted string).
func rawNumber(raw json.RawMessage) (json.Number, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || !(t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) {
		return "", fmt.Errorf("not a number")
	}
	var n json.Number
	if err := json.Unmarshal(t, &n); err != nil {
		return "", err
	}
	return n, nil
}

// rawInt parses a JSON integer literal.
func rawInt(raw json.RawMessage) (int64, error) {
	n, err := rawNumber(raw)
	if err != nil {
		return 0, err
	}
	return n.Int64()
}
