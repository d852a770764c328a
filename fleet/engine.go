package fleet

import (
	"errors"
	"fmt"

	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// Online is a fleet driven as one [engine.Engine]: whatever drives a
// single simulated server (kvsim serve, a replay's in-process target, a
// study) can drive a fleet behind its router. Submit queues a request;
// the router decides when the fleet's clock reaches its arrival, with
// every earlier completion known, exactly as [Fleet.Run] (which is the
// batch loop over an Online). Build it with [Fleet.Online].
type Online struct {
	r        *run
	finished bool
}

var _ engine.Engine = (*Online)(nil)

// Online starts the fleet as an engine at time 0. A fleet runs once:
// either Online or [Fleet.Run].
func (f *Fleet) Online() (*Online, error) { return f.online(true, false) }

// online starts the fleet as an engine; collect: RunUntil returns the
// replicas' events (false for [Fleet.Run], which reads none); closed: the
// records wait for their dependencies ([Fleet.RunClosedLoop]).
func (f *Fleet) online(collect, closed bool) (*Online, error) {
	if f.ran {
		return nil, errors.New("fleet: already run")
	}
	f.ran = true
	r := &run{
		f: f, collect: collect, stats: &f.stats, lastTok: make([]map[string]engine.Time, len(f.engines)),
		due: newDueTimes(len(f.engines)), area: make([]int64, len(f.engines)), l3Hit: make([]int64, len(f.engines)), maxIn: make([]int, len(f.engines)), open: make([]int, len(f.engines)), start: engine.Never,
	}
	for i, e := range f.engines {
		if f.gaps[i] {
			r.lastTok[i] = map[string]engine.Time{}
		} else if o, ok := e.(tokenOmitter); ok && !collect && f.pd == nil {
			o.OmitTokenEvents() // the batch loop reads none of its tokens
		}
		r.refresh(i)
	}
	if f.pd == nil {
		r.est = newEstimates(f.policy)
	} else {
		r.pd = &pdRun{run: r, pd: f.pd, reqs: map[string]*pdReq{}, orphans: map[string]*pdReq{}}
		f.pd.run = r.pd
	}
	if closed {
		r.loop = newClosedLoop()
	}
	return &Online{r: r}, nil
}

// tokenOmitter is a replica engine that can report its completions only,
// not its tokens (sim.Online).
type tokenOmitter interface{ OmitTokenEvents() }

// DropResults makes the fleet keep no per-request results (nor a
// disaggregated fleet's per-request TTFT parts), and every replica that can
// drop its own do so: Finish's Result has no Requests, its replicas none
// either; the summaries and counters are whole. A driver that reads each
// request's outcome from the events (a replay's in-process target, kvsim
// serve) calls it before the first Submit, so that memory follows the
// requests in flight, not the requests served.
func (o *Online) DropResults() {
	o.r.drop = true
	for _, e := range o.r.f.engines {
		if d, ok := e.(interface{ DropResults() }); ok {
			d.DropResults()
		}
	}
}

// Now returns the fleet's virtual time: the last t given to RunUntil.
func (o *Online) Now() engine.Time { return o.r.now }

// Submit queues rec for the router at rec.Arrival (not before Now nor
// the previous submission's arrival). It routes nothing yet: the router
// decides at the instant of the arrival, in [Online.RunUntil].
func (o *Online) Submit(rec traces.Record) error {
	r := o.r
	if o.finished {
		return errors.New("fleet: submit after Finish")
	}
	if err := engine.CheckSubmit(&rec, r.now, r.last); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	r.last = engine.Time(rec.Arrival)
	if r.loop != nil {
		r.loop.arrivals.Push(rec)
		return nil
	}
	r.pending.Push(rec)
	return nil
}

// Next returns the earliest of the next queued arrival and the replicas'
// next events.
func (o *Online) Next() (engine.Time, bool) { return o.r.nextInstant() }

// RunUntil runs every instant at or before t and sets the clock to t. At
// one instant the router acts first (its tree eviction if due, a load poll
// if due, then routing every arrival of that instant in submission order,
// each submitted at once to its replica); then the replicas with an event
// due run to that instant in index order, and their completions are
// finished at the router in the order reported, replica by replica. The
// events returned are the replicas' token and completion events in that
// order (so in non-decreasing Time); the slice is reused by the next call.
func (o *Online) RunUntil(t engine.Time) ([]engine.Event, error) {
	r := o.r
	if t < r.now {
		return nil, fmt.Errorf("fleet: RunUntil(%d ns) before the fleet's time %d ns", t, r.now)
	}
	r.evs = r.evs[:0]
	for {
		at, ok := r.nextInstant()
		if !ok || at > t {
			break
		}
		r.advance(at)
		if err := r.instant(); err != nil {
			return nil, err
		}
		r.checkInvariants()
	}
	r.accrue(t)
	return r.evs, nil
}

// Active returns the requests submitted and not yet finished: those still
// queued for the router (or held for their dependencies) and those in
// flight on a replica.
func (o *Online) Active() int {
	n := o.r.pending.Len()
	if c := o.r.loop; c != nil {
		n += c.arrivals.Len() + c.deps.Pending()
	}
	if o.r.pd != nil {
		return n + len(o.r.pd.reqs) // a request is in flight on both its replicas
	}
	for i := range o.r.f.engines {
		n += o.r.f.router.InFlight(i)
	}
	return n
}

// Router returns the fleet's router, for its counts while it runs (nil
// for a disaggregated fleet: see [Fleet.PD]).
func (o *Online) Router() *router.Router { return o.r.f.router }

// Routed returns the requests routed to replica i so far.
func (o *Online) Routed(i int) int64 {
	if pd := o.r.f.pd; pd != nil {
		return pd.routerOf(i).Routed(pd.pool[i])
	}
	return o.r.f.router.Routed(i)
}

// InFlight returns the router's in-flight count to replica i.
func (o *Online) InFlight(i int) int { return o.r.f.inFlight(i) }

// Decisions returns the router's decision counts so far by reason, in
// the order of router.Reasons, reasons never taken left out; a
// disaggregated fleet's are the prefill router's, then the decode
// router's, each reason prefixed with its pool ("prefill:cache_hit").
func (o *Online) Decisions() []DecisionCount {
	if pd := o.r.f.pd; pd != nil {
		return pdDecisions(pd.router)
	}
	return decisionCounts(o.r.f.router)
}

// decisionCounts are rt's decision counts by reason, in the order of
// router.Reasons, reasons never taken left out.
func decisionCounts(rt *router.Router) []DecisionCount { return appendDecisions(nil, "", rt) }

// pdDecisions are a disaggregated fleet's decision counts: the prefill
// router's, then the decode router's, each reason prefixed with its pool.
func pdDecisions(pd *router.PD) []DecisionCount {
	return appendDecisions(appendDecisions(nil, "prefill:", pd.Prefill), "decode:", pd.Decode)
}

// appendDecisions appends rt's decision counts by reason, in the order of
// router.Reasons, each reason prefixed with prefix, reasons never taken
// left out.
func appendDecisions(out []DecisionCount, prefix string, rt *router.Router) []DecisionCount {
	for _, why := range router.Reasons() {
		if c := rt.Count(why); c > 0 {
			out = append(out, DecisionCount{Reason: prefix + why.String(), Count: c})
		}
	}
	return out
}

// Replica returns replica i's engine (its state while the fleet runs;
// Finish is the fleet's to call).
func (o *Online) Replica(i int) engine.Engine { return o.r.f.engines[i] }

// Replicas returns the number of replicas.
func (o *Online) Replicas() int { return len(o.r.f.engines) }

// Group returns the group name of replica i.
func (o *Online) Group(i int) string { return o.r.f.replicas[i].Group }

// FinishFleet runs every remaining instant, finishes every replica and
// returns the fleet's results. The engine cannot be used afterwards.
func (o *Online) FinishFleet() (*Result, error) {
	if o.finished {
		return nil, errors.New("fleet: already finished")
	}
	r := o.r
	for {
		at, ok := r.nextInstant()
		if !ok {
			break // no arrival left and every replica idle: ticks and polls change nothing
		}
		if _, err := o.RunUntil(at); err != nil {
			return nil, err
		}
	}
	o.finished = true
	var res *Result
	var err error
	if r.pd != nil {
		defer func() { r.f.pd.run = nil }()
		if len(r.pd.reqs) > 0 {
			panic(fmt.Sprintf("fleet: %d disaggregated requests never finished", len(r.pd.reqs)))
		}
		res, err = r.pd.result() // pdrun.go
	} else {
		res, err = r.result()
	}
	if err == nil && r.loop != nil {
		r.loop.end(res.Replicas)
		res.IgnoredDeps = r.loop.deps.Ignored()
	}
	return res, err
}

// Finish runs every remaining instant and returns the fleet's results as
// one engine's: every request, the fleet's summary and the replicas'
// counters summed. [Online.FinishFleet] gives the per-replica results.
func (o *Online) Finish() (*engine.Result, error) {
	res, err := o.FinishFleet()
	if err != nil {
		return nil, err
	}
	return res.EngineResult(), nil
}

// Factory builds fleets of one configuration: the same replicas behind a
// router of the same Config and seed. It is an [engine.Factory], so a
// fleet can stand wherever one server's model does (kvsim serve).
type Factory struct {
	Replicas []Replica
	Router   router.Config
	Seed     uint64
	// PD, when not nil, makes the fleet disaggregated ([NewPD]): the
	// replicas' roles and transfer settings; Router is unused then.
	PD *PDFactory
	// OpenLoop makes Run and RunFleet release every record at its arrival
	// ([Fleet.Run]); otherwise they run closed loop
	// ([Fleet.RunClosedLoop]), as sim.Factory's Run. New's fleet (kvsim
	// serve) takes the requests as they come.
	OpenLoop bool
}

// PDFactory is what a disaggregated fleet adds to its replicas: the
// transfer settings and routers, and each replica's role and KV bytes per
// token (in the order of Factory.Replicas).
type PDFactory struct {
	Config          PDConfig
	Roles           []Role
	KVBytesPerToken []float64
}

// Build returns a fresh fleet, every replica's cache empty: [New], or
// [NewPD] for a disaggregated fleet.
func (fa Factory) Build() (*Fleet, error) {
	if fa.PD == nil {
		return New(fa.Replicas, fa.Router, fa.Seed)
	}
	if len(fa.PD.Roles) != len(fa.Replicas) || len(fa.PD.KVBytesPerToken) != len(fa.Replicas) {
		return nil, fmt.Errorf("fleet: %d replicas but %d roles and %d KV sizes", len(fa.Replicas), len(fa.PD.Roles), len(fa.PD.KVBytesPerToken))
	}
	reps := make([]PDReplica, len(fa.Replicas))
	for i, r := range fa.Replicas {
		reps[i] = PDReplica{Replica: r, Role: fa.PD.Roles[i], KVBytesPerToken: fa.PD.KVBytesPerToken[i]}
	}
	return NewPD(reps, fa.PD.Config, fa.Seed)
}

var _ engine.Factory = Factory{}

// Info describes the fleet as its first replica's server; Kind is
// "fleet".
func (fa Factory) Info() engine.Info {
	i := engine.Info{Kind: "fleet", Server: "kvsim-fleet"}
	if len(fa.Replicas) > 0 {
		i.PageSize = fa.Replicas[0].Factory.Info().PageSize
	}
	return i
}

// New returns a fresh fleet as an engine, every replica's cache empty.
func (fa Factory) New() (engine.Engine, error) {
	f, err := fa.Build()
	if err != nil {
		return nil, err
	}
	return f.Online()
}

// RunFleet runs a fresh fleet over src: [Fleet.Run] with OpenLoop, else
// [Fleet.RunClosedLoop].
func (fa Factory) RunFleet(src engine.Source) (*Result, error) {
	f, err := fa.Build()
	if err != nil {
		return nil, err
	}
	if fa.OpenLoop {
		return f.Run(src)
	}
	return f.RunClosedLoop(src)
}

// Run runs a fresh fleet over src ([Factory.RunFleet]) and returns its
// result as one engine's ([Result.EngineResult]).
func (fa Factory) Run(src engine.Source) (*engine.Result, error) {
	res, err := fa.RunFleet(src)
	if err != nil {
		return nil, err
	}
	return res.EngineResult(), nil
}

// Refuse returns why every replica refuses a prompt of input tokens
// outright (the first replica's reason; kvsim serve answers 400 with it),
// or "" when some replica's model would take it, or no model says (the
// replica the router picks then fails or serves it as its engine does).
func (fa Factory) Refuse(input int) string {
	why := ""
	for _, r := range fa.Replicas {
		rf, ok := r.Factory.(interface{ Refuse(input int) string })
		if !ok {
			return ""
		}
		w := rf.Refuse(input)
		if w == "" {
			return ""
		}
		if why == "" {
			why = w
		}
	}
	return why
}

// ServerInfo returns the first replica's /server_info fields, when its
// model has them (SGLang's), and kvsim_replicas, the fleet's size: a
// client that reads a server's arguments (page size, pool size) gets a
// replica's.
func (fa Factory) ServerInfo() map[string]any {
	out := map[string]any{"kvsim_replicas": len(fa.Replicas)}
	if len(fa.Replicas) == 0 {
		return out
	}
	if si, ok := fa.Replicas[0].Factory.(interface{ ServerInfo() map[string]any }); ok {
		for k, v := range si.ServerInfo() {
			out[k] = v
		}
	}
	return out
}
