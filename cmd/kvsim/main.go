// Command kvsim simulates and replays the hierarchical KV cache of an LLM
// inference server. See the README and docs/ for the subcommands.
package main

import "os"

func main() {
	handleInterrupts()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
