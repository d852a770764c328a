//go:build faults

package faults

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Standard output on /dev/full: every command that prints a result exits
// 1 and says it could not write it (it used to exit 0 having written
// nothing).
func TestStdoutFull(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	cfg, chat := testdata("small.toml"), testdata("chat.jsonl")
	for _, args := range [][]string{
		{"sim", "--config", cfg, "--trace", chat},
		{"sim", "--config", cfg, "--trace", chat, "--json"},
		{"replay", "--trace", chat, "--target", "sim", "--config", cfg},
		{"plan-bench", "--candidates", "200", "--deficit", "500", "--cp", "4", "--seed", "1"},
		{"trace", "stats", chat},
		{"trace", "head", "-n", "2", chat},
		{"trace", "gen", "multiturn", "--clients", "2", "--rounds", "2"},
		{"version"},
	} {
		name := strings.Join(args[:min(3, len(args))], " ")
		t.Run(strings.ReplaceAll(name, testdata(""), ""), func(t *testing.T) {
			o := kvsim(t, run{args: args, stdout: full})
			check(t, o, expect{code: 1, stderr: []string{`write standard output: .*no space left on device`}})
		})
	}
}

// Output files on a full disk (a small tmpfs as root, else a file-size
// limit): the command exits 1 naming the file, and leaves either no file
// (one written atomically) or whole lines only (one that grows); never a
// truncated file that looks complete, and no temporary files.
func TestOutputOnFullDisk(t *testing.T) {
	cfg, chat := testdata("small.toml"), testdata("chat.jsonl")
	for _, tc := range []struct {
		name string
		args func(out string) []string
		file string
		room int // bytes free: less than the file needs
	}{
		{"sim per-request", func(d string) []string {
			return []string{"sim", "--config", cfg, "--trace", chat, "--per-request", filepath.Join(d, "per.jsonl")}
		}, "per.jsonl", 4096},
		{"sim timeline", func(d string) []string {
			return []string{"sim", "--config", cfg, "--trace", chat, "--timeline", filepath.Join(d, "tl.csv")}
		}, "tl.csv", 0},
		{"trace convert", func(d string) []string {
			return []string{"trace", "convert", chat, "--out", filepath.Join(d, "conv.jsonl")}
		}, "conv.jsonl", 4096},
		{"trace gen", func(d string) []string {
			return []string{"trace", "gen", "multiturn", "--clients", "8", "--rounds", "4", "--out", filepath.Join(d, "gen.jsonl")}
		}, "gen.jsonl", 4096},
		{"replay per-request", func(d string) []string {
			return []string{"replay", "--trace", chat, "--target", "sim", "--config", cfg, "--per-request", filepath.Join(d, "per.jsonl")}
		}, "per.jsonl", 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, r := fullDisk(t, tc.room)
			r.args = tc.args(dir)
			o := kvsim(t, r)
			check(t, o, expect{code: 1, stderr: []string{regexp.QuoteMeta(filepath.Join(dir, tc.file)), `(no space left on device|file too large)`}})
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if e.Name() == filler {
					continue
				}
				if e.Name() != tc.file {
					t.Errorf("left behind: %s", e.Name())
					continue
				}
				if strings.HasSuffix(tc.file, ".jsonl") {
					wholeJSONLines(t, filepath.Join(dir, tc.file))
				}
			}
		})
	}
}

// filler is the file that fills a small tmpfs to leave little room.
const filler = "filler"

// fullDisk returns a folder with room bytes free (a multiple of 4 KiB,
// tmpfs's page), and a run that writes there: a 64 KiB tmpfs filled but
// for room (as root), else a file-size limit of room bytes on the process.
func fullDisk(t *testing.T, room int) (string, run) {
	t.Helper()
	const size, page = 64 << 10, 4 << 10
	if room%page != 0 || room >= size {
		t.Fatalf("fullDisk: room %d is not a multiple of %d below %d", room, page, size)
	}
	if dir := smallDisk(t, size); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, filler), make([]byte, size-room), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir, run{}
	}
	return t.TempDir(), run{fsize: int64(max(room, 512))}
}

// Two outputs of one run, one of them on /dev/full: the run exits 1
// naming that output's flag and keeps neither, for one server and for a
// fleet (a fleet used to open its outputs only after the run, and either
// kind kept the output written first).
func TestOneOutputFullKeepsNone(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	cfg, chat := testdata("small.toml"), testdata("chat.jsonl")
	server, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fleetCfg := filepath.Join(t.TempDir(), "fleet.toml")
	if err := os.WriteFile(fleetCfg, append(server, "\n[[fleet.groups]]\ncount = 2\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{cfg, fleetCfg} {
		for _, full := range []string{"per-request", "timeline"} {
			d := t.TempDir()
			per, tl := filepath.Join(d, "per.jsonl"), filepath.Join(d, "tl.csv")
			if full == "per-request" {
				per = "/dev/full"
			} else {
				tl = "/dev/full"
			}
			o := kvsim(t, run{args: []string{"sim", "--config", c, "--trace", chat, "--per-request", per, "--timeline", tl}})
			check(t, o, expect{code: 1, stderr: []string{`--` + full + ` /dev/full: no space left on device`}})
			if names, _ := filepath.Glob(filepath.Join(d, "*")); len(names) != 0 {
				t.Errorf("%s, --%s on /dev/full: left %v", filepath.Base(c), full, names)
			}
		}
	}
}
