package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim/engine"
)

// The bundled fleet files, and the trace the fleet tests run them on.
var (
	fleetExample  = filepath.Join("..", "..", "configs", "fleet-example.toml")
	fleetSharedL3 = filepath.Join("..", "..", "configs", "fleet-shared-l3.toml")
	fleetPD       = filepath.Join("..", "..", "configs", "fleet-pd.toml")
	fleetTrace    = filepath.Join("testdata", "fleet", "conv300.jsonl")
)

// The bundled fleet examples on the first 300 requests of the Mooncake
// conversation trace, each run silently, print the fleet table:
//   - example: four replicas of the default server behind cache_aware;
//     the load balance, the router's decisions and the replicas.
//   - shared-l3: four replicas behind round_robin, one L3 store; the
//     storage section with cross-replica reads and one line per replica.
//   - pd: two prefill and two decode replicas of the default server; the
//     transfers and the TTFT split.
func TestSimFleetTables(t *testing.T) {
	for _, c := range []struct{ config, golden string }{
		{fleetExample, "example"},
		{fleetSharedL3, "shared-l3"},
		{fleetPD, "pd"},
	} {
		t.Run(c.golden, func(t *testing.T) {
			checkGolden(t, "fleet", c.golden, runQuiet(t, "sim", "--config", c.config, "--trace", fleetTrace))
		})
	}
}

// fleetRouting is the routing part of kvsim sim --json on a fleet: each
// replica's group and routed requests, and the router's decisions.
type fleetRouting struct {
	Replicas []struct {
		Group  string `json:"group"`
		Routed int64  `json:"routed"`
	} `json:"replicas"`
	Decisions []struct {
		Reason string `json:"reason"`
		Count  int64  `json:"count"`
	} `json:"decisions"`
}

// --json holds the fleet's summary, every replica and the decisions, and
// they add up to the trace's requests.
func TestSimFleetJSON(t *testing.T) {
	perReq := filepath.Join(t.TempDir(), "requests.jsonl")
	var got struct {
		Policy  string         `json:"policy"`
		Summary engine.Summary `json:"summary"`
		Seed    uint64         `json:"seed"`
		fleetRouting
	}
	runQuietJSON(t, &got, "sim", "--config="+fleetExample, "--trace", fleetTrace, "--json", "--seed", "3", "--per-request", perReq)
	var routed, decided int64
	var groups []string
	for _, r := range got.Replicas {
		routed += r.Routed
		groups = append(groups, r.Group)
	}
	for _, d := range got.Decisions {
		decided += d.Count
	}
	if got.Policy != "cache_aware" || got.Seed != 3 || got.Summary.Completed != 300 || routed != 300 || decided != 300 ||
		strings.Join(groups, ",") != "h200,h200,h200,h200-host4" {
		t.Fatalf("policy %q, seed %d, completed %d, routed %d, decided %d, groups %v", got.Policy, got.Seed, got.Summary.Completed, routed, decided, groups)
	}
	// Every request's line names its replica, and each replica has the
	// requests the router sent it.
	per := make([]int64, len(got.Replicas))
	for _, r := range readJSONLines[struct {
		ID      string `json:"id"`
		Replica int    `json:"replica"`
	}](t, perReq) {
		if r.ID == "" || r.Replica < 0 || r.Replica >= len(per) {
			t.Fatalf("request line %+v", r)
		}
		per[r.Replica]++
	}
	for i, r := range got.Replicas {
		if per[i] != r.Routed {
			t.Errorf("replica %d: %d request lines, routed %d", i, per[i], r.Routed)
		}
	}
}

// A fleet of one replica reports the summary `kvsim sim` reports for its
// server alone, whatever the policy.
func TestSimFleetOfOne(t *testing.T) {
	server := string(testutil.ReadFile(t, filepath.Join("testdata", "replay", "sim_small.toml")))
	dir := t.TempDir()
	single := filepath.Join(dir, "single.toml")
	writeFile(t, single, server)
	want := simSummary(t, "--config", single)
	for _, policy := range []string{"cache_aware", "round_robin", "random", "power_of_two", "consistent_hash", "nginx_round_robin", "nginx_hash"} {
		path := filepath.Join(dir, policy+".toml")
		writeFile(t, path, server+"\n[[fleet.groups]]\ncount = 1\n[router]\npolicy = \""+policy+"\"\n")
		if got := simSummary(t, "--config", path); got != want {
			t.Errorf("%s: fleet of one %+v\nwant the server's %+v", policy, got, want)
		}
	}
}

// A bad fleet file is reported at its line.
func TestSimFleetRefuses(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.toml")
	writeFile(t, bad, "[[fleet.groups]]\ncount = 0\n")
	checkRefused(t, []string{"sim", "--config", bad}, "bad.toml:2:1: fleet.groups[0].count: must be in [1, 4096] (got 0)")
}

// --timeline on a fleet writes every replica's samples in time order,
// under a replica column: a fleet of one replica writes its server's
// timeline, row for row (also when a forward outlasts the sampling
// interval while requests arrive, which a replica learns of only as they
// are routed); a fleet of two, both replicas' samples.
func TestSimFleetTimeline(t *testing.T) {
	server := string(testutil.ReadFile(t, filepath.Join("testdata", "replay", "sim_small.toml")))
	dir := t.TempDir()
	timeline := func(cfg, trace string) []string {
		t.Helper()
		out := filepath.Join(dir, "timeline.csv")
		runQuiet(t, "sim", "--config", cfg, "--trace", trace, "--timeline", out)
		return strings.Split(strings.TrimSuffix(string(testutil.ReadFile(t, out)), "\n"), "\n")
	}
	// Three 100k-token prompts 1 ns apart, prefilled whole: forwards of
	// seconds.
	long := filepath.Join(dir, "long.jsonl")
	writeFile(t, long, `{"kvsim_trace":1,"format":"mooncake","block_size":512}
{"id":"a","arrival_ns":0,"input_len":100000,"output_len":1}
{"id":"b","arrival_ns":1,"input_len":100010,"output_len":1}
{"id":"c","arrival_ns":2,"input_len":100020,"output_len":1}
`)
	unchunked := "seed = 1\n[model]\npreset = \"qwen2.5-14b\"\ncontext_len = 131072\n[gpu]\npreset = \"h200\"\n" +
		"[server]\ntp_size = 4\nchunked_prefill_size = -1\nmax_prefill_tokens = 200000\nmem_fraction_static = 0.85\n[cache]\nhierarchical = true\n"
	for _, c := range []struct{ server, trace string }{{server, fleetTrace}, {unchunked, long}} {
		single := filepath.Join(dir, "single.toml")
		writeFile(t, single, c.server)
		want := timeline(single, c.trace)
		if len(want) < 4 || want[0] != engine.TimelineHeader {
			t.Fatalf("the server's timeline: %d lines, header %q", len(want), want[0])
		}
		one := filepath.Join(dir, "one.toml")
		writeFile(t, one, c.server+"\n[[fleet.groups]]\ncount = 1\n[router]\npolicy = \"round_robin\"\n")
		got := timeline(one, c.trace)
		if strings.Join(got, "\n") != "replica,"+strings.Join(want, "\n0,") {
			t.Fatalf("%s: fleet of one's timeline\n%s\nwant the server's, under replica,\n%s", c.trace, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	two := filepath.Join(dir, "two.toml")
	writeFile(t, two, server+"\n[[fleet.groups]]\ncount = 2\n[router]\npolicy = \"round_robin\"\n")
	rows := timeline(two, fleetTrace)
	seen := map[string]int{}
	last := -1.0
	for _, r := range rows[1:] {
		f := strings.Split(r, ",")
		tm, err := strconv.ParseFloat(f[1], 64)
		if len(f) != len(strings.Split(rows[0], ",")) || err != nil || tm < last {
			t.Fatalf("fleet of two: row %q after t = %g", r, last)
		}
		last = tm
		seen[f[0]]++
	}
	if len(seen) != 2 || seen["0"] == 0 || seen["1"] == 0 {
		t.Fatalf("fleet of two: rows by replica %v, want replicas 0 and 1", seen)
	}
}

// --idle-gap-cap and workload.idle_gap_cap cut a fleet's trace as they cut
// one server's: a fleet of one replica runs what its server runs.
func TestSimFleetIdleGapCap(t *testing.T) {
	trace := filepath.Join("..", "..", "traces", "testdata", "wekadir")
	server := string(testutil.ReadFile(t, filepath.Join("testdata", "replay", "sim_small.toml")))
	dir := t.TempDir()
	single, one := filepath.Join(dir, "single.toml"), filepath.Join(dir, "one.toml")
	writeFile(t, single, server)
	writeFile(t, one, server+"\n[[fleet.groups]]\ncount = 1\n")
	run := func(args ...string) (engine.Summary, string) {
		t.Helper()
		stdout, stderr := runOK(t, append([]string{"sim", "--trace", trace, "--json"}, args...)...)
		var wrap struct {
			Summary *engine.Summary `json:"summary"`
		}
		decodeJSON(t, stdout, &wrap)
		if wrap.Summary == nil {
			var s engine.Summary
			decodeJSON(t, stdout, &s)
			return s, stderr
		}
		return *wrap.Summary, stderr
	}
	uncut, _ := run("--config", one)
	want, _ := run("--config", single, "--idle-gap-cap", "1s")
	got, stderr := run("--config", one, "--idle-gap-cap", "1s")
	if got != want || !strings.Contains(stderr, "cut 2 gaps in 2 session families") {
		t.Fatalf("fleet of one, --idle-gap-cap 1s: %+v (stderr %q)\nwant the server's %+v", got, stderr, want)
	}
	if got == uncut {
		t.Fatalf("the cap changed nothing: %+v", got)
	}
	capped := filepath.Join(dir, "capped.toml")
	writeFile(t, capped, server+"\n[workload]\nidle_gap_cap = 1.0\n[[fleet.groups]]\ncount = 1\n")
	if got, _ := run("--config", capped); got != want {
		t.Fatalf("workload.idle_gap_cap = 1.0: %+v\nwant %+v", got, want)
	}
	checkRefused(t, []string{"sim", "--config", one, "--trace", trace, "--idle-gap-cap", "-1s"}, "--idle-gap-cap: must be >= 0")
}

// The commands that fit one server refuse a fleet file, naming it,
// instead of fitting its base server alone.
func TestOneServerCommandsRefuseFleet(t *testing.T) {
	args := []string{"calibrate", "--config", fleetExample, "--per-request", "x.jsonl", "--out", filepath.Join(t.TempDir(), "c.toml")}
	checkRefused(t, args, "fleet-example.toml: fleet: ", "only kvsim sim, study, serve and replay --target sim run a fleet")
}

// replay --target sim runs a fleet file's whole fleet behind its router: a
// fleet of one replica writes, request by request, what its server alone
// writes, whatever the policy; a fleet of two is a different server.
func TestReplaySimFleet(t *testing.T) {
	server := string(testutil.ReadFile(t, simConfig))
	dir := t.TempDir()
	replayOne := func(cfg string) string {
		t.Helper()
		per := filepath.Join(dir, "per.jsonl")
		runOK(t, "replay", "--trace", replayTrace, "--target", "sim", "--config", cfg, "--max-concurrency", "3", "--per-request", per, "--json")
		// The requests, without the header line (its server is kvsim-fleet).
		_, reqs, _ := strings.Cut(string(testutil.ReadFile(t, per)), "\n")
		return reqs
	}
	single := filepath.Join(dir, "single.toml")
	writeFile(t, single, server)
	want := replayOne(single)
	for _, policy := range []string{"cache_aware", "round_robin", "power_of_two", "consistent_hash", "nginx_hash"} {
		path := filepath.Join(dir, policy+".toml")
		writeFile(t, path, server+"\n[[fleet.groups]]\ncount = 1\n[router]\npolicy = \""+policy+"\"\n")
		if got := replayOne(path); got != want {
			t.Errorf("%s: a fleet of one replayed differently from its server alone", policy)
		}
	}
	two := filepath.Join(dir, "two.toml")
	writeFile(t, two, server+"\n[[fleet.groups]]\ncount = 2\n[router]\npolicy = \"round_robin\"\n")
	if replayOne(two) == want {
		t.Error("a fleet of two replayed exactly as one server")
	}
}

// kvsim sim refuses a fleet file that would run other than it says: an
// empty fleet (not one server), a key set twice in a group (not one
// spelling at random).
func TestSimFleetFileRefuses(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want []string
	}{
		{"[fleet]\ngroups = []\n", []string{"f.toml:1:1: fleet.groups: at least one group"}},
		{"[[fleet.groups]]\ncount = 1\nset = { \"server.tp_size\" = 2, server = { tp_size = 8 } }\n",
			[]string{`f.toml:3:42: fleet.groups[0].set.server.tp_size: sets server.tp_size again, as fleet.groups[0].set."server.tp_size" does (`, "f.toml:3:9)"}},
	} {
		checkFleetFileRefused(t, c.doc, c.want...)
	}
}

// Two llama-server replicas behind nginx_hash (e2e/nginx.sh's fleet): each
// request goes to the replica nginx's ketama ring gives its session, so a
// document's questions all land on one replica, and every question after
// its document's first hits the 800-token document there (the requests
// are 10 s apart: one at a time).
func TestSimFleetNginxHash(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "shared.jsonl")
	runOK(t, "trace", "gen", "shared-prefix", "--groups", "6", "--questions", "3", "--system-prompt-len", "800",
		"--question-len", "80", "--output-len", "4", "--order", "grouped", "--vocab", "1:256", "--rate", "0.1", "--seed", "8", "--out", trace)
	server := string(testutil.ReadFile(t, filepath.Join("..", "..", "configs", "llamacpp", "tiny.toml")))
	ups := []string{"127.0.0.1:8081", "127.0.0.1:8082"} // documents C and E on the second
	cfg := filepath.Join(dir, "fleet.toml")
	writeFile(t, cfg, server+"\n[[fleet.groups]]\ncount = 2\n[router]\npolicy = \"nginx_hash\"\nupstreams = [\""+ups[0]+"\", \""+ups[1]+"\"]\n")
	perReq := filepath.Join(dir, "per.jsonl")
	runOK(t, "sim", "--config", cfg, "--trace", trace, "--per-request", perReq)
	rc := router.Default()
	rc.Policy = router.NginxHash
	rc.Nginx.Upstreams = ups
	rt, err := router.New(rc, 2, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	used := map[int]bool{}
	for _, r := range readJSONLines[struct {
		ID      string `json:"id"`
		Replica int    `json:"replica"`
		Cached  int    `json:"cached_tokens"`
	}](t, perReq) {
		doc, q, _ := strings.Cut(r.ID, "+")
		d, err := rt.Route(&router.Request{Session: doc})
		if err != nil {
			t.Fatal(err)
		}
		used[d.Replica] = true
		// A first question shares at most a few tokens with another
		// document's by chance (random bytes); the others hit theirs.
		if hit := r.Cached >= 800; r.Replica != d.Replica || hit == (q == "Q1") {
			t.Errorf("%s: replica %d, cached %d; want replica %d (%s), a hit of the document unless Q1", r.ID, r.Replica, r.Cached, d.Replica, ups[d.Replica])
		}
	}
	if len(used) != 2 {
		t.Errorf("the six documents all hash to one replica (%v): the test shows nothing", used)
	}
}

// checkFleetFileRefused writes doc to a file f.toml, which kvsim sim on
// fleetTrace must refuse with every one of want in its message.
func checkFleetFileRefused(t *testing.T, doc string, want ...string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "f.toml")
	writeFile(t, f, doc)
	checkRefused(t, []string{"sim", "--config", f, "--trace", fleetTrace}, want...)
}

// The session of a replayed record and a served request's X-Session-Id
// (or SMG's X-SMG-Routing-Key) reach a fleet's router: behind
// consistent_hash every request of a session goes to one replica, so a
// session that sends its prompt again hits it every time after the first.
func TestFleetSessionKey(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hash.toml")
	writeFile(t, cfg, string(testutil.ReadFile(t, simConfig))+"\n[[fleet.groups]]\ncount = 4\n[router]\npolicy = \"consistent_hash\"\n")
	trace := filepath.Join(dir, "sessions.jsonl")
	var b strings.Builder
	b.WriteString(`{"kvsim_trace":1}` + "\n")
	for i := range 24 {
		s := i % 6
		fmt.Fprintf(&b, `{"id":"r%d","arrival_ns":%d,"session":"s%d","tokens":[%s],"input_len":300,"output_len":2}`+"\n",
			i, i*1e6, s, strings.TrimSuffix(strings.Repeat(strconv.Itoa(1000*s+1)+",", 300), ","))
	}
	writeFile(t, trace, b.String())
	per := filepath.Join(dir, "per.jsonl")
	runOK(t, "replay", "--trace", trace, "--target", "sim", "--config", cfg, "--max-concurrency", "1", "--warmup=false", "--per-request", per)
	_, recs := readTrace(t, per)
	for _, r := range recs {
		if n, _ := strconv.Atoi(strings.TrimPrefix(r.ID, "r")); r.Observed == nil || (n >= 6) != (r.Observed.CachedTokens > 0) {
			t.Errorf("replay: request %s observed %+v; want a hit from each session's second request on", r.ID, r.Observed)
		}
	}
	url := startServe(t, "--config", cfg, "--time-scale", "0")
	for i, h := range []string{"X-Session-Id", "X-SMG-Routing-Key", "X-Session-Id", ""} {
		req, _ := http.NewRequest("POST", url+"/generate", strings.NewReader(`{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":1}}`))
		if h != "" {
			req.Header.Set(h, fmt.Sprint("k", i))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`kvsim_router_decisions_total{reason="hash_ring"} 3`, `kvsim_router_decisions_total{reason="no_key"} 1`} {
		if !strings.Contains(string(m), want+"\n") {
			t.Errorf("serve: /metrics lacks %s", want)
		}
	}
}
