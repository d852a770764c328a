package traces

import (
	"fmt"
	"strings"
)

// InFile returns err naming the file path, unless its message already
// starts with it (a reader's errors do: "path:line:col: ..."), so that a
// caller can name the trace without saying it twice.
func InFile(path string, err error) error {
	if err == nil || strings.HasPrefix(err.Error(), path) {
		return err
	}
	return fmt.Errorf("%s: %w", path, err)
}
