//go:build !unix

package offheap

func mapBytes(int) ([]byte, bool) { return nil, false }

func unmapWhenUnreachable(*Bytes, []byte) func() { return nil }
