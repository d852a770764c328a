//go:build unix

package replaytest

import (
	"fmt"
	"syscall"
	"testing"
)

// RefusedURL returns the base URL of a loopback port that refuses
// connections for the rest of the test. A socket bound to the port but not
// listening holds it, so no server (of this test or another process) is
// given the port meanwhile, as can happen to a port found by listening and
// closing.
func RefusedURL(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("replaytest: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("replaytest: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("replaytest: getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("replaytest: getsockname: %T", sa)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", in4.Port)
}
