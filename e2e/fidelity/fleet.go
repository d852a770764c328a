package main

// The fleet commands: e2e/nginx.sh's helpers for two llama-servers behind a
// real nginx, predicted by kvsim's fleet with the matching nginx policy.
//
//	fidelity route -url URL -policy nginx_hash|nginx_round_robin -upstreams A,B[,...] [-n 2000]
//	fidelity chain -trace T -out O
//	fidelity simtrace -trace T -out O -gap D [-closed C [-sim SIM.jsonl]]
//	fidelity fleetcmp -name NAME -real REAL.jsonl -sim SIM.jsonl [-exact] [-max-hit-pp 2] [-access LOG -upstreams A,B]
//
// route sends n requests to an nginx whose upstream servers each answer
// with their own name (e2e/nginx.sh's routing check, no llama-server
// needed): request i carries X-Session-Id "k<i>", except every seventh,
// which carries none. It asks kvsim's router the same questions in the
// same order and fails unless every answer matches.
//
// chain writes the trace with each record's Parent the previous record of
// its session, so that a replay sends a session's next request only when
// its previous one has ended (a user asking the next question).
//
// simtrace writes the trace the fleet simulator runs: the same records
// without dependencies (the arrivals carry them), arriving either gap
// apart (a concurrency-1 run with a gap longer than any request), or as a
// replay at concurrency C sends them (its parents ended, a slot free, the
// gap kept): the requests take the times they took in the simulator's
// previous round (-sim), so e2e/nginx.sh runs simtrace and kvsim sim in
// turn until the arrivals stop changing (kvsim sim has no client with the
// replay's slots and send gap). The arrivals then come from the simulated
// run alone, none from the real one.
//
// fleetcmp puts a real replay's per-request output beside the fleet
// simulator's (kvsim sim --per-request): how many requests' cached_tokens
// the simulator predicted exactly, and both hit rates (cached over prompt
// tokens). With -exact it fails unless every request is exact; with
// -max-hit-pp unless the hit rates are that close. With -access (nginx's
// access log, one "$upstream_addr" line per request, in the order the
// requests ended, which at concurrency 1 is the order they were sent) it
// also counts the requests routed to the replica the simulator chose.

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/emirpasic/gods/trees/binaryheap"
	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/replay"
	"github.com/kvsim/kvsim/traces"
)

// routeCheck is route's comparison, apart from flag parsing: n requests
// to url, each answer (the upstream's name) against kvsim's router.
func routeCheck(client *http.Client, url string, cfg router.Config, n int, w io.Writer) error {
	rt, err := router.New(cfg, len(cfg.Nginx.Upstreams), router.Deps{})
	if err != nil {
		return err
	}
	bad := 0
	for i := range n {
		key := "k" + strconv.Itoa(i)
		if i%7 == 6 {
			key = ""
		}
		d, err := rt.Route(&router.Request{Session: key})
		if err != nil {
			return err
		}
		if err := rt.Finish(d.Replica); err != nil {
			return err
		}
		got, err := ask(client, url, key)
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if want := cfg.Nginx.Upstreams[d.Replica]; got != want {
			if bad < 5 {
				fmt.Fprintf(w, "route: request %d (key %q): nginx chose %s, kvsim %s\n", i, key, got, want)
			}
			bad++
		}
	}
	fmt.Fprintf(w, "route: %v over %d upstreams: %d of %d requests routed as kvsim's router predicts\n", cfg.Policy, len(cfg.Nginx.Upstreams), n-bad, n)
	if bad > 0 {
		return gateError{fmt.Sprintf("route: %d of %d requests routed otherwise than kvsim predicts", bad, n)}
	}
	return nil
}

// ask sends one GET with the session key (none when empty) and returns
// the body, trimmed.
func ask(client *http.Client, url, key string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if key != "" {
		req.Header.Set("X-Session-Id", key)
	}
	res, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return "", err
	}
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", res.StatusCode, b)
	}
	return strings.TrimSpace(string(b)), nil
}

func route(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("route", flag.ContinueOnError)
	url := fs.String("url", "", "nginx's URL")
	policy := fs.String("policy", "", "nginx_hash or nginx_round_robin")
	ups := fs.String("upstreams", "", "the upstream server names, comma-separated, in the upstream block's order")
	n := fs.Int("n", 2000, "requests")
	if err := parseFlags(fs, args, "url", "upstreams"); err != nil {
		return err
	}
	cfg := router.Default()
	if err := cfg.Policy.UnmarshalText([]byte(*policy)); err != nil {
		return err
	}
	cfg.Nginx.Upstreams = strings.Split(*ups, ",")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	return routeCheck(client, *url, cfg, *n, w)
}

// simRequest is the part of a fleet simulator's per-request line fleetcmp
// reads.
type simRequest struct {
	ID           string `json:"id"`
	PromptTokens int    `json:"prompt_tokens"`
	CachedTokens int    `json:"cached_tokens"`
	Failed       string `json:"failed"`
	Replica      int    `json:"replica"`
	Arrival      int64  `json:"arrival_ns"`
	Finish       int64  `json:"finish_ns"`
}

// chainSessions returns recs with each record's Parent the previous record
// of its session (none for a session's first record or a record without a
// session), WaitFor and ThinkTime cleared.
func chainSessions(recs []traces.Record) []traces.Record {
	out := slices.Clone(recs)
	last := map[string]string{}
	for i := range out {
		r := &out[i]
		r.Parent, r.WaitFor, r.ThinkTime = "", nil, 0
		if r.Session != "" {
			r.Parent = last[r.Session]
			last[r.Session] = r.ID
		}
	}
	return out
}

func chain(args []string) error {
	fs := flag.NewFlagSet("chain", flag.ContinueOnError)
	in := fs.String("trace", "", "the trace")
	out := fs.String("out", "", "the trace to write")
	if err := parseFlags(fs, args, "trace", "out"); err != nil {
		return err
	}
	recs, err := traces.ReadAll(*in, traces.FormatAuto, 0)
	if err != nil {
		return err
	}
	return writeTrace(*out, chainSessions(recs), "e2e/fidelity chain of "+*in)
}

// simTrace returns recs without dependencies (the arrivals carry them),
// arriving as kvsim replay --max-concurrency c --send-gap gap (no
// --timestamps: every record due at once) sends them, by its pacer's rules
// (replay/pace.go): a record is ready when its Parent and WaitFor records
// (earlier ones; later ones are ignored, as by the pacer) have ended, at
// once if it has none; ready records queue,
// in the order they became ready (record order at ties), for one of c
// slots (0: no limit), a slot freed by a request's end going to the queue
// before the requests that end readies; granted records are sent in grant
// order, each no sooner than gap after the previous send. Ends at the same
// instant as a send come first. A record's request takes as long as it
// took in prev (the simulator's previous round, by ID: its finish minus
// its arrival), none if it is not there, so the rule applied to one
// round's results gives the next round's arrivals. The records come out in
// arrival order.
func simTrace(recs []traces.Record, prev map[string]simRequest, c int, gap time.Duration) []traces.Record {
	n := len(recs)
	idx := make(map[string]int, n)
	left := make([]int, n)
	dependents := make([][]int, n)
	var queue []int // ready, waiting for a slot
	for i, r := range recs {
		seen := map[int]bool{}
		for _, id := range append([]string{r.Parent}, r.WaitFor...) {
			if j, ok := idx[id]; ok && !seen[j] {
				seen[j] = true
				left[i]++
				dependents[j] = append(dependents[j], i)
			}
		}
		idx[r.ID] = i
		if left[i] == 0 {
			queue = append(queue, i)
		}
	}
	out := slices.Clone(recs)
	ends := binaryheap.NewWith(byEnd) // requests in flight, by end time (gods)
	var outbox []int                  // granted, waiting for the send gap
	inUse, sent := 0, 0
	last := int64(math.MinInt64 / 2) // the previous send
	grant := func() {
		for len(queue) > 0 && (c == 0 || inUse < c) {
			outbox = append(outbox, queue[0])
			queue = queue[1:]
			inUse++
		}
	}
	var now int64
	for sent < n {
		grant()
		send := int64(math.MaxInt64)
		if len(outbox) > 0 {
			send = max(now, last+int64(gap))
		}
		if top, ok := ends.Peek(); ok && top.(end).at <= send {
			ends.Pop()
			e := top.(end)
			now = e.at
			inUse--
			grant() // the freed slot goes to the queue first
			for _, d := range dependents[e.i] {
				if left[d]--; left[d] == 0 {
					queue = append(queue, d)
				}
			}
			continue
		}
		if len(outbox) == 0 {
			// Every request ends and a record waits only for earlier ones.
			panic("fidelity: simtrace: records left that nothing readies")
		}
		i := outbox[0]
		outbox = outbox[1:]
		now, last = send, send
		sent++
		r := &out[i]
		r.Arrival = send
		r.Parent, r.WaitFor, r.ThinkTime = "", nil, 0
		took := int64(0)
		if p, ok := prev[r.ID]; ok {
			took = max(p.Finish-p.Arrival, 0)
		}
		ends.Push(end{at: send + took, i: i})
	}
	// A trace is in arrival order; a record sent after a later one (it
	// waited for its Parent) moves behind it.
	slices.SortStableFunc(out, func(a, b traces.Record) int { return cmp.Compare(a.Arrival, b.Arrival) })
	return out
}

// end is a request's end in simTrace's emulation of the replay.
type end struct {
	at int64
	i  int
}

// byEnd orders ends by time, then record order.
func byEnd(a, b any) int {
	x, y := a.(end), b.(end)
	return cmp.Or(cmp.Compare(x.at, y.at), cmp.Compare(x.i, y.i))
}

func simtrace(args []string) error {
	fs := flag.NewFlagSet("simtrace", flag.ContinueOnError)
	in := fs.String("trace", "", "the replayed trace")
	out := fs.String("out", "", "the trace to write")
	gap := fs.Duration("gap", 0, "the send gap: the least time between two arrivals")
	c := fs.Int("closed", 0, "the replay's concurrency (0: none, records arrive gap apart)")
	simPath := fs.String("sim", "", "with -closed: the fleet simulator's per-request output of the previous round, whose end times free the slots")
	if err := parseFlags(fs, args, "trace", "out"); err != nil {
		return err
	}
	if *gap <= 0 || *c < 0 {
		return errors.New("simtrace: -gap must be > 0 and -closed >= 0")
	}
	recs, err := traces.ReadAll(*in, traces.FormatAuto, 0)
	if err != nil {
		return err
	}
	prev := map[string]simRequest{}
	if *simPath != "" {
		sim, err := readSim(*simPath)
		if err != nil {
			return err
		}
		for _, r := range sim {
			prev[r.ID] = r
		}
	}
	return writeTrace(*out, simTrace(recs, prev, *c, *gap), "e2e/fidelity simtrace of "+*in)
}

// fleetCmp is fleetcmp's result.
type fleetCmp struct {
	n, exact, failed   int
	realHit, simHit    float64
	routed, routedSame int
	firstDiff          []string
	// slowdown is the median over requests of the real E2E over the
	// simulated one: how much slower the machine ran than the calibration.
	slowdown float64
}

// compareFleet sets each real request beside the simulated one of the
// same ID. access, when not nil, is the real upstream of each request in
// send order (concurrency 1) and ups the replicas' names.
func compareFleet(real []replay.RequestResult, sim []simRequest, access []string, ups []string) (fleetCmp, error) {
	var c fleetCmp
	byID := map[string]simRequest{}
	for _, s := range sim {
		byID[s.ID] = s
	}
	var rp, rc, sp, sc int
	var ratios []float64
	sent := slices.DeleteFunc(slices.Clone(real), func(r replay.RequestResult) bool { return !r.Sent })
	slices.SortStableFunc(sent, func(a, b replay.RequestResult) int { return cmp.Compare(a.Start, b.Start) })
	for i, r := range sent {
		s, ok := byID[r.ID]
		if !ok {
			return c, fmt.Errorf("fleetcmp: request %q is not in the simulator's output", r.ID)
		}
		if r.Failed != "" || s.Failed != "" {
			c.failed++
			continue
		}
		c.n++
		if r.CachedTokens == s.CachedTokens {
			c.exact++
		} else if len(c.firstDiff) < 5 {
			c.firstDiff = append(c.firstDiff, fmt.Sprintf("%s: real %d, simulated %d", r.ID, r.CachedTokens, s.CachedTokens))
		}
		if e := s.Finish - s.Arrival; e > 0 {
			ratios = append(ratios, float64(r.E2E())/float64(e))
		}
		rp += r.PromptTokens
		rc += r.CachedTokens
		sp += s.PromptTokens
		sc += s.CachedTokens
		if access != nil && i < len(access) {
			c.routed++
			if s.Replica >= 0 && s.Replica < len(ups) && ups[s.Replica] == access[i] {
				c.routedSame++
			}
		}
	}
	if len(ratios) > 0 {
		slices.Sort(ratios)
		c.slowdown = ratios[len(ratios)/2]
	}
	if rp > 0 {
		c.realHit = float64(rc) / float64(rp)
	}
	if sp > 0 {
		c.simHit = float64(sc) / float64(sp)
	}
	return c, nil
}

func fleetcmp(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("fleetcmp", flag.ContinueOnError)
	name := fs.String("name", "", "the run's name in the output")
	realPath := fs.String("real", "", "the real replay's --per-request output")
	simPath := fs.String("sim", "", "kvsim sim --per-request output of the fleet")
	exact := fs.Bool("exact", false, "fail unless every request's cached_tokens is exact")
	maxPP := fs.Float64("max-hit-pp", -1, "fail when the hit rates differ by more than this many points (-1: no gate)")
	accessPath := fs.String("access", "", "nginx's access log: one $upstream_addr line per request (concurrency 1)")
	ups := fs.String("upstreams", "", "with -access: the replicas' upstream names, comma-separated")
	if err := parseFlags(fs, args, "real", "sim"); err != nil {
		return err
	}
	real, err := replay.ReadResults(*realPath)
	if err != nil {
		return err
	}
	sim, err := readSim(*simPath)
	if err != nil {
		return err
	}
	var access []string
	if *accessPath != "" {
		b, err := os.ReadFile(*accessPath)
		if err != nil {
			return err
		}
		access = strings.Fields(string(b))
	}
	c, err := compareFleet(real, sim, access, strings.Split(*ups, ","))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: cached_tokens exact for %d of %d requests; hit rate real %.4f, simulated %.4f (%+.2f pp)",
		*name, c.exact, c.n, c.realHit, c.simHit, 100*(c.simHit-c.realHit))
	if c.routed > 0 {
		fmt.Fprintf(w, "; routed as simulated: %d of %d", c.routedSame, c.routed)
	}
	if c.failed > 0 {
		fmt.Fprintf(w, "; %d failed", c.failed)
	}
	fmt.Fprintf(w, "; real E2E / simulated: %.2f (median)", c.slowdown)
	fmt.Fprintln(w)
	for _, d := range c.firstDiff {
		fmt.Fprintln(w, "  ", d)
	}
	return gateFleet(c, *name, *exact, *maxPP)
}

// gateFleet applies fleetcmp's gates to c: a gateError when a target is
// missed.
func gateFleet(c fleetCmp, name string, exact bool, maxPP float64) error {
	var miss []string
	if c.failed > 0 || c.n == 0 {
		miss = append(miss, fmt.Sprintf("%d requests failed, %d compared", c.failed, c.n))
	}
	if exact && (c.exact != c.n || c.routedSame != c.routed) {
		miss = append(miss, "not every request exact")
	}
	if maxPP >= 0 && 100*abs(c.simHit-c.realHit) > maxPP {
		miss = append(miss, fmt.Sprintf("hit rates more than %g pp apart", maxPP))
	}
	if len(miss) > 0 {
		return gateError{name + ": " + strings.Join(miss, "; ")}
	}
	return nil
}

// readSim reads kvsim sim's --per-request lines of a fleet.
func readSim(path string) ([]simRequest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []simRequest
	dec := json.NewDecoder(f)
	for {
		var r simRequest
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: request %d: %w", path, len(out)+1, err)
		}
		out = append(out, r)
	}
}

func abs(x float64) float64 { return max(x, -x) }
