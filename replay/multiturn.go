package replay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/kvsim/kvsim/traces"
)

// MultiTurnConfig configures the closed-loop multi-turn chat benchmark of
// SGLang's bench_multiturn.py.
type MultiTurnConfig struct {
	Clients     int // conversations (>= 1; bench default 256)
	MaxParallel int // requests in flight (>= 1; default 128)
	// RequestLength is the first prompt's length in tokens (>= 1; 512).
	RequestLength int
	// OutputLength is each turn's output in tokens (>= 1; 64).
	OutputLength int
	Rounds       int // turns per client (>= 1; 5)
	// SubQuestionLength is each later question's length; 0 means
	// RequestLength.
	SubQuestionLength int
	// Rate is the request rate in requests/s (> 0; +Inf sends without
	// gaps); Distribution is DistPoisson (default) or DistUniform.
	Rate         float64
	Distribution string
	// ReadyQueue is "random" (default) or "fifo": which pending turn the
	// sender picks next.
	ReadyQueue string
	Seed       uint64
	Vocab      traces.Vocab
	Timeout    time.Duration // per request (0: none)
	Drain      time.Duration // after cancellation (default 5 s)
}

// Validate reports every problem of the config at once.
func (c *MultiTurnConfig) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"num-clients", c.Clients}, {"max-parallel", c.MaxParallel}, {"request-length", c.RequestLength},
		{"output-length", c.OutputLength}, {"num-rounds", c.Rounds}} {
		if f.v < 1 {
			errs = append(errs, fmt.Errorf("%s: must be >= 1 (got %d)", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"num-clients", c.Clients}, {"request-length", c.RequestLength}, {"output-length", c.OutputLength}, {"num-rounds", c.Rounds}, {"sub-question-input-length", c.SubQuestionLength}} {
		if f.v > traces.MaxGenLength {
			errs = append(errs, fmt.Errorf("%s: must be at most %d (got %d)", f.name, traces.MaxGenLength, f.v))
		}
	}
	if c.SubQuestionLength < 0 {
		errs = append(errs, fmt.Errorf("sub-question-input-length: must be >= 0 (got %d)", c.SubQuestionLength))
	}
	if len(errs) == 0 {
		q := c.SubQuestionLength
		if q == 0 {
			q = c.RequestLength
		}
		n := float64(c.Clients) * traces.ChatTokens(c.Rounds, c.RequestLength, c.OutputLength+q)
		if err := traces.CheckGenTokens(n, "--num-clients, --num-rounds or the lengths"); err != nil {
			errs = append(errs, err)
		}
	}
	if !(c.Rate > 0) || (c.Rate > maxMultiTurnRate && !math.IsInf(c.Rate, 1)) {
		errs = append(errs, fmt.Errorf("request-rate: must be > 0 and at most %g, or inf for no gaps (got %v)", float64(maxMultiTurnRate), c.Rate))
	}
	if c.Distribution != "" && c.Distribution != DistPoisson && c.Distribution != DistUniform {
		errs = append(errs, fmt.Errorf("distribution: must be poisson or uniform (got %q)", c.Distribution))
	}
	if c.ReadyQueue != "" && c.ReadyQueue != "random" && c.ReadyQueue != "fifo" {
		errs = append(errs, fmt.Errorf("ready-queue-policy: must be random or fifo (got %q)", c.ReadyQueue))
	}
	errs = append(errs, c.Vocab.Validate()) // nil when valid: errors.Join drops it
	return errors.Join(errs...)
}

// MultiTurnResult is the outcome of a multi-turn run.
type MultiTurnResult struct {
	// Requests holds the results in completion order; Rounds[i] is the
	// 0-based round of Requests[i].
	Requests []RequestResult
	Rounds   []int
	// Records holds the requests as sent (prompts included), parallel to
	// Requests, for a per-request trace.
	Records []traces.Record
	// OutputIDsMissing counts turns whose next prompt had to use
	// synthetic output tokens because the target did not return the
	// generated ids (then the next turn cannot hit the previous output).
	OutputIDsMissing int
	Interrupted      bool
}

// maxMultiTurnRate bounds a finite request rate: the gaps are whole
// nanoseconds, and a sender with nothing to send draws a gap after gap
// until the next completion (in virtual time, one loop turn each).
const maxMultiTurnRate = 1e6

// Stream constants of the multi-turn prompts.
const (
	streamMTQuestion = 0x6b76_7369_6d5f_6d71 // "kvsim_mq"
	streamMTOutput   = 0x6b76_7369_6d5f_6d6f // "kvsim_mo"
	streamMTSender   = 0x6b76_7369_6d5f_6d73 // "kvsim_ms"
)

// MultiTurn runs the benchmark: every client starts with its own prompt of
// RequestLength tokens; after each response the client's history grows by
// the generated tokens (the target's output ids when it returns them) and
// a new question of SubQuestionLength tokens, and the next turn joins the
// ready queue. The sender loop, as in bench_multiturn.py: while fewer than
// MaxParallel requests are in flight, take a ready turn (random or FIFO)
// and send it, then wait an inter-arrival gap (Exp(Rate) or
// Uniform(0, 2/Rate)); at the cap it waits for a completion (the script
// polls every 50 ms). A failed request ends its client. Questions are
// drawn per (client, round), so the prompts do not depend on timing
// except through the server's outputs. On cancellation nothing more is
// sent and requests in flight get Drain to finish.
func MultiTurn(ctx context.Context, cfg MultiTurnConfig, target Target, clock Clock) (*MultiTurnResult, error) {
	st, err := newMultiTurnState(cfg)
	if err != nil {
		return nil, err
	}
	cfg = st.cfg
	rcfg := Default()
	rcfg.Timeout, rcfg.Vocab = cfg.Timeout, cfg.Vocab
	r, err := New(rcfg, target, clock)
	if err != nil {
		return nil, err
	}
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(cfg.Drain, cancelHard)
		context.AfterFunc(hard, func() { t.Stop() })
	})
	defer stop()

	var (
		mu        sync.Mutex
		sent      int
		completed int
		wake      = make(chan struct{}, 1)
		wg        sync.WaitGroup
	)
	start := clock.Now()
	handle := func(c int, rec traces.Record) {
		defer wg.Done()
		rr := RequestResult{ID: rec.ID, CachedTokens: -1}
		now := clock.Now()
		rr.Due, rr.Slot = int64(now.Sub(start)), int64(now.Sub(start))
		r.send(hard, &rec, &rr, start)
		mu.Lock()
		defer mu.Unlock()
		completed++
		st.done(c, rec, rr)
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	for ctx.Err() == nil {
		mu.Lock()
		if st.ended == cfg.Clients {
			mu.Unlock()
			break
		}
		if sent-completed >= cfg.MaxParallel {
			mu.Unlock()
			select {
			case <-wake:
			case <-ctx.Done():
			}
			continue
		}
		if c, rec, ok := st.take(); ok {
			sent++
			wg.Add(1)
			go handle(c, rec)
		}
		idle := len(st.ready) == 0
		gap, paced := st.gap()
		mu.Unlock()
		if paced {
			if clock.SleepUntil(ctx, clock.Now().Add(gap)) != nil {
				break
			}
		} else if idle {
			// Nothing ready: wait for a completion rather than spin.
			select {
			case <-wake:
			case <-ctx.Done():
			}
		}
	}
	wg.Wait()
	st.res.Interrupted = ctx.Err() != nil
	return st.res, nil
}

// multiTurnState is the benchmark's clients and sender, shared by the
// drivers in wall-clock time (MultiTurn) and in the simulator's virtual
// time (SimTarget.MultiTurn): which turn is sent next, what it carries,
// the gaps between sends, and what a completion does.
type multiTurnState struct {
	cfg     MultiTurnConfig
	sub     int // later questions' length
	clients []mtClient
	ready   []int // clients whose next turn waits to be sent
	ended   int   // clients done (all rounds, or failed)
	rng     *rand.Rand
	res     *MultiTurnResult
}

type mtClient struct {
	history []int32
	round   int
}

func newMultiTurnState(cfg MultiTurnConfig) (*multiTurnState, error) {
	if cfg.Vocab == (traces.Vocab{}) {
		cfg.Vocab = traces.DefaultVocab
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Drain == 0 {
		cfg.Drain = 5 * time.Second
	}
	s := &multiTurnState{cfg: cfg, sub: cfg.SubQuestionLength, clients: make([]mtClient, cfg.Clients), ready: make([]int, cfg.Clients),
		rng: rand.New(rand.NewPCG(cfg.Seed, streamMTSender)), res: &MultiTurnResult{}}
	if s.sub == 0 {
		s.sub = cfg.RequestLength
	}
	for i := range s.clients {
		s.clients[i].history = s.tokens(streamMTQuestion, i, 0, cfg.RequestLength)
		s.ready[i] = i
	}
	return s, nil
}

// tokens are n prompt or stand-in output tokens of a client's round.
func (s *multiTurnState) tokens(stream uint64, client, round, n int) []int32 {
	rng := rand.New(rand.NewPCG(s.cfg.Seed^uint64(client)<<20^uint64(round), stream))
	out := make([]int32, n)
	span := uint64(s.cfg.Vocab.Hi - s.cfg.Vocab.Lo)
	for i := range out {
		out[i] = s.cfg.Vocab.Lo + int32(rng.Uint64N(span))
	}
	return out
}

// take removes a ready turn (random or FIFO) and returns its client and
// record; false when none is ready.
func (s *multiTurnState) take() (int, traces.Record, bool) {
	if len(s.ready) == 0 {
		return 0, traces.Record{}, false
	}
	k := 0
	if s.cfg.ReadyQueue != "fifo" {
		k = s.rng.IntN(len(s.ready))
	}
	c := s.ready[k]
	s.ready = append(s.ready[:k], s.ready[k+1:]...)
	cl := &s.clients[c]
	rec := traces.Record{
		ID: "c" + strconv.Itoa(c) + "/" + strconv.Itoa(cl.round+1), Session: "c" + strconv.Itoa(c), Turn: cl.round + 1,
		InputLen: len(cl.history), Tokens: append([]int32(nil), cl.history...), OutputLen: s.cfg.OutputLength,
		Sampling: &traces.Sampling{IgnoreEOS: true},
	}
	if cl.round > 0 {
		rec.Parent = "c" + strconv.Itoa(c) + "/" + strconv.Itoa(cl.round)
	}
	return c, rec, true
}

// gap is the sender's pause after a send attempt; false without gaps
// (rate +Inf).
func (s *multiTurnState) gap() (time.Duration, bool) {
	if math.IsInf(s.cfg.Rate, 1) {
		return 0, false
	}
	g := s.rng.ExpFloat64() / s.cfg.Rate
	if s.cfg.Distribution == DistUniform {
		g = s.rng.Float64() * 2 / s.cfg.Rate
	}
	return time.Duration(g * 1e9), true
}

// done records client c's finished turn: a failure ends the client;
// otherwise its history grows by the output (the target's ids, or
// stand-ins when it returned none) and the next question, and its next
// turn is ready, unless that was its last round.
func (s *multiTurnState) done(c int, rec traces.Record, rr RequestResult) {
	cl := &s.clients[c]
	s.res.Requests = append(s.res.Requests, rr)
	s.res.Rounds = append(s.res.Rounds, cl.round)
	s.res.Records = append(s.res.Records, rec)
	if rr.Failed != "" {
		s.ended++
		return
	}
	out := rr.OutputIDs
	if len(out) != rr.OutputTokens || len(out) == 0 {
		s.res.OutputIDsMissing++
		out = s.tokens(streamMTOutput, c, cl.round, max(rr.OutputTokens, 1))
	}
	cl.round++
	if cl.round < s.cfg.Rounds {
		cl.history = append(cl.history, out...)
		cl.history = append(cl.history, s.tokens(streamMTQuestion, c, cl.round, s.sub)...)
		s.ready = append(s.ready, c)
	} else {
		s.ended++
		cl.history = nil
	}
}

// RoundStat summarises one round of a multi-turn run.
type RoundStat struct {
	Round     int      `json:"round"` // 1-based
	Requests  int      `json:"requests"`
	Failed    int      `json:"failed"`
	MeanTTFT  float64  `json:"mean_ttft_ms"`
	CacheHit  *float64 `json:"cache_hit_rate"` // cached / server prompt tokens; nil if not reported
	MeanInput float64  `json:"mean_prompt_tokens"`
}

// RoundStats returns per-round request counts, mean TTFT and cache hit
// rate (sum of cached_tokens over sum of prompt_tokens as the server
// reported them).
func RoundStats(res *MultiTurnResult) []RoundStat {
	n := 0
	for _, r := range res.Rounds {
		n = max(n, r+1)
	}
	out := make([]RoundStat, n)
	cached := make([]int64, n)
	prompt := make([]int64, n)
	ok := make([]int, n)
	for i := range res.Requests {
		rr := &res.Requests[i]
		k := res.Rounds[i]
		st := &out[k]
		st.Round = k + 1
		st.Requests++
		if rr.Failed != "" {
			st.Failed++
			continue
		}
		ok[k]++
		st.MeanTTFT += float64(rr.TTFT()) / 1e6
		st.MeanInput += float64(rr.PromptTokens)
		if rr.CachedTokens >= 0 && rr.ServerPromptTokens > 0 {
			cached[k] += int64(rr.CachedTokens)
			prompt[k] += int64(rr.ServerPromptTokens)
		}
	}
	for k := range out {
		out[k].Round = k + 1
		if ok[k] > 0 {
			out[k].MeanTTFT /= float64(ok[k])
			out[k].MeanInput /= float64(ok[k])
		}
		if prompt[k] > 0 {
			h := float64(cached[k]) / float64(prompt[k])
			out[k].CacheHit = &h
		}
	}
	return out
}
