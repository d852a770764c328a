//go:build !unix

package atomicfile

import "os"

// openDescriptor returns nil: descriptor links are a unix matter.
func openDescriptor(string) (*os.File, error) { return nil, nil }
