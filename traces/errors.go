package traces

import (
	"errors"
	"fmt"
	"strconv"
)

// Sentinel errors. Use errors.Is: every *ParseError also matches ErrBadRecord.
var (
	// ErrUnknownFormat means the format could not be detected from the
	// content, or the format name is not one of the known ones.
	ErrUnknownFormat = errors.New("unknown trace format")
	// ErrBadRecord is matched by every *ParseError: one record (or the
	// document holding it) is malformed.
	ErrBadRecord = errors.New("bad trace record")
)

// ParseError reports malformed input with its position. Line and Col are
// 1-based (Col counts bytes within the line); either is 0 when unknown.
// Field names the offending JSON field or CSV column ("" when the whole
// record is malformed).
//
// It prints as `path:line:col: field: what was expected, what was found`.
type ParseError struct {
	Path  string
	Line  int
	Col   int
	Field string
	Err   error
}

// Error formats the error with its position.
func (e *ParseError) Error() string {
	s := e.Path
	if s == "" {
		s = "<input>"
	}
	if e.Line > 0 {
		s += ":" + strconv.Itoa(e.Line)
		if e.Col > 0 {
			s += ":" + strconv.Itoa(e.Col)
		}
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns ErrBadRecord and the underlying error, so that both
// errors.Is(err, ErrBadRecord) and checks against the cause work.
func (e *ParseError) Unwrap() []error { return []error{ErrBadRecord, e.Err} }

// fieldError is a record-level problem found after decoding: which field,
// what was expected and what was found.
type fieldError struct {
	field string
	msg   string
}

func (f *fieldError) Error() string { return f.field + ": " + f.msg }

func errField(field, format string, args ...any) *fieldError {
	return &fieldError{field: field, msg: fmt.Sprintf(format, args...)}
}
