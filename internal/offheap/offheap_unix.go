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

func unmapWhenUnreachable(o *Bytes, b []byte) {
	runtime.AddCleanup(o, func(b []byte) {
		if err := syscall.Munmap(b); err != nil {
			panic("offheap: munmap: " + err.Error())
		}
	}, b)
}
