package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/sim/engine"
)

// The simulator's own series of /metrics are read from the engine when a
// client asks (the loop answers a cmdMetrics), never at a step of the
// loop: a fleet of N replicas has about 13 N of them, and a request's cost
// must not grow with N beyond what routing takes.

type metric struct {
	name, help, kind string
	labels           string // `{k="v",...}` or ""
	value            float64
}

// simMetrics is the loop's answer to cmdMetrics: the engine's series,
// counters carried over flushes, and the virtual time.
type simMetrics struct {
	extra     []metric
	virtualNs int64
}

// What /metrics reports of an engine that offers it (sim.Online does):
// its counters, its evictions (device tokens deleted, demoted to host,
// host tokens evicted) and its queues.
type (
	counterer  interface{ Counters() engine.Counters }
	evictioner interface {
		Evictions() (deviceDeleted, demoted, hostEvicted int64)
	}
	queuer interface{ Queue() (waiting, running int) }
	// fleeter is a fleet of engines behind a router (fleet.Online).
	fleeter interface {
		Replicas() int
		Replica(i int) engine.Engine
		Group(i int) string
		Routed(i int) int64
		InFlight(i int) int
		Decisions() []fleet.DecisionCount
	}
)

// engineMetrics returns the series the engine o offers: one server's, or
// a fleet's router series and each replica's under its labels.
func engineMetrics(o engine.Engine) []metric {
	f, ok := o.(fleeter)
	if !ok {
		return appendEngineMetrics(nil, o, "")
	}
	var out []metric
	for _, d := range f.Decisions() {
		out = append(out, metric{"kvsim_router_decisions_total", "Routing decisions by the branch of the policy that decided.", "counter", fmt.Sprintf("{reason=%q}", d.Reason), float64(d.Count)})
	}
	for i := range f.Replicas() {
		labels := fmt.Sprintf("{replica=\"%d\",group=%q}", i, f.Group(i))
		out = append(out,
			metric{"kvsim_replica_requests_routed_total", "Requests the router sent to the replica.", "counter", labels, float64(f.Routed(i))},
			metric{"kvsim_replica_requests_in_flight", "The router's in-flight count to the replica.", "gauge", labels, float64(f.InFlight(i))})
		out = appendEngineMetrics(out, f.Replica(i), labels)
	}
	return out
}

// appendEngineMetrics appends the metrics one engine offers, under labels.
func appendEngineMetrics(dst []metric, o engine.Engine, labels string) []metric {
	add := func(name, help, kind string, v float64) {
		dst = append(dst, metric{name, help, kind, labels, v})
	}
	if o, ok := o.(counterer); ok {
		k := o.Counters()
		add("kvsim_load_back_tokens_total", "Tokens loaded back from host to device.", "counter", float64(k.LoadBackTokens))
		add("kvsim_write_through_tokens_total", "Tokens copied device to host by write-through.", "counter", float64(k.WriteThroughTokens))
		add("kvsim_write_back_tokens_total", "Tokens written back to host at eviction.", "counter", float64(k.WriteBackTokens))
		add("kvsim_retractions_total", "Decode retractions.", "counter", float64(k.Retractions))
		add("kvsim_prefill_batches_total", "Prefill forwards.", "counter", float64(k.PrefillBatches))
		add("kvsim_decode_steps_total", "Decode steps.", "counter", float64(k.DecodeSteps))
	}
	if o, ok := o.(evictioner); ok {
		del, dem, host := o.Evictions()
		add("kvsim_device_evicted_tokens_total", "Device tokens evicted (deleted or demoted to host).", "counter", float64(del+dem))
		add("kvsim_demoted_tokens_total", "Device tokens evicted to a host copy.", "counter", float64(dem))
		add("kvsim_host_evicted_tokens_total", "Host tokens evicted.", "counter", float64(host))
	}
	if o, ok := o.(queuer); ok {
		w, r := o.Queue()
		add("kvsim_queue_waiting", "Requests in the scheduler's waiting queue.", "gauge", float64(w))
		add("kvsim_queue_running", "Requests in the running (decode) batch.", "gauge", float64(r))
	}
	return dst
}

// carried holds the counters of the engines that /flush_cache replaced,
// so that no counter of /metrics goes back at a flush (a Prometheus
// counter only grows; SGLang's flush_cache empties the cache and leaves
// its counters). Series are kept in the order they were first carried.
type carried struct {
	at map[string]int // name+labels -> index in ms
	ms []metric
}

func newCarried() *carried { return &carried{at: map[string]int{}} }

// add folds the counters of ms (an engine's series, about to be
// replaced) into c.
func (c *carried) add(ms []metric) {
	for _, m := range ms {
		if m.kind != "counter" {
			continue
		}
		k := m.name + m.labels
		if i, ok := c.at[k]; ok {
			c.ms[i].value += m.value
			continue
		}
		c.at[k] = len(c.ms)
		c.ms = append(c.ms, m)
	}
}

// apply returns ms (the current engine's series) with the carried counts
// added to its counters, and the carried series it lacks (a decision
// reason the fresh router has not taken yet) after them.
func (c *carried) apply(ms []metric) []metric {
	if len(c.ms) == 0 {
		return ms
	}
	seen := make([]bool, len(c.ms))
	for i := range ms {
		if ms[i].kind != "counter" {
			continue
		}
		if j, ok := c.at[ms[i].name+ms[i].labels]; ok {
			ms[i].value += c.ms[j].value
			seen[j] = true
		}
	}
	for j, m := range c.ms {
		if !seen[j] {
			ms = append(ms, m)
		}
	}
	return ms
}

// errLoopDone says the simulator loop has stopped (the server is shutting
// down).
var errLoopDone = errors.New("the simulator has stopped")

// ask sends the loop the command c, whose answer comes on reply, and
// waits for the answer.
func ask[T any](ctx context.Context, s *Server, c command, reply chan T) (T, error) {
	var zero T
	select {
	case s.cmds <- c:
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-s.loopDone:
		return zero, errLoopDone
	}
	select {
	case v := <-reply:
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-s.loopDone:
		return zero, errLoopDone
	}
}
