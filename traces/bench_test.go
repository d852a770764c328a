package traces

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kvsim/kvsim/internal/testutil"
)

// The reader benchmarks parse whole traces from memory and report MB/s of
// input (b.SetBytes), so that the figures compare across formats. The
// inputs are the shared public traces (skipped when absent); the kvsim and
// Bailian inputs are the Mooncake conversation trace written in those
// formats.

// benchRead reads data as format f to the end, b.N times.
func benchRead(b *testing.B, name string, data []byte, f Format) {
	b.Helper()
	benchOpen(b, int64(len(data)), func() (*Reader, error) { return NewReader(bytes.NewReader(data), name, f) })
}

// benchOpen reads the trace that open opens (size bytes) to the end, b.N
// times.
func benchOpen(b *testing.B, size int64, open func() (*Reader, error)) {
	b.Helper()
	b.SetBytes(size)
	b.ReportAllocs()
	n := 0
	cpu := startCPU(b)
	for b.Loop() {
		r, err := open()
		if err != nil {
			b.Fatal(err)
		}
		n = 0
		for {
			_, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		r.Close()
	}
	b.ReportMetric(float64(n), "records")
	cpu.report(size)
}

// cpuMeter reports the throughput per second of the process's CPU time
// (user and system, all threads: the garbage collector's work counts) as
// cpu-MB/s. On a machine shared with other jobs the wall-clock MB/s of
// SetBytes falls with the load; CPU time varies much less.
type cpuMeter struct {
	b     *testing.B
	start time.Duration
}

func startCPU(b *testing.B) cpuMeter { return cpuMeter{b: b, start: cpuTime(b)} }

func (c cpuMeter) report(bytesPerOp int64) {
	if c.b.N == 0 {
		return
	}
	if d := cpuTime(c.b) - c.start; d > 0 {
		c.b.ReportMetric(float64(bytesPerOp)*float64(c.b.N)/1e6/d.Seconds(), "cpu-MB/s")
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func sharedBytes(b *testing.B, rel string) []byte {
	b.Helper()
	data := testutil.ReadFile(b, testutil.SharedTrace(b, rel))
	return data
}

// readTrace reads a whole shared trace.
func readTrace(b *testing.B, rel string) ([]Record, Header) {
	b.Helper()
	p := testutil.SharedTrace(b, rel)
	return readNamed(b, p, testutil.ReadFile(b, p))
}

// conversationRecords reads the Mooncake conversation trace.
func conversationRecords(b *testing.B) ([]Record, Header) {
	return readTrace(b, "mooncake_fast25/conversation_trace.jsonl")
}

// kvsimBytes writes records in the kvsim format.
func kvsimBytes(b testutil.TB, recs []Record, hdr Header) []byte {
	b.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, hdr)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

func BenchmarkReadMooncake(b *testing.B) {
	benchRead(b, "conversation_trace.jsonl", sharedBytes(b, "mooncake_fast25/conversation_trace.jsonl"), FormatMooncake)
}

func BenchmarkReadMooncakeAuto(b *testing.B) {
	benchRead(b, "conversation_trace.jsonl", sharedBytes(b, "mooncake_fast25/conversation_trace.jsonl"), FormatAuto)
}

func BenchmarkReadKVSim(b *testing.B) {
	recs, hdr := conversationRecords(b)
	benchRead(b, "conversation.kvsim.jsonl", kvsimBytes(b, recs, hdr), FormatKVSim)
}

func BenchmarkReadKVSimTokens(b *testing.B) {
	recs, hdr := readTrace(b, "llmservingsim/sharegpt-llama-3.1-8b-300-sps10.jsonl")
	benchRead(b, "sharegpt.kvsim.jsonl", kvsimBytes(b, recs, hdr), FormatKVSim)
}

func BenchmarkReadBailian(b *testing.B) {
	recs, _ := conversationRecords(b)
	var buf bytes.Buffer
	for i, r := range recs {
		fmt.Fprintf(&buf, `{"chat_id": %d, "parent_chat_id": -1, "timestamp": %s, "input_length": %d, "output_length": %d, "type": "text", "turn": 1, "hash_ids": [`,
			i, fmtSec(r.Arrival), len(r.Blocks)*BailianBlockSize, r.OutputLen)
		for j, h := range r.Blocks {
			if j > 0 {
				buf.WriteString(", ")
			}
			fmt.Fprint(&buf, h)
		}
		buf.WriteString("]}\n")
	}
	benchRead(b, "conversation.bailian.jsonl", buf.Bytes(), FormatBailian)
}

func BenchmarkReadTokens(b *testing.B) {
	benchRead(b, "sharegpt.jsonl", sharedBytes(b, "llmservingsim/sharegpt-llama-3.1-8b-300-sps10.jsonl"), FormatTokens)
}

func BenchmarkReadAzure(b *testing.B) {
	benchRead(b, "conv.csv", sharedBytes(b, "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"), FormatAzure)
}

func BenchmarkReadWEKA(b *testing.B) {
	dir := testutil.SharedTrace(b, "weka_kv_cache_tester")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		b.Fatalf("no WEKA files in %s (%v)", dir, err)
	}
	size := int64(0)
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			b.Fatal(err)
		}
		size += st.Size()
	}
	benchOpen(b, size, func() (*Reader, error) { return OpenFiles(files, FormatWEKA) })
}
