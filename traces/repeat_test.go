package traces

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// repeatBytes repeats the trace in data (format detected) copies times.
func repeatBytes(t *testing.T, name string, data []byte, copies int) ([]byte, error) {
	t.Helper()
	var out bytes.Buffer
	err := Repeat(func() (*Reader, error) { return NewReader(bytes.NewReader(data), name, FormatAuto) }, copies, &out)
	return out.Bytes(), err
}

func readBytes(t *testing.T, data []byte) ([]Record, Header) {
	t.Helper()
	return readNamed(t, "x", data)
}

// readNamed reads a whole trace held in data, named name.
func readNamed(t testing.TB, name string, data []byte) ([]Record, Header) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data), name, FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recs, errs := readAll(t, r)
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	return recs, r.Header()
}

func TestRepeatOneCopyIsTheConversion(t *testing.T) {
	for _, p := range []string{"testdata/mooncake.jsonl", "testdata/kvsim.jsonl", "testdata/tokens.jsonl", "testdata/bailian.jsonl"} {
		data := testutil.ReadFile(t, p)
		got, err := repeatBytes(t, p, data, 1)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		recs, hdr := readNamed(t, p, data)
		want := kvsimBytes(t, recs, hdr)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: one copy:\n%s\nwant the conversion:\n%s", p, got, want)
		}
	}
}

// TestRepeatCopies checks each copy against the original record by record:
// times moved by whole periods, ids and hashes renamed apart, all else
// equal.
func TestRepeatCopies(t *testing.T) {
	for _, c := range []struct{ path string }{
		{"testdata/mooncake.jsonl"}, {"testdata/kvsim.jsonl"}, {"testdata/tokens.jsonl"}, {"testdata/bailian.jsonl"},
	} {
		data := testutil.ReadFile(t, c.path)
		orig, _ := readBytes(t, data)
		const k = 3
		out, err := repeatBytes(t, c.path, data, k)
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		again, err := repeatBytes(t, c.path, data, k)
		if err != nil || !bytes.Equal(out, again) {
			t.Fatalf("%s: two runs differ (%v)", c.path, err)
		}
		got, hdr := readBytes(t, out)
		if !strings.Contains(hdr.Source, "3 copies") {
			t.Errorf("%s: header source %q does not say it was repeated", c.path, hdr.Source)
		}
		if len(got) != k*len(orig) {
			t.Fatalf("%s: %d records, want %d", c.path, len(got), k*len(orig))
		}
		ids := map[string]bool{}
		blocks := map[uint64]int{}
		tokens := map[int32]int{}
		var period int64
		for i, g := range got {
			copyNo, o := i/len(orig), orig[i%len(orig)]
			if ids[g.ID] {
				t.Fatalf("%s: id %q twice", c.path, g.ID)
			}
			ids[g.ID] = true
			if copyNo == 1 && i%len(orig) == 0 {
				period = g.Arrival - o.Arrival
				if period <= orig[len(orig)-1].Arrival-orig[0].Arrival {
					t.Fatalf("%s: copy 1 starts %d ns after copy 0, within its span", c.path, period)
				}
			}
			if copyNo > 0 && g.Arrival-o.Arrival != int64(copyNo)*period {
				t.Fatalf("%s: record %d arrives %d ns after its original, want %d", c.path, i, g.Arrival-o.Arrival, int64(copyNo)*period)
			}
			for _, b := range g.Blocks {
				if prev, ok := blocks[b]; ok && prev != copyNo {
					t.Fatalf("%s: hash id %d in copies %d and %d", c.path, b, prev, copyNo)
				}
				blocks[b] = copyNo
			}
			for _, tok := range slices.Concat(g.Tokens, g.OutputTokens) {
				if prev, ok := tokens[tok]; ok && prev != copyNo {
					t.Fatalf("%s: token id %d in copies %d and %d", c.path, tok, prev, copyNo)
				}
				tokens[tok] = copyNo
			}
			// All else equal: undo the renaming.
			g.Arrival, g.ID, g.Parent, g.Session, g.WaitFor = o.Arrival, o.ID, o.Parent, o.Session, o.WaitFor
			g.Blocks, g.Tokens, g.OutputTokens = o.Blocks, o.Tokens, o.OutputTokens
			if !reflect.DeepEqual(g, o) {
				t.Fatalf("%s: record %d:\n%+v\nwant (but for ids and times) %+v", c.path, i, g, o)
			}
		}
	}
}

// TestRepeatStats checks what trace stats sees: K times the requests and
// blocks, the same ideal hit rate (copies share nothing), and LRU hit
// rates no lower (a cache K times larger over copies that share nothing
// keeps every hit of one copy).
func TestRepeatStats(t *testing.T) {
	p := testutil.SharedTrace(t, "mooncake_fast25/synthetic_trace.jsonl")
	data := testutil.ReadFile(t, p)
	stats := func(data []byte) *Stats {
		st, err := ComputeStats(func() (*Reader, error) { return NewReader(bytes.NewReader(data), "x", FormatAuto) }, StatsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	one := stats(data)
	const k = 4
	out, err := repeatBytes(t, p, data, k)
	if err != nil {
		t.Fatal(err)
	}
	many := stats(out)
	if many.Requests != k*one.Requests || many.TotalBlocks != k*one.TotalBlocks || many.UniqueBlocks != k*one.UniqueBlocks {
		t.Errorf("%d copies: %d requests, %d blocks, %d unique; want %d times %d, %d, %d", k, many.Requests, many.TotalBlocks, many.UniqueBlocks, k, one.Requests, one.TotalBlocks, one.UniqueBlocks)
	}
	if *many.IdealHitRate != *one.IdealHitRate {
		t.Errorf("ideal hit rate %v, want %v (one copy's)", *many.IdealHitRate, *one.IdealHitRate)
	}
	// Percentiles interpolate between order statistics, which K copies
	// move slightly; the mean and the maximum stay.
	if math.Abs(many.Input.Mean-one.Input.Mean) > 1e-9*one.Input.Mean || many.Input.Max != one.Input.Max || many.Output.Max != one.Output.Max {
		t.Errorf("lengths %+v %+v, want one copy's mean and max %+v %+v", many.Input, many.Output, one.Input, one.Output)
	}
	for f, h := range one.LRUHitRate {
		if many.LRUHitRate[f] < h {
			t.Errorf("LRU hit rate at %s: %v, below one copy's %v", f, many.LRUHitRate[f], h)
		}
	}
	wantRate := one.ArrivalRate
	if got := many.ArrivalRate; got < 0.95*wantRate || got > 1.05*wantRate {
		t.Errorf("arrival rate %v req/s, want about one copy's %v", got, wantRate)
	}
}

func TestRepeatRenamesNonNumericIDs(t *testing.T) {
	data := []byte(`{"kvsim_trace":1,"block_size":2}
{"id":"a#1","arrival_ns":0,"session":"s","input_len":2,"blocks":[5],"output_len":1}
{"id":"b","arrival_ns":10,"session":"s","parent":"a#1","wait_for":["a#1"],"input_len":2,"blocks":[5],"output_len":1}
`)
	out, err := repeatBytes(t, "x", data, 2)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := readBytes(t, out)
	var ids, parents, sessions []string
	for _, r := range got {
		ids, parents, sessions = append(ids, r.ID), append(parents, r.Parent), append(sessions, r.Session)
	}
	want := []string{"a#1", "b", "a#1~1", "b~1"}
	if !reflect.DeepEqual(ids, want) || parents[3] != "a#1~1" || got[3].WaitFor[0] != "a#1~1" || sessions[2] != "s#1" {
		t.Errorf("ids %q parents %q sessions %q, want ids %q", ids, parents, sessions, want)
	}
	if got[2].Arrival != 20 || got[2].Blocks[0] != 11 {
		t.Errorf("copy 1 starts at %d with block %d, want 20 and 11", got[2].Arrival, got[2].Blocks[0])
	}
}

func TestRepeatErrors(t *testing.T) {
	big := []byte(`{"kvsim_trace":1,"block_size":2}
{"id":"0","arrival_ns":0,"input_len":2,"blocks":[18446744073709551615],"output_len":1}
`)
	if _, err := repeatBytes(t, "big", big, 2); err == nil || !strings.Contains(err.Error(), "do not fit in 64 bits") {
		t.Errorf("hash ids that overflow: %v", err)
	}
	if _, err := repeatBytes(t, "x", big, 0); err == nil {
		t.Errorf("0 copies: no error")
	}
	bad := []byte("{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 8, \"hash_ids\": [1, 2]}\n{\"timestamp\": 0, \"input_length\": 600}\n")
	_, err := repeatBytes(t, "bad.jsonl", bad, 2)
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != 2 || pe.Path != "bad.jsonl" {
		t.Errorf("a bad record: %v, want its position", err)
	}
	// A trace that changes between readings.
	n := 0
	open := func() (*Reader, error) {
		n++
		return NewReader(strings.NewReader(strings.Repeat("{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 8, \"hash_ids\": [1, 2]}\n", n)), "grow", FormatAuto)
	}
	if err := Repeat(open, 2, new(bytes.Buffer)); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Errorf("a growing trace: %v", err)
	}
}
