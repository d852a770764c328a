package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Lines is a file of lines that grows while a run goes on: a recording, a
// study's results. A Write may carry any part of a line or several lines.
// If a write fails (a full disk, a file-size limit, an I/O error), the file
// is cut back to the end of its last whole line and that write and every
// later one fail with the same error, naming the path; so whatever happens,
// the file on disk holds whole lines only. Lines is not safe for
// concurrent use.
type Lines struct {
	f     *os.File
	path  string
	size  int64 // bytes in the file
	whole int64 // bytes up to and including the last newline
	err   error
}

// CreateLines creates path empty (replacing what was there) for writing
// lines, with the permissions a user expects of a new file.
func CreateLines(path string) (*Lines, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o666)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return &Lines{f: f, path: path}, nil
}

// AppendLines opens path for appending lines, creating it if need be. A
// file that ends in a partial line (one a process killed mid-write left)
// is cut back to its last whole line first, so the next line starts on a
// line of its own.
func AppendLines(path string) (*Lines, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o666)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	l := &Lines{f: f, path: path}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	l.size = fi.Size()
	l.whole, err = lastWholeLine(f, l.size)
	if err == nil && l.whole != l.size {
		err = f.Truncate(l.whole)
		l.size = l.whole
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return l, nil
}

// lastWholeLine returns the offset just past the file's last newline (0 if
// it has none).
func lastWholeLine(f *os.File, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for end := size; end > 0; {
		start := max(end-int64(len(buf)), 0)
		b := buf[:end-start]
		if _, err := f.ReadAt(b, start); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return 0, nil
}

// Write implements io.Writer with the whole-line promise above.
func (l *Lines) Write(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.f.Write(p)
	if n > 0 {
		if i := bytes.LastIndexByte(p[:n], '\n'); i >= 0 {
			l.whole = l.size + int64(i) + 1
		}
		l.size += int64(n)
	}
	if err != nil {
		l.fail(err)
		return n, l.err
	}
	return n, nil
}

// fail records err and cuts the file back to its last whole line.
func (l *Lines) fail(err error) {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == l.path {
		err = pe.Err // the path is named once, below
	}
	l.err = fmt.Errorf("write %s: %w", l.path, err)
	if l.whole < l.size {
		if terr := l.f.Truncate(l.whole); terr != nil {
			l.err = fmt.Errorf("write %s: %w (and cutting its partial last line: %v)", l.path, err, terr)
			return
		}
		l.size = l.whole
	}
}

// Sync commits the file to stable storage.
func (l *Lines) Sync() error {
	if l.err != nil {
		return l.err
	}
	if err := l.f.Sync(); err != nil {
		l.fail(err)
	}
	return l.err
}

// Err returns the first error, if any.
func (l *Lines) Err() error { return l.err }

// Path returns the file's path.
func (l *Lines) Path() string { return l.path }

// Close cuts a partial last line if one was left (its writer stopped in
// the middle of it), syncs and closes the file. It returns the first error
// of the file's life.
func (l *Lines) Close() error {
	if l.err == nil && l.whole < l.size {
		l.fail(fmt.Errorf("closed in the middle of a line"))
	}
	if l.err == nil {
		if err := l.f.Sync(); err != nil {
			l.fail(err)
		}
	}
	if err := l.f.Close(); err != nil && l.err == nil {
		l.err = fmt.Errorf("close %s: %w", l.path, err)
	}
	return l.err
}
