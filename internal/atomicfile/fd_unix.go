//go:build unix

package atomicfile

import (
	"os"
	"regexp"
	"strconv"
	"syscall"
)

// fdLink matches the links that name one of the process's own open
// descriptors.
var fdLink = regexp.MustCompile(`^/(?:proc/self|proc/` + strconv.Itoa(os.Getpid()) + `|dev)/fd/([0-9]+)$`)

// openDescriptor returns a duplicate of the descriptor the link p names
// (/proc/self/fd/1, /dev/fd/1), so that what is written shares its offset
// with what the process writes there (a table on stdout redirected to the
// same file); nil if p names none.
func openDescriptor(p string) (*os.File, error) {
	m := fdLink.FindStringSubmatch(p)
	if m == nil {
		return nil, nil
	}
	fd, err := strconv.Atoi(m[1])
	if err != nil {
		return nil, nil
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		return nil, err
	}
	syscall.CloseOnExec(dup)
	return os.NewFile(uintptr(dup), p), nil
}
