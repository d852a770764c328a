package engine

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// TableLine writes one "key value" line in the layout of SGLang's serving
// benchmark table (print_benchmark_result): the key padded to 40 columns,
// floats with two decimals.
func TableLine(w io.Writer, key string, v any) {
	switch v := v.(type) {
	case float64:
		fmt.Fprintf(w, "%-40s %-10.2f\n", key, v)
	default:
		fmt.Fprintf(w, "%-40s %-10v\n", key, v)
	}
}

// TableHeading writes a title centred in a 50-column rule of fill.
func TableHeading(w io.Writer, title string, fill byte) {
	n := max(50-len(title), 0)
	f := string(fill)
	fmt.Fprintf(w, "%s%s%s\n", strings.Repeat(f, n/2), title, strings.Repeat(f, n-n/2))
}

// WriteTable writes the serving benchmark's metric block, from "Successful
// requests" to the inter-token latencies, exactly as SGLang's benchmarks
// print it (without the retokenized line). Callers print their own header
// and any sections of their own after it.
func (s Serving) WriteTable(w io.Writer) {
	TableLine(w, "Successful requests:", s.Completed)
	TableLine(w, "Benchmark duration (s):", s.Duration)
	TableLine(w, "Total input tokens:", s.TotalInput)
	TableLine(w, "Total generated tokens:", s.TotalOutput)
	TableLine(w, "Request throughput (req/s):", s.RequestThroughput)
	TableLine(w, "Input token throughput (tok/s):", s.InputThroughput)
	TableLine(w, "Output token throughput (tok/s):", s.OutputThroughput)
	TableLine(w, "Total token throughput (tok/s):", s.TotalThroughput)
	TableLine(w, "Concurrency:", s.Concurrency)
	latencyLines(w, "End-to-End Latency", "E2E Latency", s.MeanE2E, s.MedianE2E)
	latencyLines(w, "Time to First Token", "TTFT", s.MeanTTFT, s.MedianTTFT, s.P90TTFT, s.P99TTFT)
	latencyLines(w, "Time per Output Token (excl. 1st token)", "TPOT", s.MeanTPOT, s.MedianTPOT, s.P90TPOT, s.P99TPOT)
	latencyLines(w, "Inter-token Latency", "ITL", s.MeanITL, s.MedianITL, s.P90ITL, s.P99ITL)
}

// WriteTableBody writes what a simulated run's table has after its own
// header lines: the trace's file name, the failed requests when there are
// any, the serving benchmark's block (Serving.WriteTable), then the cache
// section's heading and the cache hit rate with its device and host parts
// under the keys device and host ("  device hit rate:").
func (s Summary) WriteTableBody(w io.Writer, trace, cacheHeading, device, host string) {
	TableLine(w, "Trace:", filepath.Base(trace))
	if s.Failed > 0 {
		TableLine(w, "Failed requests:", s.Failed)
	}
	s.Serving.WriteTable(w)
	TableHeading(w, cacheHeading, '-')
	TableLine(w, "Cache hit rate (cached/prompt):", fmt.Sprintf("%.4f", s.CacheHitRate))
	TableLine(w, device, fmt.Sprintf("%.4f", s.DeviceHitRate))
	TableLine(w, host, fmt.Sprintf("%.4f", s.HostHitRate))
}

// latencyLines writes a latency section: its heading, then "Mean <name>
// (ms):", "Median", "P90" and "P99" lines for as many values as given, in
// that order.
func latencyLines(w io.Writer, heading, name string, ms ...float64) {
	TableHeading(w, heading, '-')
	for i, v := range ms {
		TableLine(w, [...]string{"Mean", "Median", "P90", "P99"}[i]+" "+name+" (ms):", v)
	}
}
