package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/traces"
)

func readTrace(t testing.TB, path string) (traces.Header, []traces.Record) {
	t.Helper()
	r, err := traces.Open(path, traces.FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recs := testutil.ReadAll(t, r.Next)
	return r.Header(), recs
}

// readTraceRecords is readTrace without the header.
func readTraceRecords(t *testing.T, path string) []traces.Record {
	t.Helper()
	_, recs := readTrace(t, path)
	return recs
}

func TestTraceStatsTable(t *testing.T) {
	for _, f := range []string{"mooncake.jsonl", "azure.csv", "weka.json"} {
		t.Run(f, func(t *testing.T) {
			out, _ := runOK(t, "trace", "stats", filepath.Join("testdata", "trace", f))
			checkGolden(t, "trace", "stats_"+f, out)
		})
	}
}

func TestTraceStatsJSONMooncakeGolden(t *testing.T) {
	p := testutil.SharedTrace(t, "mooncake_fast25/conversation_trace.jsonl")
	var st struct {
		Requests     int                `json:"requests"`
		DurationS    float64            `json:"duration_s"`
		TotalBlocks  int                `json:"total_blocks"`
		UniqueBlocks int                `json:"unique_blocks"`
		Ideal        float64            `json:"ideal_hit_rate"`
		LRU          map[string]float64 `json:"lru_hit_rate"`
	}
	runJSON(t, &st, "trace", "stats", "--json", p)
	want := map[string]float64{"0.01": 0.052, "0.05": 0.195, "0.1": 0.278, "0.25": 0.353, "0.5": 0.363}
	if st.Requests != 12031 || st.TotalBlocks != 288500 || st.UniqueBlocks != 182790 || st.DurationS < 3536.9 || st.DurationS > 3537.1 {
		t.Fatalf("stats %+v", st)
	}
	if d := st.Ideal - 0.366; d > 5e-4 || d < -5e-4 {
		t.Errorf("ideal %.4f, want 0.366", st.Ideal)
	}
	for k, v := range want {
		if d := st.LRU[k] - v; d > 5e-4 || d < -5e-4 {
			t.Errorf("lru[%s] = %.4f, want %.3f", k, st.LRU[k], v)
		}
	}
}

func TestTraceValidate(t *testing.T) {
	code, out, _ := runCLI(t, "trace", "validate", "testdata/trace/mooncake.jsonl")
	if code != exitOK || out != "ok: 5 requests (mooncake)\n" {
		t.Fatalf("good trace: exit %d, %q", code, out)
	}
	for _, f := range []string{"bad_mooncake.jsonl", "bad_links.jsonl"} {
		code, out, errOut := runCLI(t, "trace", "validate", "testdata/trace/"+f)
		if code != exitFail {
			t.Fatalf("%s: exit %d, want %d", f, code, exitFail)
		}
		checkGolden(t, "trace", "validate_"+f, out+"--- stderr\n"+errOut)
	}
}

func TestTraceUsageErrors(t *testing.T) {
	cases := [][]string{
		{"trace"},
		{"trace", "frob"},
		{"trace", "stats"},
		{"trace", "stats", "--format", "csv", "x"},
		{"trace", "stats", "--bogus", "x"},
		{"trace", "head", "-n", "0", "testdata/trace/mooncake.jsonl"},
		{"trace", "sample", "--fraction", "2", "testdata/trace/mooncake.jsonl"},
		{"trace", "convert", "--to", "mooncake", "testdata/trace/mooncake.jsonl"},
		{"trace", "gen"},
		{"trace", "gen", "zipf"},
		{"trace", "gen", "multiturn", "--clients", "0", "--rate", "-1"},
		{"trace", "gen", "warmcache", "--pcts", "10,x"},
	}
	for _, c := range cases {
		if code, _, errOut := runCLI(t, c...); code != exitUsage || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want %d and a message", c, code, errOut, exitUsage)
		}
	}
	if code, _, _ := runCLI(t, "trace", "stats", "testdata/trace/nope.jsonl"); code != exitFail {
		t.Errorf("missing file: exit %d, want %d", code, exitFail)
	}
}

func TestTraceConvertHead(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "w.jsonl")
	if code, _, errOut := runCLI(t, "trace", "convert", "--to", "kvsim", "--out", out, "testdata/trace/weka.json"); code != exitOK {
		t.Fatalf("convert: %s", errOut)
	}
	hdr, recs := readTrace(t, out)
	_, orig := readTrace(t, "testdata/trace/weka.json")
	if hdr.Format != "weka" || hdr.BlockSize != 64 || len(recs) != len(orig) {
		t.Fatalf("converted header %+v, %d records (want %d)", hdr, len(recs), len(orig))
	}
	code, stdout, _ := runCLI(t, "trace", "head", "-n", "2", "testdata/trace/mooncake.jsonl")
	if code != exitOK {
		t.Fatal("head failed")
	}
	checkGolden(t, "trace", "head_mooncake", stdout)
	// A failing conversion leaves no output file behind.
	bad := filepath.Join(dir, "bad.jsonl")
	if code, _, _ := runCLI(t, "trace", "convert", "--out", bad, "testdata/trace/bad_mooncake.jsonl"); code != exitFail {
		t.Fatalf("converting a bad trace: exit %d", code)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("failed convert left files: %v", ents)
	}
}

func TestTraceGenAndSample(t *testing.T) {
	dir := t.TempDir()
	mt := filepath.Join(dir, "mt.jsonl")
	args := []string{"trace", "gen", "multiturn", "--clients", "4", "--rounds", "3", "--request-length", "300", "--output-length", "8", "--seed", "3", "--out", mt}
	if code, _, errOut := runCLI(t, args...); code != exitOK {
		t.Fatalf("gen: %s", errOut)
	}
	first := testutil.ReadFile(t, mt)
	if code, _, _ := runCLI(t, args...); code != exitOK {
		t.Fatal("second gen failed")
	}
	second, _ := os.ReadFile(mt)
	if !bytes.Equal(first, second) {
		t.Fatal("same seed, different files")
	}
	hdr, recs := readTrace(t, mt)
	if len(recs) != 12 || !strings.Contains(hdr.Source, "--clients 4") {
		t.Fatalf("%d records, header %+v", len(recs), hdr)
	}
	sessions := map[string]int{}
	for _, r := range recs {
		sessions[r.Session]++
	}
	for _, seed := range []string{"1", "2", "3"} {
		code, out, errOut := runCLI(t, "trace", "sample", "--fraction", "0.5", "--seed", seed, mt)
		if code != exitOK {
			t.Fatalf("sample: %s", errOut)
		}
		p := filepath.Join(dir, "s"+seed+".jsonl")
		os.WriteFile(p, []byte(out), 0o644)
		_, kept := readTrace(t, p)
		got := map[string]int{}
		for _, r := range kept {
			got[r.Session]++
		}
		for s, n := range got {
			if n != sessions[s] {
				t.Fatalf("seed %s kept %d of session %s's %d requests", seed, n, s, sessions[s])
			}
		}
	}
	for _, kind := range [][]string{
		{"roundrobin", "--rounds", "2,3,4", "--question-length", "5", "--output-length", "2"},
		{"shared-prefix", "--questions", "2,3", "--system-prompt-len", "20", "--question-len", "4", "--output-len", "2"},
		{"warmcache", "--total-tokens", "100", "--pcts", "0,50", "--num-prompts", "2", "--output-len", "3"},
	} {
		code, out, errOut := runCLI(t, append([]string{"trace", "gen"}, kind...)...)
		if code != exitOK {
			t.Fatalf("gen %v: %s", kind, errOut)
		}
		p := filepath.Join(dir, kind[0]+".jsonl")
		os.WriteFile(p, []byte(out), 0o644)
		if _, recs := readTrace(t, p); len(recs) == 0 {
			t.Fatalf("gen %v wrote no records", kind)
		}
	}
}

// pipeFile returns the read end of an os.Pipe fed with data by a goroutine
// (a non-seekable input, like `<(zcat f)` or `zcat f | kvsim ...`).
func pipeFile(t *testing.T, data []byte) *os.File {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		pw.Write(data)
		pw.Close()
	}()
	t.Cleanup(func() { pr.Close() })
	return pr
}

func gzipBytes(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// `trace stats` reads its input once: "-" (stdin) and a pipe given by path
// (/dev/fd/N, as bash's <(zcat f) gives) work, compressed or not, and give
// the figures of the file.
func TestTraceStatsPipe(t *testing.T) {
	plain := testutil.ReadFile(t, "testdata/trace/mooncake.jsonl")
	_, want, _ := runCLI(t, "trace", "stats", "--json", "testdata/trace/mooncake.jsonl")
	for name, data := range map[string][]byte{"plain": plain, "gzip": gzipBytes(t, plain)} {
		t.Run("stdin/"+name, func(t *testing.T) {
			old := os.Stdin
			os.Stdin = pipeFile(t, data)
			defer func() { os.Stdin = old }()
			code, out, errOut := runCLI(t, "trace", "stats", "--json", "-")
			if code != exitOK || out != want {
				t.Fatalf("exit %d, stderr %q\n got %s\nwant %s", code, errOut, out, want)
			}
		})
		t.Run("fd/"+name, func(t *testing.T) {
			pr := pipeFile(t, data)
			code, out, errOut := runCLI(t, "trace", "stats", "--json", fmt.Sprintf("/dev/fd/%d", pr.Fd()))
			if code != exitOK || out != want {
				t.Fatalf("exit %d, stderr %q\n got %s\nwant %s", code, errOut, out, want)
			}
		})
	}
	// Every trace subcommand takes "-".
	for _, sub := range [][]string{{"validate"}, {"convert"}, {"head", "-n", "2"}, {"sample", "--fraction", "1"}} {
		t.Run(sub[0], func(t *testing.T) {
			old := os.Stdin
			os.Stdin = pipeFile(t, plain)
			defer func() { os.Stdin = old }()
			args := append(append([]string{"trace"}, sub...), "-")
			if code, out, errOut := runCLI(t, args...); code != exitOK || out == "" {
				t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
			}
		})
	}
}

// Empty stdin says so and names it.
func TestTraceStatsEmptyStdin(t *testing.T) {
	old := os.Stdin
	os.Stdin = pipeFile(t, nil)
	defer func() { os.Stdin = old }()
	code, _, errOut := runCLI(t, "trace", "stats", "-")
	if code != exitFail || !strings.Contains(errOut, "<stdin>") || !strings.Contains(errOut, "empty input") {
		t.Fatalf("exit %d, stderr %q: want exit %d naming <stdin> and empty input", code, errOut, exitFail)
	}
}

// Converting a truncated .gz blames the input file (and the line being
// read), not the output, and leaves no output file.
func TestTraceConvertTruncatedInput(t *testing.T) {
	dir := t.TempDir()
	plain := testutil.ReadFile(t, "testdata/trace/mooncake.jsonl")
	gz := gzipBytes(t, bytes.Repeat(plain[:bytes.IndexByte(plain, '\n')+1], 5000))
	in := filepath.Join(dir, "in.jsonl.gz")
	if err := os.WriteFile(in, gz[:len(gz)*3/4], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, outArgs := range [][]string{{"--out", filepath.Join(dir, "out.jsonl")}, nil} {
		args := append(append([]string{"trace", "convert"}, outArgs...), in)
		code, _, errOut := runCLI(t, args...)
		if code != exitFail {
			t.Fatalf("%v: exit %d, want %d", args, code, exitFail)
		}
		if !strings.Contains(errOut, "read "+in+":") && !strings.Contains(errOut, in+":") {
			t.Errorf("%v: stderr %q does not name the input %s", args, errOut, in)
		}
		if strings.Contains(errOut, "write ") || !strings.Contains(errOut, "truncated gzip") {
			t.Errorf("%v: stderr %q: want a truncated-gzip error on the input, not a write error", args, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out.jsonl")); err == nil {
		t.Errorf("a failed convert left its output file")
	}
}

func TestTraceGenRepeat(t *testing.T) {
	in := "testdata/trace/mooncake.jsonl"
	// One copy is the conversion.
	one, errOut := runOK(t, "trace", "gen", "repeat", "--copies", "1", in)
	conv, errOut := runOK(t, "trace", "convert", in)
	if one != conv {
		t.Fatalf("repeat --copies 1:\n%s\nwant what convert writes:\n%s", one, conv)
	}
	// Three copies: three times the requests, the same ideal hit rate.
	out := filepath.Join(t.TempDir(), "x3.jsonl")
	runOK(t, "trace", "gen", "repeat", "--copies", "3", "--out", out, in)
	stats := func(path string) traces.Stats {
		code, js, errOut := runCLI(t, "trace", "stats", "--json", path)
		if code != exitOK {
			t.Fatalf("stats %s: exit %d: %s", path, code, errOut)
		}
		var st traces.Stats
		if err := json.Unmarshal([]byte(js), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	st1, st3 := stats(in), stats(out)
	if st3.Requests != 3*st1.Requests || *st3.IdealHitRate != *st1.IdealHitRate || st3.UniqueBlocks != 3*st1.UniqueBlocks {
		t.Errorf("3 copies: %d requests, ideal hit rate %v, %d unique blocks; one: %d, %v, %d",
			st3.Requests, *st3.IdealHitRate, st3.UniqueBlocks, st1.Requests, *st1.IdealHitRate, st1.UniqueBlocks)
	}
	// Usage errors.
	for _, args := range [][]string{
		{"--copies", "0", in},
		{"--copies", "2", "-"},
		{"--copies", "2"},
	} {
		if code, _, _ := runCLI(t, append([]string{"trace", "gen", "repeat"}, args...)...); code != exitUsage {
			t.Errorf("repeat %q: exit %d, want %d", args, code, exitUsage)
		}
	}
	// A bad record is reported with its position, and no file is left.
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	code, _, errOut := runCLI(t, "trace", "gen", "repeat", "--out", bad, "testdata/trace/bad_mooncake.jsonl")
	if code != exitFail || !strings.Contains(errOut, "bad_mooncake.jsonl:") {
		t.Errorf("a bad trace: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(bad); err == nil {
		t.Errorf("a failed repeat left %s", bad)
	}
}

func TestTraceStatsWithoutOPT(t *testing.T) {
	in := "testdata/trace/mooncake.jsonl"
	_, with, _ := runCLI(t, "trace", "stats", in)
	without, _ := runOK(t, "trace", "stats", "--opt=false", in)
	var kept []string
	for _, l := range strings.SplitAfter(with, "\n") {
		if !strings.HasPrefix(l, "OPT hit rate") {
			kept = append(kept, l)
		}
	}
	if want := strings.Join(kept, ""); without != want || want == with {
		t.Errorf("--opt=false:\n%s\nwant the full table without its OPT row:\n%s", without, want)
	}
}
