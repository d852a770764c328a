// Package testutil holds the small helpers that tests of several packages
// share: draining a reader to its io.EOF ([ReadAll]), reading a file or
// failing ([ReadFile]), finding a shared public trace or skipping
// ([SharedTrace]), driving an engine event by event ([Steps]), raising
// rapid's defaults for a plain `go test`
// in a TestMain ([MainWithDefaults]), running a test or benchmark both
// ways of a switch ([RunBool]), and the block-key rewrites that
// properties over page-keyed traces share ([DrawPrefixTrace], [ChainKeys],
// [RelabelFar]), and
// an enum's text round trip ([TextRoundTrip]).
//
// Only tests import it (internal/lint checks). It imports nothing of kvsim, so that any
// package's own (package-internal) tests can use it without an import
// cycle; helpers that need a kvsim type live in that package's tests.
package testutil
