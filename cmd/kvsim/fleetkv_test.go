package main

import (
	"path/filepath"
	"testing"
)

var fleetKVAware = filepath.Join("..", "..", "configs", "fleet-kvaware.toml")

// The kv_aware example (four replicas, the router's view of their caches
// 50 ms old) on the first 300 requests of the conversation trace: the
// table shows kv_aware's decisions (kv_hit, kv_miss) and one line per
// replica; a second run prints the same bytes.
func TestSimFleetKVAwareTable(t *testing.T) {
	code, out, errOut := runCLI(t, "sim", "--config", fleetKVAware, "--trace", fleetTrace)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	checkGolden(t, "fleet", "kvaware", out)
	if _, again, _ := runCLI(t, "sim", "--config", fleetKVAware, "--trace", fleetTrace); again != out {
		t.Fatal("a second run printed different output")
	}
}
