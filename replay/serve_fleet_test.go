package replay

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/engine"
)

// countingFleet is a fleet whose per-replica reads (what /metrics asks of
// each replica) are counted.
type countingFleet struct {
	*fleet.Online
	reads *atomic.Int64
}

func (c countingFleet) Replica(i int) engine.Engine { c.reads.Add(1); return c.Online.Replica(i) }
func (c countingFleet) Routed(i int) int64          { c.reads.Add(1); return c.Online.Routed(i) }

type countingFactory struct {
	fleet.Factory
	reads *atomic.Int64
}

func (c countingFactory) New() (engine.Engine, error) {
	e, err := c.Factory.New()
	if err != nil {
		return nil, err
	}
	return countingFleet{e.(*fleet.Online), c.reads}, nil
}

// startFleetServer serves a fleet of n replicas of the test server behind
// round_robin at time scale 0, counting its per-replica reads.
func startFleetServer(t testing.TB, n int) (string, *atomic.Int64) {
	t.Helper()
	cost := testFitted
	reps := make([]fleet.Replica, n)
	for i := range reps {
		reps[i] = fleet.Replica{Group: "g", Factory: &sim.Factory{Config: testSimConfig(100000), Cost: &cost}}
	}
	rc := router.Default()
	rc.Policy = router.RoundRobin
	reads := new(atomic.Int64)
	fa := countingFactory{fleet.Factory{Replicas: reps, Router: rc, Seed: 1}, reads}
	srv, err := NewServer(ServeConfig{Sim: SimConfig{Engine: fa, Model: "m"}, TimeScale: 0})
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + serve(t, srv), reads
}

// Serving a request on a fleet reads no replica's metrics: they are read
// when /metrics asks, once per replica. (serve used to recompute every
// replica's series at every step of its loop, so one request on 4,096
// replicas took seconds.)
func TestServeFleetMetricsOnDemand(t *testing.T) {
	const n = 64
	url, reads := startFleetServer(t, n)
	reads.Store(0) // NewServer builds an engine to check the factory
	for i := range 3 {
		code, body := httpDo(t, "POST", url+"/generate", fmt.Sprintf(`{"input_ids":[%d,2,3,4],"sampling_params":{"max_new_tokens":20}}`, i+1))
		if code != http.StatusOK {
			t.Fatalf("generate: %d %s", code, body)
		}
	}
	if got := reads.Load(); got != 0 {
		t.Errorf("3 requests of 20 tokens on %d replicas read replicas' metrics %d times, want 0 (none until /metrics)", n, got)
	}
	code, m := httpDo(t, "GET", url+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, m)
	}
	if got := reads.Load(); got != 2*n {
		t.Errorf("/metrics read replicas %d times, want %d (Routed and Replica once each per replica)", got, 2*n)
	}
	for _, want := range []string{
		`kvsim_replica_requests_routed_total{replica="2",group="g"} 1` + "\n",
		`kvsim_replica_requests_routed_total{replica="3",group="g"} 0` + "\n",
		`kvsim_decode_steps_total{replica="0",group="g"} 19` + "\n",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q:\n%.2000s", want, m)
		}
	}
}

// /flush_cache empties the caches and resets no counter: the router's
// decisions, the requests routed to each replica and the replicas' own
// counters go on from where they were, as kvsim_requests_total does (a
// Prometheus counter only grows; SGLang's flush_cache leaves its metrics).
// Gauges are the fresh simulator's.
func TestServeFlushKeepsCounters(t *testing.T) {
	url, _ := startFleetServer(t, 2)
	gen := func(first int) {
		t.Helper()
		code, body := httpDo(t, "POST", url+"/generate", fmt.Sprintf(`{"input_ids":[%d,2,3,4],"sampling_params":{"max_new_tokens":5}}`, first))
		if code != http.StatusOK {
			t.Fatalf("generate: %d %s", code, body)
		}
	}
	gen(1)
	gen(2)
	gen(3) // replica 0 twice, replica 1 once
	if code, body := httpDo(t, "POST", url+"/flush_cache", ""); code != http.StatusOK {
		t.Fatalf("flush: %d %s", code, body)
	}
	gen(4) // the fresh router starts at replica 0 again
	_, m := httpDo(t, "GET", url+"/metrics", "")
	for _, want := range []string{
		"kvsim_requests_total 4\n",
		"kvsim_cache_flushes_total 1\n",
		`kvsim_router_decisions_total{reason="round_robin"} 4` + "\n",
		`kvsim_replica_requests_routed_total{replica="0",group="g"} 3` + "\n",
		`kvsim_replica_requests_routed_total{replica="1",group="g"} 1` + "\n",
		`kvsim_prefill_batches_total{replica="0",group="g"} 3` + "\n",
		`kvsim_decode_steps_total{replica="0",group="g"} 12` + "\n",
		`kvsim_decode_steps_total{replica="1",group="g"} 4` + "\n",
		`kvsim_replica_requests_in_flight{replica="0",group="g"} 0` + "\n",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, m)
		}
	}
	if strings.Count(m, "kvsim_router_decisions_total{") != 1 {
		t.Errorf("want one decisions series:\n%s", m)
	}
}

// One 200-token request at a time on a fleet of n replicas at time scale
// 0, through HTTP: its cost should barely grow with n (routing scans the
// replicas; serve used to read every replica's metrics at every step).
func BenchmarkServeFleetRequest(b *testing.B) {
	for _, n := range []int{16, 1024, 4096} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			url, _ := startFleetServer(b, n)
			i := 0
			for b.Loop() {
				i++
				code, body := httpDo(b, "POST", url+"/generate", fmt.Sprintf(`{"input_ids":[%d,2,3,4],"sampling_params":{"max_new_tokens":200}}`, i))
				if code != http.StatusOK {
					b.Fatalf("generate: %d %s", code, body)
				}
			}
		})
	}
}
