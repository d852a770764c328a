package router

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvsim/kvsim/internal/testutil"
)

func TestDefaultValidates(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	c := Default().CacheAware
	if c.CacheThreshold != 0.3 || c.BalanceAbsThreshold != 64 || c.BalanceRelThreshold != 1.5 ||
		c.EvictionInterval != 120*time.Second || c.MaxTreeSize != 67108864 || c.MissRule != MinLoad {
		t.Fatalf("Default().CacheAware = %+v, want SGLang's CLI defaults 0.3, 64, 1.5, 120s, 2^26, min_load", c)
	}
}

func TestValidateNamesKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"policy", func(c *Config) { c.Policy = 0 }, "router.policy: unknown policy 0"},
		{"cache_threshold", func(c *Config) { c.CacheAware.CacheThreshold = 1.5 }, "router.cache_threshold: must be in [0, 1] (got 1.5)"},
		{"cache_threshold_nan", func(c *Config) { c.CacheAware.CacheThreshold = math.NaN() }, "router.cache_threshold: must be in [0, 1] (got NaN)"},
		{"balance_abs_threshold", func(c *Config) { c.CacheAware.BalanceAbsThreshold = -1 }, "router.balance_abs_threshold: must be >= 0 (got -1)"},
		{"balance_rel_threshold", func(c *Config) { c.CacheAware.BalanceRelThreshold = math.NaN() }, "router.balance_rel_threshold: must be >= 0 (got NaN)"},
		{"eviction_interval", func(c *Config) { c.CacheAware.EvictionInterval = 0 }, "router.eviction_interval: must be > 0 (got 0s)"},
		{"max_tree_size", func(c *Config) { c.CacheAware.MaxTreeSize = -5 }, "router.max_tree_size: must be >= 0 (got -5)"},
		{"balance_token_usage_threshold", func(c *Config) { c.CacheAware.BalanceTokenUsageThreshold = 1.2 }, "router.balance_token_usage_threshold: must be in [0, 1] (got 1.2)"},
		{"tree_page_size", func(c *Config) { c.CacheAware.TreePageSize = 0 }, "router.tree_page_size: must be in [1, 4096] (got 0)"},
		{"miss_rule", func(c *Config) { c.CacheAware.MissRule = 9 }, "router.miss_rule: must be min_load or smallest_tree (got MissRule(9))"},
		{"load_poll_interval", func(c *Config) { c.PowerOfTwo.LoadPollInterval = -time.Second }, "router.load_poll_interval: must be >= 0 (got -1s)"},
		{"virtual_nodes", func(c *Config) { c.ConsistentHash.VirtualNodes = 0 }, "router.virtual_nodes: must be in [1, 65536] (got 0)"},
		{"kv_prefix_weight", func(c *Config) { c.KVAware.PrefixWeight = math.Inf(1) }, "router.kv_prefix_weight: must be finite and >= 0 (got +Inf)"},
		{"kv_host_weight", func(c *Config) { c.KVAware.HostWeight = -0.5 }, "router.kv_host_weight: must be finite and >= 0 (got -0.5)"},
		{"kv_signal_delay", func(c *Config) { c.KVAware.SignalDelay = -1 }, "router.kv_signal_delay: must be >= 0 (got -1ns)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.edit(&c)
			err := c.Validate()
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
			if _, err := New(c, 2, Deps{}); err == nil || err.Error() != tc.want {
				t.Fatalf("New() error = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestValidateReportsEveryField(t *testing.T) {
	c := Default()
	c.CacheAware.CacheThreshold = -1
	c.CacheAware.MaxTreeSize = -1
	c.KVAware.UsageWeight = -1
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil for three bad fields")
	}
	for _, key := range []string{"router.cache_threshold", "router.max_tree_size", "router.kv_usage_weight"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("Validate() = %q, missing %s", err, key)
		}
	}
	if got := strings.Count(err.Error(), "\n") + 1; got != 3 {
		t.Errorf("Validate() reported %d errors, want 3:\n%v", got, err)
	}
}

func TestInfiniteRelThresholdIsValid(t *testing.T) {
	c := Default()
	c.CacheAware.BalanceRelThreshold = math.Inf(1)
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() with balance_rel_threshold = +Inf: %v", err)
	}
}

func TestPolicyText(t *testing.T) {
	for p := CacheAware; p <= LeastLoad; p++ {
		testutil.TextRoundTrip(t, p)
	}
	var p Policy
	err := p.UnmarshalText([]byte("bucket"))
	want := `unknown policy "bucket" (want one of cache_aware, round_robin, random, power_of_two, consistent_hash, kv_aware, nginx_round_robin, nginx_hash, cache_aware_oracle, prefix_hash, manual, least_load)`
	if err == nil || err.Error() != want {
		t.Fatalf("UnmarshalText(bucket) = %v, want %q", err, want)
	}
	var m MissRule
	if err := m.UnmarshalText([]byte("smallest_tree")); err != nil || m != SmallestTree {
		t.Fatalf("UnmarshalText(smallest_tree) = %v, %v", m, err)
	}
	if err := m.UnmarshalText([]byte("largest_tree")); err == nil {
		t.Fatal("UnmarshalText(largest_tree) = nil error")
	}
}

func TestNewNeedsDeps(t *testing.T) {
	for _, p := range []Policy{Random, PowerOfTwo, ConsistentHash, KVAware} {
		c := Default()
		c.Policy = p
		if _, err := New(c, 2, Deps{}); err == nil || !strings.HasPrefix(err.Error(), "router.policy: "+p.String()) {
			t.Errorf("New(%v) without deps = %v", p, err)
		}
	}
	if _, err := New(Default(), 0, Deps{}); err == nil {
		t.Error("New with 0 replicas = nil error")
	}
}
