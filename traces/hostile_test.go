package traces

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/kvsim/kvsim/internal/testutil"
)

// Inputs a hostile user might feed to every reader. Each must give an error
// naming the file, the line (and column or field where known) and what was
// expected and found; none may panic. Every input is read through a pipe
// (not a seekable file), plain, gzipped and zstd-compressed.

const (
	goodMooncake = `{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [4, 5]}` + "\n"
	goodBailian  = `{"chat_id": 10, "parent_chat_id": -1, "timestamp": 0.25, "input_length": 40, "output_length": 12, "type": "text", "turn": 1, "hash_ids": [100, 101, 102]}` + "\n"
	goodTokens   = `{"input_toks":3,"output_toks":1,"arrival_time_ns":250,"input_tok_ids":[1,2,5]}` + "\n"
	goodKVSimHdr = `{"kvsim_trace":1,"format":"mooncake","block_size":512}` + "\n"
	goodKVSim    = `{"id":"0","arrival_ns":0,"input_len":600,"blocks":[1,2],"output_len":8}` + "\n"
	goodAzure    = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n"
	goodWEKA     = "{\"id\": \"c\", \"block_size\": 64, \"requests\": [\n  {\"t\": 0.0, \"type\": \"s\", \"in\": 128, \"out\": 1, \"hash_ids\": [1, 2]}\n]}\n"
)

type hostileCase struct {
	name   string
	format Format
	data   string
	line   int      // line the message must name (0: none)
	want   []string // substrings of the message
}

func hostileCases() []hostileCase {
	deep := strings.Repeat("[", 20000) // encoding/json allows 10000 levels
	return []hostileCase{
		// empty
		{"empty", FormatMooncake, "", 0, []string{"empty input"}},
		{"blank", FormatBailian, "\n  \n", 0, []string{"empty input"}},
		{"empty", FormatTokens, "", 0, []string{"empty input"}},
		{"empty", FormatKVSim, "", 0, []string{"empty input"}},
		{"empty", FormatAzure, "", 0, []string{"empty input"}},
		{"empty", FormatWEKA, "", 0, []string{"empty input"}},

		// truncated: the last record is cut short
		{"truncated", FormatMooncake, goodMooncake + `{"timestamp": 5, "input_length": 600, "output_len`, 2, []string{"invalid JSON", "expected", "found the end of the line"}},
		{"truncated-first", FormatMooncake, `{"timestamp": 5, "input_length": 600, "output_len`, 1, []string{"invalid JSON", "found the end of the line"}},
		{"truncated", FormatBailian, goodBailian + `{"chat_id": 11, "timestamp": 1, "input_len`, 2, []string{"invalid JSON", "found the end of the line"}},
		{"truncated", FormatTokens, goodTokens + `{"input_toks":3,"output_toks":1,"arrival_time_ns":300,"input_tok_ids":[1,2`, 2, []string{"invalid JSON", "found the end of the line"}},
		{"truncated", FormatKVSim, goodKVSimHdr + goodKVSim + `{"id":"1","arrival_ns":5,"inp`, 3, []string{"invalid JSON", "found the end of the line"}},
		{"truncated", FormatAzure, goodAzure + "2023-11-16 18:17:04.0319600,31", 3, []string{"GeneratedTokens", "expected 3 columns, found 2"}},
		{"truncated", FormatWEKA, goodWEKA[:60], 2, []string{"invalid JSON", "found the end of the input"}},

		// binary
		{"binary", FormatMooncake, "\x00\x01\x02\x03\xfe\xff binary\x00", 1, []string{"expected text", "found binary data"}},
		{"binary", FormatKVSim, "\x00\x01\x02\x03\xfe\xff binary\x00", 1, []string{"expected text", "found binary data"}},
		{"binary", FormatAzure, "\x00\x01\x02\x03\xfe\xff binary\x00", 1, []string{"expected text", "found binary data"}},
		{"binary", FormatWEKA, "\x00\x01\x02\x03\xfe\xff binary\x00", 1, []string{"expected text", "found binary data"}},

		// NaN
		{"nan", FormatMooncake, `{"timestamp": NaN, "input_length": 600, "output_length": 3, "hash_ids": [4, 5]}`, 1, []string{":1:15:", "invalid JSON", "expected a value", "found 'N'"}},
		{"nan", FormatBailian, `{"chat_id": 10, "timestamp": NaN, "input_length": 40, "output_length": 12, "hash_ids": [1, 2, 3]}`, 1, []string{":1:30:", "expected a value", "found 'N'"}},
		{"nan", FormatTokens, `{"input_toks":3,"output_toks":NaN,"arrival_time_ns":250}`, 1, []string{":1:31:", "expected a value", "found 'N'"}},
		{"nan", FormatKVSim, goodKVSimHdr + `{"id":"0","arrival_ns":NaN,"input_len":600,"output_len":8}`, 2, []string{":2:24:", "expected a value", "found 'N'"}},
		{"nan", FormatWEKA, "{\"id\": \"c\", \"requests\": [\n  {\"t\": NaN, \"in\": 128, \"out\": 1, \"hash_ids\": [1, 2]}]}", 2, []string{":2:9:", "expected a value", "found 'N'"}},

		// huge numbers
		{"1e999-timestamp", FormatMooncake, `{"timestamp": 1e999, "input_length": 600, "output_length": 3, "hash_ids": [4, 5]}`, 1, []string{"timestamp", "expected milliseconds", "found 1e999"}},
		{"1e999-length", FormatMooncake, `{"timestamp": 0, "input_length": 1e999, "output_length": 3, "hash_ids": [4, 5]}`, 1, []string{"input_length", "expected an integer", "found 1e999"}},
		{"1e999", FormatBailian, `{"chat_id": 10, "timestamp": 1e999, "input_length": 40, "output_length": 12, "hash_ids": [1, 2, 3]}`, 1, []string{"timestamp", "expected seconds", "found 1e999"}},
		{"1e999", FormatTokens, `{"input_toks":3,"output_toks":1,"arrival_time_ns":1e999}`, 1, []string{"arrival_time_ns", "expected an integer", "found 1e999"}},
		{"1e999", FormatKVSim, goodKVSimHdr + `{"id":"0","arrival_ns":1e999,"input_len":600,"output_len":8}`, 2, []string{"arrival_ns", "expected an integer", "found 1e999"}},
		{"1e999", FormatWEKA, "{\"id\": \"c\", \"requests\": [\n  {\"t\": 0, \"in\": 1e999, \"out\": 1, \"hash_ids\": [1, 2]}]}", 2, []string{"requests[0].in", "expected an integer", "found 1e999"}},

		// deep nesting
		{"deep", FormatMooncake, deep, 1, []string{"invalid JSON", "nested"}},
		{"deep-value", FormatMooncake, `{"timestamp": ` + deep, 1, []string{"invalid JSON", "nested"}},
		{"deep", FormatBailian, deep, 1, []string{"invalid JSON", "nested"}},
		{"deep", FormatTokens, deep, 1, []string{"invalid JSON", "nested"}},
		{"deep", FormatKVSim, goodKVSimHdr + deep, 2, []string{"invalid JSON", "nested"}},
		{"deep", FormatWEKA, deep, 1, []string{"invalid JSON", "nested"}},

		// invalid UTF-8 inside an otherwise valid record
		{"utf8", FormatMooncake, `{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [4, 5], "session_id": "u` + "\xff" + `"}`, 1, []string{":1:95:", "expected UTF-8 text", "found the byte 0xff"}},
		{"utf8", FormatBailian, goodBailian + `{"chat_id": 11, "timestamp": 1, "input_length": 16, "output_length": 3, "type": "te` + "\xc3" + `", "hash_ids": [1]}`, 2, []string{"expected UTF-8 text", "found the byte 0xc3"}},
		{"utf8", FormatTokens, goodTokens + "{\"input_toks\":3,\"output_toks\":1,\"arrival_time_ns\":300,\"x\":\"\xff\"}", 2, []string{"expected UTF-8 text"}},
		{"utf8", FormatKVSim, goodKVSimHdr + `{"id":"0` + "\xff" + `","arrival_ns":0,"input_len":600,"output_len":8}`, 2, []string{":2:9:", "expected UTF-8 text"}},
		{"utf8", FormatAzure, goodAzure + "2023-11-16 18:17:04.0319600,31\xff,1\n", 3, []string{"expected UTF-8 text"}},
		{"utf8", FormatWEKA, "{\"id\": \"c\xff\", \"requests\": [\n  {\"t\": 0, \"in\": 128, \"out\": 1, \"hash_ids\": [1, 2]}]}", 1, []string{":1:10:", "expected UTF-8 text"}},
	}
}

// pipeOf returns the read end of an os.Pipe holding data (which must fit
// in the pipe's buffer: the tests use no goroutines to feed it).
func pipeOf(t *testing.T, data []byte) *os.File {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Write(data); err != nil {
		t.Fatalf("write pipe: %v", err)
	}
	pw.Close()
	t.Cleanup(func() { pr.Close() })
	return pr
}

func gzipOf(data []byte) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(data)
	zw.Close()
	return b.Bytes()
}

func zstdOf(t testing.TB, data []byte) []byte {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(data, nil)
}

// firstError reads r to the end and returns the first error, recovering
// from any panic as a test failure.
func firstError(t *testing.T, in io.Reader, name string, f Format) (msg string) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("panic: %v", p)
		}
	}()
	r, err := NewReader(in, name, f)
	if err != nil {
		return err.Error()
	}
	defer r.Close()
	for i := 0; i < 1000; i++ {
		if _, err := r.Next(); err == io.EOF {
			return ""
		} else if err != nil {
			return err.Error()
		}
	}
	return ""
}

func TestHostileInputs(t *testing.T) {
	for _, c := range hostileCases() {
		ext := ".jsonl"
		switch c.format {
		case FormatAzure:
			ext = ".csv"
		case FormatWEKA:
			ext = ".json"
		}
		for _, mode := range []Format{c.format, FormatAuto} {
			for _, z := range []string{"", ".gz", ".zst"} {
				t.Run(fmt.Sprintf("%s/%s/%s%s", c.format, c.name, mode, z), func(t *testing.T) {
					data := []byte(c.data)
					switch z {
					case ".gz":
						data = gzipOf(data)
					case ".zst":
						data = zstdOf(t, data)
					}
					name := "in-" + c.name + ext + z
					msg := firstError(t, pipeOf(t, data), name, mode)
					if msg == "" {
						t.Fatalf("no error")
					}
					where := name + ":"
					if c.line > 0 {
						where = fmt.Sprintf("%s:%d:", name, c.line)
					}
					if !strings.HasPrefix(msg, where) {
						t.Errorf("message %q does not start with %q", msg, where)
					}
					for _, w := range c.want {
						if !strings.Contains(msg, w) {
							t.Errorf("message %q lacks %q", msg, w)
						}
					}
					if strings.Contains(msg, "recordAlias") || strings.Contains(msg, "none of the keys") {
						t.Errorf("message %q hides the real error", msg)
					}
				})
			}
		}
	}
}

// A compressed trace cut short names the file, the line being read and
// says the data is truncated, for every format.
func TestTruncatedCompressed(t *testing.T) {
	plain := map[Format]string{
		FormatMooncake: strings.Repeat(goodMooncake, 400),
		FormatBailian:  goodBailian,
		FormatTokens:   strings.Repeat(goodTokens, 400),
		FormatKVSim:    goodKVSimHdr + strings.Repeat(goodKVSim, 400),
		FormatAzure:    goodAzure + strings.Repeat("2023-11-16 18:17:04.0319600,31,1\n", 400),
		FormatWEKA:     goodWEKA,
	}
	for f, p := range plain {
		for _, z := range []string{".gz", ".zst"} {
			for _, mode := range []Format{f, FormatAuto} {
				t.Run(fmt.Sprintf("%s/%s%s", f, mode, z), func(t *testing.T) {
					var data []byte
					if z == ".gz" {
						data = gzipOf([]byte(p))
					} else {
						data = zstdOf(t, []byte(p))
					}
					data = data[:len(data)*2/3]
					name := "cut" + z
					msg := firstError(t, pipeOf(t, data), name, mode)
					kind := map[string]string{".gz": "gzip", ".zst": "zstd"}[z]
					if !strings.HasPrefix(msg, name+":") || !strings.Contains(msg, kind) ||
						!(strings.Contains(msg, "truncated") || strings.Contains(msg, "corrupt")) {
						t.Fatalf("message %q: want %s: ... truncated/corrupt %s data", msg, name, kind)
					}
				})
			}
		}
	}
}

// Every trace can be read from a pipe (not seekable) and from "-" (stdin),
// with format and compression detected.
func TestReadFromPipe(t *testing.T) {
	for _, path := range []string{"testdata/mooncake.jsonl", "testdata/bailian.jsonl", "testdata/tokens.jsonl", "testdata/azure.csv", "testdata/weka.json", "testdata/kvsim.jsonl"} {
		want := openAll(t, path, FormatAuto)
		plain := testutil.ReadFile(t, path)
		for z, data := range map[string][]byte{"": plain, ".gz": gzipOf(plain), ".zst": zstdOf(t, plain)} {
			t.Run(path+z, func(t *testing.T) {
				old := os.Stdin
				os.Stdin = pipeOf(t, data)
				defer func() { os.Stdin = old }()
				r, err := Open("-", FormatAuto)
				if err != nil {
					t.Fatal(err)
				}
				got, errs := readAll(t, r)
				r.Close()
				if len(errs) > 0 || len(got) != len(want) {
					t.Fatalf("read %d records (want %d), errors %v", len(got), len(want), errs)
				}
			})
		}
	}
}

// ComputeStats reads its input once, so a pipe works.
func TestStatsFromPipe(t *testing.T) {
	plain := testutil.ReadFile(t, "testdata/mooncake.jsonl")
	want := statsOf(t, "testdata/mooncake.jsonl", FormatAuto, StatsOptions{})
	opens := 0
	pr := pipeOf(t, gzipOf(plain))
	st, err := ComputeStats(func() (*Reader, error) {
		opens++
		return NewReader(pr, "pipe.gz", FormatAuto)
	}, StatsOptions{})
	if err != nil {
		t.Fatalf("stats of a pipe: %v (opened %d times)", err, opens)
	}
	if opens != 1 || st.Requests != want.Requests || *st.IdealHitRate != *want.IdealHitRate || fmt.Sprint(st.LRUHitRate) != fmt.Sprint(want.LRUHitRate) {
		t.Fatalf("opened %d times; stats %+v, want %+v", opens, st, want)
	}
}

// Required keys of the kvsim format are required; errors name the JSON key
// path the user wrote, never a Go type.
func TestKVSimRequiredKeysAndPaths(t *testing.T) {
	cases := []struct {
		name, line string
		want       string
	}{
		{"no arrival", `{"id":"0","input_len":600,"output_len":8}`, "k.jsonl:2:1: arrival_ns: expected"},
		{"no output_len", `{"id":"0","arrival_ns":0,"input_len":600}`, "k.jsonl:2:1: output_len: expected"},
		{"no input_len", `{"id":"0","arrival_ns":0,"output_len":8}`, "k.jsonl:2:1: input_len: expected"},
		{"no id", `{"arrival_ns":0,"input_len":600,"output_len":8}`, "k.jsonl:2:1: id: expected"},
		{"sampling type", `{"id":"0","arrival_ns":0,"input_len":600,"output_len":8,"sampling":{"temperature":"hot"}}`, "k.jsonl:2:83: sampling.temperature: expected a number, found a string"},
		{"itl type", `{"id":"0","arrival_ns":0,"input_len":600,"output_len":8,"observed":{"cached_tokens":1,"itl_ns":[1,"x"]}}`, "k.jsonl:2:99: observed.itl_ns[1]: expected an integer, found a string"},
		{"header type", "", "k.jsonl:1:31: block_size: expected an integer, found a string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := goodKVSimHdr + c.line + "\n"
			if c.line == "" {
				data = `{"kvsim_trace":1,"block_size":"x"}` + "\n"
			}
			msg := firstError(t, strings.NewReader(data), "k.jsonl", FormatAuto)
			if !strings.HasPrefix(msg, c.want) {
				t.Fatalf("message %q, want prefix %q", msg, c.want)
			}
			if strings.Contains(msg, "found nothing") != strings.HasPrefix(c.name, "no ") {
				t.Errorf("message %q: a missing key must say \"found nothing\"", msg)
			}
			if strings.Contains(msg, "Alias") || strings.Contains(msg, "Header") {
				t.Errorf("message %q names a Go type", msg)
			}
		})
	}
}

// A read error is final, not a per-record ParseError, and names the file.
func TestReadErrorIsFinal(t *testing.T) {
	data := gzipOf([]byte(strings.Repeat(goodMooncake, 400)))
	r, err := NewReader(bytes.NewReader(data[:len(data)/2]), "half.gz", FormatMooncake)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var first error
	for first == nil {
		_, first = r.Next()
	}
	if _, again := r.Next(); again == nil || again.Error() != first.Error() || errors.Is(first, ErrBadRecord) {
		t.Fatalf("first %v, again %v: want the same final error, not ErrBadRecord", first, again)
	}
}
