package replay

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/llamacpp"
	"github.com/kvsim/kvsim/traces"
)

// OnlineSim is what a SimTarget needs of a simulated server: requests
// submitted while it runs, virtual time advanced on demand, token and
// completion events back. sim.Online (SGLang) and llamacpp.Online
// (llama-server) both have it; the pacing, measurement and timeouts of a
// replay are written once, over this interface.
type OnlineSim interface {
	// Now is the virtual time reached.
	Now() sim.Time
	// Submit queues a request arriving at rec.Arrival (>= Now()).
	Submit(rec traces.Record) error
	// Next is the time of the next pending event, if any.
	Next() (sim.Time, bool)
	// RunUntil processes the events up to t and returns them.
	RunUntil(t sim.Time) ([]sim.Event, error)
}

var (
	_ OnlineSim = (*sim.Online)(nil)
	_ OnlineSim = (*llamacpp.Online)(nil)
)

// SimConfig configures a SimTarget.
type SimConfig struct {
	// Sim and Cost are the simulated SGLang server (configs.File.Build
	// gives both). Ignored when Llama is set.
	Sim  sim.Config
	Cost sim.CostModel
	// Llama, when not nil, makes the target a simulated llama-server
	// (sim/llamacpp) with LlamaCost (configs.File.BuildLlama gives both).
	Llama     *llamacpp.Config
	LlamaCost llamacpp.CostModel
	// TraceOutputs makes a replayed record's OutputTokens, when it has at
	// least OutputLen of them, the ids the simulator generates (and
	// caches) for it, instead of [OutputTokens] of the prompt: the ids a
	// real server generated, recorded in the trace, so that a later turn
	// whose prompt contains them hits them as it did on the server.
	// Closed-loop Submit always uses [OutputTokens].
	TraceOutputs bool
	// Model is the model name the target reports (Info); may be empty.
	Model string
	// OutputVocab is the token range of generated output ids (default
	// traces.DefaultVocab). kvsim serve must use the same range for its
	// outputs to match the in-process target's.
	OutputVocab traces.Vocab
}

// SimTarget is the simulator as a replay target, in process. A
// [Replayer] whose target is a SimTarget runs the replay in virtual time:
// one goroutine, no clock, the pacer's decisions (schedule, dependencies,
// think times, concurrency slots) applied at simulated instants, and
// every request measured from the simulator's token events through the
// same recorder as an HTTP stream. The same records and configuration
// give byte-identical results.
//
// Like a server, the target keeps its cache from one Run to the next (a
// warm-up then the measured run), and Flush replaces the simulator with a
// fresh one (virtual time goes on). Generated output ids are a
// deterministic function of the prompt ([OutputTokens]) and are cached
// with it, so a client that echoes them in its next turn hits them, as it
// would on kvsim serve.
//
// Submit, which makes SimTarget a [Target] for callers that send requests
// one by one (kvsim bench multiturn), runs each request alone to
// completion; calls are serialised.
//
// Per-request timeouts (Config.Timeout) apply in virtual time: past its
// deadline a request fails as "timeout" and frees its slot, but the
// simulator, which has no abort, still serves it.
type SimTarget struct {
	cfg SimConfig

	mu   sync.Mutex
	o    OnlineSim
	base int64 // virtual time at which o started (flushes keep time going)
	seq  int64 // submissions, for unique simulator ids
}

var (
	_ Target    = (*SimTarget)(nil)
	_ Flusher   = (*SimTarget)(nil)
	_ Describer = (*SimTarget)(nil)
)

// NewSimTarget returns a simulator target.
func NewSimTarget(cfg SimConfig) (*SimTarget, error) {
	if cfg.OutputVocab == (traces.Vocab{}) {
		cfg.OutputVocab = traces.DefaultVocab
	}
	if err := cfg.OutputVocab.Validate(); err != nil {
		return nil, fmt.Errorf("output vocab: %w", err)
	}
	t := &SimTarget{cfg: cfg}
	o, err := t.newOnline()
	if err != nil {
		return nil, err
	}
	t.o = o
	return t, nil
}

// newOnline starts a fresh simulator of the configured server.
func (t *SimTarget) newOnline() (OnlineSim, error) {
	if t.cfg.Llama != nil {
		return llamacpp.NewOnline(*t.cfg.Llama, t.cfg.LlamaCost)
	}
	return sim.NewOnline(t.cfg.Sim, t.cfg.Cost)
}

// vtime maps a virtual time (ns) to the time.Time the measurements use.
func vtime(ns int64) time.Time { return time.Unix(0, ns).UTC() }

// Flush implements Flusher: the simulator is replaced by a fresh one, with
// an empty cache.
func (t *SimTarget) Flush(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, err := t.newOnline()
	if err != nil {
		return err
	}
	t.base += t.o.Now()
	t.o = o
	return nil
}

// Info implements Describer.
func (t *SimTarget) Info(context.Context) (Info, error) {
	if t.cfg.Llama != nil {
		return Info{Server: "kvsim-sim-llamacpp", Model: t.cfg.Model, PageSize: 1}, nil
	}
	return Info{Server: "kvsim-sim", Model: t.cfg.Model, PageSize: t.cfg.Sim.Cache.PageSize}, nil
}

// OutputTokens returns the n output ids kvsim's simulated servers generate
// for prompt: a deterministic function of the prompt (FNV-1a over its ids,
// then xorshift), drawn from v.
func OutputTokens(prompt []int32, n int, v traces.Vocab) []int32 {
	f := fnv.New64a()
	var b [4]byte
	for _, x := range prompt {
		b[0], b[1], b[2], b[3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
		f.Write(b[:])
	}
	h := f.Sum64() | 1
	span := uint64(v.Hi - v.Lo)
	out := make([]int32, n)
	for i := range out {
		h ^= h << 13
		h ^= h >> 7
		h ^= h << 17
		out[i] = v.Lo + int32(h%span)
	}
	return out
}

// simRecord is the simulator's record for a request: exact prompt and
// output ids, so that both are cached.
func simRecord(id string, at int64, req *Request, out []int32) traces.Record {
	return traces.Record{
		ID: id, Arrival: at, InputLen: len(req.Tokens), Tokens: req.Tokens,
		OutputLen: req.MaxNewTokens, OutputTokens: out,
	}
}

// simResponse is the response of a finished simulated request.
func simResponse(r *sim.RequestResult, out []int32, end time.Time) (Response, error) {
	resp := Response{
		PromptTokens: int(r.PromptTokens), CompletionTokens: int(r.OutputTokens),
		CachedTokens: int(r.CachedTokens), FinishReason: "length", End: end,
	}
	if r.Failed != "" {
		resp.FinishReason = "abort"
		return resp, &RequestError{Reason: "rejected", Detail: r.Failed}
	}
	resp.OutputIDs = out[:min(len(out), int(r.OutputTokens))]
	return resp, nil
}

// Submit implements Target: the request arrives at the simulator's
// current time and runs, alone, to completion.
func (t *SimTarget) Submit(ctx context.Context, req Request, sink Sink) (Response, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	id := fmt.Sprintf("s%d", t.seq)
	out := OutputTokens(req.Tokens, req.MaxNewTokens, t.cfg.OutputVocab)
	if err := t.o.Submit(simRecord(id, t.o.Now(), &req, out)); err != nil {
		return Response{CachedTokens: -1, End: vtime(t.base + t.o.Now())}, &RequestError{Reason: "rejected", Err: err}
	}
	for {
		if err := ctx.Err(); err != nil {
			return Response{CachedTokens: -1, End: vtime(t.base + t.o.Now())}, &RequestError{Reason: "canceled", Err: err}
		}
		next, ok := t.o.Next()
		if !ok {
			return Response{CachedTokens: -1}, &RequestError{Reason: "sim", Detail: "the simulator stopped before the request finished"}
		}
		evs, err := t.o.RunUntil(next)
		if err != nil {
			return Response{CachedTokens: -1}, &RequestError{Reason: "sim", Err: err}
		}
		for _, e := range evs {
			if e.ID != id {
				continue
			}
			if e.Done {
				return simResponse(&e.Result, out, vtime(t.base+e.Time))
			}
			sink.Chunk(vtime(t.base+e.Time), int(e.Tokens))
		}
	}
}

// outputs are the ids the simulator generates for a replayed record, and
// whether they are the trace's (the server's own).
func (t *SimTarget) outputs(rec *traces.Record, req *Request) ([]int32, bool) {
	if t.cfg.TraceOutputs && len(rec.OutputTokens) >= req.MaxNewTokens {
		return rec.OutputTokens[:req.MaxNewTokens], true
	}
	return OutputTokens(req.Tokens, req.MaxNewTokens, t.cfg.OutputVocab), false
}

// stream is what the simulated server streams of a request whose output
// ids are the server's own (fromTrace): a llama-server whose token text
// is not whole holds back tokens that leave an incomplete UTF-8 sequence
// (llamacpp.Stream). Nil when every token is streamed as it comes:
// synthetic ids carry no text to split.
func (t *SimTarget) stream(fromTrace bool) *llamacpp.Stream {
	if !fromTrace || t.cfg.Llama == nil || t.cfg.Llama.TokenText == llamacpp.TokenTextWhole {
		return nil
	}
	s, err := llamacpp.NewStream(t.cfg.Llama.TokenText)
	if err != nil {
		panic("replay: " + err.Error()) // the config was validated when the simulator was made
	}
	return s
}

// flight is a request in the simulator during a replay.
type flight struct {
	idx      int
	start    time.Time
	rc       recorder
	out      []int32
	stream   *llamacpp.Stream // nil: every token is streamed as it comes
	streamed int              // tokens given to stream
	sent     int              // chunks of text sent, with a stream
	deadline int64            // simulator time; 0: none
	gone     bool             // timed out: later events are ignored
}

// chunk reports whether the client receives the tokens of event e (the
// request's first e.Tokens tokens are out), and the count the client
// records with them: without a stream, every event and its tokens; with
// one, an event after which the server sends text, counted as the client
// of llama-server's OpenAI stream counts it (replay's SSE reader), one per
// chunk of text, so that tokens held back and sent together make one gap
// on both sides.
func (f *flight) chunk(e *sim.Event) (int, bool) {
	if f.stream == nil {
		return int(e.Tokens), true
	}
	send := false
	for ; f.streamed < int(e.Tokens) && f.streamed < len(f.out); f.streamed++ {
		send = f.stream.Add(f.out[f.streamed])
	}
	if send {
		f.sent++
	}
	return f.sent, send
}

// replay is Replayer.Run for the simulator: the pacer's decisions in
// virtual time. Simulator events and pacer wakes are processed in time
// order; at equal times the simulator's events (completions) come first,
// then the pacer's releases, then requests are submitted.
func (t *SimTarget) replay(ctx context.Context, cfg Config, recs []traces.Record) (*Result, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, err := newPacer(cfg, recs)
	if err != nil {
		return nil, err
	}
	res := newResult(recs)
	off := t.o.Now() // simulator time of the run's start
	start := vtime(t.base + off)
	res.Start = start
	abs := func(simT int64) time.Time { return vtime(t.base + simT) }
	flights := map[string]*flight{}
	var deadlines deadlineHeap
	now := int64(0) // ns since the run's start
	stopped := false
	for {
		if !stopped && ctx.Err() != nil {
			stopped = true // send nothing more; requests in flight finish
		}
		if !stopped {
			for _, g := range p.poll(now) {
				rr := &res.Requests[g.idx]
				rr.Due, rr.Slot, rr.Start, rr.Sent = g.due, g.slot, now, true
				req, err := requestFor(&recs[g.idx], cfg.Vocab, cfg.DisableIgnoreEOS)
				if err != nil {
					rr.End = now
					rr.Failed, rr.Detail = "bad record", truncate(err.Error(), 300)
					p.finish(g.idx, now)
					continue
				}
				rr.PromptTokens = len(req.Tokens)
				t.seq++
				id := fmt.Sprintf("s%d", t.seq)
				out, fromTrace := t.outputs(&recs[g.idx], &req)
				f := &flight{idx: g.idx, start: abs(off + now), out: out, stream: t.stream(fromTrace)}
				f.rc.start = f.start
				if cfg.Timeout > 0 {
					f.deadline = off + now + int64(cfg.Timeout)
					heap.Push(&deadlines, deadline{at: f.deadline, id: id})
				}
				if err := t.o.Submit(simRecord(id, off+now, &req, f.out)); err != nil {
					return nil, fmt.Errorf("record %q: %w", recs[g.idx].ID, err)
				}
				flights[id] = f
			}
		}
		// The next instant: a simulator event, a pacer wake or a deadline.
		next, ok := t.o.Next()
		if ok {
			next -= off
		}
		if w, wok := p.nextWake(); wok && !stopped && (!ok || w < next) {
			next, ok = w, true
		}
		if len(deadlines) > 0 && (!ok || deadlines[0].at-off < next) {
			next, ok = deadlines[0].at-off, true
		}
		if !ok {
			break
		}
		if stopped && len(flights) == 0 {
			break
		}
		evs, err := t.o.RunUntil(off + next)
		if err != nil {
			return nil, err
		}
		now = next
		for _, e := range evs {
			f := flights[e.ID]
			if f == nil {
				continue // a request of an earlier run, or timed out
			}
			if !e.Done {
				if n, ok := f.chunk(&e); ok {
					f.rc.Chunk(abs(e.Time), n)
				}
				continue
			}
			delete(flights, e.ID)
			rr := &res.Requests[f.idx]
			resp, err := simResponse(&e.Result, f.out, abs(e.Time))
			fill(context.Background(), rr, &f.rc, resp, err, start, f.start)
			p.finish(f.idx, rr.End)
		}
		for len(deadlines) > 0 && deadlines[0].at <= off+now {
			d := heap.Pop(&deadlines).(deadline)
			f := flights[d.id]
			if f == nil {
				continue
			}
			delete(flights, d.id)
			rr := &res.Requests[f.idx]
			resp := Response{CachedTokens: -1, End: abs(d.at)}
			fill(context.Background(), rr, &f.rc, resp, &RequestError{Reason: "timeout", Err: errors.New("past the per-request timeout in virtual time")}, start, f.start)
			p.finish(f.idx, rr.End)
		}
	}
	res.Interrupted = stopped
	return res, nil
}

type deadline struct {
	at int64
	id string
}

type deadlineHeap []deadline

func (h deadlineHeap) Len() int { return len(h) }
func (h deadlineHeap) Less(i, j int) bool {
	return h[i].at < h[j].at || (h[i].at == h[j].at && h[i].id < h[j].id)
}
func (h deadlineHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)   { *h = append(*h, x.(deadline)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	*h = old[:len(old)-1]
	return d
}
