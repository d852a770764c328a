//go:build !unix

package replaytest

import (
	"net"
	"testing"
)

// RefusedURL returns the base URL of a loopback port that refuses
// connections: one found by listening and closing (elsewhere than on unix,
// where a bound socket holds it, another server may be given it meanwhile).
func RefusedURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("replaytest: %v", err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	return url
}
