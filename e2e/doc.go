// Package e2e holds kvsim's end-to-end checks against a real LLM server:
// llama.cpp's llama-server, run from a Debian sid chroot on CPU with a
// random-weight model written by internal/gguf.
//
// Everything here is behind the build tag e2e, so plain `go test ./...`
// never needs the server:
//
//	e2e/llama/setup.sh                      # once, as root: chroot + models
//	go test -tags e2e ./e2e/ -v             # probes, model load, cost measurement
//	go test -tags e2e ./e2e/ -run Probe -v  # the cache-rule probes only
//
// Each test starts its own short-lived server with e2e/llama/start.sh on a
// free loopback port and stops it by its PID (e2e/llama/stop.sh) when the
// test ends. Tests skip, saying why, when the chroot or the model is
// missing. KVSIM_LLAMA_ROOT selects the chroot (default /opt/kvsim-llama).
//
// The probes confirm each cache rule the simulator's llamacpp model
// (sim/llamacpp) relies on; e2e/llama/PROBES.md records what was sent and
// what came back, with the server version. e2e/fidelity.sh calibrates
// kvsim's llama-server model on one run and compares it with the server on
// traces not used for calibration (docs/fidelity.md); e2e/run.sh, which
// make e2e-real and CI run, gates on its cache predictions.
package e2e
