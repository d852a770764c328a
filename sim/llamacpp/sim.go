package llamacpp

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// Stats counts the cache decisions of a run.
type Stats struct {
	// SlotBySimilarity and SlotByLRU count how requests got their slot.
	SlotBySimilarity int64 `json:"slot_by_similarity"`
	SlotByLRU        int64 `json:"slot_by_lru"`
	// FullHits counts prompts entirely in the slot (the last token was
	// re-evaluated anyway).
	FullHits int64 `json:"full_hits"`
	// RAMSaves counts slot states stored in the RAM cache; RAMSaveSkipped
	// those already there (a cached state had them as a prefix);
	// RAMObsolete cached states dropped because a new one extended them;
	// RAMTooLarge states larger than the whole cache.
	RAMSaves       int64 `json:"ram_saves"`
	RAMSaveSkipped int64 `json:"ram_save_skipped"`
	RAMObsolete    int64 `json:"ram_obsolete"`
	RAMTooLarge    int64 `json:"ram_too_large"`
	// RAMRestores counts states loaded back into a slot.
	RAMRestores int64 `json:"ram_restores"`
	// RAMEvictedTokens is the tokens of states removed for capacity.
	RAMEvictedTokens int64 `json:"ram_evicted_tokens"`
	// Calls counts llama_decode calls; MixedCalls those with both prompt
	// chunks and decode tokens.
	Calls      int64 `json:"calls"`
	MixedCalls int64 `json:"mixed_calls"`
	// RAMSaveBytes and RAMRestoreBytes are the slot state copied to and
	// from the RAM cache, RAMFreshBytes the saved bytes beyond the cache's
	// high-water mark (see [Copies]), and RAMCopyNs the server time
	// charged for the copies (see [StateCopier]).
	RAMSaveBytes    int64 `json:"ram_save_bytes"`
	RAMFreshBytes   int64 `json:"ram_fresh_bytes"`
	RAMRestoreBytes int64 `json:"ram_restore_bytes"`
	RAMCopyNs       int64 `json:"ram_copy_ns"`
	// AfterPromptNs is the time the decode-only calls took more for
	// following prompt calls (see [AfterPrompter]).
	AfterPromptNs int64 `json:"after_prompt_ns"`
}

// Sim simulates one llama-server. It is single-threaded and deterministic.
type Sim struct {
	cfg   Config
	cost  CostModel
	nctx  int
	now   engine.Time
	slots []*slot
	ram   *ramCache
	queue []*request // arrived, waiting for a free slot, in arrival order

	delay    engine.Time // from a request's arrival until the loop sees it (RequestDelayer)
	busy     bool
	batchEnd engine.Time
	parts    []part  // the call in flight; empty while copying states
	chunks   []Chunk // the call in flight, for the cost model
	copied   Copies  // state bytes copied by the launches of this server-loop turn
	// lastPrompt is the number (stats.Calls) of the last call in which a
	// prompt ended, 0 before any; ap gives a decode-only call's extra
	// after it (AfterPrompter).
	lastPrompt int64
	ap         AfterPrompter

	itl     *engine.Stats // where inter-token latencies go: &sum, or RecordInterTokenStats's
	src     engine.Source
	pending *traces.Record // the next record, not yet arrived
	srcDone bool
	lastArr engine.Time
	observe func(engine.Event)

	results  []engine.RequestResult // nil when streamed to sink
	sum      engine.Stats           // the summary's numbers, request by request
	sink     func(engine.RequestResult) error
	sinkErr  error // the first error sink returned
	counters engine.Counters
	stats    Stats
	active   int
	nextOut  int32             // next synthetic output id: negative, so it never matches a prompt
	slotOf   map[string]int    // the slot each request got, by ID (inspection; nil when streamed)
	copyOf   map[string]Copies // state bytes copied when each request started, by ID (inspection; nil when streamed)
}

// Copies counts slot state bytes copied to and from the RAM cache.
type Copies struct {
	// Saved is the bytes saved to the cache; Fresh those of them beyond
	// the cache's high-water mark (memory the server process touches for
	// the first time); Restored the bytes loaded back into a slot.
	Saved, Fresh, Restored int64
}

func (c Copies) minus(o Copies) Copies {
	return Copies{c.Saved - o.Saved, c.Fresh - o.Fresh, c.Restored - o.Restored}
}

type slot struct {
	id       int
	tokens   []int32     // the tokens whose KV the slot holds
	lastUsed engine.Time // release time; -1 before the first use
	req      *request    // nil when idle
}

type request struct {
	id        string
	prompt    []int32
	outputs   []int32 // known output ids (captured traces), or nil
	maxNew    int
	slot      *slot
	processed int  // prompt tokens in the slot's KV
	nOut      int  // tokens sampled
	restored  bool // the slot's tokens were restored from the RAM cache for it
	lastTok   engine.Time
	res       engine.RequestResult
}

// part is one slot's share of a llama_decode call: a prompt chunk of n
// tokens, or (n == 0) one decode token.
type part struct {
	r *request
	n int
}

// New returns a simulator of a llama-server configured by cfg.
func New(cfg Config, cost CostModel) (*Sim, error) {
	if cfg.Vocab == (traces.Vocab{}) {
		cfg.Vocab = traces.DefaultVocab
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cost == nil {
		return nil, errors.New("llamacpp: nil cost model")
	}
	s := &Sim{cfg: cfg, cost: cost, nctx: cfg.SlotContext(), nextOut: -1, slotOf: map[string]int{}, copyOf: map[string]Copies{}}
	for i := range cfg.Slots {
		s.slots = append(s.slots, &slot{id: i, lastUsed: -1})
	}
	s.itl = &s.sum
	s.ram = newRAMCache(cfg, &s.stats)
	if ap, ok := cost.(AfterPrompter); ok {
		s.ap = ap
	}
	if d, ok := cost.(RequestDelayer); ok {
		s.delay = engine.Time(d.RequestDelay())
	}
	return s, nil
}

// Stats returns the cache decision counts so far.
func (s *Sim) Stats() Stats { return s.stats }

// SlotTokens returns a copy of the tokens slot i holds (for tests and
// inspection).
func (s *Sim) SlotTokens(i int) []int32 { return append([]int32(nil), s.slots[i].tokens...) }

// SlotOf returns the slot request id was given, if it got one.
func (s *Sim) SlotOf(id string) (int, bool) {
	i, ok := s.slotOf[id]
	return i, ok
}

// CopyBytesOf returns the slot state bytes copied to and from the RAM cache
// when request id started (the saves and the restore its start caused), if
// it started.
func (s *Sim) CopyBytesOf(id string) (Copies, bool) {
	c, ok := s.copyOf[id]
	return c, ok
}

// Stream sends every finished request's result to sink, in completion
// order (the order of Result.Requests), instead of keeping it: Run's
// Result.Requests is then nil, and SlotOf and CopyBytesOf know nothing, so
// that memory follows the requests in flight, not the trace's length. The
// summary is the same either way (the simulator keeps a few numbers per
// request for it, see [engine.Stats]). The first error sink returns stops
// the run, and Run returns it. Call it before Run.
func (s *Sim) Stream(sink func(engine.RequestResult) error) {
	s.sink = sink
	s.slotOf, s.copyOf = nil, nil
}

// Run simulates the whole trace and returns the results.
func (s *Sim) Run(src engine.Source) (*engine.Result, error) {
	s.src = src
	if err := s.pull(); err != nil {
		return nil, err
	}
	for {
		ok, err := s.step(engine.Never)
		if err != nil {
			return nil, err
		}
		if s.sinkErr != nil {
			return nil, s.sinkErr
		}
		if !ok {
			break
		}
	}
	if s.active != 0 {
		panic(fmt.Sprintf("llamacpp: run ended with %d requests unfinished", s.active))
	}
	return s.result(), nil
}

// pull reads the next record into pending, checking the arrival order.
func (s *Sim) pull() error {
	if s.pending != nil || s.srcDone {
		return nil
	}
	rec, err := s.src.Next()
	switch {
	case errors.Is(err, engine.ErrNoneYet):
		return nil
	case errors.Is(err, io.EOF):
		s.srcDone = true
		return nil
	case err != nil:
		return err
	}
	if engine.Time(rec.Arrival) < s.lastArr {
		return fmt.Errorf("record %q arrives at %d ns, before the previous record (%d ns)", rec.ID, rec.Arrival, s.lastArr)
	}
	s.lastArr = engine.Time(rec.Arrival)
	s.pending = &rec
	return nil
}

// nextTime is the time of the next event, if any.
func (s *Sim) nextTime() (engine.Time, bool) {
	t, ok := engine.Never, false
	if s.busy {
		t, ok = s.batchEnd, true
	}
	if s.pending != nil && max(engine.Time(s.pending.Arrival)+s.delay, s.now) < t {
		t, ok = max(engine.Time(s.pending.Arrival)+s.delay, s.now), true
	}
	return t, ok
}

// step processes the next event if it is at or before limit. A call that
// ends at the same time as an arrival ends first.
func (s *Sim) step(limit engine.Time) (bool, error) {
	t, ok := s.nextTime()
	if !ok || t > limit {
		return false, nil
	}
	s.now = t
	if s.busy && s.batchEnd == t {
		s.endCall()
	}
	for s.pending != nil && engine.Time(s.pending.Arrival)+s.delay <= s.now {
		rec := s.pending
		s.pending = nil
		if err := s.arrive(rec); err != nil {
			return false, err
		}
		if err := s.pull(); err != nil {
			return false, err
		}
	}
	if !s.busy {
		s.iterate()
	}
	s.checkInvariants()
	return true, nil
}

// arrive turns a record into a queued request; prompts longer than a slot's
// context fail at once, as the server answers them HTTP 400.
func (s *Sim) arrive(rec *traces.Record) error {
	prompt, err := traces.PromptTokens(rec, s.cfg.Vocab)
	if err != nil {
		return err
	}
	r := &request{id: rec.ID, prompt: prompt, outputs: rec.OutputTokens, maxNew: max(rec.OutputLen, 1)}
	r.res = engine.RequestResult{ID: rec.ID, Arrival: engine.Time(rec.Arrival), PromptTokens: int64(len(prompt))}
	s.active++
	if len(prompt) > s.nctx {
		r.res.Failed = fmt.Sprintf("request (%d tokens) exceeds the available context size (%d tokens)", len(prompt), s.nctx)
		r.res.Admitted, r.res.FirstToken, r.res.Finish = s.now, s.now, s.now
		s.done(r)
		return nil
	}
	// Generation stops when the slot's context is full (no context shift).
	r.maxNew = min(r.maxNew, max(1, s.nctx-len(prompt)))
	s.queue = append(s.queue, r)
	return nil
}

// iterate is one turn of the server loop with no call in flight: start the
// queued tasks that find a slot, then build and run one llama_decode call.
// When the starts copied slot states to or from the RAM cache and the cost
// model charges for that, the server is busy copying first, and requests
// that arrive meanwhile start in the same turn, before the call is built:
// the server's loop takes every queued task before it runs a call.
func (s *Sim) iterate() {
	for len(s.queue) > 0 {
		before := s.copied
		sl := s.choose(s.queue[0])
		if sl == nil {
			break
		}
		s.launch(s.queue[0], sl)
		if s.copyOf != nil {
			s.copyOf[s.queue[0].id] = s.copied.minus(before)
		}
		s.queue = s.queue[1:]
	}
	s.parts = s.parts[:0]
	s.chunks = s.chunks[:0]
	if s.copied != (Copies{}) {
		s.stats.RAMSaveBytes += s.copied.Saved
		s.stats.RAMFreshBytes += s.copied.Fresh
		s.stats.RAMRestoreBytes += s.copied.Restored
		var d int64
		if c, ok := s.cost.(StateCopier); ok {
			d = c.CopyTime(s.copied)
		}
		s.copied = Copies{}
		if d > 0 {
			s.stats.RAMCopyNs += d
			s.busy = true
			s.batchEnd = s.now + engine.Time(d)
			return // a copy, not a call: endCall finds no parts
		}
	}
	tokens := 0
	for _, sl := range s.slots {
		if r := sl.req; r != nil && r.processed == len(r.prompt) {
			s.parts = append(s.parts, part{r: r})
			s.chunks = append(s.chunks, Chunk{Slot: sl.id, New: 1, Cached: int64(len(sl.tokens)), Decode: true})
			tokens++
		}
	}
	for _, sl := range s.slots {
		r := sl.req
		if r == nil || r.processed == len(r.prompt) {
			continue
		}
		n := min(len(r.prompt)-r.processed, s.cfg.Batch-tokens)
		if n <= 0 {
			break
		}
		s.parts = append(s.parts, part{r: r, n: n})
		s.chunks = append(s.chunks, Chunk{Slot: sl.id, New: int64(n), Cached: int64(r.processed)})
		tokens += n
	}
	if tokens == 0 {
		return
	}
	d := s.cost.CallTime(s.chunks, s.cfg.UbatchSize())
	s.stats.Calls++
	// The counters class the call as the cost does: a one-token chunk (a
	// full hit) is a decode token.
	prompt, decodes := 0, 0
	for _, ch := range s.chunks {
		if ch.decodeToken() {
			decodes++
		} else {
			prompt++
		}
	}
	switch {
	case prompt > 0 && decodes > 0:
		s.stats.MixedCalls++
		s.counters.PrefillBatches++
		s.counters.PrefillNs += d
	case prompt > 0:
		s.counters.PrefillBatches++
		s.counters.PrefillNs += d
	default:
		extra := s.afterPromptExtra()
		d += extra
		s.stats.AfterPromptNs += extra
		s.counters.DecodeSteps++
		s.counters.DecodeNs += d
	}
	s.busy = true
	s.batchEnd = s.now + engine.Time(d)
}

// choose is get_available_slot: the idle slot whose tokens share the
// longest prefix with the prompt, if that is more than the similarity
// threshold of the prompt; else the least recently released idle slot
// (never-used slots first, lowest id on ties). When the slot was chosen by
// LRU, or by similarity but would keep less than half of its tokens, its
// state goes to the RAM cache and a better cached state is restored into it.
func (s *Sim) choose(r *request) *slot {
	var ret *slot
	update := false
	if s.cfg.SlotPromptSimilarity != 0 {
		simBest, retLCP := float32(0), 0
		for _, sl := range s.slots {
			if sl.req != nil || len(sl.tokens) == 0 {
				continue
			}
			l := lcp(sl.tokens, r.prompt)
			sim := float32(l) / float32(len(r.prompt))
			if sim > simBest && sim > float32(s.cfg.SlotPromptSimilarity) {
				simBest, ret, retLCP = sim, sl, l
			}
		}
		if ret != nil {
			s.stats.SlotBySimilarity++
			if float32(retLCP)/float32(len(ret.tokens)) < 0.5 {
				update = true
			}
		}
	}
	if ret == nil {
		for _, sl := range s.slots {
			if sl.req == nil && (ret == nil || sl.lastUsed < ret.lastUsed) {
				ret = sl
			}
		}
		if ret == nil {
			return nil
		}
		s.stats.SlotByLRU++
		update = true
	}
	if update && s.ram != nil && len(ret.tokens) > 0 {
		s.saveState(ret.tokens)
		if toks, ok := s.ram.load(ret.tokens, r.prompt); ok {
			ret.tokens = toks
			r.restored = true
			s.copied.Restored += int64(len(toks)) * s.ram.perToken
		}
		s.ram.update()
	}
	return ret
}

// saveState saves a slot's tokens to the RAM cache and counts the copy.
func (s *Sim) saveState(toks []int32) {
	n, fresh := s.ram.save(toks)
	s.copied.Saved += n
	s.copied.Fresh += fresh
}

// launch gives the slot to the request, saves the idle slots to the RAM
// cache, and keeps the common prefix of the slot's tokens: the cached
// tokens, one fewer when the whole prompt is there (the last prompt token
// is always evaluated again, to get its logits).
func (s *Sim) launch(r *request, sl *slot) {
	sl.req = r
	r.slot = sl
	if s.slotOf != nil {
		s.slotOf[r.id] = sl.id
	}
	r.res.Admitted = s.now
	if s.ram != nil && !s.cfg.NoCacheIdleSlots {
		for _, o := range s.slots {
			if o.req == nil && len(o.tokens) > 0 {
				s.saveState(o.tokens)
				s.ram.update()
			}
		}
	}
	n := lcp(sl.tokens, r.prompt)
	if n == len(r.prompt) && n > 0 {
		n--
		s.stats.FullHits++
	}
	sl.tokens = sl.tokens[:n]
	r.processed = n
	r.res.CachedTokens = int64(n)
	if r.restored {
		r.res.CachedHost = int64(n)
	} else {
		r.res.CachedDevice = int64(n)
	}
}

// endCall applies the call that just ended: decode tokens enter the KV
// and each generating slot samples its next token; prompt chunks enter the
// KV and a finished prompt samples its first token.
func (s *Sim) endCall() {
	s.busy = false
	prompted := false // a prompt ended in this call
	for _, p := range s.parts {
		r := p.r
		sl := r.slot
		if p.n == 0 {
			sl.tokens = append(sl.tokens, s.outputID(r, r.nOut-1))
			r.nOut++
			if s.itl != nil {
				s.itl.AddITL(float64(s.now-r.lastTok) / 1e6)
			}
		} else {
			sl.tokens = append(sl.tokens, r.prompt[r.processed:r.processed+p.n]...)
			r.processed += p.n
			if r.processed < len(r.prompt) {
				continue
			}
			r.nOut = 1
			r.res.FirstToken = s.now
			prompted = true
		}
		r.lastTok = s.now
		if s.observe != nil {
			s.observe(engine.Event{ID: r.id, Time: s.now, Tokens: int64(r.nOut)})
		}
		if r.nOut == r.maxNew {
			sl.req = nil
			sl.lastUsed = s.now
			r.res.Finish = s.now
			r.res.OutputTokens = int64(r.nOut)
			s.counters.OutputTokens += int64(r.nOut)
			s.done(r)
		}
	}
	if prompted {
		s.lastPrompt = s.stats.Calls
	}
}

// MaxAfterPrompt is how many calls back a prompt call slows a decode-only
// call (AfterPrompter); replay's calibration looks back as far.
const MaxAfterPrompt = 48

// afterPromptExtra is the extra time of the decode-only call in s.chunks,
// call number s.stats.Calls, j calls after the last call in which a
// prompt ended: ns * decay^(j-1), ns and decay the cost's at the call's
// context. Only the last prompt call counts: on llama-server b11669 a
// decode step after two or three prompt calls in a row took no more than
// after one (calibration runs of run 61, medians: 1.90 ms after three in
// a row and 2.01 after one at 4000-6000 context tokens).
func (s *Sim) afterPromptExtra() int64 {
	j := s.stats.Calls - s.lastPrompt
	if s.ap == nil || s.lastPrompt == 0 || j > MaxAfterPrompt {
		return 0
	}
	ns, decay := s.ap.AfterPrompt(callContext(s.chunks))
	return int64(math.Round(ns * math.Pow(decay, float64(j-1))))
}

// outputID is the id of the request's i-th output token: the trace's when
// it has them, else a synthetic id that matches no prompt.
func (s *Sim) outputID(r *request, i int) int32 {
	if i < len(r.outputs) {
		return r.outputs[i]
	}
	id := s.nextOut
	s.nextOut--
	return id
}

func (s *Sim) done(r *request) {
	s.active--
	s.counters.Requests++
	if r.res.Failed != "" {
		s.counters.Failed++
	}
	s.sum.Add(r.res)
	switch {
	case s.sink == nil:
		s.results = append(s.results, r.res)
	case s.sinkErr == nil:
		s.sinkErr = s.sink(r.res)
	}
	if s.observe != nil {
		s.observe(engine.Event{ID: r.id, Time: s.now, Tokens: int64(r.nOut), Done: true, Result: r.res})
	}
}

func (s *Sim) result() *engine.Result {
	return &engine.Result{Requests: s.results, Summary: s.sum.Summary(), Counters: s.counters}
}

// checkInvariants panics when the state is impossible.
func (s *Sim) checkInvariants() {
	for _, sl := range s.slots {
		if len(sl.tokens) > s.nctx {
			panic(fmt.Sprintf("llamacpp: slot %d holds %d tokens, more than its context %d", sl.id, len(sl.tokens), s.nctx))
		}
		if r := sl.req; r != nil && (r.slot != sl || r.processed > len(r.prompt) || r.nOut > r.maxNew) {
			panic(fmt.Sprintf("llamacpp: slot %d request %q inconsistent", sl.id, r.id))
		}
	}
	if s.ram != nil && s.ram.limitBytes > 0 && len(s.ram.states) > 1 && s.ram.bytes > s.ram.limitBytes {
		panic(fmt.Sprintf("llamacpp: RAM cache holds %d bytes over its limit %d", s.ram.bytes, s.ram.limitBytes))
	}
}
