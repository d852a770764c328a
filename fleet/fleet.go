package fleet

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// Replica is one server of a fleet: the factory that builds its engine and
// the name of the replica group it belongs to (for reports).
type Replica struct {
	Group   string
	Factory engine.Factory
	// SharedL3 is the namespace of the shared L3 store the replica uses
	// (storage.shared; configs' L3Namespace): replicas of one namespace and
	// page size share one store (fleet/sharedl3.go). "" (default): the
	// replica's own storage tier, if any.
	SharedL3 string
}

// Fleet is N engines behind a router, on one event loop and one virtual
// clock. Build it with [New] and run it once with [Fleet.Run].
type Fleet struct {
	replicas []Replica
	engines  []engine.Engine
	router   *router.Router
	policy   router.Policy
	poll     loadPoll // the router's load snapshots (poll.go)
	ran      bool
	pd       *pdFleet // prefill/decode disaggregation (pd.go); router is nil then
	l3       sharedL3s
	kv       *kvIndex // kv_aware's and cache_aware_oracle's view of the replicas' caches (kvindex.go); nil otherwise
	// stats is the fleet's summary, accumulated as requests finish and
	// tokens stream: the replicas record their inter-token latencies in
	// it themselves (newReplica). gaps[i]: replica i's engine cannot, and
	// the fleet computes its latencies from its token events.
	stats engine.Stats
	gaps  []bool
}

// New builds a fleet of the replicas behind a router of cfg. seed seeds
// the router's own random stream (random, power_of_two, keyless
// consistent_hash). kv_aware's and cache_aware_oracle's cache oracle is an
// index of the replicas' KV events (kvindex.go): every replica must be a
// SGLang simulator, all of one page size.
func New(replicas []Replica, cfg router.Config, seed uint64) (*Fleet, error) {
	if len(replicas) == 0 {
		return nil, errors.New("fleet: no replica")
	}
	deps := router.Deps{Rand: rand.New(rand.NewPCG(seed, 0x666c656574))} // "fleet"
	var kv *kvIndex
	if cfg.Policy == router.KVAware || cfg.Policy == router.CacheAwareOracle {
		var err error
		if kv, err = newKVIndex(cfg, replicas, nil, "router.policy", "replica"); err != nil {
			return nil, err
		}
		deps.Oracle = kv
	}
	rt, err := router.New(cfg, len(replicas), deps)
	if err != nil {
		return nil, err
	}
	f := &Fleet{replicas: replicas, router: rt, policy: cfg.Policy, poll: newLoadPoll(cfg), kv: kv}
	if kv != nil {
		f.l3.pager = kv.pager
	}
	for i, r := range replicas {
		e, err := f.newReplica(i, r, &f.stats)
		if err == nil && kv != nil {
			err = kv.attach(i, e)
		}
		if err != nil {
			return nil, fmt.Errorf("fleet: replica %d (%s): %w", i, r.Group, err)
		}
		f.engines = append(f.engines, e)
	}
	return f, nil
}

// itlRecorder is a replica engine that can record its inter-token
// latencies in another summary than its own (both server models).
type itlRecorder interface {
	RecordInterTokenStats(st *engine.Stats)
}

// newReplica builds replica i's engine (attached to its shared L3 store
// when it has one) recording its inter-token latencies in itl (the fleet's
// summary; nil: nowhere) rather than its own summary, when it can: the
// fleet reports no replica's, and a replica has each request's last token
// at hand where the fleet would look it up. Replicas record as their
// token events are reported, replica by replica at an instant, so the
// fleet's summary gets the latencies in the order of those events.
// Otherwise the fleet computes them from the replica's token events.
func (f *Fleet) newReplica(i int, r Replica, itl *engine.Stats) (engine.Engine, error) {
	e, err := f.l3.newEngine(i, r)
	if err != nil {
		return nil, err
	}
	rec, ok := e.(itlRecorder)
	if ok {
		rec.RecordInterTokenStats(itl)
	}
	f.gaps = append(f.gaps, !ok && itl != nil)
	return e, nil
}

// Router returns the fleet's router, for its counts after a run (nil for
// a disaggregated fleet: see [Fleet.PD]).
func (f *Fleet) Router() *router.Router { return f.router }

// PD returns a disaggregated fleet's prefill and decode routers (nil for
// a regular fleet).
func (f *Fleet) PD() *router.PD {
	if f.pd == nil {
		return nil
	}
	return f.pd.router
}

// routeReq is what the router sees of rec: its token ids, else its block
// hashes and block size (the approximate tree's key), its session
// (consistent_hash's key) and its length.
func routeReq(rec *traces.Record) router.Request {
	req := router.Request{Session: rec.Session, Len: rec.InputLen}
	if len(rec.Tokens) > 0 {
		req.Tokens = rec.Tokens
	} else {
		req.Blocks, req.BlockSize = rec.Blocks, rec.BlockSize
	}
	return req
}

// Run routes and simulates every record of src, open loop (each request
// reaches the router at its arrival; dependencies between records are not
// waited for), and returns the fleet's results. It is the batch loop over
// the fleet as an engine ([Online]): each record is submitted once every
// instant before its arrival has run, so the router decides with every
// earlier completion known, and [Online.RunUntil] takes the instants in
// order (see there for what happens at one).
func (f *Fleet) Run(src engine.Source) (*Result, error) { return f.runSource(src, false) }

// RunClosedLoop is [Fleet.Run] closed loop, as a single server's
// [sim.Sim.RunClosedLoop]: a record reaches the router when its Parent
// and WaitFor records (earlier ones) have finished, on whichever replica,
// and not before its Parent's finish plus its ThinkTime, nor before its
// Arrival. RequestResult.Release and DepWait say when and how long after
// its arrival; the router and the replica see it arriving at its release.
// At one instant, the records arriving and the records due go to the
// router in the order a single server would take them (closedloop.go).
// A trace without dependencies runs as with Run, Release set. Record IDs
// must be unique.
func (f *Fleet) RunClosedLoop(src engine.Source) (*Result, error) { return f.runSource(src, true) }

func (f *Fleet) runSource(src engine.Source, closed bool) (*Result, error) {
	o, err := f.online(false, closed)
	if err != nil {
		return nil, err
	}
	var prev traces.Record
	for first := true; ; first = false {
		rec, err := src.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if !first && rec.Arrival < prev.Arrival {
			return nil, fmt.Errorf("fleet: request %q arrives at %d ns, before the previous one (%d ns)", rec.ID, rec.Arrival, prev.Arrival)
		}
		prev = rec
		if t := engine.Time(rec.Arrival); t > o.Now() {
			if _, err := o.RunUntil(t - 1); err != nil {
				return nil, err
			}
		}
		if err := o.Submit(rec); err != nil {
			return nil, err
		}
	}
	return o.FinishFleet()
}

// run is the state of the fleet as an engine: the requests submitted and
// not yet routed, the clock, and what the results are built from.
type run struct {
	f       *Fleet
	pending engine.Queue // submitted, not yet routed, by arrival
	last    engine.Time  // the latest submission's arrival
	// collect: RunUntil returns the replicas' events in evs ([Online]);
	// false in [Fleet.Run]'s batch loop, which reads none of them.
	collect  bool
	evs      []engine.Event // the events of the current RunUntil
	requests []engine.RequestResult
	replica  []int
	drop     bool          // keep no requests nor replica indexes ([Online.DropResults])
	l3Hit    []int64       // prompt tokens each replica's requests took from storage
	stats    *engine.Stats // the fleet's summary (Fleet.stats)
	est      *estimates    // the router's expected prefixes against the hits (estimate.go); nil: none
	// lastTok is, per replica whose latencies the fleet computes
	// (Fleet.gaps), the time of each streaming request's last token, by
	// request id (a map per replica: a string key hashes faster than a
	// (replica, id) pair); nil for the others.
	lastTok []map[string]engine.Time
	// due is each replica's next event time (engine.Never when it has
	// none) as its engine's Next gave it after the fleet's last call that
	// could change it (a Submit, a RunUntil), so that finding the next
	// instant asks no engine (due.go). A disaggregated fleet's replicas
	// are driven from more places (pdrun.go): it asks them all at every
	// instant ([run.nextInstant]).
	due *dueTimes
	// running is runReplicas' list of the replicas due now (reused).
	running []int
	// area is the in-flight count x ns per replica. A regular fleet keeps
	// it as its requests are routed and finish, each adding its finish
	// time less its routing time (the same integral as accruing at every
	// instant, without touching every replica at each); a disaggregated
	// fleet accrues it at every instant ([run.accrue]).
	area  []int64
	maxIn []int
	open  []int // requests submitted to each replica and not finished (checkInvariants)
	start engine.Time
	now   engine.Time
	pd    *pdRun // a disaggregated fleet's state (pdrun.go); nil otherwise
	// loop holds back the records of a closed-loop run until their
	// dependencies finish (closedloop.go); nil: open loop.
	loop *closedLoop
}

// nextInstant is the earliest of the next arrival and the replicas' next
// events; false when there is neither.
func (r *run) nextInstant() (engine.Time, bool) {
	t, ok := engine.Never, false
	if r.pending.Len() > 0 {
		t, ok = engine.Time(r.pending.Peek().Arrival), true
	}
	if r.pd != nil {
		for i := range r.due.at {
			r.refresh(i)
		}
	}
	if at, has := r.due.next(); has && at < t {
		t, ok = at, true
	}
	if r.loop != nil {
		if at, has := r.loop.next(); has && at < t {
			t, ok = at, true
		}
	}
	if r.pd != nil {
		for _, l := range r.pd.pd.links {
			if l == nil {
				continue
			}
			if at, has := l.next(); has && at < t {
				t, ok = at, true
			}
		}
		if at, has := r.pd.nextTimeout(); has && at < t {
			t, ok = at, true
		}
	}
	return t, ok
}

// refresh records replica i's next event time after a call that may have
// changed it.
func (r *run) refresh(i int) {
	at, has := r.f.engines[i].Next()
	if !has {
		at = engine.Never
	}
	r.due.set(i, at)
}

// accrue moves the clock to t, accruing each replica's in-flight area
// in a disaggregated fleet.
func (r *run) accrue(t engine.Time) {
	if r.pd != nil && r.start != engine.Never {
		for i := range r.area {
			r.area[i] += int64(r.f.inFlight(i)) * int64(t-r.now)
		}
	}
	r.now = t
}

// advance moves the clock to the instant t and tells the routers, which
// run their evictions if due. The router's events come first at an instant; a
// tick due between two instants happens at the later one: nothing was
// routed in between and no replica's state changed.
func (r *run) advance(t engine.Time) {
	r.accrue(t)
	for _, rt := range r.f.routers() {
		rt.Tick(time.Duration(r.now))
	}
}

// inFlight is the router's in-flight count to replica i.
func (f *Fleet) inFlight(i int) int {
	if f.pd != nil {
		return f.pd.inFlight(i)
	}
	return f.router.InFlight(i)
}

// routers are the fleet's routers: one, or the prefill and decode pools'.
func (f *Fleet) routers() []*router.Router {
	if f.pd != nil {
		return []*router.Router{f.pd.router.Prefill, f.pd.router.Decode}
	}
	return []*router.Router{f.router}
}

// instant runs the fleet's steps at the instant r.now, after the
// routers' ticks: in a closed loop the records released now join the
// arrivals; then routing the arrivals, then the replicas (a
// disaggregated fleet's steps are pdRun's, pdrun.go).
func (r *run) instant() error {
	if r.loop != nil {
		if err := r.loop.gate(r); err != nil {
			return err
		}
	}
	if r.pd != nil {
		return r.pd.instant()
	}
	if err := r.routeArrivals(); err != nil {
		return err
	}
	return r.runReplicas()
}

// routeArrivals routes and submits every request arriving now, polling
// the replicas' load first when a poll is due.
func (r *run) routeArrivals() error {
	f := r.f
	for r.pending.Len() > 0 && engine.Time(r.pending.Peek().Arrival) == r.now {
		rec, _ := r.pending.Next()
		f.poll.maybe(r.now, f.router, f.engines, nil)
		if f.kv != nil {
			f.kv.advance(r.now) // kv_aware's view: the events kv_signal_delay old
		}
		req := routeReq(&rec)
		d, err := f.router.Route(&req)
		if err != nil {
			return fmt.Errorf("fleet: request %q: %w", rec.ID, err)
		}
		if r.est != nil {
			r.est.routed(&rec, d)
		}
		if r.start == engine.Never {
			r.start = r.now
		}
		if err := f.engines[d.Replica].Submit(rec); err != nil {
			return fmt.Errorf("fleet: replica %d: %w", d.Replica, err)
		}
		r.refresh(d.Replica)
		r.maxIn[d.Replica] = max(r.maxIn[d.Replica], f.router.InFlight(d.Replica))
		r.open[d.Replica]++
		r.area[d.Replica] -= int64(r.now)
	}
	return nil
}

// runReplicas runs, in index order, the replicas with an event due now
// (an idle replica's clock catches up at its next due instant), records
// their token gaps and completions, tells the router of the latter and
// passes every event on to the caller of RunUntil.
func (r *run) runReplicas() error {
	r.running = r.due.takeDue(r.now, r.running[:0])
	for _, i := range r.running {
		evs, err := r.f.engines[i].RunUntil(r.now)
		if err != nil {
			return fmt.Errorf("fleet: replica %d: %w", i, err)
		}
		r.refresh(i)
		for _, ev := range evs {
			if !ev.Done {
				r.token(i, ev)
				continue
			}
			r.finished(i, ev)
			r.open[i]--
			r.area[i] += int64(r.now)
			if err := r.f.router.Finish(i); err != nil {
				return fmt.Errorf("fleet: request %q: %w", ev.ID, err)
			}
		}
	}
	return nil
}

// token records the inter-token latency of a token event of replica i
// (after the request's first) if the replica does not record it itself,
// and passes the event on if RunUntil's caller reads them.
func (r *run) token(i int, ev engine.Event) {
	if m := r.lastTok[i]; m != nil {
		if last, seen := m[ev.ID]; seen {
			r.stats.AddITL(float64(ev.Time-last) / 1e6)
		}
		m[ev.ID] = ev.Time
	}
	if r.collect {
		r.evs = append(r.evs, ev)
	}
}

// finished records a request's completion event from replica i (its
// Result final; in a closed loop given back its trace arrival, and the
// records waiting for it made due) and passes the event on if RunUntil's
// caller reads them.
func (r *run) finished(i int, ev engine.Event) {
	if r.loop != nil {
		r.loop.finished(&ev)
	}
	delete(r.lastTok[i], ev.ID)
	r.l3Hit[i] += ev.Result.CachedStorage
	if r.est != nil {
		r.est.finished(ev.ID, ev.Result.CachedTokens, ev.Result.Failed != "")
	}
	if !r.drop {
		r.requests = append(r.requests, ev.Result)
		r.replica = append(r.replica, i)
	}
	r.stats.Add(ev.Result)
	if r.collect {
		r.evs = append(r.evs, ev)
	}
}

// result finishes every replica and builds the fleet's result.
func (r *run) result() (*Result, error) {
	f := r.f
	res := &Result{Policy: f.policy.String(), Requests: r.requests, Replica: r.replica}
	for i, e := range f.engines {
		er, err := e.Finish()
		if err != nil {
			return nil, fmt.Errorf("fleet: replica %d: %w", i, err)
		}
		r.area[i] += int64(f.inFlight(i)) * int64(r.now) // none, after a whole run
		res.Replicas = append(res.Replicas, replicaResult(i, f.replicas[i].Group, f.router, er, r.area[i], r.maxIn[i], r.now-r.start))
	}
	res.Summary = summarize(r.stats, res.Replicas)
	res.L3, res.SharedL3 = f.l3.l3Results(res.Replicas, f.replicas, r.l3Hit)
	res.Imbalance = imbalance(res.Replicas)
	res.Decisions = decisionCounts(f.router)
	res.RouterEstimate = r.est.result()
	return res, nil
}

// summarize is the fleet's metric set: the serving benchmark's over every
// request (st, what [engine.Summarize] gives over the requests and
// inter-token latencies in the order they were added), plus the cache
// activity summed over the replicas.
func summarize(st *engine.Stats, reps []ReplicaResult) engine.Summary {
	s := st.Summary()
	for _, r := range reps {
		o := r.Result.Summary
		s.DeviceEvictions += o.DeviceEvictions
		s.Demoted += o.Demoted
		s.HostEvictions += o.HostEvictions
		s.WriteThroughTokens += o.WriteThroughTokens
		s.WriteBackTokens += o.WriteBackTokens
		s.LoadBackTokens += o.LoadBackTokens
		s.H2DGB += o.H2DGB
		s.D2HGB += o.D2HGB
		s.Retractions += o.Retractions
		s.StorageReadGB += o.StorageReadGB
		s.StorageWriteGB += o.StorageWriteGB
	}
	return s
}

func replicaResult(i int, group string, rt *router.Router, r *engine.Result, area int64, maxIn int, span engine.Time) ReplicaResult {
	s := r.Summary
	out := ReplicaResult{
		Index: i, Group: group, Routed: rt.Routed(i), Completed: s.Completed, Failed: s.Failed,
		CacheHitRate: s.CacheHitRate, DeviceHitRate: s.DeviceHitRate, HostHitRate: s.HostHitRate, StorageHitRate: s.StorageHitRate,
		MeanTTFT: s.MeanTTFT, MedianTTFT: s.MedianTTFT, P90TTFT: s.P90TTFT, P99TTFT: s.P99TTFT,
		MaxInFlight: maxIn, Result: r,
	}
	if span > 0 {
		out.MeanInFlight = float64(area) / float64(span)
	}
	return out
}

// imbalance is max/mean of the replicas' mean in-flight counts and the
// coefficient of variation (population) of the requests routed to each.
func imbalance(reps []ReplicaResult) Imbalance {
	var im Imbalance
	var sumIn, maxIn, sumReq float64
	for _, r := range reps {
		sumIn += r.MeanInFlight
		maxIn = max(maxIn, r.MeanInFlight)
		sumReq += float64(r.Routed)
	}
	n := float64(len(reps))
	if sumIn > 0 {
		im.MaxOverMeanInFlight = maxIn / (sumIn / n)
	}
	if sumReq > 0 {
		mean := sumReq / n
		var v float64
		for _, r := range reps {
			d := float64(r.Routed) - mean
			v += d * d
		}
		im.RequestsCV = math.Sqrt(v/n) / mean
	}
	return im
}
