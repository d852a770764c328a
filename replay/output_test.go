package replay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvsim/kvsim/internal/golden"
	"github.com/kvsim/kvsim/sim/engine"
)

func TestPrintTableGolden(t *testing.T) {
	h := 0.4567
	mc := 4
	s := Summary{
		Backend: "sglang", RequestRate: Rate(math.Inf(1)), MaxConcurrency: &mc,
		Serving: engine.Serving{
			Completed: 62, Duration: 12.3456,
			TotalInput: 4340000, TotalOutput: 12400, RequestThroughput: 5.02, InputThroughput: 351543.2, OutputThroughput: 1004.4,
			TotalThroughput: 352547.6, MeanTTFT: 812.5, MedianTTFT: 790.25, P90TTFT: 1200, P99TTFT: 1350.75,
			MeanTPOT: 12.5, MedianTPOT: 12.25, P90TPOT: 14, P99TPOT: 15.5, MeanITL: 12.4, MedianITL: 12, P90ITL: 13.9, P99ITL: 30.1,
			MeanE2E: 3300.5, MedianE2E: 3250, Concurrency: 3.98,
		},
		CacheHitRate: &h, Failed: 2,
		FailedReasons: map[string]int64{"timeout": 1, "http 503": 1}, MeanLateness: 0.0123, P99Lateness: 0.25, MeanQueueWait: 1500.5,
	}
	var b bytes.Buffer
	PrintTable(&b, TableHeader{Backend: "sglang", RequestRate: s.RequestRate, MaxConcurrency: 4}, &s)
	golden.Check(t, filepath.Join("testdata", "table.golden"), b.Bytes())
}

type nopSink struct{ last int }

func (s *nopSink) Chunk(_ time.Time, n int) { s.last = n }

// FuzzSSEStream feeds arbitrary streams to the event parser of both APIs:
// it must never panic, and a failure is always a *RequestError.
func FuzzSSEStream(f *testing.F) {
	f.Add([]byte("data: {\"text\":\"a\",\"meta_info\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"cached_tokens\":2,\"finish_reason\":null}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":\"length\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\ndata: [DONE]\n"))
	f.Add([]byte(": comment\nevent: x\ndata: {\"error\":{\"message\":\"boom\"}}\n"))
	f.Add([]byte("data: {\"text\":\"\",\"meta_info\":{\"finish_reason\":{\"type\":\"abort\",\"message\":\"m\"}}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, api := range []API{APISGLang, APIOpenAI, APIOpenAIChat} {
			st := streamState{api: api}
			resp := Response{CachedTokens: -1}
			err := st.read(context.Background(), bufio.NewReaderSize(bytes.NewReader(data), 16), WallClock{}, &nopSink{}, &resp)
			var re *RequestError
			if err != nil && !errors.As(err, &re) {
				t.Fatalf("%s: error %v is not a *RequestError", api, err)
			}
			// JSON keys match case-insensitively, so "finish_reAson" is a finish.
			if err == nil && !bytes.Contains(data, []byte("[DONE]")) && !strings.Contains(strings.ToLower(string(data)), "finish_reason") {
				t.Fatalf("%s: stream without [DONE] or finish accepted", api)
			}
		}
	})
}
