package traces

import (
	"bytes"
	"reflect"
	"testing"
)

// roundTrip writes recs in the kvsim format and reads them back: the
// records and the header must come back unchanged.
// tb is what roundTrip needs of *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
	Fatal(args ...any)
}

func roundTrip(t tb, h Header, recs []Record) {
	t.Helper()
	data := kvsimBytes(t, recs, h)
	r, err := NewReader(bytes.NewReader(data), "roundtrip", FormatAuto)
	if err != nil {
		t.Fatalf("read back: %v\n%s", err, data)
	}
	if r.Format() != FormatKVSim {
		t.Fatalf("read back detected %v, want kvsim", r.Format())
	}
	got, errs := readAllErr(r)
	if len(errs) > 0 {
		t.Fatalf("read back: %v\n%s", errs, data)
	}
	if len(got) != len(recs) {
		t.Fatalf("read back %d records, wrote %d", len(got), len(recs))
	}
	for i := range recs {
		if !reflect.DeepEqual(got[i], recs[i]) {
			t.Fatalf("record %d changed in the round trip:\n got %+v\nwant %+v", i, got[i], recs[i])
		}
	}
	h.Version = KVSimVersion
	if g := r.Header(); g != h {
		t.Fatalf("header changed: got %+v, want %+v", g, h)
	}
}

func TestRoundTripMooncake(t *testing.T) {
	recs := openAll(t, "testdata/mooncake.jsonl", FormatMooncake)
	roundTrip(t, Header{Format: "mooncake", BlockSize: 512, Source: "testdata/mooncake.jsonl"}, recs)
}

func TestRoundTripAllFields(t *testing.T) {
	recs := []Record{
		{ID: "a", Arrival: 1, Session: "s", Turn: 1, InputLen: 3, Tokens: []int32{1, 2, 3}, OutputLen: 2, OutputTokens: []int32{4, 5},
			Model: "m", Kind: "text", Sampling: &Sampling{Temperature: 0.5, TopP: 0.9, TopK: 40, IgnoreEOS: true},
			Observed: &Observed{CachedTokens: -1, TTFT: 5, ITL: []int64{1, 2}, E2E: 9, Status: "ok"}},
		{ID: "b", Arrival: 1, Session: "s", Turn: 2, Parent: "a", WaitFor: []string{"x", "y"}, ThinkTime: 7, InputLen: 20, Blocks: []uint64{1<<63 + 5, 2}, BlockSize: 16, OutputLen: 0,
			Observed: &Observed{CachedTokens: 0}},
		{ID: "c", Arrival: 2, InputLen: 100, Blocks: []uint64{9}, BlockSize: 64, OutputLen: 1},
	}
	roundTrip(t, Header{BlockSize: 16, Source: "hand", Server: "sglang", ServerVersion: "0.5.4", Note: "n"}, recs)
}
