// Package atomicfile writes files so that a reader never sees a partial
// one: the content goes to a temporary file in the same folder, is flushed
// and synced, and is renamed over the target only when everything
// succeeded. A failure leaves the target as it was and removes the
// temporary file. Files are created with the permissions a user expects of
// a new file (0666 less the umask), or keep those of the file they replace.
//
// [Lines] is the same promise for a file that grows while a long run goes
// on (a recording, a study's results): a reader sees whole lines only, even
// when the disk fills in the middle of one.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Write writes path with what fill writes to the buffered writer it is
// given.
func Write(path string, fill func(io.Writer) error) error {
	f, err := Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	err = fill(bw)
	if err == nil {
		err = bw.Flush()
	}
	return f.Finish(err)
}

// File is a file being written atomically: write to it, then call Finish.
type File struct {
	path string
	tmp  *os.File
	mode fs.FileMode
}

// Create starts writing path.
func Create(path string) (*File, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return &File{path: path, tmp: tmp, mode: NewFileMode(path)}, nil
}

// NewFileMode is the permission a file written at path gets: that of the
// file already there, else 0666 less the process's umask, as os.Create
// would give it.
func NewFileMode(path string) fs.FileMode {
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		return fi.Mode().Perm()
	}
	return 0o666 &^ umask
}

// Write implements io.Writer.
func (f *File) Write(p []byte) (int, error) { return f.tmp.Write(p) }

// Finish syncs and renames the file into place if err is nil; otherwise,
// or if that fails, it removes the temporary file. It returns the first
// error, naming the path.
func (f *File) Finish(err error) error {
	if err == nil {
		err = f.tmp.Chmod(f.mode)
	}
	if err == nil {
		err = f.tmp.Sync()
	}
	if cerr := f.tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.tmp.Name(), f.path)
	}
	if err != nil {
		os.Remove(f.tmp.Name())
		// The temporary file's name is of no use to the user: name the
		// target only.
		var pe *fs.PathError
		if errors.As(err, &pe) && pe.Path == f.tmp.Name() {
			err = pe.Err
		}
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	return nil
}
