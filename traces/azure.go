package traces

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// azureLayout parses the Azure LLM inference timestamps, such as
// "2023-11-16 18:17:03.9799600" (UTC, up to 9 fractional digits).
const azureLayout = "2006-01-02 15:04:05.999999999"

// azureDecoder reads the Azure LLM inference trace CSV:
//
//	TIMESTAMP,ContextTokens,GeneratedTokens
//	2023-11-16 18:17:03.9799600,4808,10
//
// Arrivals are relative to the first row. The format has no prefix or
// session information.
type azureDecoder struct {
	path  string
	cr    *csv.Reader
	col   [3]int // indexes of TIMESTAMP, ContextTokens, GeneratedTokens
	start time.Time
	n     int
	last  int64
	line  int
}

func (d *azureDecoder) lineNo() int { return d.line }

var azureColumns = [3]string{"timestamp", "contexttokens", "generatedtokens"}

func newAzure(br *bufio.Reader, path string) (*azureDecoder, error) {
	cr := csv.NewReader(br)
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err == io.EOF {
		return nil, &ParseError{Path: path, Line: 1, Col: 1, Err: errors.New("expected a header row TIMESTAMP,ContextTokens,GeneratedTokens, found an empty file")}
	}
	if err != nil {
		if err = csvError(path, err); !errors.As(err, new(*ParseError)) {
			err = &readError{path: path, line: 1, err: err}
		}
		return nil, err
	}
	if pe := checkFields(path, cr, head); pe != nil {
		return nil, pe
	}
	d := &azureDecoder{path: path, cr: cr, col: [3]int{-1, -1, -1}}
	for i, h := range head {
		h = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
		for j, want := range azureColumns {
			if h == want {
				d.col[j] = i
			}
		}
	}
	for j, c := range d.col {
		if c < 0 {
			return nil, &ParseError{Path: path, Line: 1, Col: 1, Field: azureHeader(j), Err: fmt.Errorf("expected a header row with TIMESTAMP,ContextTokens,GeneratedTokens, found %q", strings.Join(head, ","))}
		}
	}
	return d, nil
}

func azureHeader(j int) string {
	return [...]string{"TIMESTAMP", "ContextTokens", "GeneratedTokens"}[j]
}

// csvError converts a csv.ParseError; other errors (I/O) are returned as
// they are, for Reader.Next to place.
func csvError(path string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &ParseError{Path: path, Line: pe.Line, Col: pe.Column, Err: fmt.Errorf("expected a CSV row, found %v", pe.Err)}
	}
	return err
}

// checkFields reports a field of the row just read that is not UTF-8 text.
func checkFields(path string, cr *csv.Reader, row []string) *ParseError {
	for i, f := range row {
		if pe := checkText(path, 0, []byte(f)); pe != nil {
			line, col := cr.FieldPos(i)
			pe.Line, pe.Col = line, col+pe.Col-1
			return pe
		}
	}
	return nil
}

func (d *azureDecoder) next() (Record, error) {
	row, err := d.cr.Read()
	if err != nil {
		if err == io.EOF {
			return Record{}, io.EOF
		}
		return Record{}, csvError(d.path, err)
	}
	line, _ := d.cr.FieldPos(0)
	d.line = line
	if pe := checkFields(d.path, d.cr, row); pe != nil {
		return Record{}, pe
	}
	bad := func(j int, format string, args ...any) error {
		col := 1
		if d.col[j] < len(row) {
			_, col = d.cr.FieldPos(d.col[j])
		}
		return &ParseError{Path: d.path, Line: line, Col: col, Field: azureHeader(j), Err: fmt.Errorf(format, args...)}
	}
	for j, c := range d.col {
		if c >= len(row) {
			return Record{}, bad(j, "expected %d columns, found %d", len(d.col), len(row))
		}
	}
	ts, err := time.Parse(azureLayout, strings.TrimSpace(row[d.col[0]]))
	if err != nil {
		return Record{}, bad(0, "expected a time like 2023-11-16 18:17:03.9799600, found %q", row[d.col[0]])
	}
	in, err := strconv.Atoi(strings.TrimSpace(row[d.col[1]]))
	if err != nil || in <= 0 {
		return Record{}, bad(1, "expected a positive token count, found %q", row[d.col[1]])
	}
	out, err := strconv.Atoi(strings.TrimSpace(row[d.col[2]]))
	if err != nil || out < 0 {
		return Record{}, bad(2, "expected a non-negative token count, found %q", row[d.col[2]])
	}
	if d.n == 0 {
		d.start = ts
	}
	at := int64(ts.Sub(d.start))
	if at < d.last {
		return Record{}, bad(0, "expected a time >= the previous row's, found %q", row[d.col[0]])
	}
	d.last = at
	rec := Record{ID: strconv.Itoa(d.n), Arrival: at, InputLen: in, OutputLen: out}
	d.n++
	return rec, nil
}
