package replay

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// SimConfig configures a SimTarget.
type SimConfig struct {
	// Engine builds the simulated server (configs.File.BuildServer gives
	// it). The pacing, measurement and timeouts of a replay are written
	// once, over [engine.Engine]; what a model offers beyond it is found
	// through the small interfaces below (textStreamer, refuser).
	Engine engine.Factory
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
// fresh one (virtual time goes on). A Run ends at its last completion, as
// kvsim serve goes idle: the simulator's own work still pending (a backup
// to the storage tier) goes on in the next Run. Generated output ids are a
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
	o    engine.Engine
	base engine.Time // virtual time at which o started (flushes keep time going)
	seq  int64       // submissions, for unique simulator ids
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
func (t *SimTarget) newOnline() (engine.Engine, error) {
	if t.cfg.Engine == nil {
		return nil, errors.New("replay: simulator target without an engine")
	}
	return newEngine(t.cfg.Engine)
}

// newEngine starts a fresh engine of f for a driver that reads every
// request's outcome from the engine's events and never calls Finish (a
// replay, kvsim serve): an engine that can keep no per-request results,
// timeline or inter-token latencies of its own does not (see
// sim.Online.DropResults and RecordInterTokenStats), so that memory follows
// the requests in flight, not the requests served. The driver measures
// every request itself.
func newEngine(f engine.Factory) (engine.Engine, error) {
	e, err := f.New()
	if err != nil {
		return nil, err
	}
	if d, ok := e.(interface{ DropResults() }); ok {
		d.DropResults()
	}
	if d, ok := e.(interface{ RecordInterTokenStats(*engine.Stats) }); ok {
		d.RecordInterTokenStats(nil)
	}
	return e, nil
}

// vtime maps a virtual time (ns) to the time.Time the measurements use.
func vtime(ns engine.Time) time.Time { return time.Unix(0, int64(ns)).UTC() }

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
	i := t.cfg.Engine.Info()
	return Info{Server: i.Server, Model: t.cfg.Model, PageSize: i.PageSize}, nil
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
// output ids, so that both are cached, and the session, a fleet router's
// key (consistent_hash, nginx_hash), as an HTTP target sends it.
func simRecord(id string, at int64, req *Request, out []int32) traces.Record {
	return traces.Record{
		ID: id, Arrival: at, InputLen: len(req.Tokens), Tokens: req.Tokens,
		OutputLen: req.MaxNewTokens, OutputTokens: out, Session: req.Session,
	}
}

// simResponse is the response of a finished simulated request.
func simResponse(r *engine.RequestResult, out []int32, end time.Time) (Response, error) {
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
	if err := t.o.Submit(simRecord(id, int64(t.o.Now()), &req, out)); err != nil {
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

// textStreamer is an engine factory whose server streams text, not
// tokens (llamacpp.Factory): TextStream returns a function that takes each
// sampled id of a request and reports whether the server sends text now,
// or nil when every token is streamed as it comes.
type textStreamer interface {
	TextStream() func(id int32) bool
}

// stream is what the simulated server streams of a request whose output
// ids are the server's own (fromTrace): a llama-server whose token text
// is not whole holds back tokens that leave an incomplete UTF-8 sequence.
// Nil when every token is streamed as it comes: synthetic ids carry no
// text to split.
func (t *SimTarget) stream(fromTrace bool) func(id int32) bool {
	ts, ok := t.cfg.Engine.(textStreamer)
	if !fromTrace || !ok {
		return nil
	}
	return ts.TextStream()
}

// flight is a request in the simulator during a replay.
type flight struct {
	idx      int
	start    time.Time
	rc       recorder
	out      []int32
	stream   func(id int32) bool // nil: every token is streamed as it comes
	streamed int                 // tokens given to stream
	sent     int                 // chunks of text sent, with a stream
	deadline int64               // simulator time; 0: none
}

// chunk reports whether the client receives the tokens of event e (the
// request's first e.Tokens tokens are out), and the count the client
// records with them: without a stream, every event and its tokens; with
// one, an event after which the server sends text, counted as the client
// of llama-server's OpenAI stream counts it (replay's SSE reader), one per
// chunk of text, so that tokens held back and sent together make one gap
// on both sides.
func (f *flight) chunk(e *engine.Event) (int, bool) {
	if f.stream == nil {
		return int(e.Tokens), true
	}
	send := false
	for ; f.streamed < int(e.Tokens) && f.streamed < len(f.out); f.streamed++ {
		send = f.stream(f.out[f.streamed])
	}
	if send {
		f.sent++
	}
	return f.sent, send
}

// simRun is what a run in virtual time keeps, for Replayer.Run (replay)
// and the multi-turn benchmark (MultiTurn): the requests in flight by
// their simulator ids, their deadlines, and where the run starts on the
// simulator's clock. The caller holds t.mu.
type simRun struct {
	t         *SimTarget
	off       engine.Time // simulator time of the run's start
	start     time.Time   // the run's start, as measurements read it
	flights   map[string]*flight
	deadlines minHeap[deadline]
}

func (t *SimTarget) newRun() *simRun {
	off := t.o.Now()
	return &simRun{t: t, off: off, start: vtime(t.base + off), flights: map[string]*flight{}}
}

// abs maps a simulator time to the time.Time the measurements use.
func (r *simRun) abs(simT engine.Time) time.Time { return vtime(r.t.base + simT) }

// submit sends rec as req at now (ns since the run's start), with a
// deadline timeout later (0: none), and returns its flight.
func (r *simRun) submit(rec *traces.Record, req *Request, now int64, timeout time.Duration) (*flight, error) {
	t := r.t
	t.seq++
	id := fmt.Sprintf("s%d", t.seq)
	out, fromTrace := t.outputs(rec, req)
	f := &flight{start: r.abs(r.off + engine.Time(now)), out: out, stream: t.stream(fromTrace)}
	f.rc.start = f.start
	if timeout > 0 {
		f.deadline = int64(r.off) + now + int64(timeout)
		heap.Push(&r.deadlines, deadline{at: f.deadline, id: id})
	}
	if err := t.o.Submit(simRecord(id, int64(r.off)+now, req, f.out)); err != nil {
		return nil, err
	}
	r.flights[id] = f
	return f, nil
}

// next is the next instant (ns since the run's start) of a simulator event
// or a deadline, or wake when it comes first (wok).
func (r *simRun) next(wake int64, wok bool) (int64, bool) {
	t, ok := r.t.o.Next()
	var next int64
	if ok {
		next = int64(t - r.off)
	}
	if wok && (!ok || wake < next) {
		next, ok = wake, true
	}
	if len(r.deadlines) > 0 && (!ok || r.deadlines[0].at-int64(r.off) < next) {
		next, ok = r.deadlines[0].at-int64(r.off), true
	}
	return next, ok
}

// advance runs the simulator to next (ns since the run's start): the
// stream events of the requests in flight go to their recorders, and done
// gets each request that ended, in event order, then each whose deadline
// passed (it fails as "timeout"; the simulator, which has no abort, still
// serves it, and its later events are ignored).
func (r *simRun) advance(next int64, done func(f *flight, resp Response, err error)) error {
	evs, err := r.t.o.RunUntil(r.off + engine.Time(next))
	if err != nil {
		return err
	}
	for _, e := range evs {
		f := r.flights[e.ID]
		if f == nil {
			continue // a request of an earlier run, or timed out
		}
		if !e.Done {
			if n, ok := f.chunk(&e); ok {
				f.rc.Chunk(r.abs(e.Time), n)
			}
			continue
		}
		delete(r.flights, e.ID)
		resp, err := simResponse(&e.Result, f.out, r.abs(e.Time))
		done(f, resp, err)
	}
	for len(r.deadlines) > 0 && r.deadlines[0].at <= int64(r.off)+next {
		d := heap.Pop(&r.deadlines).(deadline)
		f := r.flights[d.id]
		if f == nil {
			continue
		}
		delete(r.flights, d.id)
		done(f, Response{CachedTokens: -1, End: r.abs(engine.Time(d.at))}, &RequestError{Reason: "timeout", Err: errors.New("past the per-request timeout in virtual time")})
	}
	return nil
}

// replay is Replayer.RunStream for the simulator: the pacer's decisions
// in virtual time. Simulator events and pacer wakes are processed in time
// order; at equal times the simulator's events (completions) come first,
// then the pacer's releases, then requests are submitted. It returns an
// error of the simulator (the pacer's own are in p.err).
func (t *SimTarget) replay(ctx context.Context, cfg Config, p *pacer, st *runState) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	run := t.newRun()
	st.start = run.start
	now := int64(0) // ns since the run's start
	stopped := false
	for {
		if !stopped && ctx.Err() != nil {
			stopped = true // send nothing more; requests in flight finish
		}
		if !stopped {
			if err := t.submitGranted(p, st, run, cfg, now); err != nil {
				return err
			}
			if p.err != nil {
				return nil
			}
		}
		st.emit(now, false)
		// The next instant: a simulator event, a pacer wake or a deadline.
		w, wok := p.nextWake()
		if len(run.flights) == 0 && (stopped || !wok) {
			// Nothing in flight and nothing more to send: the run ends
			// at its last completion, as kvsim serve goes idle then.
			// The simulator's own work still pending (a backup to the
			// storage tier, a write-through) is left for the next run,
			// which a client sends at once after this one (the measured
			// run after the warm-up): running it here would have the
			// next run start later, on a cache a server would not have.
			break
		}
		next, ok := run.next(w, wok && !stopped)
		if !ok {
			break
		}
		now = next
		err := run.advance(next, func(f *flight, resp Response, err error) {
			e := p.entry(f.idx)
			fill(context.Background(), &e.rr, &f.rc, resp, err, run.start, f.start)
			p.finish(f.idx, e.rr.End)
			st.finished(e)
		})
		if err != nil {
			return err
		}
	}
	st.interrupted = stopped
	return nil
}

// submitGranted submits to the simulator the records the pacer grants at
// now; a record whose prompt cannot be built fails at once.
func (t *SimTarget) submitGranted(p *pacer, st *runState, run *simRun, cfg Config, now int64) error {
	for _, g := range p.poll(now) {
		e := p.entry(g.idx)
		rr := &e.rr
		rr.Due, rr.Slot, rr.Start, rr.Sent = g.due, g.slot, now, true
		st.granted(g.idx, now)
		req, err := requestFor(&e.rec, cfg.Vocab, cfg.DisableIgnoreEOS)
		if err != nil {
			rr.End = now
			rr.Failed, rr.Detail = "bad record", truncate(err.Error(), 300)
			p.finish(g.idx, now)
			st.finished(e)
			continue
		}
		rr.PromptTokens = len(req.Tokens)
		f, err := run.submit(&e.rec, &req, now, cfg.Timeout)
		if err != nil {
			return fmt.Errorf("record %q: %w", e.rec.ID, err)
		}
		f.idx = g.idx
	}
	return nil
}

type deadline struct {
	at int64
	id string
}

func (d deadline) before(o deadline) bool { return d.at < o.at || (d.at == o.at && d.id < o.id) }
