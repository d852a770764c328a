package sim

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"

	"github.com/kvsim/kvsim/planner"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/traces"
	"github.com/kvsim/kvsim/tree"
)

// CostModel gives the GPU time of forward passes, in nanoseconds. The
// roofline and the fitted model of package hw implement it.
type CostModel interface {
	// PrefillTime is the time of one prefill forward over the batch.
	PrefillTime(batch []hw.Extend) int64
	// DecodeTime is the time of one decode step of batchSize requests whose
	// KV lengths add up to contextTokens.
	DecodeTime(batchSize int, contextTokens int64) int64
}

// Sim simulates one SGLang server replica with HiCache over a trace. It is
// single-threaded and deterministic: the same Config, cost model and trace
// give identical results.
type Sim struct {
	cfg     Config
	cost    CostModel
	tree    *tree.Tree
	pager   *tree.Pager
	planner *planner.Planner // nil unless the owner-lane planner is on
	rng     *rand.Rand
	lanes   int

	now    engine.Time
	events eventHeap
	seq    uint64

	src      engine.Source
	srcDone  bool
	sampling bool               // a timeline sample is scheduled
	sampleAt engine.Time        // when: an evSample at another time is stale
	sampled  engine.Time        // the last sample's time
	clockErr error              // set when an event's time would pass int64 ns
	observe  func(engine.Event) // online runs: reports tokens and completions
	noTokens bool               // observe gets completions only (OmitTokenEvents)
	itl      *engine.Stats      // where inter-token latencies go: &stats, or RecordInterTokenStats's
	pending  *traces.Record     // the next record, scheduled as an arrival
	deps     *DepTracker        // closed loop only (RunClosedLoop)
	nextIdx  int
	lastArr  engine.Time

	waiting   []*request
	running   []*request
	live      []*request // every request not finished, in any order (see addLive)
	chunked   *request
	batch     []*request // the forward in flight
	decode    bool       // the forward in flight is a decode step
	busy      bool
	batchFull bool
	ratio     float64 // new_token_ratio
	ratioMin  float64
	ratioDec  float64

	writeDone       []engine.Time // completion time of each in-flight write, FIFO (tree.Writes)
	d2hFree         engine.Time   // when the D2H link is next free
	loadDone        []engine.Time // completion time of each in-flight load (tree.Loads)
	h2dFree         engine.Time
	stall           engine.Time // write-back stall accrued while forming the current batch
	pendingLoad     int64       // tokens of load-back queued for the next forward
	seenWrittenBack int64       // tree.Stats().WrittenBack already charged
	nodeByID        map[tree.NodeID]*tree.Node
	st              *storageState // nil without a storage tier
	oracle          *oracle       // cache.eviction = "belady" only
	pd              *pdState      // prefill/decode disaggregation only (pd.go)

	results  []engine.RequestResult // nil when streamed to sink.Result
	stats    engine.Stats           // what the summary needs, request by request
	counters engine.Counters
	timeline []engine.Sample
	sink     Sink
	held     *engine.Sample // the last sample, held back while streaming
	sinkErr  error          // the first error a sink returned
	active   int            // requests arrived and not finished

	// scratch
	runBuf         []tree.PageRun
	keyBuf         []tree.PageRun // keyFor's result
	lanesA, lanesB []int64
	extends        []hw.Extend
	plannerNodes   []planner.Node
	deficits       []int64
}

// New returns a simulator for cfg with the given cost model.
func New(cfg Config, cost CostModel) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cost == nil {
		return nil, errors.New("sim: nil cost model")
	}
	cfg = cfg.withDefaults()
	t, err := tree.New(cfg.treeConfig())
	if err != nil {
		return nil, err
	}
	s := &Sim{
		cfg: cfg, cost: cost, tree: t, pager: tree.NewPager(cfg.Cache.PageSize),
		rng:   rand.New(rand.NewPCG(cfg.Seed, 0x6b7673696d)), // stream constant: "kvsim"
		lanes: cfg.Cache.CP,
	}
	s.itl = &s.stats
	if cfg.Cache.Planner == PlannerOwnerLane || (cfg.Cache.Planner == PlannerAuto && cfg.Cache.CP > 1 && cfg.Cache.Eviction != tree.Belady) {
		s.planner, err = planner.New(planner.Config{Lanes: cfg.Cache.CP})
		if err != nil {
			return nil, err
		}
	}
	sc := cfg.Scheduler
	init := math.Min(sc.InitNewTokenRatio*sc.ScheduleConservativeness, 1)
	s.ratio = init
	s.ratioMin = init * sc.MinNewTokenRatioFactor
	s.ratioDec = (init - s.ratioMin) / float64(sc.NewTokenRatioDecaySteps)
	if cfg.storageOn() {
		s.st = newStorageState(cfg)
	}
	s.lanesA = make([]int64, s.lanes)
	s.lanesB = make([]int64, s.lanes)
	s.deficits = make([]int64, s.lanes)
	s.forgetUnheld()
	return s, nil
}

// Tree exposes the cache for inspection (tests, timelines). Do not mutate it.
func (s *Sim) Tree() *tree.Tree { return s.tree }

// Run simulates the whole trace and returns the results.
func (s *Sim) Run(src engine.Source) (*engine.Result, error) {
	if s.cfg.Cache.Eviction == tree.Belady {
		var err error
		if src, err = s.readAhead(src); err != nil {
			return nil, err
		}
	}
	s.src = src
	if err := s.start(); err != nil {
		return nil, err
	}
	for len(s.events) > 0 {
		if err := s.processNext(); err != nil {
			return nil, err
		}
	}
	if s.active != 0 {
		panic(fmt.Sprintf("sim: run ended with %d requests unfinished", s.active))
	}
	res := s.finish()
	if s.sinkErr != nil {
		return nil, s.sinkErr
	}
	return res, nil
}

// RunClosedLoop simulates the trace closed-loop, as kvsim replay --target
// sim paces it: a record is released to the server when its Parent and
// WaitFor records (earlier ones) have finished in simulated time, and not
// before its Parent's finish plus its ThinkTime, nor before its Arrival
// (see DepTracker). RequestResult.Release and DepWait say when and how
// long after its arrival. A trace without dependencies runs as with Run.
// Record IDs must be unique.
func (s *Sim) RunClosedLoop(src engine.Source) (*engine.Result, error) {
	s.deps = NewDepTracker(func(at engine.Time) uint64 { s.schedule(at, evRelease); return s.seq })
	res, err := s.Run(src)
	if err == nil && s.deps.Pending() != 0 {
		panic(fmt.Sprintf("sim: closed-loop run ended with %d records held", s.deps.Pending()))
	}
	return res, err
}

// start schedules the first arrival.
func (s *Sim) start() error {
	return s.scheduleNextArrival()
}

// processNext runs the earliest pending event.
func (s *Sim) processNext() error {
	e := s.events.pop()
	if e.at < s.now {
		panic(fmt.Sprintf("sim: clock went back from %d to %d", s.now, e.at))
	}
	s.now = e.at
	var err error
	switch e.kind {
	case evArrival:
		err = s.arrive()
	case evRelease:
		err = s.admit(s.deps.Release())
		if err == nil && !s.busy {
			s.iterate()
		}
	case evForwardDone:
		s.forwardDone()
	case evWake:
		if !s.busy {
			s.iterate()
		}
	case evPD:
		s.pdEvent()
	case evSample:
		// Samples are taken every TimelineInterval while requests are in
		// the server, and once more when it has just emptied. The state
		// changes only at events, so when the next event is further away
		// than the interval the next sample waits for it: an idle gap or
		// an hour-long step costs one sample, and the timeline grows with
		// the events, never with the simulated span. The next arrival
		// starts sampling again. A sample is the state at the end of its
		// instant: while other events share it, it waits behind them, so
		// that when a record was submitted (a fleet's replica learns of an
		// arrival only at its instant) changes no sample; for the same
		// reason an event scheduled before a sample that waits for the next
		// event brings the sample forward (schedule).
		if s.now != s.sampleAt {
			break // stale: the sample was brought forward
		}
		// This is the one sample due; any other in the queue is stale
		// and must not stand for an event below.
		for len(s.events) > 0 && s.events[0].kind == evSample {
			s.events.pop()
		}
		if len(s.events) > 0 && s.events[0].at == s.now {
			s.schedule(s.now, evSample)
			break
		}
		s.sample()
		s.sampled = s.now
		if s.active > 0 {
			next := s.now + engine.Time(s.cfg.TimelineInterval)
			if len(s.events) > 0 && s.events[0].at > next {
				next = s.events[0].at
			}
			s.sampleAt = next
			s.schedule(next, evSample)
		} else {
			s.sampling = false
		}
	}
	if err != nil {
		return err
	}
	if s.clockErr != nil {
		return s.clockErr
	}
	if s.sinkErr != nil {
		return s.sinkErr
	}
	s.checkInvariants()
	return nil
}

// finish lands what is still in flight after the last request and returns
// the results.
func (s *Sim) finish() *engine.Result {
	// Copies still in flight land after the last request; acknowledge them
	// so the final state has no transient locks.
	if s.st != nil {
		s.ackBackups()
		for _, w := range s.tree.Writes() {
			s.backup(w.Node, false)
		}
	}
	s.tree.AckWrites(len(s.writeDone))
	s.tree.AckLoads(len(s.loadDone))
	s.writeDone, s.loadDone = nil, nil
	if s.st != nil {
		s.finishStorage()
	}
	if s.held != nil {
		s.emitSample(*s.held)
		s.held = nil
	}
	return s.result()
}

func (s *Sim) schedule(at engine.Time, kind eventKind) {
	if at < s.now || at == engine.Never {
		// Only a time past int64 nanoseconds (292 years) wraps below now
		// (or is saturated to its end, as a release after a huge delay is):
		// stop the run with an error rather than let the clock go back.
		if s.clockErr == nil {
			s.clockErr = fmt.Errorf("simulated time would pass %d ns (292 years) at %d ns: the trace spans too long or its steps are too slow", int64(math.MaxInt64), s.now)
		}
		at = engine.Never
	}
	s.seq++
	s.events.push(event{at: at, seq: s.seq, kind: kind})
	// A sample put off to the next event, which this one now precedes,
	// comes forward to where it would have been had the event been known
	// (evSample): a single server knows its arrivals in advance, a fleet's
	// replica only when they are submitted.
	if iv := engine.Time(s.cfg.TimelineInterval); kind != evSample && s.sampling && at < s.sampleAt && s.sampleAt > s.sampled+iv {
		s.sampleAt = max(s.sampled+iv, at)
		s.seq++
		s.events.push(event{at: s.sampleAt, seq: s.seq, kind: evSample})
	}
}

func (s *Sim) scheduleNextArrival() error {
	if s.srcDone {
		return nil
	}
	rec, err := s.src.Next()
	if err == engine.ErrNoneYet {
		s.pending = nil // online: more records may be submitted later
		return nil
	}
	if err == io.EOF {
		s.srcDone = true
		s.pending = nil
		return nil
	}
	if err != nil {
		return err
	}
	if engine.Time(rec.Arrival) < s.lastArr {
		return fmt.Errorf("request %q arrives at %d ns, before the previous request (%d ns): traces must be sorted by arrival", rec.ID, rec.Arrival, s.lastArr)
	}
	s.lastArr = engine.Time(rec.Arrival)
	s.pending = &rec
	s.schedule(engine.Time(rec.Arrival), evArrival)
	return nil
}

// arrive handles the pending record at its arrival time: it goes to the
// server now unless, closed-loop, it waits for its dependencies.
func (s *Sim) arrive() error {
	rec := s.pending
	if s.deps != nil {
		now, err := s.deps.Arrive(rec, s.now)
		if err != nil {
			return err
		}
		if !now {
			return s.scheduleNextArrival()
		}
	}
	if err := s.admit(rec); err != nil {
		return err
	}
	if err := s.scheduleNextArrival(); err != nil {
		return err
	}
	if !s.busy {
		s.iterate()
	}
	return nil
}

// admit hands a record to the server at s.now.
func (s *Sim) admit(rec *traces.Record) error {
	r := newRequest(rec, s.nextIdx, s.lanes)
	r.arrive = s.now
	if s.pd != nil && !s.pd.decode {
		r.maxNew = 1 // a prefill server computes the first token only
	}
	if s.deps != nil {
		r.res.Release, r.res.DepWait = s.now, s.now-engine.Time(rec.Arrival)
	}
	s.nextIdx++
	s.active++
	s.addLive(r)
	s.counters.Requests++
	if s.cfg.TimelineInterval > 0 && !s.sampling {
		s.sampling, s.sampleAt = true, s.now
		s.schedule(s.now, evSample)
	}
	// SGLang rejects a request longer than the model's context or than
	// the KV pool (admissionError); checking before paging also keeps an
	// absurd length in a trace from costing memory or time.
	if why := admissionError(&s.cfg, s.lanes, r.input, r.maxNew); why != "" {
		s.fail(r, why)
	} else {
		if s.pd == nil || !s.pd.decode || !s.cfg.Cache.Disable || s.st != nil {
			// (A decode server's chunk cache needs no page keys, unless
			// it offloads to storage.)
			if err := s.computePromptPages(r, rec); err != nil {
				return fmt.Errorf("request %q: %w", rec.ID, err)
			}
		}
		if s.pd != nil && s.pd.decode {
			s.pd.prealloc = append(s.pd.prealloc, r) // a decode server preallocates first
			return nil
		}
		s.waiting = append(s.waiting, r)
		if s.st != nil {
			s.prefetch(r)
		}
	}
	return nil
}

func (s *Sim) fail(r *request, why string) {
	if r.prefetch != nil {
		s.endPrefetch(r.prefetch, false)
		s.counters.PrefetchesCancelled++
	}
	r.res.Failed = why
	s.counters.Failed++
	s.finishBookkeeping(r)
}

// iterate runs one scheduler iteration at s.now on an idle GPU: process
// finished transfers, then prefill if a batch can be formed, else decode.
func (s *Sim) iterate() {
	s.checkHiCacheEvents()
	if len(s.running) == 0 {
		s.batchFull = false // SGLang starts an empty running batch afresh
	}
	if s.pd != nil && s.pdIterate() {
		return
	}
	if b := s.newPrefillBatch(); len(b) > 0 {
		s.launchPrefill(b)
		return
	}
	if len(s.running) > 0 {
		s.launchDecode()
		return
	}
	// Idle.
	if len(s.waiting) == 0 && s.chunked == nil {
		s.ratio = math.Min(s.cfg.Scheduler.InitNewTokenRatio*s.cfg.Scheduler.ScheduleConservativeness, 1)
		if t, ok := s.storageIdleWake(); ok {
			s.schedule(t, evWake)
		}
		return
	}
	// Requests wait but none could be admitted. If an in-flight copy still
	// pins memory, retry when it lands; otherwise the head can never run.
	if t, ok := s.nextTransferDone(); ok {
		s.schedule(max(t, s.now+1), evWake)
		return
	}
	if s.pd != nil && len(s.pd.inflight) > 0 {
		return // KVSent frees memory and iterates again
	}
	var r *request
	if s.chunked != nil {
		r, s.chunked = s.chunked, nil
		s.dropKV(r)
	} else {
		r = s.waiting[0]
		s.waiting = s.waiting[1:]
	}
	s.fail(r, "not enough KV memory to admit the request")
	s.schedule(s.now, evWake)
}

func (s *Sim) nextTransferDone() (engine.Time, bool) {
	best, ok := engine.Time(0), false
	if len(s.writeDone) > 0 {
		best, ok = s.writeDone[0], true
	}
	if len(s.loadDone) > 0 && (!ok || s.loadDone[0] < best) {
		best, ok = s.loadDone[0], true
	}
	if t, pok := s.prefetchWake(); pok && (!ok || t < best) {
		best, ok = t, true
	}
	return best, ok
}

// checkHiCacheEvents acknowledges finished copies in FIFO order, as
// SGLang's writing_check and loading_check do at the start of an iteration.
// With a storage tier it first drains the storage acks (landed backups
// release their host copies), and every acknowledged write-through is
// backed up to storage.
func (s *Sim) checkHiCacheEvents() {
	if s.st != nil {
		s.ackBackups()
	}
	k := 0
	for k < len(s.writeDone) && s.writeDone[k] <= s.now {
		k++
	}
	if k > 0 {
		if s.st != nil {
			for _, w := range s.tree.Writes()[:k] {
				s.backup(w.Node, false)
			}
		}
		s.tree.AckWrites(k)
		s.writeDone = s.writeDone[k:]
	}
	k = 0
	for k < len(s.loadDone) && s.loadDone[k] <= s.now {
		k++
	}
	if k > 0 {
		s.tree.AckLoads(k)
		s.loadDone = s.loadDone[k:]
	}
}

// trackWrites schedules the D2H copies the tree has queued since the last
// call, one after another on the rank's D2H link.
func (s *Sim) trackWrites() {
	ws := s.tree.Writes()
	for i := len(s.writeDone); i < len(ws); i++ {
		start := max(s.now, s.d2hFree)
		done := start + engine.Time(s.cfg.Links.D2HLatency) + s.bytesTime(maxLane(ws[i].Lanes), s.cfg.Links.D2HBandwidth)
		s.d2hFree = done
		s.writeDone = append(s.writeDone, done)
		s.counters.D2HBytes += s.bytes(ws[i].Tokens)
		s.counters.WriteThroughTokens += ws[i].Tokens
	}
}

func maxLane(lanes []int64) int64 {
	var m int64
	for _, v := range lanes {
		m = max(m, v)
	}
	return m
}

// bytesTime is the time to move tokens' KV (one lane's share: lanes move in
// parallel on their own links) at bw bytes/s.
func (s *Sim) bytesTime(tokens int64, bw float64) engine.Time {
	return engine.Time(math.Ceil(float64(tokens) * s.cfg.Links.KVBytesPerToken / bw * 1e9))
}

func (s *Sim) bytes(tokens int64) float64 { return float64(tokens) * s.cfg.Links.KVBytesPerToken }

// ---- Memory ----

// lanesOf returns (in dst, cleared first) the tokens each lane owns among
// positions [from, to) of a sequence.
func (s *Sim) lanesOf(from, to int64, dst []int64) []int64 {
	clear(dst)
	return s.tree.LaneTokens(from, to, dst)
}

func (s *Sim) freeTotal() int64 {
	var f int64
	for o := 0; o < s.lanes; o++ {
		f += s.tree.DeviceFree(o)
	}
	return f
}

// alloc takes device tokens for a request, evicting first if a lane is
// short, as SGLang's allocation helpers do. It reports success.
func (s *Sim) alloc(r *request, lanes []int64) bool {
	if !s.tree.Reserve(lanes) {
		s.evictFor(lanes)
		if !s.tree.Reserve(lanes) {
			return false
		}
	}
	for o, v := range lanes {
		r.held[o] += v
	}
	return true
}

// evictFor frees device memory for an allocation of lanes. SGLang's way
// evicts the full request size in strategy order when the pool is short;
// the owner-lane planner covers each lane's deficit exactly.
func (s *Sim) evictFor(lanes []int64) {
	if s.planner == nil {
		need := int64(0)
		for _, v := range lanes {
			need += v
		}
		s.applyEviction(s.tree.Evict(need))
		return
	}
	short := false
	for o, v := range lanes {
		s.deficits[o] = max(0, v-s.tree.DeviceFree(o))
		short = short || s.deficits[o] > 0
	}
	if !short {
		return
	}
	nodes := s.snapshotForPlanner()
	plan, err := s.planner.Plan(nodes, s.deficits)
	if err != nil {
		panic("sim: planner rejected the tree snapshot: " + err.Error())
	}
	s.counters.PlannerRuns++
	for _, id := range plan.Victims {
		n := s.nodeByID[tree.NodeID(id)]
		res, err := s.tree.EvictNode(n)
		if err != nil {
			panic("sim: planner victim: " + err.Error())
		}
		s.applyEviction(res)
	}
}

func (s *Sim) applyEviction(res tree.EvictResult) {
	if s.st != nil {
		s.drainWriteBacks()
	}
	if res.WrittenBack > 0 {
		s.counters.WriteBackTokens += res.WrittenBack
		s.counters.D2HBytes += s.bytes(res.WrittenBack)
		// Write-back blocks the scheduler until the copy is done.
		s.stall += engine.Time(s.cfg.Links.D2HLatency) + s.bytesTime(res.WrittenBack, s.cfg.Links.D2HBandwidth)
	}
}

// release gives back lanes of a request's held tokens.
func (s *Sim) release(r *request, lanes []int64) {
	s.tree.Release(lanes)
	for o, v := range lanes {
		r.held[o] -= v
		if r.held[o] < 0 {
			panic("sim: request holds negative tokens")
		}
	}
}
