package traces

import (
	"reflect"
	"testing"
)

func TestReadFixtures(t *testing.T) {
	obs := func(e2e, ttft int64, status string) *Observed {
		return &Observed{CachedTokens: -1, E2E: e2e, TTFT: ttft, Status: status}
	}
	cases := []struct {
		path   string
		format Format
		want   []Record
	}{
		{"testdata/bailian.jsonl", FormatBailian, []Record{
			{ID: "10", Arrival: 250e6, Session: "10", Turn: 1, InputLen: 40, OutputLen: 12, Blocks: []uint64{100, 101, 102}, BlockSize: 16, Kind: "text"},
			{ID: "11", Arrival: 500e6, Session: "11", Turn: 1, InputLen: 16, OutputLen: 3, Blocks: []uint64{200}, BlockSize: 16, Kind: "image"},
			{ID: "12", Arrival: 2e9, Session: "10", Turn: 2, Parent: "10", InputLen: 70, OutputLen: 5, Blocks: []uint64{100, 101, 102, 103, 104}, BlockSize: 16, Kind: "text"},
			{ID: "13", Arrival: 3125e6, Session: "10", Turn: 3, Parent: "12", InputLen: 90, OutputLen: 0, Blocks: []uint64{100, 101, 102, 103, 104, 105}, BlockSize: 16, Kind: "text"},
		}},
		{"testdata/tokens.jsonl", FormatTokens, []Record{
			{ID: "0", Arrival: 100, InputLen: 4, Tokens: []int32{1, 2, 3, 4}, OutputLen: 2, OutputTokens: []int32{9, 9}},
			{ID: "1", Arrival: 250, InputLen: 3, Tokens: []int32{1, 2, 5}, OutputLen: 1},
			{ID: "2", Arrival: 250, InputLen: 5, OutputLen: 3},
		}},
		{"testdata/azure.csv", FormatAzure, []Record{
			{ID: "0", Arrival: 0, InputLen: 4808, OutputLen: 10},
			{ID: "1", Arrival: 52e6, InputLen: 3180, OutputLen: 8},
			{ID: "2", Arrival: 52e6, InputLen: 12, OutputLen: 0},
		}},
		{"testdata/weka.json", FormatWEKA, []Record{
			{ID: "conv1/1", Arrival: 0, Session: "conv1", Turn: 1, InputLen: 200, OutputLen: 10, Blocks: []uint64{0, 1, 2}, BlockSize: 64, Model: "m1", Kind: "s", Observed: obs(1500e6, 250e6, "tool_use")},
			// The first sub-agent's times are offsets from its t = 2 s; its
			// delay counts from the end of the request that spawned it
			// (0 + 1.5 s).
			{ID: "conv1/sa1/1", Arrival: 2e9, Session: "conv1/sa1", Turn: 1, Parent: "conv1/1", ThinkTime: 500e6, InputLen: 64, OutputLen: 4, Blocks: []uint64{3}, BlockSize: 64, Model: "m2", Kind: "s", Observed: obs(500e6, 0, "end_turn")},
			// The second's first t (2.5 s) is not below its t: conversation clock.
			{ID: "conv1/sa2/1", Arrival: 2500e6, Session: "conv1/sa2", Turn: 1, Parent: "conv1/1", ThinkTime: 1e9, InputLen: 64, OutputLen: 2, Blocks: []uint64{5}, BlockSize: 64, Model: "m2", Kind: "n"},
			// The delay is t - the parent's t + api_time (3 - 2.5 s); the
			// recorded think_time stays in Observed.
			{ID: "conv1/sa1/2", Arrival: 3e9, Session: "conv1/sa1", Turn: 2, Parent: "conv1/sa1/1", ThinkTime: 500e6, InputLen: 130, OutputLen: 4, Blocks: []uint64{3, 4}, BlockSize: 64, Model: "m2", Kind: "s", Observed: &Observed{CachedTokens: -1, Status: "end_turn", ThinkTime: 500e6}},
			// sa2 (no duration_ms: it ends with its last request, at 2.5 s)
			// is joined here; sa1 (2 s + 1.8 s) is still running.
			{ID: "conv1/2", Arrival: 3e9, Session: "conv1", Turn: 2, Parent: "conv1/1", WaitFor: []string{"conv1/sa2/1"}, ThinkTime: 1500e6, InputLen: 250, OutputLen: 1, Blocks: []uint64{0, 1, 2, 6}, BlockSize: 64, Model: "m1", Kind: "n", Observed: &Observed{CachedTokens: -1, E2E: 250e6, Status: "tool_use", ThinkTime: 1e9}},
			// sa3 ends at 63.5 s, after every later request of its agent:
			// a background sub-agent, joined nowhere.
			{ID: "conv1/sa3/1", Arrival: 3500e6, Session: "conv1/sa3", Turn: 1, Parent: "conv1/2", ThinkTime: 250e6, InputLen: 64, OutputLen: 2, Blocks: []uint64{7}, BlockSize: 64, Model: "m2", Kind: "n"},
			{ID: "conv1/3", Arrival: 4e9, Session: "conv1", Turn: 3, Parent: "conv1/2", WaitFor: []string{"conv1/sa1/2"}, ThinkTime: 750e6, InputLen: 300, OutputLen: 1, Blocks: []uint64{0, 1, 2, 6, 8}, BlockSize: 64, Model: "m1", Kind: "n", Observed: &Observed{CachedTokens: -1, Status: "end_turn", ThinkTime: 500e6}},
		}},
		{"testdata/wekadir", FormatAuto, []Record{
			{ID: "a/1", Arrival: 0, Session: "a", Turn: 1, InputLen: 128, OutputLen: 1, Blocks: []uint64{0, 1}, BlockSize: 64, Kind: "s", Observed: obs(6e9, 0, "")},
			{ID: "b/1", Arrival: 1e9, Session: "b", Turn: 1, InputLen: 128, OutputLen: 1, Blocks: []uint64{3, 4}, BlockSize: 64, Kind: "s"},
			// Sent at 5 s, before its parent's recorded end (6 s): an
			// inconsistent recording. It waits for the nearest ancestor that
			// had ended, here none.
			{ID: "a/2", Arrival: 5e9, Session: "a", Turn: 2, InputLen: 192, OutputLen: 1, Blocks: []uint64{0, 1, 2}, BlockSize: 64, Kind: "s", Observed: &Observed{CachedTokens: -1, E2E: 1e9, ThinkTime: 4e9}},
			{ID: "a/3", Arrival: 6500e6, Session: "a", Turn: 3, Parent: "a/2", ThinkTime: 500e6, InputLen: 192, OutputLen: 1, Blocks: []uint64{0, 1, 2}, BlockSize: 64, Kind: "s"},
		}},
		{"testdata/kvsim.jsonl", FormatKVSim, []Record{
			{ID: "0", Arrival: 0, Session: "c1", Turn: 1, InputLen: 600, Blocks: []uint64{1, 2}, BlockSize: 512, OutputLen: 8},
			{ID: "1", Arrival: 1500e6, Session: "c1", Turn: 2, Parent: "0", ThinkTime: 250e6, InputLen: 1100, Blocks: []uint64{1, 2, 3}, BlockSize: 512, OutputLen: 4,
				Observed: &Observed{CachedTokens: 512, TTFT: 35e6, E2E: 90e6, Status: "ok"}},
			{ID: "2", Arrival: 1500e6, InputLen: 5, Tokens: []int32{11, 12, 13, 14, 15}, OutputLen: 2, OutputTokens: []int32{7, 8}, Sampling: &Sampling{Temperature: 0.7, IgnoreEOS: true}},
		}},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			r, err := Open(c.path, FormatAuto)
			if err != nil {
				t.Fatal(err)
			}
			if r.Format() != c.format && c.format != FormatAuto {
				t.Fatalf("detected %v, want %v", r.Format(), c.format)
			}
			got, errs := readAll(t, r)
			r.Close()
			if len(errs) > 0 {
				t.Fatalf("errors: %v", errs)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %d records, want %d:\n%+v", len(got), len(c.want), got)
			}
			for i := range got {
				if !reflect.DeepEqual(got[i], c.want[i]) {
					t.Errorf("record %d:\n got %+v\nwant %+v", i, got[i], c.want[i])
				}
			}
			roundTrip(t, r.Header(), got)
		})
	}
}

func FuzzReadBailian(f *testing.F) {
	fuzzFormat(f, FormatBailian, "testdata/bailian.jsonl", "testdata/bad/bailian_ids.jsonl")
}

func FuzzReadTokens(f *testing.F) {
	fuzzFormat(f, FormatTokens, "testdata/tokens.jsonl", "testdata/bad/tokens_len.jsonl")
}

func FuzzReadAzure(f *testing.F) {
	fuzzFormat(f, FormatAzure, "testdata/azure.csv", "testdata/bad/azure_rows.csv", "testdata/bad/azure_header.csv")
}

func FuzzReadWEKA(f *testing.F) {
	fuzzFormat(f, FormatWEKA, "testdata/weka.json", "testdata/wekadir/a.json", "testdata/bad/weka_blocks.json", "testdata/bad/weka_type.json", "testdata/bad/weka_duration.json", "testdata/bad/weka_api_time.json")
}

func FuzzReadKVSim(f *testing.F) {
	fuzzFormat(f, FormatKVSim, "testdata/kvsim.jsonl", "testdata/bad/kvsim_records.jsonl", "testdata/bad/kvsim_version.jsonl")
}

// FuzzReadAuto feeds any input to format detection and the chosen reader.
func FuzzReadAuto(f *testing.F) {
	fuzzFormat(f, FormatAuto, "testdata/mooncake.jsonl", "testdata/bailian.jsonl", "testdata/tokens.jsonl", "testdata/azure.csv", "testdata/weka.json", "testdata/kvsim.jsonl")
}
