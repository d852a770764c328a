package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/sim/engine"
)

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
	if p.BootstrapTimeouts > 0 || p.WaitingTimeouts > 0 {
		line("Aborted by the bootstrap timeout:", p.BootstrapTimeouts)
		line("Aborted by the waiting timeout:", p.WaitingTimeouts)
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
