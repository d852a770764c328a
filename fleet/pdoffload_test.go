package fleet_test

import (
	"testing"

	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/traces"
	"github.com/kvsim/kvsim/tree"
	"pgregory.net/rapid"
)

// offloadFleet is two prefill replicas (round robin) and one decode
// replica sharing one L3 store: the prefill replicas write through to
// it, the decode replica (chunk cache) offloads when offload is set.
func offloadFleet(ps int, offload bool) ([]fleet.PDReplica, fleet.PDConfig) {
	var reps []fleet.PDReplica
	for _, role := range []fleet.Role{fleet.Prefill, fleet.Prefill, fleet.Decode} {
		sc := sim.Default(8192)
		sc.Cache.PageSize = ps
		sc.Cache.HostTokens = 8192
		sc.Cache.WritePolicy = tree.WriteThrough
		sc.Storage.Enabled = true
		sc.Storage.PrefetchThreshold = 1
		sc.Storage.PrefetchPolicy = sim.WaitComplete
		ns := "m"
		if role == fleet.Decode {
			sc.Cache.Disable = true
			sc.Storage.DecodeOffload = offload
			if !offload {
				ns = "" // a chunk cache without offload has no storage tier
			}
		}
		reps = append(reps, fleet.PDReplica{
			Replica: fleet.Replica{Group: role.String(), Factory: &sim.Factory{Config: sc, Cost: &fitted, OpenLoop: true}, SharedL3: ns},
			Role:    role, KVBytesPerToken: 1 << 10,
		})
	}
	cfg := fleet.DefaultPD()
	cfg.Prefill.Policy, cfg.Decode.Policy = router.RoundRobin, router.RoundRobin
	cfg.TransferGbps = 100
	cfg.DecodeOffload = offload
	return reps, cfg
}

// With decode offload, a follow-up turn whose prompt extends the first
// turn's prompt + output (the trace gives the output's tokens) finds on
// the prefill replica that never saw the first turn every whole page of
// the first turn's KV (prompt + output - 1 tokens) in the shared L3;
// without it, no more than the first prompt's whole pages. (The first
// turn's prompt pages reach L3 from its prefill replica's write-through.)
func TestPropPDDecodeOffload(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ps := rapid.SampledFrom([]int{1, 4, 16}).Draw(t, "page_size")
		// Long enough for a load-back (at least 10 tokens) of the hit.
		p1 := rapid.IntRange(16, 600).Draw(t, "prompt")
		o1 := rapid.IntRange(16, 200).Draw(t, "output")
		more := rapid.IntRange(1, 100).Draw(t, "more")
		first := pdRec("t1", 0, p1, o1)
		for i := range o1 {
			first.OutputTokens = append(first.OutputTokens, int32(900000+i))
		}
		second := traces.Record{ID: "t2", Arrival: 30e9, OutputLen: 3}
		second.Tokens = append(append(append([]int32{}, first.Tokens...), first.OutputTokens...), make([]int32, more)...)
		for i := range more {
			second.Tokens[p1+o1+i] = int32(800000 + i)
		}
		second.InputLen = len(second.Tokens)
		recs := []traces.Record{first, second}
		kv := (p1 + o1 - 1) / ps * ps // the first turn's whole pages of KV
		for _, offload := range []bool{false, true} {
			reps, cfg := offloadFleet(ps, offload)
			res, _ := pdRun(t, reps, cfg, recs)
			d := res.PDRequests[1]
			got := res.Requests[1]
			if got.Failed != "" || d.Prefill != 1 || res.Replicas[1].Routed != 1 {
				t.Fatalf("offload %v: second turn %q on prefill replica %d", offload, got.Failed, d.Prefill)
			}
			if offload && got.CachedStorage < int64(kv) {
				t.Fatalf("with offload the second turn found %d tokens in L3, want >= %d", got.CachedStorage, kv)
			}
			if !offload && got.CachedStorage > int64(p1/ps*ps) {
				t.Fatalf("without offload the second turn found %d tokens in L3, more than the first prompt's %d", got.CachedStorage, p1/ps*ps)
			}
		}
	})
}

// Decode offload needs a storage tier on every decode replica.
func TestPDDecodeOffloadNeedsStorage(t *testing.T) {
	reps, cfg := offloadFleet(4, true)
	sc := reps[2].Factory.(*sim.Factory).Config
	sc.Storage.Enabled = false
	reps[2].Factory, reps[2].SharedL3 = &sim.Factory{Config: sc, Cost: &fitted, OpenLoop: true}, ""
	if _, err := fleet.NewPD(reps, cfg, 1); err == nil {
		t.Fatal("NewPD with offload and a decode replica without storage = nil")
	}
}
