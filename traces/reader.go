package traces

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"

	"github.com/kvsim/kvsim/internal/jsonerr"
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
// directory is read as a set of WEKA conversation files. The path "-" means
// standard input (named "<stdin>" in messages). Every reader reads its input
// once, front to back, so pipes and FIFOs work.
func Open(path string, f Format) (*Reader, error) {
	if path == "-" {
		return newReader(os.Stdin, StdinName, f)
	}
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

// ReadAll opens the trace at path as [Open] does and returns its first n
// records (n == 0: all of them).
func ReadAll(path string, f Format, n int) ([]Record, error) {
	rd, err := Open(path, f)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var recs []Record
	for n == 0 || len(recs) < n {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// StdinName is the name under which Open reports standard input ("-").
const StdinName = "<stdin>"

// NewReader reads a trace from r. name is used in error messages (and, as a
// last resort, to detect the format). The caller closes r. r is read once,
// front to back: it need not be seekable.
func NewReader(r io.Reader, name string, f Format) (*Reader, error) {
	return newReader(r, name, f)
}

const (
	bufSize  = 64 << 10 // read buffer; lines may be longer (lineReader)
	peekSize = 1 << 20  // enough for the leading keys of any first record
)

func newReader(r io.Reader, name string, f Format) (_ *Reader, err error) {
	rd := &Reader{path: name}
	defer func() {
		if err != nil {
			rd.Close() // the decompressor, not r
		}
	}()
	br, closer, err := decompress(r, name)
	if err != nil {
		return nil, err
	}
	if closer != nil {
		rd.closers = append(rd.closers, closer)
	}
	if err := skipEmpty(br, name, f); err != nil {
		return nil, err
	}
	if f == FormatAuto {
		if f, br, err = sniff(br, name); err != nil {
			return nil, err
		}
	}
	rd.format = f
	rd.hdr = Header{Version: KVSimVersion, Format: f.String(), Source: name}
	if int(f) <= 0 || int(f) >= len(formatDecoders) {
		return nil, fmt.Errorf("%s: %w %q", name, ErrUnknownFormat, f.String())
	}
	dec, err := formatDecoders[f](br, name, &rd.hdr)
	if err != nil {
		return nil, err
	}
	rd.dec = dec
	return rd, nil
}

// formatDecoders plugs each format into newReader, which has opened,
// decompressed and detected it: given the plain input from its first
// non-blank byte, each returns its decoder and sets what it implies in the
// header (a kvsim file's own header replaces it). The JSON Lines formats
// share one skeleton (jsonlDecoder); Azure is CSV, and a WEKA file is one
// JSON document.
var formatDecoders = [...]func(br *bufio.Reader, name string, hdr *Header) (decoder, error){
	FormatMooncake: func(br *bufio.Reader, name string, hdr *Header) (decoder, error) {
		hdr.BlockSize = MooncakeBlockSize
		return newMooncake(br, name), nil
	},
	FormatBailian: func(br *bufio.Reader, name string, hdr *Header) (decoder, error) {
		hdr.BlockSize = BailianBlockSize
		return newBailian(br, name), nil
	},
	FormatTokens: func(br *bufio.Reader, name string, _ *Header) (decoder, error) {
		return newTokens(br, name), nil
	},
	FormatAzure: func(br *bufio.Reader, name string, _ *Header) (decoder, error) {
		return newAzure(br, name)
	},
	FormatWEKA: func(br *bufio.Reader, name string, hdr *Header) (decoder, error) {
		data, err := io.ReadAll(br)
		if err != nil {
			return nil, &readError{path: name, line: 1 + bytes.Count(data, []byte("\n")), err: err}
		}
		d, bs, err := readWEKA([]string{name}, func(string) ([]byte, error) { return data, nil })
		if err != nil {
			return nil, err
		}
		hdr.BlockSize = bs
		return d, nil
	},
	FormatKVSim: func(br *bufio.Reader, name string, hdr *Header) (decoder, error) {
		d, h, err := newKVSim(br, name)
		if err != nil {
			return nil, err
		}
		*hdr = h
		return d, nil
	},
}

// blanks are the bytes skipped before the first record.
const blanks = " \t\r\n"

var bom = []byte("\xef\xbb\xbf")

// peekMore returns what br has buffered, reading more only when it holds
// fewer than n bytes: at most one read per call, so that a live pipe is
// never waited on for more than it has sent (bufio's Peek(n) would block
// until n bytes). err is io.EOF at the end of the input.
func peekMore(br *bufio.Reader, n int) ([]byte, error) {
	n = min(n, bufSize)
	if br.Buffered() < n {
		if _, err := br.Peek(br.Buffered() + 1); err != nil {
			p, _ := br.Peek(br.Buffered())
			return p, err
		}
	}
	return br.Peek(br.Buffered())
}

// skipEmpty reads until the first non-blank byte and reports an input
// with none (empty, or only blank lines) as such. It drops a UTF-8 byte
// order mark.
func skipEmpty(br *bufio.Reader, name string, f Format) error {
	for n := 1; ; {
		p, err := peekMore(br, n)
		if bytes.HasPrefix(p, bom) {
			br.Discard(len(bom))
			n = 1
			continue
		}
		if len(bytes.TrimLeft(p, blanks)) > 0 || len(p) >= bufSize {
			return nil
		}
		if err == io.EOF {
			what := "a trace"
			if f != FormatAuto {
				what = "a trace in the " + f.String() + " format"
			}
			return &ParseError{Path: name, Err: fmt.Errorf("empty input: expected %s, found %s", what, map[bool]string{true: "no data", false: "only blank lines"}[len(p) == 0])}
		}
		if err != nil {
			return &readError{path: name, line: 1 + bytes.Count(p, []byte("\n")), err: err}
		}
		n = len(p) + 1
	}
}

// sniff detects the format from the start of br, reading no more than it
// needs: until the first record identifies its format, or its first line
// is complete, or bufSize bytes; only then, if the first record's
// identifying keys may come later, up to peekSize bytes. It returns the
// reader to go on with. When the format cannot be detected because the
// first line is not valid JSON or not text, it says that, with its
// position.
func sniff(br *bufio.Reader, name string) (Format, *bufio.Reader, error) {
	var prefix []byte
	for n := 1; ; {
		p, err := peekMore(br, n)
		if err != nil && err != io.EOF {
			return FormatAuto, nil, &readError{path: name, line: 1 + bytes.Count(p, []byte("\n")), err: err}
		}
		prefix = p
		if f, derr := Detect(prefix, name); derr == nil {
			return f, br, nil
		}
		if err == io.EOF || firstLineDone(prefix) {
			_, derr := Detect(prefix, name)
			return FormatAuto, nil, explainDetect(prefix, name, true, derr)
		}
		if len(prefix) >= bufSize {
			break
		}
		n = len(prefix) + 1
	}
	big := make([]byte, peekSize)
	n, err := io.ReadFull(br, big)
	if err != nil && err != io.ErrUnexpectedEOF {
		return FormatAuto, nil, &readError{path: name, line: 1 + bytes.Count(big[:n], []byte("\n")), err: err}
	}
	big = big[:n]
	f, derr := Detect(big, name)
	if derr != nil {
		return FormatAuto, nil, explainDetect(big, name, n < peekSize || firstLineDone(big), derr)
	}
	return f, bufio.NewReaderSize(io.MultiReader(bytes.NewReader(big), br), bufSize), nil
}

// firstLineDone reports whether p holds the whole first non-blank line.
func firstLineDone(p []byte) bool {
	t := bytes.TrimLeft(p, blanks)
	return len(t) > 0 && bytes.IndexByte(t, '\n') >= 0
}

// explainDetect turns a failed detection into the most useful error: the
// first line's real problem (not text, not valid JSON, not an object) with
// its position, or else the detection failure. complete says whether p
// holds the whole first line (else its end is only where reading stopped).
func explainDetect(p []byte, name string, complete bool, derr error) error {
	line, i := 1, 0
	for i < len(p) && bytes.IndexByte([]byte(blanks), p[i]) >= 0 {
		if p[i] == '\n' {
			line++
		}
		i++
	}
	start := bytes.LastIndexByte(p[:i], '\n') + 1
	text := p[start:]
	if j := bytes.IndexByte(text, '\n'); j >= 0 {
		text, complete = text[:j], true
	}
	text = bytes.TrimRight(text, "\r")
	if pe := checkText(name, line, text); pe != nil {
		return pe
	}
	if i < len(p) && (p[i] == '{' || p[i] == '[') {
		if complete {
			dec := json.NewDecoder(bytes.NewReader(text))
			dec.UseNumber()
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return jsonError(name, line, text, err)
			}
			if dec.More() {
				return &ParseError{Path: name, Line: line, Col: int(dec.InputOffset()) + 1, Err: errors.New("expected one JSON object per line, found more")}
			}
		}
		if p[i] == '[' {
			return &ParseError{Path: name, Line: line, Col: i - start + 1, Err: fmt.Errorf("%w: expected a JSON object (one record per line), found an array", ErrUnknownFormat)}
		}
		var keys map[string]json.RawMessage
		if complete && json.Unmarshal(text, &keys) == nil {
			found := "no keys"
			if len(keys) > 0 {
				found = "only " + strings.Join(slices.Sorted(maps.Keys(keys)), ", ")
			}
			return &ParseError{Path: name, Line: line, Col: i - start + 1, Err: fmt.Errorf("%w, found %s", derr, found)}
		}
		return &ParseError{Path: name, Line: line, Col: i - start + 1, Err: derr}
	}
	excerpt := text
	if len(excerpt) > 40 {
		excerpt = append(excerpt[:40:40], "..."...)
	}
	return &ParseError{Path: name, Line: line, Col: 1, Err: fmt.Errorf("%w: expected a JSON object or a CSV header with ContextTokens,GeneratedTokens columns, found %q", ErrUnknownFormat, excerpt)}
}

// checkText reports a line that is not UTF-8 text: a NUL byte means binary
// data, another invalid byte a wrong encoding (or binary data).
func checkText(path string, line int, data []byte) *ParseError {
	if utf8.Valid(data) && bytes.IndexByte(data, 0) < 0 {
		return nil
	}
	for i := 0; i < len(data); {
		c := data[i]
		if c == 0 {
			return &ParseError{Path: path, Line: line, Col: i + 1, Err: errors.New("expected text (JSON or CSV), found binary data (a NUL byte)")}
		}
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return &ParseError{Path: path, Line: line, Col: i + 1, Err: fmt.Errorf("expected UTF-8 text, found the byte 0x%02x (binary data, or text in another encoding)", c)}
		}
		i += size
	}
	return nil
}

// decompress sniffs gzip and zstd magic bytes and returns a buffered reader
// of the plain content. It only peeks, so r need not be seekable.
func decompress(r io.Reader, name string) (*bufio.Reader, io.Closer, error) {
	br := bufio.NewReaderSize(r, bufSize)
	var magic []byte
	for {
		p, err := peekMore(br, 4)
		if err != nil && err != io.EOF {
			return nil, nil, &readError{path: name, line: 1, err: err}
		}
		magic = p
		if len(p) >= 4 || err == io.EOF {
			break
		}
	}
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, &readError{path: name, line: 1, err: &decompressError{kind: "gzip", err: err}}
		}
		return bufio.NewReaderSize(decompressErrors{zr, "gzip"}, bufSize), zr, nil
	case len(magic) >= 4 && bytes.Equal(magic[:4], []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, &readError{path: name, line: 1, err: &decompressError{kind: "zstd", err: err}}
		}
		return bufio.NewReaderSize(decompressErrors{zr, "zstd"}, bufSize), zstdCloser{zr}, nil
	}
	return br, nil, nil
}

// decompressErrors marks the errors of a decompressor as such.
type decompressErrors struct {
	r    io.Reader
	kind string
}

func (d decompressErrors) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if err != nil && err != io.EOF {
		err = &decompressError{kind: d.kind, err: err}
	}
	return n, err
}

// decompressError is a failure of the gzip or zstd decoder: the input is
// truncated or corrupt.
type decompressError struct {
	kind string
	err  error
}

func (e *decompressError) Error() string {
	if errors.Is(e.err, io.ErrUnexpectedEOF) {
		return fmt.Sprintf("expected more %s data, found the end of the input (truncated %s file)", e.kind, e.kind)
	}
	return fmt.Sprintf("expected valid %s data, found corrupt %s data (%v)", e.kind, e.kind, e.err)
}

func (e *decompressError) Unwrap() error { return e.err }

// readError is a failure to read the input (I/O or decompression), as
// opposed to a malformed record. It ends the stream. line is the line being
// read, or 0 when unknown.
type readError struct {
	path string
	line int
	err  error
}

func (e *readError) Error() string {
	s := e.path
	if e.line > 0 {
		s += ":" + strconv.Itoa(e.line)
	}
	return s + ": read: " + e.err.Error()
}

func (e *readError) Unwrap() error { return e.err }

// Next returns the next record, or io.EOF after the last one. A returned
// *ParseError with a line concerns one record only: calling Next again
// continues with the following record (this is how validation reports
// every problem). Any other error is final and is returned again by later
// calls; a failure to read (I/O, truncated or corrupt gzip/zstd data)
// prints as "path:line: read: ...", line being the one it was reading.
func (r *Reader) Next() (Record, error) {
	if r.err != nil {
		return Record{}, r.err
	}
	rec, err := r.dec.next()
	if err != nil {
		var pe *ParseError
		var re *readError
		switch {
		case errors.As(err, &pe) && pe.Line > 0:
			return Record{}, err // this record only
		case err != io.EOF && pe == nil && !errors.As(err, &re):
			// An I/O or decompression error while reading the next line.
			line := 0
			if l, ok := r.dec.(interface{ lineNo() int }); ok {
				line = l.lineNo() + 1
			}
			err = &readError{path: r.path, line: line, err: err}
		}
		r.err = err
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
// numbers. Lines may be arbitrarily long. A line that is not UTF-8 text
// gives a *ParseError for that line.
type lineReader struct {
	path string
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
		if pe := checkText(l.path, l.line, s); pe != nil {
			return nil, pe
		}
		return s, nil
	}
}

// jsonError converts an encoding/json error on one line into a ParseError
// that says where, what was expected and what was found, naming fields by
// their JSON key path (never a Go type).
func jsonError(path string, line int, data []byte, err error) *ParseError {
	pe := &ParseError{Path: path, Line: line}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se) && se.Error() != "unexpected end of JSON input":
		pe.Col = max(1, int(se.Offset))
		pe.Err = syntaxError(se.Error())
	case se != nil || errors.Is(err, io.ErrUnexpectedEOF): // just past the end
		pe.Col = len(data) + 1
		pe.Err = syntaxError("unexpected end of JSON input")
	case errors.As(err, &te):
		field, start := locateValue(data, te.Offset)
		if start < 0 {
			field, start = te.Field, 0
		}
		pe.Col = start + 1
		pe.Field = field
		pe.Err = fmt.Errorf("expected %s, found %s", jsonerr.Expected(te.Type), jsonerr.Found(te.Value))
	default:
		pe.Col = 1
		pe.Err = fmt.Errorf("expected a JSON object, found %s", err.Error())
	}
	if pe.Col > len(data)+1 {
		pe.Col = len(data) + 1
	}
	return pe
}

// syntaxError rewords encoding/json's syntax errors as "invalid JSON:
// expected X, found Y".
func syntaxError(msg string) error {
	const ic = "invalid character "
	if msg == "unexpected end of JSON input" {
		return errors.New("invalid JSON: expected the rest of the record, found the end of the line (truncated record?)")
	}
	if strings.HasSuffix(msg, "exceeded max depth") {
		return errors.New("invalid JSON: expected arrays and objects nested at most 10000 deep, found them nested deeper")
	}
	if rest, ok := strings.CutPrefix(msg, ic); ok {
		for _, c := range []struct{ ctx, want string }{
			{" looking for beginning of value", "a value"},
			{" looking for beginning of object key string", "a quoted key"},
			{" after object key:value pair", "',' or '}'"},
			{" after object key", "':' after the key"},
			{" after array element", "',' or ']'"},
			{" after top-level value", "one JSON value per line"},
			{" in string literal", "no control characters in a string"},
			{" in numeric literal", "a digit"},
		} {
			if ch, ok := strings.CutSuffix(rest, c.ctx); ok {
				return fmt.Errorf("invalid JSON: expected %s, found %s", c.want, ch)
			}
		}
	}
	return fmt.Errorf("invalid JSON: %s", msg)
}

// locateValue finds the JSON value that ends at or just after byte offset
// off of data (where encoding/json reports a type error) and returns its
// key path as the user wrote it (sampling.temperature, itl_ns[3]) and its
// 0-based start offset; start is -1 if data cannot be walked.
func locateValue(data []byte, off int64) (string, int) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		obj     bool
		wantKey bool
		key     string
		idx     int
	}
	var stack []frame
	done := func() { // a value of the innermost container is complete
		if n := len(stack); n > 0 {
			if stack[n-1].obj {
				stack[n-1].wantKey = true
			} else {
				stack[n-1].idx++
			}
		}
	}
	for {
		before := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return "", -1
		}
		n := len(stack)
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			if n == 0 {
				return "", -1
			}
			stack = stack[:n-1]
			done()
			continue
		}
		if n > 0 && stack[n-1].obj && stack[n-1].wantKey {
			stack[n-1].key, _ = tok.(string)
			stack[n-1].wantKey = false
			continue
		}
		if dec.InputOffset() >= off {
			start := before
			for start < len(data) && bytes.IndexByte([]byte(" \t\r\n:,"), data[start]) >= 0 {
				start++
			}
			var b strings.Builder
			for _, f := range stack {
				if f.obj {
					if b.Len() > 0 {
						b.WriteByte('.')
					}
					b.WriteString(f.key)
				} else {
					fmt.Fprintf(&b, "[%d]", f.idx)
				}
			}
			return b.String(), start
		}
		if d, ok := tok.(json.Delim); ok {
			stack = append(stack, frame{obj: d == '{', wantKey: d == '{'})
			continue
		}
		done()
	}
}

// numberToNs converts a JSON number in units of unit nanoseconds (integer
// or decimal) to nanoseconds, rounding to the nearest nanosecond.
func numberToNs(raw json.RawMessage, unit float64) (int64, error) {
	if i, ok := plainInt(raw); ok { // the common case, as n.Int64 below
		v := float64(i) * unit
		if v > 9e18 || v < -9e18 {
			return 0, fmt.Errorf("out of range")
		}
		return i * int64(unit), nil
	}
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

// plainInt parses raw when it is exactly an integer literal that fits in
// an int64 (no blanks, fraction or exponent).
func plainInt(raw []byte) (int64, bool) {
	s := newScanner(raw)
	lit := s.intLit()
	if !s.ok || s.i != len(raw) {
		return 0, false
	}
	v, bad := parseInt(lit, 64)
	return v, !bad
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

type zstdCloser struct{ d *zstd.Decoder }

func (z zstdCloser) Close() error { z.d.Close(); return nil }
