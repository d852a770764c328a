package replay

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// TableHeader holds the run settings printed at the top of the table.
type TableHeader struct {
	Backend        string // the API ("sglang", "openai", ...)
	RequestRate    Rate   // +Inf when not rate-paced
	MaxConcurrency int    // 0: not set
}

// PrintTable prints s in the layout of SGLang's serving benchmarks
// (print_benchmark_result), without the retokenized line (kvsim has no
// tokenizer), followed by kvsim's failure, cache and client sections.
func PrintTable(w io.Writer, h TableHeader, s *Summary) {
	line := func(k string, v any) { engine.TableLine(w, k, v) }
	head := func(title string, fill string) { engine.TableHeading(w, title, fill[0]) }
	fmt.Fprintln(w)
	head(" Serving Benchmark Result ", "=")
	line("Backend:", h.Backend)
	line("Traffic request rate:", h.RequestRate.String())
	if h.MaxConcurrency > 0 {
		line("Max request concurrency:", h.MaxConcurrency)
	} else {
		line("Max request concurrency:", "not set")
	}
	s.Serving.WriteTable(w)
	head("Cache and client (kvsim)", "-")
	if s.CacheHitRate != nil {
		line("Cache hit rate (cached/prompt):", fmt.Sprintf("%.4f", *s.CacheHitRate))
	} else {
		line("Cache hit rate (cached/prompt):", "not reported by the server")
	}
	line("Failed requests:", s.Failed)
	for _, k := range sortedKeys(s.FailedReasons) {
		line("  "+k+":", s.FailedReasons[k])
	}
	if s.Retried > 0 {
		line("Resent on a fresh connection:", s.Retried)
	}
	if s.NotSent > 0 {
		line("Not sent (interrupted):", s.NotSent)
	}
	line("Client lateness mean / p99 (ms):", fmt.Sprintf("%.3f / %.3f", s.MeanLateness, s.P99Lateness))
	line("Mean wait for a concurrency slot (ms):", s.MeanQueueWait)
	fmt.Fprintln(w, strings.Repeat("=", 50))
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// PerRequestHeader returns the header of a per-request trace.
func PerRequestHeader(source string, info Info) traces.Header {
	return traces.Header{
		Format: "kvsim",
		Source: source,
		Server: info.Server,
		Note:   "replayed by kvsim: arrival_ns is the actual send time from the run's start; observed holds the measurements",
	}
}

// WritePerRequest writes every sent request of res as a kvsim trace: the
// original record (prompt, lengths, dependencies, sampling) with Arrival
// set to the actual send time (ns since the run's start; records sorted by
// it) and Observed holding cached tokens (-1 if not reported), TTFT, ITL,
// E2E and the status ("ok", or the failure reason). Unsent requests are
// left out. recs must be the slice that was replayed.
func WritePerRequest(w *traces.Writer, recs []traces.Record, res *Result) error {
	order := make([]int, 0, len(res.Requests))
	for i := range res.Requests {
		if res.Requests[i].Sent {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return res.Requests[order[a]].Start < res.Requests[order[b]].Start })
	for _, i := range order {
		rr := &res.Requests[i]
		if err := w.Write(PerRequestRecord(recs[rr.Index], rr)); err != nil {
			return err
		}
	}
	return w.Flush()
}

// PerRequestRecord is the line WritePerRequest writes for a sent request:
// its record rec as replayed, with Arrival set to the send time and
// Observed holding rr's measurements.
func PerRequestRecord(rec traces.Record, rr *RequestResult) traces.Record {
	rec.Arrival = max(rr.Start, 0)
	obs := &traces.Observed{CachedTokens: rr.CachedTokens, E2E: rr.E2E(), Status: "ok", Retries: rr.Retries}
	if rr.Failed != "" {
		obs.Status = rr.Failed
		obs.CachedTokens = -1
	} else {
		obs.TTFT = rr.TTFT()
		obs.ITL = rr.ITL
	}
	rec.Observed = obs
	return rec
}
