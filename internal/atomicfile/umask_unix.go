//go:build unix

package atomicfile

import (
	"io/fs"
	"syscall"
)

// umask is the process's file-creation mask, read once at start-up (the
// only way to read it sets it, so it is put back at once, before any other
// goroutine creates a file).
var umask = func() fs.FileMode {
	m := syscall.Umask(0o022)
	syscall.Umask(m)
	return fs.FileMode(m) & fs.ModePerm
}()
