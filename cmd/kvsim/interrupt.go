package main

import (
	"context"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/kvsim/kvsim/internal/atomicfile"
)

// Signals. A command that stops gracefully on SIGINT/SIGTERM (replay,
// bench, capture, serve, compare, study: each writes what it has) takes
// its context from interruptContext. While one such context is live, the
// process-wide handler main installs leaves the signal to it; otherwise
// (sim, trace, plan, ...) the handler removes the temporary files of the
// outputs being written (internal/atomicfile), so an interrupted run leaves
// the old files as they were and no .tmp files, and exits 128+signal.

// graceful counts the live contexts of interruptContext.
var graceful atomic.Int32

// interruptContext returns a context that SIGINT/SIGTERM cancel, for a
// command that then stops and writes what it has.
func interruptContext() (context.Context, context.CancelFunc) {
	graceful.Add(1)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var once atomic.Bool
	return ctx, func() {
		stop()
		if once.CompareAndSwap(false, true) {
			graceful.Add(-1)
		}
	}
}

// handleInterrupts installs the process-wide SIGINT/SIGTERM handler. Only
// main calls it: tests run commands in-process.
func handleInterrupts() {
	ch := make(chan os.Signal, 1)
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		// A signal ignored at start (a shell's background job ignores
		// SIGINT) stays ignored.
		if !signal.Ignored(sig) {
			signal.Notify(ch, sig)
		}
	}
	go func() {
		for sig := range ch {
			if graceful.Load() > 0 {
				continue // the command's own context has it
			}
			atomicfile.RemoveTemps()
			code := 128 + 2 // SIGINT
			if s, ok := sig.(syscall.Signal); ok {
				code = 128 + int(s)
			}
			os.Exit(code)
		}
	}()
}
