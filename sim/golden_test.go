package sim

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/golden"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/traces"
	"github.com/kvsim/kvsim/tree"
)

func roofline(t *testing.T, model, gpu string, tp int) CostModel {
	t.Helper()
	m, err := hw.ModelPreset(model)
	if err != nil {
		t.Fatal(err)
	}
	g, err := hw.GPUPreset(gpu)
	if err != nil {
		t.Fatal(err)
	}
	s := hw.DefaultServer()
	s.TPSize = tp
	r, err := hw.NewRoofline(m, g, s, hw.DefaultEfficiency())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func chatTrace(t *testing.T) []traces.Record {
	recs, err := traces.GenerateChat(traces.ChatConfig{
		Clients: 12, Rounds: 4, RequestLength: 600, OutputLength: 40, SubQuestionLength: 120,
		Rate: 4, Seed: 7, Vocab: traces.DefaultVocab,
	})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// mooncakeHead reads the first n records of the conversation trace.
func mooncakeHead(t *testing.T, n int) []traces.Record {
	t.Helper()
	recs, err := traces.ReadAll(conversation, traces.FormatMooncake, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < n {
		t.Fatalf("%s: %d records, want %d", conversation, len(recs), n)
	}
	return recs
}

// TestGolden pins the simulator's output for fixed configurations and
// traces: the summary, the counters, the first requests in full and a
// digest of every request. Run with -update after a deliberate change and
// review the diff: a golden change must be explained by the change.
func TestGolden(t *testing.T) {
	type tc struct {
		name string
		cfg  func() Config
		recs func(*testing.T) []traces.Record
		cost CostModel
	}
	small := func(mod func(*Config)) func() Config {
		return func() Config {
			c := Default(6000)
			c.Cache.PageSize = 16
			c.Cache.HostTokens = 12000
			c.Scheduler.ChunkedPrefillSize = 2048
			c.Links.KVBytesPerToken = 196608 / 2
			c.Links.Layers = 28
			mod(&c)
			return c
		}
	}
	q7 := roofline(t, "qwen2.5-7b", "h100-sxm", 1)
	cases := []tc{
		{"chat_write_through_lru", small(func(*Config) {}), chatTrace, q7},
		{"chat_write_back_slru", small(func(c *Config) { c.Cache.WritePolicy = tree.WriteBack; c.Cache.Eviction = tree.SLRU }), chatTrace, q7},
		{"chat_selective_lpm", small(func(c *Config) {
			c.Cache.WritePolicy = tree.WriteThroughSelective
			c.Scheduler.Policy = LPM
		}), chatTrace, q7},
		{"chat_no_host", small(func(c *Config) { c.Cache.HostTokens = 0 }), chatTrace, q7},
		{"chat_cp4_owner_lane", small(func(c *Config) { c.Cache.CP = 4; c.Cache.DeviceTokens = 1500; c.Cache.HostTokens = 3000 }), chatTrace, q7},
		{"mooncake300_default", func() Config {
			c := Default(200000)
			c.Cache.HostTokens = 400000
			c.Links.KVBytesPerToken = 196608 / 4
			c.Links.Layers = 48
			return c
		}, func(t *testing.T) []traces.Record { return mooncakeHead(t, 300) }, roofline(t, "qwen2.5-14b", "h200", 4)},
		// Storage tier: the host pool is the device's size, so history
		// leaves the host and comes back from storage.
		{"chat_storage_wait_complete", small(func(c *Config) {
			c.Cache.HostTokens = 6000
			c.Storage = StorageConfig{Enabled: true, PrefetchPolicy: WaitComplete, ReadBandwidth: 2e9, WriteBandwidth: 2e9}
		}), chatTrace, q7},
		{"chat_storage_best_effort_capped", small(func(c *Config) {
			c.Cache.HostTokens = 6000
			c.Storage = StorageConfig{Enabled: true, CapacityTokens: 20000, ReadBandwidth: 10e9, WriteBandwidth: 5e9}
		}), chatTrace, q7},
		{"mooncake300_storage_timeout", func() Config {
			c := Default(200000)
			c.Cache.HostTokens = 200000
			c.Links.KVBytesPerToken = 196608 / 4
			c.Links.Layers = 48
			c.Storage = StorageConfig{Enabled: true, PrefetchPolicy: PrefetchTimeout}
			return c
		}, func(t *testing.T) []traces.Record { return mooncakeHead(t, 300) }, roofline(t, "qwen2.5-14b", "h200", 4)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(c.cfg(), c.cost)
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Run(engine.NewSliceSource(c.recs(t)))
			if err != nil {
				t.Fatal(err)
			}
			got := goldenText(res)
			golden.CheckString(t, filepath.Join("testdata", "golden", c.name+".golden"), got)
		})
	}
}

func goldenText(res *engine.Result) string {
	var b strings.Builder
	round := func(v any) any {
		if f, ok := v.(float64); ok {
			return math.Round(f*1e6) / 1e6
		}
		return v
	}
	sum, _ := json.Marshal(res.Summary)
	var m map[string]any
	json.Unmarshal(sum, &m)
	for k, v := range m {
		m[k] = round(v)
	}
	sum, _ = json.MarshalIndent(m, "", "  ")
	fmt.Fprintf(&b, "summary %s\n", sum)
	cnt, _ := json.MarshalIndent(res.Counters, "", "  ")
	fmt.Fprintf(&b, "counters %s\n", cnt)
	h := sha256.New()
	for i, r := range res.Requests {
		line, _ := json.Marshal(r)
		h.Write(line)
		h.Write([]byte{'\n'})
		if i < 10 {
			fmt.Fprintf(&b, "request %s\n", line)
		}
	}
	fmt.Fprintf(&b, "requests %d sha256 %x\n", len(res.Requests), h.Sum(nil))
	return b.String()
}
