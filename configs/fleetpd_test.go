package configs

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/kvsim/kvsim/fleet/router"
)

// The bundled disaggregated example: its groups' roles, the transfer
// keys, and each pool's router over [router] (SGLang's --prefill-policy
// and --decode-policy fall back to --policy; the other keys are shared).
func TestPDConfig(t *testing.T) {
	f := mustLoad(t, "fleet-pd.toml")
	if !f.IsPD() {
		t.Fatal("fleet-pd.toml is not disaggregated")
	}
	pd := f.PDConfig()
	if len(pd.Prefill) != 2 || !pd.Prefill[0] || pd.Prefill[1] {
		t.Errorf("roles %v, want prefill, decode", pd.Prefill)
	}
	if pd.TransferGbps != 200 || pd.TransferLatency != 20*time.Microsecond || pd.TransferQueues != 4 || pd.ReservedDecodeTokens != 512 {
		t.Errorf("transfer %+v", pd)
	}
	if pd.PrefillRouter.Policy != router.CacheAware || pd.DecodeRouter.Policy != router.RoundRobin {
		t.Errorf("policies %v, %v", pd.PrefillRouter.Policy, pd.DecodeRouter.Policy)
	}
	// Defaults, an array of names, and a pool key over a shared one.
	g := mustParse(t, fleetDoc("[[fleet.groups]]\nname = \"p\"\ncount = 1\n[[fleet.groups]]\nname = \"d\"\ncount = 1\n[[fleet.groups]]\nname = \"p2\"\ncount = 1\n"+
		"[disaggregation]\nprefill = [\"p\", \"p2\"]\ndecode = \"d\"\ntransfer_gbps = 100\n[router]\ncache_threshold = 0.5\n[router.prefill]\nbalance_abs_threshold = 8\n"), "t.toml")
	pd = g.PDConfig()
	want := router.Default()
	want.CacheAware.CacheThreshold = 0.5
	if !reflect.DeepEqual(pd.DecodeRouter, want) {
		t.Errorf("decode router %+v, want %+v", pd.DecodeRouter, want)
	}
	want.CacheAware.BalanceAbsThreshold = 8
	if !reflect.DeepEqual(pd.PrefillRouter, want) {
		t.Errorf("prefill router %+v, want %+v", pd.PrefillRouter, want)
	}
	if fmt.Sprint(pd.Prefill) != "[true false true]" || pd.TransferQueues != 4 || pd.ReservedDecodeTokens != 512 || pd.TransferLatency != 0 || pd.DecodeRadix ||
		pd.BootstrapTimeout != 300*time.Second || pd.WaitingTimeout != 300*time.Second {
		t.Errorf("defaults %+v", pd)
	}
	h := mustParse(t, fleetDoc("[[fleet.groups]]\nname = \"p\"\ncount = 1\n[[fleet.groups]]\nname = \"d\"\ncount = 1\n"+
		"[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 100\nbootstrap_timeout = 0.25\nwaiting_timeout = 600\n"), "t.toml")
	if pd := h.PDConfig(); pd.BootstrapTimeout != 250*time.Millisecond || pd.WaitingTimeout != 600*time.Second || pd.DecodeOffload {
		t.Errorf("timeouts %v, %v, offload %v", pd.BootstrapTimeout, pd.WaitingTimeout, pd.DecodeOffload)
	}
	o := mustParse(t, fleetDoc("[[fleet.groups]]\nname = \"p\"\ncount = 1\n[[fleet.groups]]\nname = \"d\"\ncount = 1\n"+
		"[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 100\ndecode_offload = true\n"), "t.toml")
	if !o.PDConfig().DecodeOffload {
		t.Error("decode_offload = true not read")
	}
}

// Every mistake of [disaggregation], [router.prefill] and [router.decode]
// is refused at its key.
func TestPDErrors(t *testing.T) {
	groups := "[[fleet.groups]]\nname = \"p\"\ncount = 1\n[[fleet.groups]]\nname = \"d\"\ncount = 1\n"
	for _, c := range []struct{ doc, want string }{
		{"[disaggregation]\ntransfer_gbps = 1\n", `t.toml:7:1: disaggregation: only with a [fleet] table (add [[fleet.groups]])`},
		{groups + "[router.decode]\npolicy = \"random\"\n", `t.toml:13:1: router.decode: only with a [disaggregation] table`},
		{groups + "[disaggregation]\nprefill = \"p\"\ntransfer_gbps = 1\n",
			`t.toml:13:1: disaggregation.decode: required: the name of a [[fleet.groups]] (or an array of names) serving decode`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = [\"d\", \"x\"]\ntransfer_gbps = 1\n",
			`t.toml:15:1: disaggregation.decode: no [[fleet.groups]] is named "x"`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = [\"d\", \"p\"]\ntransfer_gbps = 1\n",
			`t.toml:15:1: disaggregation.decode: group "p" has a role already: a group serves prefill or decode`},
		{groups + "[[fleet.groups]]\nname = \"q\"\ncount = 1\n[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\n",
			`t.toml:16:1: disaggregation: group "q" serves neither prefill nor decode: name it in disaggregation.prefill or disaggregation.decode`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\n",
			`t.toml:13:1: disaggregation.transfer_gbps: required: each prefill replica's KV link, Gbit/s`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = -2.0\n",
			`t.toml:16:1: disaggregation.transfer_gbps: must be Gbit/s in (0, 1e+06] (got -2)`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\ntransfer_latency = -1.0\ntransfer_queues = 0\nnum_reserved_decode_tokens = -5\ndecode_cache = \"hicache\"\n",
			"t.toml:17:1: disaggregation.transfer_latency: must be seconds in [0, 31536000] (got -1)\n" +
				"t.toml:18:1: disaggregation.transfer_queues: must be in [1, 1024] (got 0)\n" +
				"t.toml:19:1: disaggregation.num_reserved_decode_tokens: must be tokens in [0, 16777216] (got -5)\n" +
				`t.toml:20:1: disaggregation.decode_cache: "hicache" is not supported yet: "chunk" or "radix"`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\nbootstrap_timeout = 0.0\nwaiting_timeout = -3.0\n",
			"t.toml:17:1: disaggregation.bootstrap_timeout: must be seconds in [1e-06, 31536000] (got 0)\n" +
				"t.toml:18:1: disaggregation.waiting_timeout: must be seconds in [1e-06, 31536000] (got -3)"},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\ndecode_cache = \"radix\"\ndecode_offload = true\n",
			`t.toml:18:1: disaggregation.decode_offload: only with decode_cache = "chunk" (a radix decode replica has no storage tier)`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\ndecode_cache = \"lru\"\n",
			`t.toml:17:1: disaggregation.decode_cache: must be "chunk" or "radix" (got "lru")`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\n[router.prefill]\ncache_threshold = 2.0\n[router.decode]\npolicy = \"nope\"\n",
			"t.toml:18:1: router.prefill.cache_threshold: must be in [0, 1] (got 2)\n" +
				`t.toml:20:1: router.decode.policy: must be "cache_aware", "round_robin", "random", "power_of_two", "consistent_hash", "kv_aware", "nginx_round_robin", "nginx_hash" or "cache_aware_oracle" (got "nope")`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\n[router.prefill]\npolicy = \"kv_aware\"\n",
			`t.toml:18:1: router.prefill.policy: kv_aware is not supported in a disaggregated fleet's pools yet`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\n[router.decode]\npolicy = \"cache_aware_oracle\"\n",
			`t.toml:18:1: router.decode.policy: cache_aware_oracle is not supported in a disaggregated fleet's pools yet`},
		{groups + "[disaggregation]\nprefill = \"p\"\ndecode = \"d\"\ntransfer_gbps = 1\n[[fleet.groups]]\ncount = 1\nset = { \"disaggregation.transfer_gbps\" = 2 }\n",
			"t.toml:13:1: disaggregation: group \"group2\" serves neither prefill nor decode: name it in disaggregation.prefill or disaggregation.decode\n" +
				`t.toml:19:9: fleet.groups[2].set.disaggregation.transfer_gbps: [disaggregation] is the fleet's, not a group's`},
	} {
		checkFleetDocError(t, c.doc, c.want)
	}
}
