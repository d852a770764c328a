package main

import (
	"bytes"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
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
