//go:build !unix

package atomicfile

import "io/fs"

// umask is the usual default where the process's cannot be read.
const umask fs.FileMode = 0o022
