package traces

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// scanEdgeLines are lines at the edges of the scanner's subset: each must
// give the same record, or the same error, as encoding/json.
var scanEdgeLines = []string{
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]}`,
	`{"timestamp":0,"input_length":600,"output_length":8,"hash_ids":[1,2]}`,
	` { "timestamp" : 1.5e3 , "input_length" : 600 , "output_length" : 8 , "hash_ids" : [ 1 , 2 ] } `,
	`{"timestamp": -0, "input_length": 600, "output_length": 8, "hash_ids": []}`,
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2], "session_id": "a", "delay": 12}`,
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2], "session_id": 7}`,
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2], "session_id": "a\u0062"}`,
	`{"timestamp": 0, "Input_Length": 600, "output_length": 8, "hash_ids": [1, 2]}`,
	`{"timestamp": 0, "input_length": 600, "input_length": 700, "output_length": 8, "hash_ids": [1, 2]}`,
	`{"timestamp": 0, "input_length": 600.0, "output_length": 8, "hash_ids": [1, 2]}`,
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, -2]}`,
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 02]}`,
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [18446744073709551615, 18446744073709551616]}`,
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2e1]}`,
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2,]}`,
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]} x`,
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]}{}`,
	`{"timestamp": null, "input_length": 600, "output_length": 8, "hash_ids": null}`,
	`{"timestamp": 99999999999999999999, "input_length": 9223372036854775808, "output_length": 8, "hash_ids": [1]}`,
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2], "other": [1, {"a": "b"}]}`,
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]`,
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1 2]}`,
	`{"timestamp": "0", "input_length": 600, "output_length": 8, "hash_ids": [1, 2]}`,
	`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2], "session_id": "tab	here"}`,
	`[1, 2]`,
	`{}`,
	`{"id":"0","arrival_ns":0,"session":"c1","turn":1,"input_len":600,"blocks":[1,2],"output_len":8}`,
	`{"id":"1","arrival_ns":5,"session":"c1","turn":2,"parent":"0","wait_for":["0"],"think_ns":3,"input_len":3,"tokens":[1,2,-3],"output_len":2,"output_tokens":[4,5],"model":"m","kind":"s","sampling":{"temperature":0.5,"ignore_eos":true},"observed":{"cached_tokens":1,"itl_ns":[1,2],"status":"ok"}}`,
	`{"id":"1","arrival_ns":5,"input_len":3,"tokens":[1,2,2147483648],"output_len":2}`,
	`{"id":"1","arrival_ns":5,"input_len":3,"output_len":2,"observed":{"cached_tokens":1,"bogus":2}}`,
	`{"id":"1","arrival_ns":5,"input_len":3,"output_len":2,"sampling":null,"wait_for":[]}`,
	`{"id":"1","arrival_ns":5,"input_len":3,"output_len":2,"extra":1}`,
	`{"ID":"1","arrival_ns":5,"input_len":3,"output_len":2}`,
	`{"id":"1","arrival_ns":5,"input_len":3,"output_len":2,"block_size":0,"blocks":[]}`,
	`{"id":"1","arrival_ns":5,"input_len":3,"output_len":2,"observed":{"cached_tokens":1}} {}`,
}

func FuzzScanMooncake(f *testing.F) {
	for _, l := range scanEdgeLines {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var got mooncakeLine
		var sc mooncakeScratch
		if !scanMooncake(line, &got, &sc) {
			return
		}
		var want mooncakeLine
		if err := json.Unmarshal(line, &want); err != nil {
			t.Fatalf("scanner accepted %q, encoding/json: %v", line, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: scanner %+v, encoding/json %+v", line, got, want)
		}
	})
}

func FuzzScanKVSim(f *testing.F) {
	for _, l := range scanEdgeLines {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var got Record
		wr := readRecord{recordAlias: (*recordAlias)(&got)}
		var sc scratch
		if !scanKVSim(line, &wr, &sc) {
			return
		}
		want, wwr, err := decodeKVSimLine("x", 1, line)
		if err != nil {
			t.Fatalf("scanner accepted %q, encoding/json: %v", line, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: scanner %+v, encoding/json %+v", line, got, want)
		}
		wr.recordAlias, wwr.recordAlias = nil, nil
		if !reflect.DeepEqual(wr, wwr) {
			t.Fatalf("%q: scanner %+v, encoding/json %+v", line, wr, wwr)
		}
	})
}

// readEach reads a whole input, with the scanner or with encoding/json
// only, and returns each record or error as text.
func readEach(t *testing.T, data []byte, f Format, slow bool) []string {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data), "fuzz", f)
	if err != nil {
		return []string{"open: " + err.Error()}
	}
	defer r.Close()
	switch d := r.dec.(*jsonlDecoder).format.(type) {
	case *mooncakeFormat:
		d.slow = slow
	case *kvsimFormat:
		d.slow = slow
	}
	var out []string
	eachResult(r, 10000, func(rec Record, err error) {
		if err != nil {
			out = append(out, "error: "+err.Error())
			return
		}
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	})
	return out
}

// sameAsJSON checks that the reader gives the same records and errors with
// the scanner as with encoding/json alone.
func sameAsJSON(t *testing.T, data []byte, f Format) {
	fast, slow := readEach(t, data, f, false), readEach(t, data, f, true)
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("input %q:\nwith the scanner:\n%s\nwith encoding/json:\n%s", data, strings.Join(fast, "\n"), strings.Join(slow, "\n"))
	}
}

func FuzzScannerSameAsJSON(f *testing.F) {
	mooncake := strings.Join(scanEdgeLines[:26], "\n")
	kvsim := `{"kvsim_trace":1,"block_size":512}` + "\n" + strings.Join(scanEdgeLines[26:], "\n")
	f.Add([]byte(mooncake), false)
	f.Add([]byte(kvsim), true)
	for _, p := range []string{"testdata/mooncake.jsonl", "testdata/kvsim.jsonl", "testdata/bad/kvsim_records.jsonl", "testdata/bad/mooncake_type.jsonl", "testdata/bad/mooncake_syntax.jsonl"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, strings.Contains(p, "kvsim"))
	}
	f.Fuzz(func(t *testing.T, data []byte, kvsim bool) {
		format := FormatMooncake
		if kvsim {
			format = FormatKVSim
		}
		sameAsJSON(t, data, format)
	})
}

func TestScannerEdgeLines(t *testing.T) {
	for _, l := range scanEdgeLines {
		sameAsJSON(t, []byte(l+"\n"+l+"\n"), FormatMooncake)
		sameAsJSON(t, []byte(`{"kvsim_trace":1,"block_size":2}`+"\n"+l+"\n"), FormatKVSim)
	}
}

// TestScannerTakesTheCommonCase checks that the scanner, not the fallback,
// reads the lines the shared traces and kvsim's writer produce: a
// regression that sent them all to encoding/json would pass every other
// test and lose the speed.
func TestScannerTakesTheCommonCase(t *testing.T) {
	var m mooncakeLine
	var sc mooncakeScratch
	if !scanMooncake([]byte(scanEdgeLines[0]), &m, &sc) {
		t.Errorf("the scanner gave up on a plain Mooncake line")
	}
	var rec Record
	wr := readRecord{recordAlias: (*recordAlias)(&rec)}
	var ks scratch
	for _, l := range scanEdgeLines[26:28] {
		if !scanKVSim([]byte(l), &wr, &ks) {
			t.Errorf("the scanner gave up on %s", l)
		}
	}
}

// TestScannerSameAsJSONMutations is a seeded, always-run sample of what
// FuzzScannerSameAsJSON explores: random byte edits of the seed traces
// (JSON punctuation and digits favoured), read with and without the
// scanner.
func TestScannerSameAsJSONMutations(t *testing.T) {
	seeds := [][]byte{
		[]byte(strings.Join(scanEdgeLines[:26], "\n")),
		[]byte(`{"kvsim_trace":1,"block_size":512}` + "\n" + strings.Join(scanEdgeLines[26:], "\n")),
	}
	for _, p := range []string{"testdata/mooncake.jsonl", "testdata/kvsim.jsonl"} {
		data := testutil.ReadFile(t, p)
		seeds = append(seeds, data)
	}
	const alphabet = "[]{}\",:0123456789-e. \n"
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		in := slices.Clone(seeds[rng.IntN(len(seeds))])
		for m := rng.IntN(8); m >= 0 && len(in) > 0; m-- {
			i := rng.IntN(len(in))
			switch rng.IntN(3) {
			case 0:
				in[i] = byte(rng.IntN(256))
			case 1:
				in = slices.Delete(in, i, i+1)
			case 2:
				in = slices.Insert(in, i, alphabet[rng.IntN(len(alphabet))])
			}
		}
		sameAsJSON(t, in, FormatMooncake)
		sameAsJSON(t, in, FormatKVSim)
	}
}
