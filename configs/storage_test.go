package configs

import (
	"testing"

	"github.com/kvsim/kvsim/sim"
)

// The [storage] section maps onto sim.StorageConfig: seconds, GB/s and µs
// become ns and bytes/s.
func TestStorageSection(t *testing.T) {
	f := mustParse(t, []byte(`
[model]
preset = "qwen2.5-7b"
[gpu]
preset = "h100-sxm"
[storage]
enabled = true
capacity_tokens = 1000000
prefetch_policy = "timeout"
prefetch_threshold = 512
prefetch_timeout_base = 1.5
prefetch_timeout_per_ki_token = 0.25
prefetch_timeout_max = 20
prefetch_capacity_ratio = 0.25
read_gbps = 12.5
write_gbps = 6
read_latency_us = 80
write_latency_us = 150
eviction = "mooncake"
high_watermark = 0.9
eviction_ratio = 0.1
lease_ttl = 2.5
shared = true
aggregate_gbps = 40
`), "storage.toml")
	b := must(t, f.Build)
	want := sim.StorageConfig{
		Enabled: true, CapacityTokens: 1e6, PrefetchPolicy: sim.PrefetchTimeout, PrefetchThreshold: 512,
		PrefetchTimeoutBase: 1.5e9, PrefetchTimeoutPerKiToken: 0.25e9, PrefetchTimeoutMax: 20e9,
		PrefetchCapacityRatio: 0.25, ReadBandwidth: 12.5e9, WriteBandwidth: 6e9,
		ReadLatency: 80_000, WriteLatency: 150_000,
		Eviction: sim.StorageMooncake, HighWatermark: 0.9, EvictionRatio: 0.1, LeaseTTL: 2.5e9,
		AggregateBandwidth: 40e9,
	}
	if b.Sim.Storage != want {
		t.Fatalf("storage config\n got %+v\nwant %+v", b.Sim.Storage, want)
	}
	// Off by default, and the simulator fills in its defaults.
	d := must(t, Default().Build)
	if d.Sim.Storage != (sim.StorageConfig{}) {
		t.Fatalf("default storage %+v, want off and zero", d.Sim.Storage)
	}
}

// The storage ranges are checked once, by the simulator, and reported at
// the file's keys with the values as written: a negative value too small
// to survive the conversion to ns, and an infinite bandwidth (which the
// simulator used to report at its own key, with no position).
func TestStorageRangesAtFileKeys(t *testing.T) {
	_, err := Parse([]byte(`[model]
preset = "qwen2.5-14b"
[gpu]
preset = "h200"
[storage]
read_latency_us = -1e-9
write_gbps = inf
`), "s.toml")
	want := "s.toml:7:1: storage.write_gbps: must be >= 0 (got +Inf)\n" +
		"s.toml:6:1: storage.read_latency_us: must be >= 0 (got -1e-09)"
	if err == nil || err.Error() != want {
		t.Fatalf("Parse: %v, want\n%s", err, want)
	}
}
