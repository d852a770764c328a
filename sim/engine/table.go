package engine

import (
	"fmt"
	"io"
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
	TableHeading(w, "End-to-End Latency", '-')
	TableLine(w, "Mean E2E Latency (ms):", s.MeanE2E)
	TableLine(w, "Median E2E Latency (ms):", s.MedianE2E)
	TableHeading(w, "Time to First Token", '-')
	TableLine(w, "Mean TTFT (ms):", s.MeanTTFT)
	TableLine(w, "Median TTFT (ms):", s.MedianTTFT)
	TableLine(w, "P90 TTFT (ms):", s.P90TTFT)
	TableLine(w, "P99 TTFT (ms):", s.P99TTFT)
	TableHeading(w, "Time per Output Token (excl. 1st token)", '-')
	TableLine(w, "Mean TPOT (ms):", s.MeanTPOT)
	TableLine(w, "Median TPOT (ms):", s.MedianTPOT)
	TableLine(w, "P90 TPOT (ms):", s.P90TPOT)
	TableLine(w, "P99 TPOT (ms):", s.P99TPOT)
	TableHeading(w, "Inter-token Latency", '-')
	TableLine(w, "Mean ITL (ms):", s.MeanITL)
	TableLine(w, "Median ITL (ms):", s.MedianITL)
	TableLine(w, "P90 ITL (ms):", s.P90ITL)
	TableLine(w, "P99 ITL (ms):", s.P99ITL)
}
