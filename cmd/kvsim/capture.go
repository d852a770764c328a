package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/kvsim/kvsim/internal/atomicfile"
	"github.com/kvsim/kvsim/replay"
)

func init() {
	register(&command{
		name:    "capture",
		summary: "record live traffic to a kvsim trace through a reverse proxy in front of a server",
		run:     runCapture,
	})
}

const captureUsage = `usage: kvsim capture --listen ADDR --upstream URL --out FILE

Listens on ADDR (loopback, e.g. 127.0.0.1:30001), forwards every request to
the server at URL and streams its responses back unchanged, and writes every
generation request (/generate, /v1/completions, /v1/chat/completions) to FILE
as a kvsim trace: arrival time, prompt token ids (text prompts: the length
the server reported and hashes of the text's 16-token blocks, so that
prompts sharing a text prefix share it in replays), sampling parameters,
output length and ids, and the observed TTFT, ITL, E2E, cached tokens and
status. Each record is flushed as soon as it and every earlier one have
finished, so FILE is a valid trace even if kvsim is killed; Ctrl-C stops
accepting, lets requests in flight finish for --drain, records the rest as
interrupted and exits. See docs/replay.md.
`

// captureSignalContext and captureReady are replaced by tests.
var (
	captureSignalContext = replaySignalContext
	captureListen        = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	captureReady         = func(addr string) {}
)

func runCapture(args []string, stdout, stderr io.Writer) int {
	fs := newCommand("kvsim capture", captureUsage, stderr)
	listen := fs.String("listen", "127.0.0.1:30001", "address to listen on")
	upstream := fs.String("upstream", "", "the server's base URL, e.g. http://127.0.0.1:30000")
	out := fs.String("out", "", "the trace file to write")
	drain := fs.Duration("drain", 10*time.Second, "on Ctrl-C, how long requests in flight may finish")
	bpt := fs.Float64("text-bytes-per-token", 4, "text prompts: bytes of text per token for the prefix hashes of their 16-token blocks (about 4 for English with the usual BPE tokenizers; lower for code or other languages)")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	usageErr := fs.usageErr
	switch {
	case *upstream == "":
		return usageErr("--upstream is required")
	case *out == "":
		return usageErr("--out is required")
	case !validHostPort(*listen):
		return usageErr("--listen: expected HOST:PORT, e.g. 127.0.0.1:30001, found %q", *listen)
	case !(*bpt >= replay.MinTextBytesPerToken && *bpt <= replay.MaxTextBytesPerToken):
		return usageErr("--text-bytes-per-token: expected a number from %g to %g, found %v", replay.MinTextBytesPerToken, replay.MaxTextBytesPerToken, *bpt)
	}
	ctx, stop := captureSignalContext()
	defer stop()
	// The file holds whole lines only, whatever happens to the disk: a
	// record that does not fit is cut off (internal/atomicfile.Lines).
	f, err := atomicfile.CreateLines(*out)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim capture: %v\n", err)
		return exitFail
	}
	defer f.Close()
	p, err := replay.NewProxy(ctx, replay.CaptureConfig{Upstream: *upstream, TextBytesPerToken: *bpt}, f)
	if err != nil {
		f.Close()
		os.Remove(*out)
		if f.Err() != nil {
			fmt.Fprintf(stderr, "kvsim capture: %v\n", err)
			return exitFail
		}
		return usageErr("%v", err)
	}
	ln, err := captureListen(*listen)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim capture: %v\n", err)
		return exitFail
	}
	hs := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(stderr, "kvsim capture: http://%s -> %s, recording to %s\n", ln.Addr(), *upstream, *out)
	captureReady(ln.Addr().String())
	code := exitOK
	shutdown := func() {
		sctx, cancel := context.WithTimeout(context.Background(), *drain)
		if hs.Shutdown(sctx) != nil {
			hs.Close()
		}
		cancel()
	}
	select {
	case <-ctx.Done():
		shutdown()
	case <-p.Failed():
		// Say so at once: new requests get 503 from here on, and the
		// ones in flight are let finish before kvsim exits.
		fmt.Fprintf(stderr, "kvsim capture: cannot record: %v; refusing new requests (503), letting those in flight finish for up to %v, then exiting\n", p.Err(), *drain)
		for deadline := time.Now().Add(*drain); p.InFlight() > 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		shutdown()
		code = exitFail
	case err := <-served:
		fmt.Fprintf(stderr, "kvsim capture: %v\n", err)
		code = exitFail
	}
	perr := p.Close()
	if err := f.Close(); err != nil || perr != nil {
		if err == nil {
			err = perr
		}
		fmt.Fprintf(stderr, "kvsim capture: %v\n", err)
		code = exitFail
	}
	reportUnrecorded(stderr, p.Unrecorded())
	fmt.Fprintf(stderr, "kvsim capture: %d requests recorded to %s\n", p.Records(), *out)
	return code
}

// maxUnrecordedShown bounds the requests reportUnrecorded lists one by one.
const maxUnrecordedShown = 20

// reportUnrecorded tells the user which requests were forwarded, and
// maybe answered, but are missing from the trace (replay.Proxy.Unrecorded).
func reportUnrecorded(stderr io.Writer, lost []replay.Unrecorded) {
	if len(lost) == 0 {
		return
	}
	answered := 0
	for _, u := range lost {
		if u.Status == "ok" {
			answered++
		}
	}
	fmt.Fprintf(stderr, "kvsim capture: %d requests forwarded but not recorded (%d answered in full); the trace lacks them:\n", len(lost), answered)
	for _, u := range lost[:min(len(lost), maxUnrecordedShown)] {
		fmt.Fprintf(stderr, "  id %s: %s, arrival_ns %d, %s\n", u.ID, u.Kind, u.Arrival, u.Status)
	}
	if n := len(lost) - maxUnrecordedShown; n > 0 {
		fmt.Fprintf(stderr, "  and %d more\n", n)
	}
}
