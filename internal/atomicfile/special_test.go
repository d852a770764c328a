//go:build unix

package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

// A FIFO is written into, not replaced by a regular file.
func TestWriteFIFO(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	got := make(chan string, 1)
	go func() {
		b, err := os.ReadFile(path)
		if err != nil {
			got <- "read error: " + err.Error()
			return
		}
		got <- string(b)
	}()
	if err := Write(path, writeString("through the pipe\n")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "through the pipe\n" {
		t.Fatalf("the reader got %q", s)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&fs.ModeNamedPipe == 0 {
		t.Fatalf("%s is now %v, want the FIFO kept", path, fi.Mode())
	}
	assertOnly(t, dir, "pipe")
}

// A symbolic link is kept and its target replaced, atomically: a failed
// write leaves the target as it was.
func TestWriteSymlink(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "real", "out.txt")
	if err := os.WriteFile(target, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(filepath.Join("real", "out.txt"), link); err != nil {
		t.Fatal(err)
	}
	// A chain of two links.
	link2 := filepath.Join(dir, "link2")
	if err := os.Symlink(link, link2); err != nil {
		t.Fatal(err)
	}
	if err := Write(link2, writeString("new")); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{link, link2} {
		if fi, err := os.Lstat(l); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Fatalf("%s is no longer a symbolic link (%v, %v)", l, fi, err)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Fatalf("target holds %q, want new", b)
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o640 {
		t.Fatalf("target's mode is %v, want the old 0640 kept", fi.Mode().Perm())
	}
	boom := errors.New("boom")
	if err := Write(link, func(w io.Writer) error { io.WriteString(w, "half"); return boom }); !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want boom", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Fatalf("after a failed write the target holds %q", b)
	}
	assertOnly(t, filepath.Join(dir, "real"), "out.txt")

	// A dangling link: its target is created, the link kept.
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink("made.txt", dangling); err != nil {
		t.Fatal(err)
	}
	if err := Write(dangling, writeString("made")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "made.txt")); string(b) != "made" {
		t.Fatalf("dangling link's target holds %q", b)
	}
	if fi, _ := os.Lstat(dangling); fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatal("the dangling link was replaced")
	}

	loop := filepath.Join(dir, "loop")
	os.Symlink("loop", loop)
	if err := Write(loop, writeString("x")); err == nil || !strings.Contains(err.Error(), loop) {
		t.Fatalf("Write to a link loop = %v, want an error naming it", err)
	}
}

func TestWriteDevNull(t *testing.T) {
	fi, err := os.Stat("/dev/null")
	if err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		t.Skip("no /dev/null")
	}
	if err := Write("/dev/null", writeString("discarded")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat("/dev/null"); err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		t.Fatalf("/dev/null is now %v (%v)", fi, err)
	}
}

func TestWriteDevFull(t *testing.T) {
	fi, err := os.Stat("/dev/full")
	if err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		t.Skip("no /dev/full")
	}
	err = Write("/dev/full", writeString("does not fit"))
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "write /dev/full: ") {
		t.Fatalf("Write(/dev/full) = %v, want ENOSPC naming /dev/full", err)
	}
	if fi, err := os.Lstat("/dev/full"); err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		t.Fatalf("/dev/full is now %v (%v)", fi, err)
	}
}

func TestWriteDirectory(t *testing.T) {
	dir := t.TempDir()
	err := Write(dir, writeString("x"))
	if err == nil || !strings.Contains(err.Error(), dir+": is a directory") {
		t.Fatalf("Write(dir) = %v, want an error naming it as a directory", err)
	}
}

// RemoveTemps removes the temporary file of a File not yet finished, keeps
// the target, and makes the File's Finish fail rather than rename.
func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "new")
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("want the target and one temporary file, have %v", entries)
	}
	defer func() { temps = registry{live: map[string]bool{}} }()
	RemoveTemps()
	assertOnly(t, dir, "out.txt")
	if err := f.Finish(nil); err == nil {
		t.Fatal("Finish after RemoveTemps succeeded")
	}
	if _, err := Create(path); err == nil {
		t.Fatal("Create after RemoveTemps succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("target holds %q, want old", b)
	}
	assertOnly(t, dir, "out.txt")
}

// assertOnly fails unless dir holds exactly the named entries.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, e := range entries {
		have = append(have, e.Name())
	}
	if strings.Join(have, " ") != strings.Join(names, " ") {
		t.Fatalf("%s holds %v, want %v", dir, have, names)
	}
}

// A link to one of the process's open descriptors (what /dev/stdout is)
// writes through that descriptor, sharing its offset, rather than
// replacing the file it has open.
func TestWriteDescriptorLink(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc/self/fd")
	}
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "stdout.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	link := filepath.Join(dir, "out")
	if err := os.Symlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), link); err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "before\n")
	if err := Write(link, writeString("through the link\n")); err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "after\n")
	if b, _ := os.ReadFile(f.Name()); string(b) != "before\nthrough the link\nafter\n" {
		t.Fatalf("the file holds %q", b)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("%s is no longer a link (%v, %v)", link, fi, err)
	}
	assertOnly(t, dir, "out", "stdout.txt")
}
