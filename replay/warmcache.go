package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kvsim/kvsim/traces"
)

// WarmCacheConfig configures the exact shared-prefix sweep of SGLang's
// bench_warm_cache.py.
type WarmCacheConfig struct {
	TotalTokens    int   // prompt length in tokens (>= 1; bench default 70000)
	NumPrompts     int   // prompts per percentage (>= 1; default 64)
	OutputLen      int   // output tokens per prompt (>= 1; default 200)
	MaxConcurrency int   // requests in flight (>= 1; default 4)
	Pcts           []int // shared-prefix percentages, each in [0, 100]
	// Seed seeds the prompts. Percentage p uses the seed mixed with p, so
	// a percentage's prompts do not depend on the other percentages.
	Seed  uint64
	Vocab traces.Vocab
	// Timeout bounds each request (0: none).
	Timeout time.Duration
	// Settle is the pause after each flush (the bench sleeps 1 s).
	Settle           time.Duration
	DisableIgnoreEOS bool
	// Log receives the bench's progress lines (nil: discarded).
	Log io.Writer
}

func (c *WarmCacheConfig) gen() traces.WarmCacheConfig {
	return traces.WarmCacheConfig{TotalTokens: c.TotalTokens, Pcts: c.Pcts, NumPrompts: c.NumPrompts, OutputLength: c.OutputLen, Vocab: c.Vocab}
}

// Validate reports every problem of the config at once.
func (c *WarmCacheConfig) Validate() error {
	var errs []error
	g := c.gen()
	if err := g.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxConcurrency < 1 {
		errs = append(errs, fmt.Errorf("max-concurrency: must be >= 1 (got %d)", c.MaxConcurrency))
	}
	if c.Timeout < 0 || c.Settle < 0 {
		errs = append(errs, fmt.Errorf("timeout, settle: must be >= 0 (got %v, %v)", c.Timeout, c.Settle))
	}
	return errors.Join(errs...)
}

// WarmCacheRow is the outcome of one percentage.
type WarmCacheRow struct {
	Pct, PrefixLen, SuffixLen int
	Summary                   Summary
	// Records and Result are the measured prompts and their results.
	Records []traces.Record
	Result  *Result
}

// ErrAllFailed is returned when every request of a measured batch failed.
var ErrAllFailed = errors.New("all requests failed")

// WarmCache runs the sweep: for each percentage p it flushes the target's
// cache, waits Settle, builds NumPrompts prompts of TotalTokens exact
// token ids whose first TotalTokens*p/100 are shared
// (traces.GenerateWarmCache), sends the shared prefix alone once with 1
// output token (when it is not empty), then sends every prompt at once
// with at most MaxConcurrency in flight, and calls each with the row. It
// stops at the first error: a failed flush or warm-up, a batch whose
// requests all failed (after calling each), each's error, or ctx's
// cancellation (after calling each with the partial row).
func WarmCache(ctx context.Context, cfg WarmCacheConfig, target Target, clock Clock, each func(WarmCacheRow) error) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	fl, ok := target.(Flusher)
	if !ok {
		return fmt.Errorf("flush: %w", ErrNotSupported)
	}
	gen := cfg.gen()
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	rcfg := Default()
	rcfg.MaxConcurrency, rcfg.Timeout, rcfg.Vocab, rcfg.DisableIgnoreEOS = cfg.MaxConcurrency, cfg.Timeout, cfg.Vocab, cfg.DisableIgnoreEOS
	r, err := New(rcfg, target, clock)
	if err != nil {
		return err
	}
	for _, p := range cfg.Pcts {
		prefix := cfg.TotalTokens * p / 100
		row := WarmCacheRow{Pct: p, PrefixLen: prefix, SuffixLen: cfg.TotalTokens - prefix}
		fmt.Fprintf(log, "\n%s\nshared_prefix=%d%% prefix_len=%d suffix_len=%d total=%d\n%s\n",
			strings.Repeat("=", 70), p, prefix, row.SuffixLen, cfg.TotalTokens, strings.Repeat("=", 70))
		fmt.Fprintln(log, "Flushing KV cache ...")
		if err := fl.Flush(ctx); err != nil {
			return fmt.Errorf("pct %d: %w", p, err)
		}
		if err := clock.SleepUntil(ctx, clock.Now().Add(cfg.Settle)); err != nil {
			return err
		}
		fmt.Fprintf(log, "Building %d prompts ...\n", cfg.NumPrompts)
		g := gen
		g.Pcts, g.Seed = []int{p}, cfg.Seed^(uint64(p)*0x9e37_79b9_7f4a_7c15)
		recs, err := traces.GenerateWarmCache(g)
		if err != nil {
			return err
		}
		if prefix > 0 {
			fmt.Fprintf(log, "Warming shared prefix only (%d tokens) ...\n", prefix)
			warm, err := r.Run(ctx, recs[:1])
			if err != nil {
				return err
			}
			if w := warm.Requests[0]; !w.Sent || w.Failed != "" {
				return fmt.Errorf("pct %d: warm-up failed: %s %s", p, w.Failed, w.Detail)
			}
			recs = recs[1:]
		}
		for i := range recs {
			recs[i].Parent, recs[i].WaitFor = "", nil
		}
		fmt.Fprintf(log, "Sending requests (max_concurrency=%d) ...\n", cfg.MaxConcurrency)
		res, err := r.Run(ctx, recs)
		if err != nil {
			return err
		}
		row.Records, row.Result, row.Summary = recs, res, Summarize(res.Requests)
		if n := row.Summary.Failed; n > 0 {
			fmt.Fprintf(log, "WARNING: %d/%d requests failed\n", n, len(recs))
			shown := 0
			for _, rr := range res.Requests {
				if rr.Failed != "" && shown < 5 {
					fmt.Fprintf(log, "  %s\n", truncate(rr.Failed+": "+rr.Detail, 160))
					shown++
				}
			}
		}
		if err := each(row); err != nil {
			return err
		}
		if res.Interrupted {
			return ctx.Err()
		}
		if row.Summary.Completed == 0 {
			return fmt.Errorf("pct %d: %w", p, ErrAllFailed)
		}
	}
	return nil
}
