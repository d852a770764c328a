package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/traces"
)

func runCLI(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// runOK runs kvsim with args, which must exit 0, and returns its
// stdout and stderr.
func runOK(t testing.TB, args ...string) (stdout, stderr string) {
	t.Helper()
	code, stdout, stderr := runCLI(t, args...)
	if code != exitOK {
		t.Fatalf("kvsim %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	return stdout, stderr
}

// runQuiet runs kvsim with args, which must exit 0 and write nothing to
// stderr, and returns its stdout.
func runQuiet(t testing.TB, args ...string) string {
	t.Helper()
	stdout, stderr := runOK(t, args...)
	if stderr != "" {
		t.Fatalf("kvsim %s: stderr %q", strings.Join(args, " "), stderr)
	}
	return stdout
}

// runJSON runs kvsim with args, which must exit 0, and decodes its
// stdout, which must be JSON, into v.
func runJSON(t testing.TB, v any, args ...string) {
	t.Helper()
	stdout, _ := runOK(t, args...)
	decodeJSON(t, stdout, v)
}

// runQuietJSON is runJSON for a run that must also write nothing to
// stderr.
func runQuietJSON(t testing.TB, v any, args ...string) {
	t.Helper()
	decodeJSON(t, runQuiet(t, args...), v)
}

// readJSONLines decodes each line of the JSON-lines file at path, which
// must be JSON, into a T.
func readJSONLines[T any](t testing.TB, path string) []T {
	t.Helper()
	var out []T
	for _, l := range strings.Split(strings.TrimSpace(string(testutil.ReadFile(t, path))), "\n") {
		var v T
		decodeJSON(t, l, &v)
		out = append(out, v)
	}
	return out
}

// decodeJSON decodes doc, which must be JSON, into v.
func decodeJSON(t testing.TB, doc string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(doc), v); err != nil {
		t.Fatalf("%v: %s", err, doc)
	}
}

// writeTrace writes recs to path as a kvsim trace with header hdr, or
// fails the test.
func writeTrace(t testing.TB, path string, hdr traces.Header, recs []traces.Record) {
	t.Helper()
	var b bytes.Buffer
	if err := writeRecords(&b, hdr, recs); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, b.String())
}

// writeFile writes data to path or fails the test.
func writeFile(t testing.TB, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkRefused runs kvsim with args, which must exit with exitUsage and
// a stderr that contains every one of want.
func checkRefused(t *testing.T, args []string, want ...string) {
	t.Helper()
	code, _, stderr := runCLI(t, args...)
	for _, w := range want {
		if code != exitUsage || !strings.Contains(stderr, w) {
			t.Errorf("kvsim %s: exit %d, stderr %q, want %q", strings.Join(args, " "), code, stderr, w)
			return
		}
	}
}

// usageCase is a command line (after the subcommand) that kvsim must
// refuse as a usage error, with want in its message.
type usageCase struct {
	args []string
	want string
}

// checkUsageErrors runs `kvsim CMD ARGS` for each case: each must exit
// with exitUsage and a stderr that contains the case's want.
func checkUsageErrors(t *testing.T, cmd string, cases []usageCase) {
	t.Helper()
	for _, tc := range cases {
		checkRefused(t, append([]string{cmd}, tc.args...), tc.want)
	}
}

func TestRunNoArgsIsUsageError(t *testing.T) {
	code, _, stderr := runCLI(t)
	if code != exitUsage {
		t.Fatalf("run() = %d, want %d", code, exitUsage)
	}
	if !strings.Contains(stderr, "usage: kvsim") {
		t.Fatalf("stderr lacks usage: %q", stderr)
	}
}

func TestRunUnknownCommand(t *testing.T) {
	code, _, stderr := runCLI(t, "frobnicate")
	if code != exitUsage || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Fatalf("run(frobnicate) = %d, %q", code, stderr)
	}
}

func TestHelpListsEveryCommand(t *testing.T) {
	code, stdout, _ := runCLI(t, "help")
	if code != exitOK {
		t.Fatalf("run(help) = %d", code)
	}
	for name := range commands {
		if !strings.Contains(stdout, "  "+name) {
			t.Errorf("help does not list %q:\n%s", name, stdout)
		}
	}
}

// fullStdout fails every write as a full disk (or /dev/full) does.
type fullStdout struct{ writes int }

func (f *fullStdout) Write(p []byte) (int, error) {
	f.writes++
	return 0, syscall.ENOSPC
}

// Every command checks its writes to standard output: a table that did not
// reach its reader exits non-zero and says why, whichever command wrote it.
func TestStdoutWriteErrorsFail(t *testing.T) {
	tr := genTrace(t, "shared-prefix", "--groups", "2", "--questions", "2", "--system-prompt-len", "200", "--question-len", "20", "--output-len", "4")
	for _, args := range [][]string{
		{"version"},
		{"help"},
		{"sim", "--config", simConfig, "--trace", tr},
		{"sim", "--config", simConfig, "--trace", tr, "--json"},
		{"replay", "--trace", tr, "--target", "sim", "--config", simConfig},
		{"policy", "--trace", policySmall, "--l1-pages", "2", "--l2-pages", "4"},
		{"trace", "stats", tr},
		{"trace", "head", "-n", "1", tr},
		{"plan-bench", "--candidates", "50", "--deficit", "100", "--cp", "2", "--seed", "1"},
	} {
		t.Run(strings.Join(args[:min(2, len(args))], " "), func(t *testing.T) {
			out := &fullStdout{}
			var stderr bytes.Buffer
			code := run(args, out, &stderr)
			if out.writes == 0 {
				t.Fatalf("wrote nothing to stdout (exit %d): %s", code, stderr.String())
			}
			if code == exitOK || !strings.Contains(stderr.String(), "write standard output: no space left on device") {
				t.Fatalf("exit %d with stdout full; stderr:\n%s", code, stderr.String())
			}
		})
	}
}
