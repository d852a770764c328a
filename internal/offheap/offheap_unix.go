//go:build unix

package offheap

import (
	"runtime"
	"syscall"
)

func mapBytes(n int) ([]byte, bool) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	return b, err == nil
}

// unmapWhenUnreachable unmaps b once o is unreachable, and returns a
// function that unmaps it now instead.
func unmapWhenUnreachable(o *Bytes, b []byte) func() {
	c := runtime.AddCleanup(o, unmap, b)
	return func() {
		c.Stop()
		unmap(b)
	}
}

func unmap(b []byte) {
	if err := syscall.Munmap(b); err != nil {
		panic("offheap: munmap: " + err.Error())
	}
}
