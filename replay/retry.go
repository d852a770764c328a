package replay

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"syscall"
	"time"
)

// Stale keep-alive connections.
//
// A server may close a keep-alive connection at any moment: after an idle
// timeout (uvicorn's and cpp-httplib's are 5 s), after a number of
// requests, or, as llama.cpp's llama-server does, right after every
// streamed response although it advertised "Keep-Alive: timeout=5,
// max=100". The client learns of the close only when the FIN arrives; a
// request sent on the connection before that is written into a socket the
// server no longer reads, and fails with EOF or a reset before any byte of
// the response. Go's transport resends such a request by itself only when
// it is idempotent (or nothing at all was written); a POST is neither, so
// without help a replay loses it and reports a server failure that never
// happened (docs/replay.md, "Stale connections").
//
// doRetrying resends it once, on a fresh connection, and only when that
// is provably safe: the failed attempt ran on a reused connection, no
// byte of the response arrived (the round trip itself failed, so no
// status line was read), the failure is the connection's (EOF, reset,
// broken pipe, the transport's "server closed idle connection"), and the
// request was not canceled. A response that had started is never resent.
// It returns how many times the request was resent (by it, or internally
// by the transport, which shows as a second connection for one request).
func doRetrying(ctx context.Context, client, fresh *http.Client, build func(ctx context.Context) (*http.Request, error)) (*http.Response, int, error) {
	retries := 0
	for attempt := 0; ; attempt++ {
		conns, reused := 0, false
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
			conns++
			reused = info.Reused
		}}
		req, err := build(httptrace.WithClientTrace(ctx, trace))
		if err != nil {
			return nil, retries, err
		}
		c := client
		if attempt > 0 {
			c = fresh
		}
		res, err := c.Do(req)
		retries += max(conns-1, 0)
		if err == nil || attempt > 0 || !reused || ctx.Err() != nil || !staleConnError(err) {
			return res, retries, err
		}
		retries++
	}
}

// staleConnError reports whether err is how a connection that the server
// had closed fails a round trip.
func staleConnError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

// idleConnTimeout is how long an idle keep-alive connection is kept: under
// the 5 s of uvicorn (SGLang's, vLLM's HTTP server) and cpp-httplib
// (llama-server), so that kvsim closes its idle connections before those
// servers do and the race above is rare even before the retry.
const idleConnTimeout = 4 * time.Second
