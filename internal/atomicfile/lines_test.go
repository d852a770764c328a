package atomicfile

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// TestLinesFullDisk writes lines into a file whose size is limited (the
// process's RLIMIT_FSIZE, as `ulimit -f` sets it, so no root is needed):
// the writes that do not fit fail with the path named, and the file holds
// whole lines only, every one that was reported written.
func TestLinesFullDisk(t *testing.T) {
	if os.Getenv("ATOMICFILE_LINES_CHILD") != "" {
		linesChild()
		return
	}
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLinesFullDisk$")
	cmd.Env = append(os.Environ(), "ATOMICFILE_LINES_CHILD="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var written int
	var werr string
	for _, l := range strings.Split(string(out), "\n") {
		if s, ok := strings.CutPrefix(l, "written "); ok {
			fmt.Sscan(s, &written)
		}
		if s, ok := strings.CutPrefix(l, "error "); ok {
			werr = s
		}
	}
	if !strings.Contains(werr, path) || !strings.Contains(werr, "file too large") {
		t.Fatalf("the write error %q does not name %s and the cause", werr, path)
	}
	data := testutil.ReadFile(t, path)
	if len(data) == 0 || data[len(data)-1] != '\n' {
		t.Fatalf("the file (%d bytes) does not end in a whole line", len(data))
	}
	lines := bytes.Split(data[:len(data)-1], []byte("\n"))
	if len(lines) != written || written == 0 {
		t.Fatalf("the file holds %d lines, the writer reported %d written", len(lines), written)
	}
	for i, l := range lines {
		if want := lineText(i); string(l) != want {
			t.Fatalf("line %d = %q, want %q", i+1, l, want)
		}
	}
}

func lineText(i int) string {
	return fmt.Sprintf("{\"line\":%d,\"pad\":%q}", i, strings.Repeat("x", 37*(i%5)))
}

// linesChild limits its file size to 3000 bytes, writes lines in pieces
// until a write fails, and prints how many were written whole.
func linesChild() {
	path := os.Getenv("ATOMICFILE_LINES_CHILD")
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 3000, Max: 3000}); err != nil {
		fmt.Println("setrlimit:", err)
		os.Exit(1)
	}
	l, err := CreateLines(path)
	if err != nil {
		fmt.Println("create:", err)
		os.Exit(1)
	}
	n := 0
	for i := 0; i < 1000; i++ {
		s := lineText(i) + "\n"
		// A line in two writes, as a buffered writer may split it.
		if _, err := l.Write([]byte(s[:len(s)/2])); err != nil {
			fmt.Println("error", err)
			break
		}
		if _, err := l.Write([]byte(s[len(s)/2:])); err != nil {
			fmt.Println("error", err)
			break
		}
		n++
	}
	if _, err := l.Write([]byte("more\n")); err == nil {
		fmt.Println("error a write after a failure succeeded")
	}
	if err := l.Close(); err == nil {
		fmt.Println("error Close forgot the failure")
	}
	fmt.Println("written", n)
	os.Exit(0)
}

func TestAppendLinesCutsAPartialLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.jsonl")
	os.WriteFile(path, []byte("one\ntwo\nthr"), 0o644)
	l, err := AppendLines(path)
	if err != nil {
		t.Fatal(err)
	}
	l.Write([]byte("three\n"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "one\ntwo\nthree\n" {
		t.Fatalf("file = %q", got)
	}
	// Closing in the middle of a line cuts it and says so.
	l, _ = AppendLines(path)
	l.Write([]byte("fou"))
	if err := l.Close(); err == nil || !strings.Contains(err.Error(), "middle of a line") {
		t.Fatalf("Close = %v", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "one\ntwo\nthree\n" {
		t.Fatalf("file = %q", got)
	}
}

func TestModes(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	saved := umask
	umask = 0o027
	defer func() { umask = saved }()
	dir := t.TempDir()
	path := filepath.Join(dir, "new.txt")
	if err := Write(path, func(w io.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Fatalf("new file mode %v, want 0640 (0666 less umask 027)", fi.Mode().Perm())
	}
	// Replacing a file keeps its permissions.
	os.Chmod(path, 0o604)
	if err := Write(path, func(w io.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o604 {
		t.Fatalf("replaced file mode %v, want 0604 (kept)", fi.Mode().Perm())
	}
	l, err := CreateLines(filepath.Join(dir, "lines"))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if fi, _ := os.Stat(filepath.Join(dir, "lines")); fi.Mode().Perm() != 0o640 {
		t.Fatalf("lines file mode %v, want 0640", fi.Mode().Perm())
	}
}
