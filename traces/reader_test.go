package traces

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/kvsim/kvsim/internal/golden"
	"github.com/kvsim/kvsim/internal/testutil"
)

// readAll reads every record of r, collecting per-record errors.
func readAll(t testing.TB, r *Reader) ([]Record, []error) {
	t.Helper()
	return readAllErr(r)
}

func readAllErr(r *Reader) ([]Record, []error) {
	var recs []Record
	var errs []error
	eachResult(r, math.MaxInt, func(rec Record, err error) {
		if err != nil {
			errs = append(errs, err)
		} else {
			recs = append(recs, rec)
		}
	})
	return recs, errs
}

// eachResult calls f with each record, or each record's error, that r
// yields, in order, at most limit times: it stops at io.EOF and after an
// error that is not a record's (a ParseError with a line).
func eachResult(r *Reader, limit int, f func(Record, error)) {
	for range limit {
		rec, err := r.Next()
		if err == io.EOF {
			return
		}
		f(rec, err)
		var pe *ParseError
		if err != nil && (!errors.As(err, &pe) || pe.Line == 0) {
			return
		}
	}
}

func openAll(t testing.TB, path string, f Format) []Record {
	t.Helper()
	r, err := Open(path, f)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	defer r.Close()
	recs, errs := readAll(t, r)
	if len(errs) > 0 {
		t.Fatalf("read %s: %v", path, errors.Join(errs...))
	}
	return recs
}

func TestReadMooncakeFixture(t *testing.T) {
	got := openAll(t, "testdata/mooncake.jsonl", FormatAuto)
	want := []Record{
		{ID: "0", Arrival: 0, InputLen: 1100, OutputLen: 20, Blocks: []uint64{0, 1, 2}, BlockSize: 512},
		{ID: "1", Arrival: 0, InputLen: 1030, OutputLen: 7, Blocks: []uint64{0, 1, 3}, BlockSize: 512},
		{ID: "2", Arrival: 27e6, Session: "u1", Turn: 1, InputLen: 600, OutputLen: 3, Blocks: []uint64{4, 5}, BlockSize: 512},
		{ID: "3", Arrival: 30_500_000, Session: "u1", Turn: 2, Parent: "2", ThinkTime: 1500e6, InputLen: 1500, OutputLen: 0, Blocks: []uint64{4, 5, 6}, BlockSize: 512},
		{ID: "4", Arrival: 1e9, Session: "17", Turn: 1, InputLen: 512, OutputLen: 1, Blocks: []uint64{7}, BlockSize: 512},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("records:\n got %+v\nwant %+v", got, want)
	}
}

// TestBadInputs reads every testdata/bad file with the format named by its
// prefix and compares all the errors with the .err golden file.
func TestBadInputs(t *testing.T) {
	golden.BadFiles(t, "testdata/bad/*", func(t *testing.T, path string) error {
		name := filepath.Base(path)
		prefix, _, _ := strings.Cut(name, "_")
		f, err := ParseFormat(prefix)
		if err != nil {
			t.Fatalf("bad fixture name %s: %v", name, err)
		}
		r, err := Open(path, f)
		if err != nil {
			return err
		}
		_, errs := readAll(t, r)
		r.Close()
		for _, e := range errs {
			if !errors.Is(e, ErrBadRecord) {
				t.Errorf("error %q does not match ErrBadRecord", e)
			}
		}
		return errors.Join(errs...) // one error a line
	})
}

func TestParseErrorFormat(t *testing.T) {
	cause := errors.New("expected an integer, found string")
	e := &ParseError{Path: "run1.jsonl", Line: 1042, Col: 17, Field: "input_length", Err: cause}
	if got, want := e.Error(), "run1.jsonl:1042:17: input_length: expected an integer, found string"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, ErrBadRecord) || !errors.Is(e, cause) {
		t.Fatalf("errors.Is fails on %v", e)
	}
	e2 := &ParseError{Path: "x", Err: cause}
	if got, want := e2.Error(), "x: expected an integer, found string"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestDetect(t *testing.T) {
	cases := []struct {
		name, in string
		want     Format
	}{
		{"mooncake", `{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}`, FormatMooncake},
		{"mooncake truncated", `{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, 2, 3`, FormatMooncake},
		{"mooncake hash first", `{"hash_ids": [1], "timestamp": 3}`, FormatMooncake},
		{"bailian", `{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5}`, FormatBailian},
		{"weka", "{\n  \"id\": \"trace_0001\",\n  \"models\": [\"m\"],\n  \"block_size\": 64,\n  \"requests\": [", FormatWEKA},
		{"tokens", `{"input_toks": 3, "output_toks": 1, "arrival_time_ns": 5, "input_tok_ids": [1,2,3]}`, FormatTokens},
		{"kvsim", `{"kvsim_trace": 1, "block_size": 16}`, FormatKVSim},
		{"azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n", FormatAzure},
		{"bom", "\ufeff" + `{"input_toks": 3}`, FormatTokens},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Detect([]byte(c.in), "")
			if err != nil || got != c.want {
				t.Fatalf("Detect = %v, %v; want %v", got, err, c.want)
			}
		})
	}
	for _, in := range []string{"", "hello", `{"foo": 1}`, `[1,2]`} {
		if f, err := Detect([]byte(in), ""); !errors.Is(err, ErrUnknownFormat) {
			t.Errorf("Detect(%q) = %v, %v; want ErrUnknownFormat", in, f, err)
		}
	}
}

func TestParseFormat(t *testing.T) {
	for _, n := range FormatNames() {
		f, err := ParseFormat(n)
		if err != nil || f.String() != n {
			t.Errorf("ParseFormat(%q) = %v, %v", n, f, err)
		}
	}
	if _, err := ParseFormat("csv"); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("ParseFormat(csv) err = %v", err)
	}
}

func TestCompressedInput(t *testing.T) {
	plain := testutil.ReadFile(t, "testdata/mooncake.jsonl")
	want := openAll(t, "testdata/mooncake.jsonl", FormatAuto)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain)
	zw.Close()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	zst := enc.EncodeAll(plain, nil)
	enc.Close()
	for name, data := range map[string][]byte{"x.jsonl.gz": gz.Bytes(), "x.jsonl.zst": zst} {
		r, err := NewReader(bytes.NewReader(data), name, FormatAuto)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, errs := readAll(t, r)
		r.Close()
		if len(errs) > 0 || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: got %v %v", name, got, errs)
		}
	}
}

func FuzzReadMooncake(f *testing.F) {
	fuzzFormat(f, FormatMooncake, "testdata/mooncake.jsonl", "testdata/bad/mooncake_type.jsonl", "testdata/bad/mooncake_syntax.jsonl")
}

// fuzzFormat fuzzes the reader of format with fuzzRead, seeded with the
// files at paths.
func fuzzFormat(f *testing.F, format Format, paths ...string) {
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRead(t, data, format) })
}

// fuzzRead reads data in format f: it must never panic, every record it
// returns must be consistent, and the records must survive a round trip
// through the kvsim format.
func fuzzRead(t *testing.T, data []byte, f Format) {
	r, err := NewReader(bytes.NewReader(data), "fuzz", f)
	if err != nil {
		return
	}
	defer r.Close()
	var recs []Record
	eachResult(r, 10000, func(rec Record, err error) {
		if err != nil {
			return
		}
		if fe := rec.check(nil); fe != nil {
			t.Fatalf("reader returned an inconsistent record %+v: %v", rec, fe)
		}
		recs = append(recs, rec)
	})
	roundTrip(t, r.Header(), recs)
}

// A first record whose identifying key comes after the first read buffer
// (64 KiB) is still detected (from up to 1 MiB), and every record is read,
// plain and gzipped.
func TestDetectLateKeys(t *testing.T) {
	var plain bytes.Buffer
	plain.WriteString(`{"pad": "` + strings.Repeat("a", 100_000) + `", "timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [1, 2]}` + "\n")
	plain.WriteString(`{"timestamp": 5, "input_length": 600, "output_length": 10, "hash_ids": [1, 3]}` + "\n")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain.Bytes())
	zw.Close()
	for name, data := range map[string][]byte{"plain": plain.Bytes(), "gzip": gz.Bytes()} {
		r, err := NewReader(bytes.NewReader(data), "late.jsonl", FormatAuto)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.Format() != FormatMooncake {
			t.Errorf("%s: detected %v, want mooncake", name, r.Format())
		}
		var ids [][]uint64
		for {
			rec, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			ids = append(ids, rec.Blocks)
		}
		if len(ids) != 2 || len(ids[1]) != 2 || ids[1][1] != 3 {
			t.Errorf("%s: hash ids %v, want two records, the second [1 3]", name, ids)
		}
		r.Close()
	}
	// Beyond the first megabyte nothing is guessed.
	huge := `{"pad": "` + strings.Repeat("a", 1<<20) + `", "hash_ids": [1]}` + "\n"
	if _, err := NewReader(strings.NewReader(huge), "huge.jsonl", FormatAuto); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("identifying key after 1 MiB: %v, want ErrUnknownFormat", err)
	}
}

// ReadAll returns the first n records of a file, all of them for n == 0
// or an n past the end, as a Reader gives them; a missing file is an
// error.
func TestReadAllReadsTheFirstN(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	doc := `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}
{"timestamp": 1, "input_length": 11, "output_length": 1, "hash_ids": [1]}
{"timestamp": 2, "input_length": 12, "output_length": 1, "hash_ids": [2]}
{"timestamp": 3, "input_length": 13, "output_length": 1, "hash_ids": [3]}
{"timestamp": 4, "input_length": 14, "output_length": 1, "hash_ids": [4]}
`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ n, want int }{{0, 5}, {1, 1}, {3, 3}, {5, 5}, {9, 5}} {
		recs, err := ReadAll(path, FormatAuto, c.n)
		if err != nil {
			t.Fatalf("n=%d: %v", c.n, err)
		}
		if len(recs) != c.want {
			t.Fatalf("n=%d: %d records, want %d", c.n, len(recs), c.want)
		}
		for i, r := range recs {
			if r.InputLen != 10+i || r.Arrival != int64(i)*1e6 {
				t.Errorf("n=%d: record %d is %+v", c.n, i, r)
			}
		}
	}
	if _, err := ReadAll(filepath.Join(t.TempDir(), "none"), FormatAuto, 0); err == nil {
		t.Error("ReadAll of a missing file: no error")
	}
}
