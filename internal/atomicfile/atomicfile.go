// Package atomicfile writes files so that a reader never sees a partial
// one: the content goes to a temporary file in the same folder, is flushed
// and synced, and is renamed over the target only when everything
// succeeded. A failure leaves the target as it was and removes the
// temporary file. Files are created with the permissions a user expects of
// a new file (0666 less the umask), or keep those of the file they replace.
//
// A path that is a symbolic link is written through: its final target is
// replaced and the link kept. A path that names something other than a
// regular file (a device such as /dev/null, a FIFO, a socket) is written
// straight into, with no temporary file and no rename; a folder is an
// error. The temporary files alive at any moment are known to the package,
// so a command interrupted by a signal can remove them ([RemoveTemps]).
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
	"strings"
	"sync"
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
	path   string // as the caller named it
	tmp    *os.File
	mode   fs.FileMode
	target string // where the content goes: path with symbolic links resolved
	direct bool   // tmp is target itself (not a regular file): no rename
}

// Create starts writing path.
func Create(path string) (*File, error) {
	target, fdPath, fi, err := resolve(path)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	switch {
	case fi != nil && fi.IsDir():
		return nil, fmt.Errorf("create %s: is a directory", path)
	case fi != nil && (!fi.Mode().IsRegular() || target == ""):
		// A device, FIFO or socket, or a descriptor already open
		// (/dev/stdout): renaming a file over it would replace it, so
		// write into it as a shell redirection would.
		f, err := openDescriptor(fdPath)
		if f == nil && err == nil {
			f, err = os.OpenFile(path, os.O_WRONLY, 0)
		}
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", path, unwrapPath(err, path))
		}
		return &File{path: path, tmp: f, target: path, direct: true}, nil
	}
	tmp, err := temps.create(target)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return &File{path: path, tmp: tmp, mode: NewFileMode(target), target: target}, nil
}

// maxLinks bounds the symbolic links followed, as the kernel's ELOOP does.
const maxLinks = 40

// resolve returns the information of the file path names, following
// symbolic links (nil if it does not exist yet), and the path to rename a
// new file to so as to replace it: path with its links resolved, so that
// they are kept (a dangling link's target is created). That path is "" if
// the chain goes through a link to an open descriptor (/dev/stdout,
// /proc/self/fd/N, /dev/fd/N), which is no path to replace; fdPath is then
// that link.
func resolve(path string) (target, fdPath string, fi fs.FileInfo, err error) {
	fi, err = os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		fi, err = nil, nil
	}
	if err != nil {
		return "", "", nil, unwrapPath(err, path)
	}
	for range maxLinks {
		lfi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return path, "", nil, nil
		}
		if err != nil {
			return "", "", nil, unwrapPath(err, path)
		}
		if lfi.Mode()&fs.ModeSymlink == 0 {
			return path, "", fi, nil
		}
		if abs, _ := filepath.Abs(path); strings.HasPrefix(abs, "/proc/") || strings.HasPrefix(abs, "/dev/fd/") {
			return "", abs, fi, nil
		}
		link, err := os.Readlink(path)
		if err != nil {
			return "", "", nil, unwrapPath(err, path)
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(filepath.Dir(path), link)
		}
		path = link
	}
	return "", "", nil, errors.New("too many levels of symbolic links")
}

// unwrapPath drops a *fs.PathError naming name, which the caller names
// itself.
func unwrapPath(err error, name string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == name {
		return pe.Err
	}
	return err
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
// error, naming the path. Written straight into a device or FIFO, the file
// is only closed.
func (f *File) Finish(err error) error {
	if f.direct {
		if cerr := f.tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", f.path, unwrapPath(err, f.target))
		}
		return nil
	}
	if err == nil {
		err = f.tmp.Chmod(f.mode)
	}
	if err == nil {
		err = f.tmp.Sync()
	}
	if cerr := f.tmp.Close(); err == nil {
		err = cerr
	}
	err = temps.finish(f.tmp.Name(), f.target, err)
	if err != nil {
		// The temporary file's name is of no use to the user: name the
		// target only.
		return fmt.Errorf("write %s: %w", f.path, unwrapPath(err, f.tmp.Name()))
	}
	return nil
}

// temps is the registry of the temporary files alive.
var temps = registry{live: map[string]bool{}}

// registry is the set of temporary files written at a moment. Once
// removeAll has run (the process is about to exit on a signal), no new
// one is created and none is renamed into place.
type registry struct {
	mu      sync.Mutex
	live    map[string]bool
	stopped bool
}

// errInterrupted is returned for a file started or finished after RemoveTemps.
var errInterrupted = errors.New("interrupted")

// create makes a temporary file beside target and registers it.
func (r *registry) create(target string) (*os.File, error) {
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".tmp*")
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, errInterrupted
	}
	r.live[tmp.Name()] = true
	return tmp, nil
}

// finish renames the closed temporary file tmp over target if err is nil,
// removes it otherwise or if that fails, and forgets it. It returns the
// first error.
func (r *registry) finish(tmp, target string, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && r.stopped {
		err = errInterrupted
	}
	if err == nil {
		err = os.Rename(tmp, target)
	}
	if err != nil {
		os.Remove(tmp)
	}
	delete(r.live, tmp)
	return err
}

// removeAll removes every live temporary file and stops new ones.
func (r *registry) removeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	for name := range r.live {
		os.Remove(name)
		delete(r.live, name)
	}
}

// RemoveTemps removes the temporary files of every File not yet finished,
// leaving their targets as they were, and makes later Creates and
// Finishes fail. A command calls it when a signal ends it, just before it
// exits; it is safe to call from any goroutine.
func RemoveTemps() { temps.removeAll() }
