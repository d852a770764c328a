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
}

// Fleet is N engines behind a router, on one event loop and one virtual
// clock. Build it with [New] and run it once with [Fleet.Run].
type Fleet struct {
	replicas []Replica
	engines  []engine.Engine
	router   *router.Router
	policy   router.Policy
	poll     time.Duration // power_of_two's load poll interval; -1: no polling
	ran      bool
}

// New builds a fleet of the replicas behind a router of cfg. seed seeds
// the router's own random stream (random, power_of_two, keyless
// consistent_hash). kv_aware is refused: its cache oracle over the
// replicas' trees is not built yet.
func New(replicas []Replica, cfg router.Config, seed uint64) (*Fleet, error) {
	if len(replicas) == 0 {
		return nil, errors.New("fleet: no replica")
	}
	if cfg.Policy == router.KVAware {
		return nil, errors.New("fleet: router.policy kv_aware is not supported yet (its cache oracle over the replicas is not built)")
	}
	rt, err := router.New(cfg, len(replicas), router.Deps{Rand: rand.New(rand.NewPCG(seed, 0x666c656574))}) // "fleet"
	if err != nil {
		return nil, err
	}
	f := &Fleet{replicas: replicas, router: rt, policy: cfg.Policy, poll: -1}
	if cfg.Policy == router.PowerOfTwo {
		f.poll = cfg.PowerOfTwo.LoadPollInterval
	}
	for i, r := range replicas {
		e, err := r.Factory.New()
		if err != nil {
			return nil, fmt.Errorf("fleet: replica %d (%s): %w", i, r.Group, err)
		}
		f.engines = append(f.engines, e)
	}
	return f, nil
}

// Router returns the fleet's router, for its counts after a run.
func (f *Fleet) Router() *router.Router { return f.router }

// routeReq is what the router sees of rec: its token ids, else its block
// hashes (the approximate tree's key), its session (consistent_hash's key)
// and its length.
func routeReq(rec *traces.Record) router.Request {
	req := router.Request{Session: rec.Session, Len: rec.InputLen}
	if len(rec.Tokens) > 0 {
		req.Tokens = rec.Tokens
	} else {
		req.Blocks = rec.Blocks
	}
	return req
}

// tokenKey identifies a request on a replica while its tokens stream.
type tokenKey struct {
	replica int
	id      string
}

// Run routes and simulates every record of src, open loop (each request
// reaches the router at its arrival; dependencies between records are not
// waited for), and returns the fleet's results. The loop's instant is the
// earliest of the next arrival and the replicas' next events; a tree
// eviction or load poll due between two instants takes effect at the
// later one, which changes nothing (no decision and no replica event lies
// between). At one instant the router acts first (eviction tick, load poll, then routing every arrival of that
// instant in trace order, each submitted at once to its replica), then the
// replicas with an event due run to that instant in index order and their completions are
// finished at the router in the order reported, replica by replica.
func (f *Fleet) Run(src engine.Source) (*Result, error) {
	if f.ran {
		return nil, errors.New("fleet: already run")
	}
	f.ran = true
	n := len(f.engines)
	var (
		rec      traces.Record
		have     bool
		requests []engine.RequestResult
		replica  []int
		itls     []float64
		lastTok  = map[tokenKey]engine.Time{}
		area     = make([]int64, n) // in-flight x ns per replica
		maxIn    = make([]int, n)
		start    = engine.Never
		now      engine.Time
		nextPoll engine.Time
	)
	next := func() error {
		r, err := src.Next()
		if err == io.EOF {
			have = false
			return nil
		}
		if err != nil {
			return err
		}
		if have && r.Arrival < rec.Arrival {
			return fmt.Errorf("fleet: request %q arrives at %d ns, before the previous one (%d ns)", r.ID, r.Arrival, rec.Arrival)
		}
		rec, have = r, true
		return nil
	}
	if err := next(); err != nil {
		return nil, err
	}
	for {
		t, ok := engine.Never, false
		if have {
			t, ok = engine.Time(rec.Arrival), true
		}
		for _, e := range f.engines {
			if at, has := e.Next(); has && at < t {
				t, ok = at, true
			}
		}
		if !ok {
			break // no arrival left and every replica idle: ticks and polls change nothing
		}
		if t < now {
			return nil, fmt.Errorf("fleet: request %q arrives at %d ns, before the fleet's time %d ns", rec.ID, t, now)
		}
		if start != engine.Never {
			for i := range n {
				area[i] += int64(f.router.InFlight(i)) * int64(t-now)
			}
		}
		now = t
		// The router's events come first at an instant. A tick or poll
		// due between two instants happens at the later one: nothing was
		// routed in between and no replica's state changed.
		if at, has := f.router.NextTick(); has && time.Duration(now) >= at {
			f.router.Tick(time.Duration(now))
		}
		for have && engine.Time(rec.Arrival) == now {
			if f.poll >= 0 && (f.poll == 0 || now >= nextPoll) {
				for i, e := range f.engines {
					f.router.SetLoad(i, float64(e.Active()))
				}
				if f.poll > 0 {
					nextPoll = (now/engine.Time(f.poll) + 1) * engine.Time(f.poll)
				}
			}
			req := routeReq(&rec)
			d, err := f.router.Route(&req)
			if err != nil {
				return nil, fmt.Errorf("fleet: request %q: %w", rec.ID, err)
			}
			if start == engine.Never {
				start = now
			}
			if err := f.engines[d.Replica].Submit(rec); err != nil {
				return nil, fmt.Errorf("fleet: replica %d: %w", d.Replica, err)
			}
			maxIn[d.Replica] = max(maxIn[d.Replica], f.router.InFlight(d.Replica))
			if err := next(); err != nil {
				return nil, err
			}
		}
		for i, e := range f.engines {
			if at, has := e.Next(); !has || at > now {
				continue // nothing due: its clock catches up at its next due instant
			}
			evs, err := e.RunUntil(now)
			if err != nil {
				return nil, fmt.Errorf("fleet: replica %d: %w", i, err)
			}
			for _, ev := range evs {
				k := tokenKey{i, ev.ID}
				if ev.Done {
					delete(lastTok, k)
					requests = append(requests, ev.Result)
					replica = append(replica, i)
					if err := f.router.Finish(i); err != nil {
						return nil, fmt.Errorf("fleet: request %q: %w", ev.ID, err)
					}
					continue
				}
				if last, seen := lastTok[k]; seen {
					itls = append(itls, float64(ev.Time-last)/1e6)
				}
				lastTok[k] = ev.Time
			}
		}
	}
	res := &Result{Policy: f.policy.String(), Requests: requests, Replica: replica}
	for i, e := range f.engines {
		r, err := e.Finish()
		if err != nil {
			return nil, fmt.Errorf("fleet: replica %d: %w", i, err)
		}
		res.Replicas = append(res.Replicas, replicaResult(i, f.replicas[i].Group, f.router, r, area[i], maxIn[i], now-start))
	}
	res.Summary = summarize(requests, itls, res.Replicas)
	res.Imbalance = imbalance(res.Replicas)
	for _, why := range router.Reasons() {
		if c := f.router.Count(why); c > 0 {
			res.Decisions = append(res.Decisions, DecisionCount{Reason: why.String(), Count: c})
		}
	}
	return res, nil
}

// summarize is the fleet's metric set: the serving benchmark's over every
// request ([engine.Summarize]), plus the cache activity summed over the
// replicas.
func summarize(rs []engine.RequestResult, itls []float64, reps []ReplicaResult) engine.Summary {
	s := engine.Summarize(rs, itls)
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
