package fleet_test

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
	"pgregory.net/rapid"
)

// pdServer is a small SGLang server for a disaggregated fleet: a decode
// server has its radix cache off (SGLang's chunk cache on decode).
func pdServer(role fleet.Role, device int64, chunk int64, pageSize int) fleet.PDReplica {
	return pdServerCache(role, device, chunk, pageSize, false)
}

// pdServerCache is pdServer with a choice of the decode replica's cache:
// the chunk cache or (radix) the decode-side radix cache.
func pdServerCache(role fleet.Role, device int64, chunk int64, pageSize int, radix bool) fleet.PDReplica {
	sc := sim.Default(device)
	sc.Cache.PageSize = pageSize
	sc.Scheduler.ChunkedPrefillSize = chunk
	if role == fleet.Decode {
		sc.Cache.Disable = !radix
	} else {
		sc.Cache.HostTokens = 4096
	}
	return fleet.PDReplica{
		Replica:         fleet.Replica{Group: role.String(), Factory: &sim.Factory{Config: sc, Cost: &fitted, OpenLoop: true}},
		Role:            role,
		KVBytesPerToken: 1 << 17,
	}
}

// fataler is what the helpers need of *testing.T and *rapid.T.
type fataler interface{ Fatal(args ...any) }

// pdRun runs a disaggregated fleet and returns its result.
func pdRun(t fataler, reps []fleet.PDReplica, cfg fleet.PDConfig, recs []traces.Record) (*fleet.Result, *fleet.Fleet) {
	f, err := fleet.NewPD(reps, cfg, 7)
	return runBuilt(t, f, err, recs), f
}

// drawPD draws a disaggregated fleet: one to three replicas per role,
// small pools, chunked prefill, any router policies, link and reservation.
func drawPD(t *rapid.T) ([]fleet.PDReplica, fleet.PDConfig, int) {
	ps := rapid.SampledFrom([]int{1, 4, 16}).Draw(t, "page_size")
	chunk := int64(rapid.SampledFrom([]int{-1, 64, 256}).Draw(t, "chunk"))
	var reps []fleet.PDReplica
	for range rapid.IntRange(1, 3).Draw(t, "prefill") {
		reps = append(reps, pdServer(fleet.Prefill, int64(rapid.IntRange(300, 4096).Draw(t, "p_device")), chunk, ps))
	}
	radix := rapid.Bool().Draw(t, "decode_radix")
	for range rapid.IntRange(1, 3).Draw(t, "decode") {
		reps = append(reps, pdServerCache(fleet.Decode, int64(rapid.IntRange(700, 4096).Draw(t, "d_device")), chunk, ps, radix))
	}
	if rapid.Bool().Draw(t, "interleave") {
		reps[0], reps[len(reps)-1] = reps[len(reps)-1], reps[0]
	}
	cfg := fleet.DefaultPD()
	cfg.Prefill, cfg.Decode = drawPoolRouter(t), drawPoolRouter(t)
	cfg.TransferGbps = rapid.SampledFrom([]float64{1, 10, 400}).Draw(t, "gbps")
	cfg.TransferLatency = time.Duration(rapid.SampledFrom([]int64{0, 1e5, 5e6}).Draw(t, "latency"))
	cfg.TransferQueues = rapid.IntRange(1, 4).Draw(t, "queues")
	cfg.ReservedDecodeTokens = int64(rapid.SampledFrom([]int{0, 64, 512}).Draw(t, "reserved"))
	timeouts := []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond, 300 * time.Second}
	cfg.BootstrapTimeout = rapid.SampledFrom(timeouts).Draw(t, "bootstrap_timeout")
	cfg.WaitingTimeout = rapid.SampledFrom(timeouts).Draw(t, "waiting_timeout")
	return reps, cfg, ps
}

// drawPoolRouter draws a pool's router: drawRouter's, kv_aware with a
// signal delay, or cache_aware_oracle (both over the pool's KV events).
func drawPoolRouter(t *rapid.T) router.Config {
	c := drawRouter(t)
	switch rapid.IntRange(0, 3).Draw(t, "kv") {
	case 1:
		c.Policy = router.KVAware
		c.KVAware.SignalDelay = time.Duration(rapid.SampledFrom([]int64{0, 5e6, 1e9}).Draw(t, "delay"))
	case 2:
		c.Policy = router.CacheAwareOracle
	}
	return c
}

// Every request is decoded (or aborted) once on its decode replica and,
// unless it failed before, prefilled once on its prefill replica; both
// routers' in-flight counts return to zero; a completed request's TTFT is
// exactly the sum of its five parts, none negative; the transfers add up;
// a request aborted by a timeout fails on both its replicas (on its
// prefill replica only if it got there: never after a bootstrap timeout),
// at its arrival + the bootstrap timeout or at least the waiting timeout
// after it, and the fleet counts each timeout's aborts; and a second run
// is byte-identical.
func TestPropPDConservation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reps, cfg, ps := drawPD(t)
		recs := drawTrace(t)
		res, f := pdRun(t, reps, cfg, recs)
		if len(res.Requests) != len(recs) || len(res.PDRequests) != len(recs) {
			t.Fatalf("%d results, %d details for %d requests", len(res.Requests), len(res.PDRequests), len(recs))
		}
		// Which requests each replica's engine served.
		served := make([]map[string]int, len(reps))
		for i, rr := range res.Replicas {
			if rr.Role != reps[i].Role.String() {
				t.Fatalf("replica %d role %q, want %v", i, rr.Role, reps[i].Role)
			}
			served[i] = map[string]int{}
			for _, r := range rr.Result.Requests {
				served[i][r.ID]++
			}
		}
		var pages int64
		var timedOut [2]int64
		seen := map[string]bool{}
		for k, r := range res.Requests {
			d := res.PDRequests[k]
			if seen[r.ID] {
				t.Fatalf("request %s finished twice", r.ID)
			}
			seen[r.ID] = true
			if reps[d.Prefill].Role != fleet.Prefill || reps[d.Decode].Role != fleet.Decode || res.Replica[k] != d.Decode {
				t.Fatalf("request %s: prefill %d, decode %d, replica %d", r.ID, d.Prefill, d.Decode, res.Replica[k])
			}
			decoded := 0
			prefilled := 0
			for i := range reps {
				if reps[i].Role == fleet.Decode {
					decoded += served[i][r.ID]
				} else {
					prefilled += served[i][r.ID]
				}
			}
			if decoded != 1 || served[d.Decode][r.ID] != 1 {
				t.Fatalf("request %s decoded %d times (%d on its replica %d)", r.ID, decoded, served[d.Decode][r.ID], d.Decode)
			}
			if r.Failed != "" {
				if prefilled > 1 {
					t.Fatalf("failed request %s prefilled %d times", r.ID, prefilled)
				}
				checkTimeout(t, cfg, r, d.FailedAt, prefilled, res.Replicas[d.Prefill].Result.Requests, timedOut[:])
				continue
			}
			if prefilled != 1 || served[d.Prefill][r.ID] != 1 {
				t.Fatalf("request %s prefilled %d times (%d on its replica %d)", r.ID, prefilled, served[d.Prefill][r.ID], d.Prefill)
			}
			parts := []engine.Time{d.Bootstrap, d.PrefillQueue, d.PrefillCompute, d.TransferTail, d.FirstStep}
			var sum engine.Time
			for _, v := range parts {
				if v < 0 {
					t.Fatalf("request %s: negative TTFT part in %+v", r.ID, d)
				}
				sum += v
			}
			if sum != r.TTFT() || d.FirstStep < 1 {
				t.Fatalf("request %s: parts %v sum to %d, TTFT %d", r.ID, parts, sum, r.TTFT())
			}
			// The prefill replica holds it (its KV and tree lock) until
			// its last page lands.
			pr := res.Replicas[d.Prefill].Result.Requests
			if p := pr[slices.IndexFunc(pr, func(x engine.RequestResult) bool { return x.ID == r.ID })]; p.Finish != r.Arrival+sum-d.FirstStep {
				t.Fatalf("request %s finished on its prefill replica at %d, its KV landed at %d", r.ID, p.Finish, r.Arrival+sum-d.FirstStep)
			}
			if r.OutputTokens != int64(max(recs[slices.IndexFunc(recs, func(x traces.Record) bool { return x.ID == r.ID })].OutputLen, 1)) {
				t.Fatalf("request %s: %d output tokens", r.ID, r.OutputTokens)
			}
			// Every page of the prompt is sent once, but for those the
			// decode replica had.
			if want := (r.PromptTokens+int64(ps)-1)/int64(ps) - d.DecodeCached/int64(ps); d.TransferPages != want || d.DecodeCached%int64(ps) != 0 {
				t.Fatalf("request %s: %d pages sent, %d cached on decode, want %d pages", r.ID, d.TransferPages, d.DecodeCached, want)
			}
			pages += d.TransferPages
		}
		if timedOut[0] != res.PD.BootstrapTimeouts || timedOut[1] != res.PD.WaitingTimeouts {
			t.Fatalf("requests failed by timeouts %v, the fleet counts %d and %d", timedOut, res.PD.BootstrapTimeouts, res.PD.WaitingTimeouts)
		}
		if pages != res.PD.TransferPages && res.Summary.Failed == 0 {
			t.Fatalf("requests moved %d pages, the fleet counts %d", pages, res.PD.TransferPages)
		}
		var pool [2]int
		for _, r := range reps {
			pool[r.Role-fleet.Prefill]++
		}
		for i, rt := range []*router.Router{f.PD().Prefill, f.PD().Decode} {
			for k := range pool[i] {
				if rt.InFlight(k) != 0 {
					t.Fatalf("pool %d replica %d: %d in flight at the end", i, k, rt.InFlight(k))
				}
			}
		}
		again, _ := pdRun(t, reps, cfg, recs)
		if a, b := pdDigest(t, res), pdDigest(t, again); a != b {
			t.Fatalf("second run differs:\n%s\n%s", a, b)
		}
	})
}

// checkTimeout checks a failed request r against the timeouts: aborted
// by the bootstrap timeout, it never reached its prefill replica and
// failed (at) at its arrival + the timeout; by the waiting timeout, it
// failed at least that long after its arrival, with the same reason on
// its prefill replica (prefill) unless that replica had finished it. It
// counts each in timedOut.
func checkTimeout(t *rapid.T, cfg fleet.PDConfig, r engine.RequestResult, at engine.Time, prefilled int, prefill []engine.RequestResult, timedOut []int64) {
	switch {
	case strings.HasPrefix(r.Failed, "disaggregation: bootstrap timeout"):
		timedOut[0]++
		if prefilled != 0 || at != r.Arrival+engine.Time(cfg.BootstrapTimeout) || cfg.BootstrapTimeout == 0 {
			t.Fatalf("request %s: %s at %d (arrival %d, timeout %v), prefilled %d times", r.ID, r.Failed, at, r.Arrival, cfg.BootstrapTimeout, prefilled)
		}
	case strings.HasPrefix(r.Failed, "disaggregation: waiting timeout"):
		timedOut[1]++
		if at < r.Arrival+engine.Time(cfg.WaitingTimeout) || cfg.WaitingTimeout == 0 || prefilled != 1 {
			t.Fatalf("request %s: %s at %d (arrival %d, timeout %v), prefilled %d times", r.ID, r.Failed, at, r.Arrival, cfg.WaitingTimeout, prefilled)
		}
		p := prefill[slices.IndexFunc(prefill, func(x engine.RequestResult) bool { return x.ID == r.ID })]
		if p.Failed != "" && p.Failed != r.Failed {
			t.Fatalf("request %s failed on decode (%s), on prefill (%s)", r.ID, r.Failed, p.Failed)
		}
	}
}

// With both timeouts longer than the run (every request's whole life),
// a run is byte-identical to one without timeouts.
func TestPropPDTimeoutsBeyondRun(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reps, cfg, _ := drawPD(t)
		recs := drawTrace(t)
		cfg.BootstrapTimeout, cfg.WaitingTimeout = 0, 0
		res, _ := pdRun(t, reps, cfg, recs)
		var span engine.Time
		for i, r := range res.Requests {
			// A failed request has no finish time: its life ends when it
			// failed (a prefill admission failure ends it late too).
			span = max(span, r.Finish-r.Arrival, res.PDRequests[i].FailedAt-r.Arrival)
		}
		cfg.BootstrapTimeout = time.Duration(span + 1)
		cfg.WaitingTimeout = time.Duration(span + 1)
		again, _ := pdRun(t, reps, cfg, recs)
		if a, b := pdDigest(t, res), pdDigest(t, again); a != b {
			t.Fatalf("timeouts of %d ns change the run:\n%s\n%s", span+1, a, b)
		}
	})
}

// A request its decode replica cannot preallocate fails at its arrival +
// the bootstrap timeout without reaching the prefill replica; a request
// whose KV is still on the link after the waiting timeout fails then,
// and its transfer leaves the link, so the next request's transfer has
// the link to itself.
func TestPDTimeouts(t *testing.T) {
	cfg := fleet.DefaultPD()
	cfg.TransferGbps = 100
	cfg.BootstrapTimeout = time.Millisecond
	reps := []fleet.PDReplica{pdServer(fleet.Prefill, 8192, -1, 1), pdServer(fleet.Decode, 4096, -1, 1)}
	res, _ := pdRun(t, reps, cfg, []traces.Record{pdRec("long", 0, 1000, 2000), pdRec("next", 1e6, 2500, 2)})
	k := slices.IndexFunc(res.Requests, func(r engine.RequestResult) bool { return r.ID == "next" })
	next := res.Requests[k]
	if !strings.HasPrefix(next.Failed, "disaggregation: bootstrap timeout") || res.PDRequests[k].FailedAt != 2e6 || res.PD.BootstrapTimeouts != 1 {
		t.Fatalf("next: %q at %d; %d bootstrap timeouts", next.Failed, res.PDRequests[k].FailedAt, res.PD.BootstrapTimeouts)
	}
	if n := len(res.Replicas[0].Result.Requests); n != 1 {
		t.Fatalf("the prefill replica served %d requests, want long only", n)
	}

	cfg = fleet.DefaultPD()
	cfg.TransferGbps = 1
	cfg.TransferLatency = 0
	cfg.WaitingTimeout = time.Second
	reps = []fleet.PDReplica{pdServer(fleet.Prefill, 8192, -1, 1), pdServer(fleet.Decode, 8192, -1, 1)}
	// big: 4000 tokens x 128 KiB take 4.19 s at 1 Gbit/s; small's 100
	// tokens 105 ms.
	res, _ = pdRun(t, reps, cfg, []traces.Record{pdRec("big", 0, 4000, 2), pdRec("small", 1.5e9, 100, 2)})
	big, small := res.Requests[0], res.Requests[1]
	if big.ID != "big" || !strings.HasPrefix(big.Failed, "disaggregation: waiting timeout") || res.PDRequests[0].FailedAt != 1e9 || res.PD.WaitingTimeouts != 1 {
		t.Fatalf("big: %q at %d; %d waiting timeouts", big.Failed, res.PDRequests[0].FailedAt, res.PD.WaitingTimeouts)
	}
	if d := res.PDRequests[1]; small.Failed != "" || d.Transfer != engine.Time(math.Ceil(100*(1<<17)*8/1.0)) {
		t.Fatalf("small: %q, transfer %d ns", small.Failed, d.Transfer)
	}
}

// pdDigest is a run's whole output as text.
func pdDigest(t fataler, res *fleet.Result) string {
	b, err := json.Marshal(struct {
		*fleet.Result
		Requests []engine.RequestResult
		Detail   []fleet.PDRequest
	}{res, res.Requests, res.PDRequests})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// one request of n tokens arriving at at.
func pdRec(id string, at int64, n, out int) traces.Record {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(7000*len(id) + i)
	}
	return traces.Record{ID: id, Arrival: at, InputLen: n, Tokens: toks, OutputLen: out}
}

// With no latency and one transfer per request (no chunking, requests far
// apart), a transfer takes its bytes over the link's bandwidth (to the
// nanosecond), and doubling the bandwidth halves it.
func TestPropPDTransferHalves(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ps := rapid.SampledFrom([]int{1, 16}).Draw(t, "page_size")
		reps := []fleet.PDReplica{pdServer(fleet.Prefill, 8192, -1, ps), pdServer(fleet.Decode, 8192, -1, ps)}
		var recs []traces.Record
		for i := range rapid.IntRange(1, 5).Draw(t, "n") {
			recs = append(recs, pdRec(fmt.Sprint("r", i), int64(i)*1000e9, rapid.IntRange(1, 4000).Draw(t, "len"), 3))
		}
		cfg := fleet.DefaultPD()
		cfg.TransferLatency = 0
		gbps := rapid.Float64Range(1, 800).Draw(t, "gbps")
		var xfer [2][]engine.Time
		for k, g := range []float64{gbps, 2 * gbps} {
			cfg.TransferGbps = g
			res, _ := pdRun(t, reps, cfg, recs)
			for i, d := range res.PDRequests {
				bytes := float64(d.TransferPages) * float64(ps) * float64(reps[0].KVBytesPerToken)
				if want := math.Ceil(bytes * 8 / g); math.Abs(float64(d.Transfer)-want) > 1 || d.TransferTail != d.Transfer {
					t.Fatalf("%s at %g Gbit/s: %d bytes took %d ns (tail %d), want %g", res.Requests[i].ID, g, int64(bytes), d.Transfer, d.TransferTail, want)
				}
				xfer[k] = append(xfer[k], d.Transfer)
			}
		}
		for i := range xfer[0] {
			if d := xfer[0][i] - 2*xfer[1][i]; d < -2 || d > 2 {
				t.Fatalf("request %d: %d ns at %g Gbit/s, %d ns at twice that", i, xfer[0][i], gbps, xfer[1][i])
			}
		}
	})
}

// A decode replica whose KV is taken by a long request holds the next
// request in its preallocation queue (bootstrap wait) while the prefill
// replica idles; with room on the decode side the same request does not
// wait.
func TestPDBackPressure(t *testing.T) {
	recs := []traces.Record{pdRec("long", 0, 1000, 2000), pdRec("next", 1e6, 2500, 2)}
	cfg := fleet.DefaultPD()
	cfg.TransferGbps = 100
	for _, c := range []struct {
		device int64
		wait   bool
	}{{4096, true}, {65536, false}} {
		reps := []fleet.PDReplica{pdServer(fleet.Prefill, 8192, -1, 1), pdServer(fleet.Decode, c.device, -1, 1)}
		res, _ := pdRun(t, reps, cfg, recs)
		byID := map[string]int{}
		for i, r := range res.Requests {
			byID[r.ID] = i
		}
		long, next := res.Requests[byID["long"]], res.PDRequests[byID["next"]]
		if !c.wait {
			if next.Bootstrap != 0 {
				t.Errorf("device %d: next waited %d ns for preallocation with room", c.device, next.Bootstrap)
			}
			continue
		}
		// While long holds its 1000 tokens and 512 reserved, 4096 has no
		// room for next's 2500 + 512: next is preallocated when long
		// finishes (long reaches the decode replica after next arrives).
		if at := engine.Time(1e6) + next.Bootstrap; at != long.Finish {
			t.Errorf("device %d: next preallocated at %d, long finished at %d", c.device, at, long.Finish)
		}
		if next.PrefillQueue != 0 {
			t.Errorf("device %d: next queued %d ns on the idle prefill replica", c.device, next.PrefillQueue)
		}
	}
}

// BenchmarkPD runs benchTrace's 1,000 requests on a disaggregated fleet
// of two prefill and two decode replicas (the aggregated fleet of four is
// BenchmarkFleet/replicas=4), and reports ns per request.
func BenchmarkPD(b *testing.B) {
	recs := benchTrace(1000)
	cfg := fleet.DefaultPD()
	cfg.Prefill.Policy, cfg.Decode.Policy = router.RoundRobin, router.RoundRobin
	cfg.TransferGbps = 100
	reps := []fleet.PDReplica{
		pdServer(fleet.Prefill, 2048, -1, 1), pdServer(fleet.Prefill, 2048, -1, 1),
		pdServer(fleet.Decode, 2048, -1, 1), pdServer(fleet.Decode, 2048, -1, 1),
	}
	for b.Loop() {
		pdRun(b, reps, cfg, recs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(recs)), "ns/request")
}

// kv_aware on the prefill pool reads the prefill replicas' KV events. The
// fleet is a decode replica (0, behind round robin) and two prefill
// replicas (1 and 2). x (short) goes to prefill replica 1, a at 1 ms (long
// output, so in flight until about a second) to replica 2, the less
// loaded; b, a's prompt again, arrives at 300 ms. With no delay, a delay
// of 100 ms (a's prefill is long done), and with cache_aware_oracle
// (threshold 0, never imbalanced) the router sees a's prefix on replica 2
// and b's prefill there hits it; with a 1 s delay nothing of a is seen
// yet, and b goes to replica 1, the less loaded, and computes its prompt
// again.
func TestPDKVAwarePrefillPool(t *testing.T) {
	pa := seqTokens(1000, 800)
	recs := []traces.Record{
		{ID: "x", Arrival: 0, InputLen: 100, Tokens: seqTokens(50000, 100), OutputLen: 1},
		{ID: "a", Arrival: 1e6, InputLen: len(pa), Tokens: pa, OutputLen: 500},
		{ID: "b", Arrival: 300e6, InputLen: len(pa), Tokens: pa, OutputLen: 1},
	}
	oracle := router.Default()
	oracle.Policy = router.CacheAwareOracle
	oracle.CacheAware.CacheThreshold, oracle.CacheAware.BalanceRelThreshold = 0, math.Inf(1)
	for _, c := range []struct {
		name    string
		prefill router.Config
		replica int
	}{{"kv_aware", kvRouter(0), 2}, {"kv_aware 100ms", kvRouter(100 * time.Millisecond), 2},
		{"kv_aware 1s", kvRouter(time.Second), 1}, {"cache_aware_oracle", oracle, 2}} {
		reps := []fleet.PDReplica{pdServer(fleet.Decode, 4096, -1, 1), pdServer(fleet.Prefill, 4096, -1, 1),
			pdServer(fleet.Prefill, 4096, -1, 1)}
		cfg := fleet.DefaultPD()
		cfg.TransferGbps = 400
		cfg.Prefill, cfg.Decode = c.prefill, router.Default()
		cfg.Decode.Policy = router.RoundRobin
		res, _ := pdRun(t, reps, cfg, recs)
		got := map[string]int{}
		for k, r := range res.Requests {
			got[r.ID] = res.PDRequests[k].Prefill
		}
		var cachedB int64
		for _, r := range res.Replicas[got["b"]].Result.Requests {
			if r.ID == "b" {
				cachedB = r.CachedTokens
			}
		}
		if got["x"] != 1 || got["a"] != 2 || got["b"] != c.replica || (cachedB > 0) != (c.replica == 2) {
			t.Errorf("%s: prefilled on %v, b's prefill cached %d tokens; want b on prefill replica %d", c.name, got, cachedB, c.replica)
		}
	}
}

// A pool behind kv_aware or cache_aware_oracle needs one page size, and
// both pools behind them the same one (one page-id space): other fleets
// are refused, naming the replicas.
func TestPDKVAwareRefusals(t *testing.T) {
	oracle := router.Default()
	oracle.Policy = router.CacheAwareOracle
	for _, c := range []struct {
		reps            []fleet.PDReplica
		prefill, decode router.Config
		want            string
	}{
		{[]fleet.PDReplica{pdServer(fleet.Prefill, 4096, -1, 1), pdServer(fleet.Decode, 4096, -1, 1), pdServer(fleet.Prefill, 4096, -1, 4)},
			kvRouter(0), router.Default(),
			"fleet: router.prefill.policy kv_aware needs one page size on every prefill replica: replica 0 has 1, replica 2 (prefill) 4"},
		{[]fleet.PDReplica{pdServer(fleet.Prefill, 4096, -1, 4), pdServer(fleet.Decode, 4096, -1, 1)},
			kvRouter(0), oracle,
			"fleet: router.prefill.policy and router.decode.policy read the replicas' KV events with one page size: the prefill replicas have 4, the decode replicas 1"},
	} {
		cfg := fleet.DefaultPD()
		cfg.TransferGbps = 400
		cfg.Prefill, cfg.Decode = c.prefill, c.decode
		if _, err := fleet.NewPD(c.reps, cfg, 1); err == nil || err.Error() != c.want {
			t.Errorf("error %v, want %s", err, c.want)
		}
	}
}

// A pool's router is polled as a regular fleet's: with the prefill pool
// behind cache_aware, its in-flight test never tripping and a poll at every
// decision, an overload_token_usage_threshold of 0 counts as imbalanced
// every request that arrives while a prefill replica holds KV, and the
// default threshold (1) none.
func TestPDLoadPoll(t *testing.T) {
	var recs []traces.Record
	for i := range 10 {
		toks := seqTokens(1000*i, 300)
		recs = append(recs, traces.Record{ID: fmt.Sprint("r", i), Arrival: int64(i) * 1e6, InputLen: len(toks), Tokens: toks, OutputLen: 4})
	}
	for _, overload := range []float64{0, 1} {
		cfg := fleet.DefaultPD()
		cfg.TransferGbps = 400
		cfg.Prefill.CacheAware.BalanceAbsThreshold = 1 << 30
		cfg.Prefill.CacheAware.OverloadTokenUsageThreshold = overload
		cfg.Prefill.PowerOfTwo.LoadPollInterval = 0
		res, _ := pdRun(t, []fleet.PDReplica{pdServer(fleet.Prefill, 4096, -1, 1), pdServer(fleet.Prefill, 4096, -1, 1),
			pdServer(fleet.Decode, 4096, -1, 1)}, cfg, recs)
		counts := map[string]int64{}
		for _, d := range res.Decisions {
			counts[d.Reason] = d.Count
		}
		if imb := counts["prefill:imbalanced"]; (overload == 0) != (imb > 0) || imb > 9 {
			t.Errorf("overload_token_usage_threshold %g: decisions %v", overload, counts)
		}
	}
}
