package sim

import (
	"strings"
	"testing"
)

// admissionError fails what SGLang rejects at the request level: a prompt
// of context_len tokens or more, a prompt and output reaching it, and a
// request larger than the KV pool.
func TestAdmissionError(t *testing.T) {
	cfg := Config{Cache: CacheConfig{DeviceTokens: 10000}, Scheduler: SchedulerConfig{ContextLen: 1024}}
	for _, c := range []struct {
		ctx, input, maxNew int64
		want               string
	}{
		{1024, 1000, 23, ""},
		{1024, 1024, 1, "prompt of 1024 tokens exceeds the model's context length of 1024 tokens"},
		{1024, 1100, 10, "prompt of 1100 tokens exceeds the model's context length of 1024 tokens"},
		{1024, 1000, 24, "prompt of 1000 tokens plus 24 output tokens exceeds the model's context length of 1024 tokens"},
		{0, 9000, 1000, ""},
		{0, 9000, 1001, "prompt of 9000 tokens plus 1001 output tokens exceeds the KV pool of 10000 tokens"},
		{1 << 20, 9000, 1001, "prompt of 9000 tokens plus 1001 output tokens exceeds the KV pool of 10000 tokens"},
	} {
		cfg.Scheduler.ContextLen = c.ctx
		got := admissionError(&cfg, 1, c.input, c.maxNew)
		if got != c.want {
			t.Errorf("admissionError(context_len %d, %d + %d) = %q, want %q", c.ctx, c.input, c.maxNew, got, c.want)
		}
		if got != "" && !strings.Contains(got, "exceeds") {
			t.Errorf("%q does not say exceeds (replay's server answers 400 on it)", got)
		}
	}
}
