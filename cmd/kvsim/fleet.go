package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// fleetConfig returns the config file named by sim's --config when it
// describes a fleet ([fleet] groups), else nil: runSim simulates one server
// then, and reports the file's errors itself.
func fleetConfig(args []string) *configs.File {
	path := ""
	for i, a := range args {
		switch {
		case a == "--":
			return nil
		case (a == "--config" || a == "-config") && i+1 < len(args):
			path = args[i+1]
		case strings.HasPrefix(a, "--config="), strings.HasPrefix(a, "-config="):
			_, path, _ = strings.Cut(a, "=")
		}
	}
	if path == "" {
		return nil
	}
	f, err := configs.Load(path)
	if err != nil || !f.IsFleet() {
		return nil
	}
	return f
}

const fleetUsage = `usage: kvsim sim --config FLEET.toml [--trace FILE] [--format F] [--seed N]
                 [--open-loop] [--explain] [--json] [--per-request FILE]
                 [--timeline FILE] [--idle-gap-cap D]

Simulates the fleet described by FLEET.toml's [fleet] and [router] tables
(docs/config.md, docs/fleet.md): every replica group's servers behind
SGLang's router on one virtual clock, closed loop as one server's run (a
request reaches the router when its parent and sub-agents have finished,
on any replica, plus its delay) unless --open-loop or workload.open_loop.
Prints the fleet's serving-benchmark metrics, the load balance, the
router's decisions and one line per replica. --timeline writes every
replica's tier occupancy, every simulated second, as CSV (a replica column,
then kvsim sim's timeline columns).
`

// runFleetSim is kvsim sim for a fleet file f.
func runFleetSim(f *configs.File, args []string, stdout, stderr io.Writer) int {
	fs := newCommand("kvsim sim", fleetUsage, stderr)
	sf := defineSimFlags(fs) // sim.go
	cfgPath, tracePath, format, seed, asJSON, perReq, explain := sf.cfgPath, sf.tracePath, sf.format, sf.seed, sf.asJSON, sf.perReq, sf.explain
	timeline, gapCap := defineTimelineFlags(fs) // sim.go
	if code, ok := fs.parse(args); !ok {
		return code
	}
	sf.applyOpenLoop(f)
	outs := []outputFlag{{"per-request", *perReq}, {"timeline", *timeline}}
	if code, ok := checkOutputDirs(outs, stderr); !ok { // sim.go
		return code
	}
	capNs, code, ok := idleGapCap(fs, f, *gapCap) // sim.go
	if !ok {
		return code
	}
	b, err := f.BuildFleet(configs.ServerOptions{NoTimeline: *timeline == ""}, *seed)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim sim: %s: %v\n", *cfgPath, err)
		return exitUsage
	}
	fl, err := b.Factory.Build()
	if err != nil {
		fmt.Fprintf(stderr, "kvsim sim: %s: %v\n", *cfgPath, err)
		return exitUsage
	}
	if *explain {
		for i, srv := range b.Servers {
			fmt.Fprintln(stdout, b.Describe[i])
			for _, l := range srv.Explain {
				fmt.Fprintln(stdout, "  "+l)
			}
		}
		fmt.Fprintln(stdout)
	}
	tp, rd, closeTrace, code := openSimTrace(fs, f, *cfgPath, *tracePath, *format, outs, stderr)
	if rd == nil {
		return code
	}
	defer closeTrace()
	// The outputs are created before the run, so that one that cannot be
	// written fails at once, not after it.
	streams, err := createOutputs(outs...) // sim.go
	if err != nil {
		fmt.Fprintf(stderr, "kvsim sim: %v\n", err)
		return exitFail
	}
	if code, ok := capTraceGaps(rd, tp, capNs, stderr); !ok { // sim.go
		return code
	}
	run := fl.RunClosedLoop
	if b.Factory.OpenLoop {
		run = fl.Run
	}
	res, err := run(rd)
	if err == nil {
		warnIgnoredDeps(stderr, res.IgnoredDeps)
		err = writeFleetOutputs(res, streams[0], streams[1])
	} else {
		err = traces.InFile(tp, err)
	}
	if ferr := finishAll(streams, err); err != nil || ferr != nil {
		fmt.Fprintf(stderr, "kvsim sim: %v\n", cmp.Or(err, ferr))
		return exitFail
	}
	if *asJSON {
		out := struct {
			*fleet.Result
			Trace   string `json:"trace"`
			Config  string `json:"config"`
			Seed    uint64 `json:"seed"`
			Version string `json:"kvsim_version"`
		}{res, tp, *cfgPath, f.Seed, version}
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			fmt.Fprintf(stderr, "kvsim sim: %v\n", err)
			return exitFail
		}
		return exitOK
	}
	writeFleetTable(stdout, tp, b.Describe, res)
	return exitOK
}

// writeFleetOutputs writes a fleet run's --per-request lines and its
// timeline into their streams (each if asked for).
func writeFleetOutputs(res *fleet.Result, perReq, timeline *lineStream) error {
	if perReq != nil {
		enc := json.NewEncoder(perReq.w)
		for i, r := range res.Requests {
			line := struct {
				engine.RequestResult
				Replica int `json:"replica"`
				*fleet.PDRequest
			}{r, res.Replica[i], nil}
			if res.PDRequests != nil {
				line.PDRequest = &res.PDRequests[i] // the TTFT split (fleetpd.go)
			}
			if err := enc.Encode(line); err != nil {
				return perReq.named(err)
			}
		}
	}
	if timeline != nil {
		writeFleetTimeline(timeline.w, res) // its error is the stream's, at its flush
	}
	return nil
}

// writeFleetTimeline writes the replicas' timelines as one CSV file: a
// replica column, then engine.TimelineHeader's, the rows in time order
// (ties in replica order).
func writeFleetTimeline(w *bufio.Writer, res *fleet.Result) {
	type row struct {
		replica int
		engine.Sample
	}
	var rows []row
	for i, r := range res.Replicas {
		if r.Result != nil {
			for _, x := range r.Result.Timeline {
				rows = append(rows, row{i, x})
			}
		}
	}
	slices.SortStableFunc(rows, func(a, b row) int { return cmp.Compare(a.Time, b.Time) })
	w.WriteString("replica," + engine.TimelineHeader + "\n")
	var b []byte
	for _, r := range rows {
		b = strconv.AppendInt(b[:0], int64(r.replica), 10)
		w.Write(append(r.AppendCSV(append(b, ',')), '\n'))
	}
}

// writeFleetTable prints a fleet run: the fleet's serving metrics and
// cache hits, the load balance, the router's decisions and a line per
// replica.
func writeFleetTable(w io.Writer, trace string, groups []string, res *fleet.Result) {
	s := res.Summary
	line := func(k string, v any) { engine.TableLine(w, k, v) }
	engine.TableHeading(w, " kvsim fleet simulation ", '=')
	line("Replicas:", len(res.Replicas))
	for _, g := range groups {
		fmt.Fprintf(w, "  %s\n", g)
	}
	line("Router policy:", res.Policy)
	s.WriteTableBody(w, trace, "KV Cache", "  device hit rate:", "  host hit rate (loaded back):")
	if res.L3 != nil {
		writeFleetL3(w, res)
	}
	engine.TableHeading(w, "Load balance", '-')
	line("Max/mean in-flight:", fmt.Sprintf("%.3f", res.Imbalance.MaxOverMeanInFlight))
	line("CV of requests per replica:", fmt.Sprintf("%.3f", res.Imbalance.RequestsCV))
	engine.TableHeading(w, "Router decisions", '-')
	for _, d := range res.Decisions {
		line(d.Reason+":", d.Count)
	}
	if e := res.RouterEstimate; e != nil && e.Requests > 0 {
		engine.TableHeading(w, "Router's expected prefix", '-')
		line("Requests routed on a prefix:", e.Requests)
		line("Expected / cached tokens:", fmt.Sprintf("%d / %d", e.Expected, e.Cached))
		line("Found fewer / more:", fmt.Sprintf("%d / %d", e.Over, e.Under))
		line("Mean |expected - cached|:", fmt.Sprintf("%.1f", e.MeanAbsError))
	}
	if res.PD != nil {
		writePDTable(w, res) // fleetpd.go
	}
	engine.TableHeading(w, "Replicas", '-')
	fmt.Fprintf(w, "%-4s %-12s %8s %7s %8s %9s %9s %9s\n", "#", "group", "routed", "hit", "in-fl", "p50 TTFT", "p90 TTFT", "p99 TTFT")
	for _, r := range res.Replicas {
		fmt.Fprintf(w, "%-4d %-12s %8d %7.4f %8.2f %9.2f %9.2f %9.2f\n", r.Index, r.Group, r.Routed, r.CacheHitRate, r.MeanInFlight, r.MedianTTFT, r.P90TTFT, r.P99TTFT)
	}
	fmt.Fprintln(w, "(in-fl: the router's mean in-flight count; TTFT in ms)")
	if res.L3 != nil {
		fmt.Fprintf(w, "%-4s %10s %10s %10s %10s %10s\n", "#", "L3 hit tok", "pages rd", "pages wr", "cross rd", "evicted")
		for _, r := range res.Replicas {
			l := r.L3
			fmt.Fprintf(w, "%-4d %10d %10d %10d %10d %10d\n", r.Index, l.HitTokens, l.PagesRead, l.PagesWritten, l.CrossReplicaPagesRead, l.PagesEvicted)
		}
		fmt.Fprintln(w, "(L3 pages read and written by each replica; cross rd: read pages another replica wrote)")
	}
	fmt.Fprintln(w, strings.Repeat("=", 50))
}

// writeFleetL3 prints the fleet's storage-tier (L3) activity and its
// shared stores.
func writeFleetL3(w io.Writer, res *fleet.Result) {
	line := func(k string, v any) { engine.TableLine(w, k, v) }
	l3 := res.L3
	engine.TableHeading(w, "Storage (L3)", '-')
	line("  storage hit rate:", fmt.Sprintf("%.4f", res.Summary.StorageHitRate))
	line("L3 hit tokens:", l3.HitTokens)
	line("L3 pages read:", l3.PagesRead)
	line("L3 pages written:", l3.PagesWritten)
	line("Cross-replica L3 pages read:", l3.CrossReplicaPagesRead)
	line("L3 pages evicted:", l3.PagesEvicted)
	for _, st := range res.SharedL3 {
		line("Shared store:", fmt.Sprintf("%s, page %d, replicas %v, %d tokens stored", st.Namespace, st.PageSize, st.Replicas, st.StoredTokens))
	}
}
