//go:build faults

package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kvsimBin is the binary under test, built once by TestMain.
var kvsimBin string

// repo is the repository's root (this package is e2e/faults).
var repo, _ = filepath.Abs("../..")

func TestMain(m *testing.M) {
	// KVSIM_FAULTS_BIN runs the suite against another build (an older
	// commit's, to show which cases it fails).
	if kvsimBin = os.Getenv("KVSIM_FAULTS_BIN"); kvsimBin != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "kvsim-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kvsimBin = filepath.Join(dir, "kvsim")
	build := exec.Command("go", "build", "-o", kvsimBin, "./cmd/kvsim")
	build.Dir = repo
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "faults: building kvsim:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run is one invocation of kvsim.
type run struct {
	args    []string
	dir     string        // working directory (default: a temp dir)
	stdin   io.Reader     // default: empty
	stdout  *os.File      // default: captured
	fsize   int64         // RLIMIT_FSIZE in bytes (0: none), as `ulimit -f` sets it
	timeout time.Duration // default 2 minutes
}

// outcome is what came of it.
type outcome struct {
	code           int
	stdout, stderr string
	maxRSSMB       float64
	timedOut       bool
}

func (o outcome) String() string {
	return fmt.Sprintf("exit %d, max RSS %.0f MB\nstderr:\n%s", o.code, o.maxRSSMB, o.stderr)
}

// kvsim runs the binary and waits for it.
func kvsim(t *testing.T, r run) outcome {
	t.Helper()
	cmd, stdout, stderr := command(t, r)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return wait(t, cmd, r, stdout, stderr)
}

func command(t *testing.T, r run) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	name, args := kvsimBin, r.args
	if r.fsize > 0 {
		// bash's ulimit -f counts 1024-byte blocks.
		name, args = "bash", append([]string{"-c", fmt.Sprintf(`ulimit -f %d && exec "$0" "$@"`, r.fsize/1024), kvsimBin}, r.args...)
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = r.dir
	if cmd.Dir == "" {
		cmd.Dir = t.TempDir()
	}
	cmd.Env = append(os.Environ(), "GOTRACEBACK=all")
	cmd.Stdin = r.stdin
	var stdout, stderr bytes.Buffer
	if r.stdout != nil {
		cmd.Stdout = r.stdout
	} else {
		cmd.Stdout = &stdout
	}
	cmd.Stderr = &stderr
	return cmd, &stdout, &stderr
}

func wait(t *testing.T, cmd *exec.Cmd, r run, stdout, stderr *bytes.Buffer) outcome {
	t.Helper()
	timeout := r.timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var o outcome
	select {
	case <-done:
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		o.timedOut = true
	}
	o.code = cmd.ProcessState.ExitCode()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		o.maxRSSMB = float64(ru.Maxrss) / 1024 // KiB on Linux
	}
	o.stdout, o.stderr = stdout.String(), stderr.String()
	return o
}

// expect is what a case asserts of an outcome.
type expect struct {
	code     int      // the exit code
	stderr   []string // regular expressions stderr must match, in any order
	maxRSSMB float64  // peak memory bound (default 400 MB)
}

// panicLike matches what a user must never see: a Go panic or a runtime
// crash with its goroutine dump.
var panicLike = regexp.MustCompile(`(?m)^(panic: |fatal error: |goroutine \d+ \[)`)

func check(t *testing.T, o outcome, e expect) {
	t.Helper()
	if o.timedOut {
		t.Fatalf("timed out (killed): %v", o)
	}
	if panicLike.MatchString(o.stderr) {
		t.Fatalf("a panic or runtime crash reached the user: %v", o)
	}
	if o.code != e.code {
		t.Fatalf("exit %d, want %d: %v", o.code, e.code, o)
	}
	for _, re := range e.stderr {
		if !regexp.MustCompile(re).MatchString(o.stderr) {
			t.Errorf("stderr does not match %q:\n%s", re, o.stderr)
		}
	}
	bound := e.maxRSSMB
	if bound == 0 {
		bound = 400
	}
	if o.maxRSSMB > bound {
		t.Errorf("peak RSS %.0f MB, over the bound of %.0f MB", o.maxRSSMB, bound)
	}
}

// writeFile writes a fixture into dir and returns its path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// testdata returns the absolute path of a file in testdata/.
func testdata(name string) string {
	p, _ := filepath.Abs(filepath.Join("testdata", name))
	return p
}

// wholeJSONLines checks that path holds whole JSON lines only (or does not
// exist) and returns how many.
func wholeJSONLines(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Errorf("%s ends in a partial line: %q", path, tail(data))
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		n++
		if !json.Valid(sc.Bytes()) {
			t.Errorf("%s:%d is not a JSON line: %q", path, n, sc.Text())
		}
	}
	return n
}

func tail(b []byte) []byte { return b[max(0, len(b)-80):] }

// validTrace checks path with `kvsim trace validate`.
func validTrace(t *testing.T, path string) {
	t.Helper()
	o := kvsim(t, run{args: []string{"trace", "validate", path}})
	if o.code != 0 {
		t.Errorf("kvsim trace validate %s: %v", path, o)
	}
}

// smallDisk returns a folder on a tmpfs of size bytes (as root), or "" and
// a reason when one cannot be mounted; the caller then limits the file
// size instead.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 || os.Getenv("KVSIM_FAULTS_NO_TMPFS") != "" {
		return ""
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "kvsim-faults", dir).CombinedOutput(); err != nil {
		t.Logf("no tmpfs (%v: %s); limiting the file size instead", err, out)
		return ""
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// freeAddr returns a loopback address nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// waitHTTP waits until addr accepts connections.
func waitHTTP(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never listened", addr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lines splits s into its non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
