// Package golden is the -update golden-file helper every golden test of
// the repository uses (the standard library's pattern): a test renders
// its output as text and calls [Check], which compares it byte for byte
// with the file, or, when the test binary runs with -update (`make
// golden`), rewrites the file instead. [BadFiles] is the same for the
// testdata/bad corpora whose .err goldens hold an error's exact text.
//
// Importing the package defines the -update flag in the test binary, so a
// package's tests must not define their own. Only tests import it: it
// imports testing and defines a command-line flag, neither of which
// belongs in a production binary (internal/lint checks).
package golden
