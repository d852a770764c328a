//go:build faults

package faults

import (
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvsim/kvsim/internal/testutil"
)

// hostile inputs for the trace readers: name, file name, content.
func hostileTraces(t *testing.T) []struct {
	name, file string
	data       []byte
} {
	t.Helper()
	mooncake := `{"timestamp":0,"input_length":600,"output_length":8,"hash_ids":[1,2]}` + "\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	for range 2000 {
		zw.Write([]byte(mooncake))
	}
	zw.Close()
	zst := testutil.ReadFile(t, filepath.Join(repo, "configs", "traces", "mooncake_conversation.jsonl.zst"))
	return []struct {
		name, file string
		data       []byte
	}{
		{"empty", "empty.jsonl", nil},
		{"truncated", "trunc.jsonl", []byte(mooncake + mooncake[:40])},
		{"binary", "bin.jsonl", []byte("\x00\x01\x02\xff\xfe binary\n")},
		{"NaN", "nan.jsonl", []byte(`{"timestamp":NaN,"input_length":600,"output_length":8,"hash_ids":[1]}` + "\n")},
		{"huge number", "huge.jsonl", []byte(`{"timestamp":0,"input_length":1e999,"output_length":8,"hash_ids":[1]}` + "\n")},
		{"deep nesting", "deep.jsonl", []byte(strings.Repeat("[", 100000) + "\n")},
		{"invalid UTF-8", "utf8.jsonl", []byte(`{"timestamp":0,"input_length":600,"output_length":8,"hash_ids":[1],"x":"` + "\xff\xfe" + `"}` + "\n")},
		{"truncated gzip", "cut.jsonl.gz", gz.Bytes()[:gz.Len()/2]},
		{"truncated zstd", "cut.jsonl.zst", zst[:len(zst)/3]},
	}
}

// Each reader, on each hostile input, exits 1 (2 for a flag error) with
// the file's name, the line and what was expected; no panic, no hang, a
// bounded memory.
func TestReadersOnHostileInput(t *testing.T) {
	dir := t.TempDir()
	cfg := testdata("small.toml")
	for _, in := range hostileTraces(t) {
		path := writeFile(t, dir, in.file, in.data)
		for _, cmd := range [][]string{
			{"trace", "validate", path},
			{"trace", "stats", path},
			{"trace", "convert", path, "--out", filepath.Join(dir, "out.jsonl")},
			{"sim", "--config", cfg, "--trace", path},
			{"policy", "--trace", path, "--l1-pages", "8", "--l2-pages", "16"},
		} {
			t.Run(in.name+"/"+cmd[0]+" "+cmd[1], func(t *testing.T) {
				o := kvsim(t, run{args: cmd, timeout: time.Minute})
				if cmd[1] == "validate" {
					// validate lists the problems on stdout, the count on stderr.
					o.stderr = o.stdout + o.stderr
				}
				want := []string{regexp.QuoteMeta(in.file)}
				switch in.name {
				case "empty":
					want = append(want, `empty input`)
				case "truncated gzip", "truncated zstd":
					want = append(want, regexp.QuoteMeta(in.file)+`:\d+: read: .*truncated`)
				default:
					want = append(want, regexp.QuoteMeta(in.file)+`:\d+(:\d+)?: .*(expected|found)`)
				}
				check(t, o, expect{code: 1, stderr: want, maxRSSMB: 300})
				if _, err := os.Stat(filepath.Join(dir, "out.jsonl")); err == nil {
					t.Errorf("trace convert left out.jsonl behind")
				}
			})
		}
	}
}

// Readers take "-" for stdin and read pipes and FIFOs once: stats of a
// trace through a pipe equal those of the file.
func TestReadersOnPipes(t *testing.T) {
	chat := testdata("chat.jsonl")
	data := testutil.ReadFile(t, chat)
	file := kvsim(t, run{args: []string{"trace", "stats", "--json", chat}})
	check(t, file, expect{code: 0})
	want := strings.ReplaceAll(file.stdout, chat, "<stdin>")
	stdin := kvsim(t, run{args: []string{"trace", "stats", "--json", "-"}, stdin: bytes.NewReader(data)})
	check(t, stdin, expect{code: 0})
	if stdin.stdout != want && stdin.stdout != file.stdout {
		t.Errorf("stats of stdin differ from the file's:\n%s\nwant\n%s", stdin.stdout, file.stdout)
	}
	// A FIFO, written by another process while kvsim reads it.
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	writer := exec.Command("sh", "-c", `cat "$0" > "$1"`, chat, fifo)
	if err := writer.Start(); err != nil {
		t.Fatal(err)
	}
	o := kvsim(t, run{args: []string{"sim", "--config", testdata("small.toml"), "--trace", fifo, "--json"}, timeout: 30 * time.Second})
	writer.Wait()
	check(t, o, expect{code: 0})
	ref := kvsim(t, run{args: []string{"sim", "--config", testdata("small.toml"), "--trace", chat, "--json"}})
	if strip(o.stdout, fifo) != strip(ref.stdout, chat) {
		t.Errorf("sim on a FIFO differs from sim on the file:\n%s\n%s", o.stdout, ref.stdout)
	}
}

// strip removes the trace's name from a sim JSON line.
func strip(s, name string) string { return strings.ReplaceAll(s, name, "TRACE") }

// Every bad config in configs/testdata/bad stops kvsim sim before it
// simulates anything: exit 2, the golden message (file, line, column, key,
// expected and found), quickly and in little memory. Among them are the
// ones that used to run a zero-cost server, wrap around int64 or grow
// without bound (gemm_mfu 1e-12).
func TestBadConfigs(t *testing.T) {
	dir := filepath.Join(repo, "configs")
	files, err := filepath.Glob(filepath.Join(dir, "testdata", "bad", "*.toml"))
	if err != nil || len(files) < 20 {
		t.Fatalf("bad configs: %v (%d)", err, len(files))
	}
	for _, f := range files {
		rel, _ := filepath.Rel(dir, f)
		t.Run(filepath.Base(f), func(t *testing.T) {
			golden := testutil.ReadFile(t, strings.TrimSuffix(f, ".toml")+".err")
			o := kvsim(t, run{args: []string{"sim", "--config", rel, "--trace", testdata("chat.jsonl")}, dir: dir, timeout: 30 * time.Second})
			var want []string
			for _, l := range lines(string(golden)) {
				want = append(want, regexp.QuoteMeta(l))
			}
			check(t, o, expect{code: 2, stderr: want, maxRSSMB: 200})
		})
	}
}

// A study whose objective bound is NaN or infinite is refused before any
// point is simulated (it used to simulate them all and fail in the
// plotter).
func TestStudyObjectiveRefusedUpFront(t *testing.T) {
	dir := t.TempDir()
	for _, bound := range []string{"nan", "inf", "-Inf"} {
		sf := writeFile(t, dir, "s.toml", []byte(`title = "t"
objective = "maximize cache_hit_rate subject to p99_ttft_ms <= `+bound+`"
base = "`+testdata("small.toml")+`"
[sweep]
"cache.host_tokens" = [20000, 40000]
`))
		o := kvsim(t, run{args: []string{"study", sf, "--out", filepath.Join(dir, "out")}})
		check(t, o, expect{code: 2, stderr: []string{`s\.toml:2:1: objective: constraint on p99_ttft_ms: expected a finite number as the bound`}})
		if _, err := os.Stat(filepath.Join(dir, "out", "results.jsonl")); err == nil {
			t.Errorf("bound %s: points were simulated", bound)
		}
	}
}
