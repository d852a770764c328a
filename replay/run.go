package replay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/kvsim/kvsim/internal/enum"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// Pacing modes of a replay.
type Pacing int

const (
	// PaceASAP sends every request at once, limited only by dependencies
	// and MaxConcurrency.
	PaceASAP Pacing = 1 + iota
	// PaceTimestamps sends each record at its trace Arrival divided by
	// Speedup (relative to the first record).
	PaceTimestamps
	// PaceRate sends records in trace order at seeded Poisson or uniform
	// arrivals of Rate requests/s.
	PaceRate
)

var pacingNames = enum.New[Pacing]("Pacing", "pacing", "asap", "timestamps", "rate")

// String returns the mode's name.
func (p Pacing) String() string { return pacingNames.String(p) }

// Arrival distributions of PaceRate (the names of traces.ArrivalPoisson
// and traces.ArrivalUniform).
const (
	DistPoisson = traces.ArrivalPoisson // exponential gaps of mean 1/Rate
	DistUniform = traces.ArrivalUniform // gaps uniform in [0, 2/Rate)
)

// Config configures a Replayer.
type Config struct {
	// Pacing is the arrival mode (default PaceASAP).
	Pacing Pacing
	// Rate is PaceRate's request rate in requests/s (> 0; +Inf means
	// PaceASAP).
	Rate float64
	// Distribution is DistPoisson (default) or DistUniform.
	Distribution string
	// Speedup divides trace times under PaceTimestamps, think times
	// included (> 0; default 1).
	Speedup float64
	// Seed seeds the arrival process of PaceRate.
	Seed uint64
	// MaxConcurrency caps the requests in flight (0: no cap). Requests
	// that are due while the cap is reached wait in arrival order.
	MaxConcurrency int
	// SendGap is the least time between two sends (0: none). Requests due
	// together then reach the server in the pacer's order (arrival order,
	// record order for ties) instead of the order in which its HTTP threads
	// happen to accept them; the simulated target applies the same gap.
	SendGap time.Duration
	// Timeout bounds each request from send to the end of its stream
	// (0: none). A request past it fails with reason "timeout".
	Timeout time.Duration
	// Drain is how long requests in flight may go on after the run's
	// context is cancelled (default 5 s); past it they fail as
	// "interrupted".
	Drain time.Duration
	// Vocab is the token range of synthesised prompts (hash-block and
	// length-only traces); default traces.DefaultVocab.
	Vocab traces.Vocab
	// DisableIgnoreEOS sends ignore_eos=false whatever the records say.
	DisableIgnoreEOS bool
}

// Default returns the default configuration: as fast as possible, no
// concurrency cap, no timeout, a 5 s drain.
func Default() Config {
	return Config{Pacing: PaceASAP, Speedup: 1, Distribution: DistPoisson, Drain: 5 * time.Second, Vocab: traces.DefaultVocab}
}

// Validate reports every problem of the configuration at once.
func (c *Config) Validate() error {
	var errs []error
	switch c.Pacing {
	case PaceASAP, PaceTimestamps:
	case PaceRate:
		if !(c.Rate > 0) {
			errs = append(errs, fmt.Errorf("rate: must be > 0 requests/s or inf (got %v)", c.Rate))
		}
	default:
		errs = append(errs, fmt.Errorf("pacing: must be asap, timestamps or rate (got %d)", int(c.Pacing)))
	}
	if c.Distribution != "" && c.Distribution != DistPoisson && c.Distribution != DistUniform {
		errs = append(errs, fmt.Errorf("distribution: must be poisson or uniform (got %q)", c.Distribution))
	}
	if !(c.Speedup > 0) || math.IsInf(c.Speedup, 1) {
		errs = append(errs, fmt.Errorf("speedup: must be a finite number > 0 (got %v)", c.Speedup))
	}
	if c.MaxConcurrency < 0 {
		errs = append(errs, fmt.Errorf("max-concurrency: must be >= 0 (got %d)", c.MaxConcurrency))
	}
	if c.SendGap < 0 {
		errs = append(errs, fmt.Errorf("send-gap: must be >= 0 (got %v)", c.SendGap))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout: must be >= 0 (got %v)", c.Timeout))
	}
	if c.Drain < 0 {
		errs = append(errs, fmt.Errorf("drain: must be >= 0 (got %v)", c.Drain))
	}
	errs = append(errs, c.Vocab.Validate()) // nil when valid: errors.Join drops it
	return errors.Join(errs...)
}

// Replayer sends trace records to a Target with a pacing and measures
// every request.
type Replayer struct {
	cfg    Config
	target Target
	clock  Clock
	eager  bool // the pacer reads every record first (tests)
}

// New returns a Replayer. clock is the time source of pacing and
// measurement (WallClock for real servers).
func New(cfg Config, target Target, clock Clock) (*Replayer, error) {
	if cfg.Vocab == (traces.Vocab{}) {
		cfg.Vocab = traces.DefaultVocab
	}
	if cfg.Pacing == 0 {
		cfg.Pacing = PaceASAP
	}
	if cfg.Pacing == PaceRate && math.IsInf(cfg.Rate, 1) {
		cfg.Pacing = PaceASAP
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if target == nil || clock == nil {
		return nil, errors.New("replay: New needs a target and a clock")
	}
	return &Replayer{cfg: cfg, target: target, clock: clock}, nil
}

// Result is the outcome of a run.
type Result struct {
	// Requests holds one entry per record, in record order.
	Requests []RequestResult
	// Start is the run's time origin (the times in Requests count from it).
	Start time.Time
	// Interrupted reports that the run's context was cancelled before
	// every request was sent and finished.
	Interrupted bool
}

// schedule returns each record's scheduled send time in ns from the run's
// start under cfg's pacing (see scheduler).
func schedule(cfg Config, recs []traces.Record) []int64 {
	out := make([]int64, len(recs))
	s := scheduler{cfg: cfg}
	for i := range recs {
		out[i] = s.at(i, &recs[i])
	}
	return out
}

// scheduler gives the records' scheduled send times one by one, in record
// order: 0 for PaceASAP; (Arrival - first Arrival) / Speedup for
// PaceTimestamps; for PaceRate the seeded arrival process in record order
// (the first at 0). Dependencies can only delay a request beyond its
// scheduled time.
type scheduler struct {
	cfg Config
	t0  int64      // the first record's Arrival (PaceTimestamps)
	rng *rand.Rand // PaceRate's arrival process, from the first record on
	t   float64    // PaceRate: the next arrival, in s
}

// at returns the scheduled time of record i, the next in record order.
func (s *scheduler) at(i int, rec *traces.Record) int64 {
	switch s.cfg.Pacing {
	case PaceTimestamps:
		if i == 0 {
			s.t0 = rec.Arrival
		}
		return int64(math.Round(float64(rec.Arrival-s.t0) / s.cfg.Speedup))
	case PaceRate:
		if math.IsInf(s.cfg.Rate, 1) {
			return 0
		}
		if s.rng == nil {
			s.rng = rand.New(rand.NewPCG(s.cfg.Seed, streamArrivals))
		}
		out := int64(math.Round(s.t * 1e9))
		if s.cfg.Distribution == DistUniform {
			s.t += s.rng.Float64() * 2 / s.cfg.Rate
		} else {
			s.t += s.rng.ExpFloat64() / s.cfg.Rate
		}
		return out
	}
	return 0
}

// streamArrivals is the PCG stream of the arrival process.
const streamArrivals = 0x6b76_7369_6d5f_6172 // "kvsim_ar"

// Run sends recs (in order; a record's Parent and WaitFor must name
// earlier records to be waited for, other names are ignored) and returns
// every request's measurements. A record is sent at its scheduled time
// (see schedule), or, if later, when its Parent and WaitFor have finished
// (succeeded or failed) and its Parent's finish plus its ThinkTime /
// Speedup has passed (think times count under PaceTimestamps only, and
// from the Parent only), and when a concurrency slot is free (the
// rules of the pacer, shared with the simulator's driver).
//
// With a *SimTarget, Run drives the simulator in virtual time instead (see
// SimTarget): the same pacing decisions, no goroutine, no clock, the same
// Result; the Replayer's clock is not used.
//
// When ctx is cancelled, Run sends nothing more, lets requests in flight
// go on for Config.Drain, then cancels them; it returns the partial
// Result with Interrupted set, and a nil error. A record whose prompt
// cannot be built fails alone with reason "bad record"; the returned error
// is non-nil only for repeated record IDs, found before anything is sent.
//
// Run is RunStream over recs, keeping every result.
func (r *Replayer) Run(ctx context.Context, recs []traces.Record) (*Result, error) {
	if err := uniqueIDs(recs); err != nil {
		return nil, err
	}
	res := newResult(recs)
	sr, err := r.RunStream(ctx, engine.NewSliceSource(recs), func(_ *traces.Record, rr *RequestResult) error {
		res.Requests[rr.Index] = *rr
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.Start, res.Interrupted = sr.Start, sr.Interrupted
	return res, nil
}

// uniqueIDs checks that record IDs are unique.
func uniqueIDs(recs []traces.Record) error {
	seen := make(map[string]bool, len(recs))
	for i := range recs {
		if seen[recs[i].ID] {
			return fmt.Errorf("record %d: id %q: expected unique ids, found a repeat", i, recs[i].ID)
		}
		seen[recs[i].ID] = true
	}
	return nil
}

// runWall is RunStream against a target on the wall clock: one dispatcher
// (this goroutine) owns the pacer and the run's state, starts a goroutine
// per granted request and learns of completions over done.
func (r *Replayer) runWall(ctx context.Context, p *pacer, st *runState) {
	// hard is cancelled Drain after ctx, and cancels requests in flight.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(r.cfg.Drain, cancelHard)
		context.AfterFunc(hard, func() { t.Stop() })
	})
	defer stop()

	start := r.clock.Now()
	st.start = start
	done := make(chan int, 64)
	flying := 0
	sl := sleeper{clock: r.clock}
	defer sl.stop()
	land := func(i int) {
		flying--
		e := p.entry(i)
		p.finish(i, e.rr.End)
		st.finished(e)
	}
	var woke, now int64
	for {
		now = max(int64(r.clock.Now().Sub(start)), woke, now)
		for _, g := range p.poll(now) {
			e := p.entry(g.idx)
			e.rr.Due, e.rr.Slot = g.due, g.slot
			st.granted(g.idx, now)
			flying++
			go func() {
				r.send(hard, &e.rec, &e.rr, start)
				done <- g.idx
			}()
		}
		st.emit(now, false)
		if p.allGranted() {
			break
		}
		var wake <-chan struct{}
		at, ok := p.nextWake()
		if ok {
			wake = sl.until(ctx, start.Add(time.Duration(at)))
		}
		select {
		case i := <-done:
			land(i)
			for more := true; more; {
				select {
				case i := <-done:
					land(i)
				default:
					more = false
				}
			}
		case <-wake:
			woke = at
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	for flying > 0 {
		land(<-done)
	}
	st.interrupted = ctx.Err() != nil
}

// newResult returns a Result with one unsent entry per record.
func newResult(recs []traces.Record) *Result {
	res := &Result{Requests: make([]RequestResult, len(recs))}
	for i := range recs {
		res.Requests[i] = RequestResult{Index: i, ID: recs[i].ID, Warmup: recs[i].Kind == "warmup", CachedTokens: -1}
	}
	return res
}

// sleeper turns Clock.SleepUntil into a channel that is closed at a given
// time, keeping one sleeping goroutine for as long as the time is the same.
type sleeper struct {
	clock  Clock
	at     time.Time
	ch     chan struct{}
	cancel context.CancelFunc
}

func (s *sleeper) until(ctx context.Context, t time.Time) <-chan struct{} {
	if s.ch != nil && s.at.Equal(t) {
		return s.ch
	}
	s.stop()
	c, cancel := context.WithCancel(ctx)
	ch := make(chan struct{})
	clock := s.clock
	go func() {
		if clock.SleepUntil(c, t) == nil {
			close(ch)
		}
	}()
	s.at, s.ch, s.cancel = t, ch, cancel
	return ch
}

func (s *sleeper) stop() {
	if s.cancel != nil {
		s.cancel()
		s.ch, s.cancel = nil, nil
	}
}

// send sends one record and fills rr.
func (r *Replayer) send(ctx context.Context, rec *traces.Record, rr *RequestResult, t0 time.Time) {
	req, err := requestFor(rec, r.cfg.Vocab, r.cfg.DisableIgnoreEOS)
	if err != nil {
		now := r.clock.Now()
		rr.Sent = true
		rr.Start, rr.End = int64(now.Sub(t0)), int64(now.Sub(t0))
		rr.Failed, rr.Detail = "bad record", err.Error()
		return
	}
	rr.PromptTokens = len(req.Tokens)
	if r.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.Timeout)
		defer cancel()
	}
	rec0 := recorder{}
	st := r.clock.Now()
	rec0.start = st
	rr.Sent = true
	rr.Start = int64(st.Sub(t0))
	resp, err := r.target.Submit(ctx, req, &rec0)
	fill(ctx, rr, &rec0, resp, err, t0, st)
}

// fill records a finished request.
func fill(ctx context.Context, rr *RequestResult, rc *recorder, resp Response, err error, t0, st time.Time) {
	end := resp.End
	if end.IsZero() || end.Before(st) {
		end = st
	}
	rr.End = int64(end.Sub(t0))
	rr.FirstToken = rr.Start // no output chunk: TTFT 0, as the benchmarks leave it
	if !rc.first.IsZero() {
		rr.FirstToken = int64(rc.first.Sub(t0))
	}
	rr.OutputTokens = rc.lastTokens
	if rc.first.IsZero() {
		rr.OutputTokens = resp.CompletionTokens
	}
	rr.ITL = rc.itl
	rr.ServerPromptTokens = resp.PromptTokens
	rr.CachedTokens = resp.CachedTokens
	rr.FinishReason = resp.FinishReason
	rr.OutputIDs = resp.OutputIDs
	rr.Retries = resp.Retries
	if err != nil {
		rr.Failed = Reason(err)
		var re *RequestError
		if rr.Failed == "canceled" {
			// Distinguish the per-request timeout from an interrupt.
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				rr.Failed = "timeout"
			} else {
				rr.Failed = "interrupted"
			}
		}
		rr.Detail = err.Error()
		if errors.As(err, &re) {
			rr.Detail = re.Detail
			if rr.Detail == "" && re.Err != nil {
				rr.Detail = re.Err.Error()
			}
		}
		rr.Detail = truncate(rr.Detail, 300)
		rr.ITL = nil
	}
}

func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
