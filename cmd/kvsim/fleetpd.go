package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/sim/engine"
)

// buildPDFleet builds a disaggregated fleet ([disaggregation]): each
// group's replicas in their role, the decode groups with their radix
// cache off (decode_cache = "chunk") or without a host tier and storage
// ("radix"), each replica's KV bytes per token over its TP ranks from its
// model and GPU sizing.
func buildPDFleet(f *configs.File, groups []configs.FleetGroupFile, seed uint64) (*fleet.Fleet, []string, error) {
	pd := f.PDConfig()
	var reps []fleet.PDReplica
	var desc []string
	for i, g := range groups {
		if seed != 0 {
			g.File.Seed = seed
		}
		role := fleet.Prefill
		if !pd.Prefill[i] {
			role = fleet.Decode
			if pd.DecodeRadix {
				// --disaggregation-decode-enable-radix-cache without HiCache.
				off := false
				g.File.Cache.Hierarchical, g.File.Storage.Enabled = &off, false
			} else {
				g.File.Cache.Disable = true // SGLang forces the chunk cache on decode
			}
		}
		b, err := g.File.Build()
		if err != nil {
			return nil, nil, fmt.Errorf("group %s (%v): %w", g.Name, role, err)
		}
		srv, err := g.File.BuildServer(configs.ServerOptions{NoTimeline: true})
		if err != nil {
			return nil, nil, fmt.Errorf("group %s (%v): %w", g.Name, role, err)
		}
		perToken := float64(b.Sizing.CellBytes) * float64(b.Sizing.TPSize)
		for range g.Count {
			rep := fleet.Replica{Group: g.Name, Factory: srv.Factory, SharedL3: g.File.L3Namespace()}
			reps = append(reps, fleet.PDReplica{Replica: rep, Role: role, KVBytesPerToken: perToken})
		}
		desc = append(desc, fmt.Sprintf("%s (%v): %d x %s", g.Name, role, g.Count, g.File.Describe()))
	}
	cfg := fleet.PDConfig{
		Prefill: pd.PrefillRouter, Decode: pd.DecodeRouter,
		TransferGbps: pd.TransferGbps, TransferLatency: pd.TransferLatency,
		TransferQueues: pd.TransferQueues, ReservedDecodeTokens: pd.ReservedDecodeTokens,
	}
	fl, err := fleet.NewPD(reps, cfg, f.Seed)
	return fl, desc, err
}

// writePDTable prints a disaggregated run's transfers and TTFT split.
func writePDTable(w io.Writer, res *fleet.Result) {
	p := res.PD
	line := func(k string, v any) { engine.TableLine(w, k, v) }
	ms := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	engine.TableHeading(w, "Disaggregation", '-')
	var roles [2][]string
	for _, r := range res.Replicas {
		k := 0
		if r.Role == fleet.Decode.String() {
			k = 1
		}
		roles[k] = append(roles[k], fmt.Sprint(r.Index))
	}
	line("Prefill replicas:", strings.Join(roles[0], " "))
	line("Decode replicas:", strings.Join(roles[1], " "))
	line("KV transfers (chunks):", p.Transfers)
	line("KV pages transferred:", p.TransferPages)
	line("KV transferred (GB):", fmt.Sprintf("%.3f", p.TransferBytes/1e9))
	if p.SkippedPages > 0 {
		line("KV pages not sent (decode hits):", p.SkippedPages)
	}
	line("Mean transfer (ms):", ms(p.TransferMeanMs))
	line("P50 transfer (ms):", ms(p.TransferP50Ms))
	line("P90 transfer (ms):", ms(p.TransferP90Ms))
	line("P99 transfer (ms):", ms(p.TransferP99Ms))
	line("Mean TTFT split (ms):", "")
	line("  bootstrap wait:", ms(p.BootstrapMs))
	line("  prefill queue:", ms(p.PrefillQueueMs))
	line("  prefill compute:", ms(p.PrefillComputeMs))
	line("  transfer tail:", ms(p.TransferTailMs))
	line("  first decode step:", ms(p.FirstStepMs))
}
