package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kvsim/kvsim/sim/policy"
	"github.com/kvsim/kvsim/traces"
)

func init() {
	register(&command{
		name:    "policy",
		summary: "page-level L1/L2 cache-policy simulator, number for number SGLang's hicache_policy_simulator.py",
		run:     runPolicy,
	})
}

const policyUsage = `usage: kvsim policy --trace FILE [--format F] [--policy NAME[,NAME]]
                    --l1-pages N --l2-pages M [--write-through-threshold K]
                    [--max-requests R] [--json]
       kvsim policy --trace FILE --policy belady --l1-pages N [--json]

Replays a block-hash trace (one page per block) through a page-level device
(L1) / host (L2) cache model without timing or batching, with exactly the
semantics of SGLang's benchmark/hicache/hicache_policy_simulator.py, and
prints its counters. Policies: main_write_through, boundary_l1_l2 (default:
both, in that order, as SGLang). --policies is accepted as a synonym of
--policy, as SGLang spells it. See the doc of package sim/policy for the
model and every counter.

--policy belady is kvsim's offline optimum (not SGLang's): L1 only
(--l2-pages must be 0 or absent), evicting the page whose next use in the
whole trace is furthest, so its l1_hit_pages bound what any eviction policy
could get from the same L1. It ignores timing and concurrency.

--json prints one object with the counters of the policy; with several
policies, one object keyed by policy name.
`

func runPolicy(args []string, stdout, stderr io.Writer) int {
	fs := newCommand("kvsim policy", policyUsage+"\nflags:\n", stderr)
	tracePath := fs.String("trace", "", "trace file (required); a directory is read as WEKA conversations")
	format := fs.String("format", "", "trace format: "+strings.Join(traces.FormatNames(), ", ")+" (default: detect)")
	var names string
	defNames := policy.MainWriteThrough.String() + "," + policy.BoundaryL1L2.String()
	fs.StringVar(&names, "policy", defNames, "comma-separated policies to simulate")
	fs.StringVar(&names, "policies", defNames, "synonym of --policy (SGLang's name)")
	l1 := fs.Int("l1-pages", -1, "device (L1) capacity in pages, >= 0 (required)")
	l2 := fs.Int("l2-pages", -1, "host (L2) capacity in pages, >= 0 (required)")
	thr := fs.Int("write-through-threshold", policy.Default().WriteThroughThreshold, "hits at which main_write_through copies a page to host, >= 1")
	maxReq := fs.Int("max-requests", 0, "read at most this many records, in file order (0: all)")
	asJSON := fs.Bool("json", false, "print JSON instead of the table")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	usageErr := fs.usageErr
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case *tracePath == "":
		return usageErr("--trace is required")
	case set["policy"] && set["policies"]:
		return usageErr("--policy and --policies are the same flag: give one")
	case !set["l1-pages"]:
		return usageErr("--l1-pages is required")
	case *maxReq < 0:
		return usageErr("--max-requests: must be >= 0 (got %d)", *maxReq)
	}
	f, err := traces.ParseFormat(*format)
	if err != nil {
		return usageErr("--format: %v", err)
	}
	pols, err := parsePolicies(names)
	if err != nil {
		return usageErr("--policy: %v", err)
	}
	if !set["l2-pages"] {
		// Belady models L1 only: --l2-pages may be left out, as 0.
		if slices.ContainsFunc(pols, func(p policy.Policy) bool { return p != policy.Belady }) {
			return usageErr("--l2-pages is required")
		}
		*l2 = 0
	}
	cfgs := make([]policy.Config, len(pols))
	for i, p := range pols {
		cfgs[i] = policy.Config{Policy: p, L1Pages: *l1, L2Pages: *l2, WriteThroughThreshold: *thr}
		if err := cfgs[i].Validate(); err != nil {
			flagNames := strings.NewReplacer("l1_pages", "--l1-pages", "l2_pages", "--l2-pages",
				"write_through_threshold", "--write-through-threshold", "\n", "; ")
			return usageErr("%s", flagNames.Replace(err.Error()))
		}
	}

	results, errs, ids, n, err := policyReplay(*tracePath, f, *maxReq, cfgs)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim policy: %v\n", err)
		return exitFail
	}
	for i, cfg := range cfgs {
		if err := errs[i]; err != nil {
			var ae *policy.AbortError
			if errors.As(err, &ae) {
				fmt.Fprintf(stderr, "kvsim policy: %s: %s: request %q (replayed as number %d): %v (AssertionError: %s); SGLang reports no results\n",
					cfg.Policy, *tracePath, ids(ae.Index), ae.Request, policy.ErrAborted, ae.Reason)
			} else {
				fmt.Fprintf(stderr, "kvsim policy: %s: %v\n", cfg.Policy, err)
			}
			return exitFail
		}
	}
	if *asJSON {
		err = policyWriteJSON(stdout, results)
	} else {
		err = policyWriteTable(stdout, *tracePath, n, cfgs[0], results)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kvsim policy: %v\n", err)
		return exitFail
	}
	return exitOK
}

// policyReplay replays up to limit records (0: all) of the trace through
// each configuration and returns each one's result or error, the ids of
// the requests (by index; for the requests an error names only) and the
// number of requests. The policies are independent simulations over the
// same read-only requests: they run side by side, each result landing at
// its index, so the output does not depend on scheduling. Without Belady,
// which must see the whole trace in advance, the trace streams through the
// online simulators in batches (a Reader yields records in arrival order,
// which is Run's replay order), so memory is the simulators' state (unique
// pages) and one batch, not the trace.
func policyReplay(path string, f traces.Format, limit int, cfgs []policy.Config) (results []policy.Result, errs []error, ids func(int) string, n int, err error) {
	results, errs = make([]policy.Result, len(cfgs)), make([]error, len(cfgs))
	if slices.ContainsFunc(cfgs, func(c policy.Config) bool { return c.Policy == policy.Belady }) {
		reqs, all, err := policyReadTrace(path, f, limit, nil)
		if err != nil {
			return nil, nil, nil, 0, err
		}
		var wg sync.WaitGroup
		for i, cfg := range cfgs {
			wg.Go(func() { results[i], errs[i] = policy.Run(cfg, reqs) })
		}
		wg.Wait()
		return results, errs, func(i int) string { return all[i] }, len(reqs), nil
	}
	sims := make([]*policy.Simulator, len(cfgs))
	for i, cfg := range cfgs {
		if sims[i], err = policy.New(cfg); err != nil {
			return nil, nil, nil, 0, err
		}
	}
	named := map[int]string{} // the ids of the requests an error names
	run := func(reqs []policy.Request, batchIDs []string, base int) {
		var wg sync.WaitGroup
		for i, s := range sims {
			if errs[i] != nil {
				continue
			}
			wg.Go(func() {
				for j, r := range reqs {
					if _, _, err := s.Process(r.Pages); err != nil {
						if ae, ok := errors.AsType[*policy.AbortError](err); ok {
							ae.Index = base + j
						}
						errs[i] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if ae, ok := errors.AsType[*policy.AbortError](err); ok && ae.Index >= base && ae.Index < base+len(reqs) {
				named[ae.Index] = batchIDs[ae.Index-base]
			}
		}
	}
	const batch = 4096
	var reqs []policy.Request
	var batchIDs []string
	if _, _, err := policyReadTrace(path, f, limit, func(r policy.Request, id string) {
		reqs, batchIDs = append(reqs, r), append(batchIDs, id)
		if len(reqs) == batch {
			run(reqs, batchIDs, n)
			n += len(reqs)
			reqs, batchIDs = reqs[:0], batchIDs[:0]
		}
	}); err != nil {
		return nil, nil, nil, 0, err
	}
	run(reqs, batchIDs, n)
	n += len(reqs)
	for i, s := range sims {
		if errs[i] == nil {
			results[i] = s.Result()
		}
	}
	return results, errs, func(i int) string { return named[i] }, n, nil
}

// policyReadTrace reads up to limit records (0: all) and turns each into a
// request whose pages are the record's block hashes; ids are the records'
// IDs, index for index. With each set, it passes every request to each
// instead, as it is read, and returns none.
func policyReadTrace(path string, f traces.Format, limit int, each func(policy.Request, string)) (reqs []policy.Request, ids []string, err error) {
	rd, err := traces.Open(path, f)
	if err != nil {
		return nil, nil, err
	}
	defer rd.Close()
	hashed := rd.Header().BlockSize > 0
	for n := 0; limit == 0 || n < limit; n++ {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		if rec.Blocks == nil && (rec.Tokens != nil || !hashed) {
			return nil, nil, fmt.Errorf("%s: request %q: no block hashes: policy mode needs a block-hash trace (%s has none)", path, rec.ID, rd.Format())
		}
		req := policy.Request{Timestamp: rec.Arrival, Pages: rec.Blocks}
		if each != nil {
			each(req, rec.ID)
			continue
		}
		reqs = append(reqs, req)
		ids = append(ids, rec.ID)
	}
	return reqs, ids, nil
}

func policyWriteJSON(w io.Writer, results []policy.Result) error {
	var v any = results[0]
	if len(results) > 1 {
		m := make(map[string]policy.Result, len(results))
		for _, r := range results {
			m[r.Policy.String()] = r
		}
		v = m // encoding/json sorts the keys
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func policyWriteTable(w io.Writer, tracePath string, n int, cfg policy.Config, results []policy.Result) error {
	fmt.Fprintf(w, "trace %s: %d requests\n", tracePath, n)
	onlyBelady := true
	for _, r := range results {
		onlyBelady = onlyBelady && r.Policy == policy.Belady
	}
	if onlyBelady {
		fmt.Fprintf(w, "L1 %d pages, no L2 (belady: the offline optimum, knowing every later request)\n\n", cfg.L1Pages)
	} else {
		fmt.Fprintf(w, "L1 %d pages, L2 %d pages, write-through threshold %d\n\n", cfg.L1Pages, cfg.L2Pages, cfg.WriteThroughThreshold)
	}
	// Rows of cells: the counter name left-aligned, the figures right-aligned.
	var rows [][]string
	row := func(name string, f func(policy.Result) string) {
		cells := []string{name}
		for _, r := range results {
			cells = append(cells, f(r))
		}
		rows = append(rows, cells)
	}
	count := func(f func(policy.Result) int) func(policy.Result) string {
		return func(r policy.Result) string { return strconv.Itoa(f(r)) }
	}
	rate := func(f func(policy.Result) float64) func(policy.Result) string {
		return func(r policy.Result) string { return fmt.Sprintf("%.4f", f(r)) }
	}
	row("counter", func(r policy.Result) string { return r.Policy.String() })
	row("requests", count(func(r policy.Result) int { return r.Requests }))
	row("total_input_pages", count(func(r policy.Result) int { return r.TotalInputPages }))
	row("l1_hit_pages", count(func(r policy.Result) int { return r.L1HitPages }))
	row("l2_hit_pages", count(func(r policy.Result) int { return r.L2HitPages }))
	row("miss_pages", count(func(r policy.Result) int { return r.MissPages }))
	row("l1_hit_rate", rate(func(r policy.Result) float64 { return r.L1HitRate }))
	row("l1_l2_hit_rate", rate(func(r policy.Result) float64 { return r.L1L2HitRate }))
	row("l1_evictions", count(func(r policy.Result) int { return r.L1Evictions }))
	row("l2_evictions", count(func(r policy.Result) int { return r.L2Evictions }))
	row("  dh_to_d_l2_dedup_evictions", count(func(r policy.Result) int { return r.DedupL2Evictions }))
	row("  h_to_deleted_evictions", count(func(r policy.Result) int { return r.DeletedL2Evictions }))
	row("d_to_h_demotions", count(func(r policy.Result) int { return r.DToHDemotions }))
	row("failed_h_allocations", count(func(r policy.Result) int { return r.FailedHAllocations }))
	row("d_pages", count(func(r policy.Result) int { return r.DPages }))
	row("h_pages", count(func(r policy.Result) int { return r.HPages }))
	row("dh_pages", count(func(r policy.Result) int { return r.DHPages }))
	row("unique_cached_pages", count(func(r policy.Result) int { return r.UniqueCachedPages }))
	row("duplicate_ratio", rate(func(r policy.Result) float64 { return r.DuplicateRatio }))
	width := make([]int, len(rows[0]))
	for _, cells := range rows {
		for i, c := range cells {
			width[i] = max(width[i], len(c))
		}
	}
	var b strings.Builder
	for _, cells := range rows {
		fmt.Fprintf(&b, "%-*s", width[0], cells[0])
		for i, c := range cells[1:] {
			fmt.Fprintf(&b, "  %*s", width[i+1], c)
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// parsePolicies parses a comma-separated list of policy names (empty
// names are skipped); it needs at least one.
func parsePolicies(names string) ([]policy.Policy, error) {
	var pols []policy.Policy
	for _, n := range strings.Split(names, ",") {
		if strings.TrimSpace(n) == "" {
			continue
		}
		p, err := policy.ParsePolicy(n)
		if err != nil {
			return nil, err
		}
		pols = append(pols, p)
	}
	if len(pols) == 0 {
		return nil, errors.New("no policy named")
	}
	return pols, nil
}
