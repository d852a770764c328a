package study

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// writeReport writes report.md: the question, the answer for the
// objective, how it was computed, the table, the figures and the base
// configuration. It contains no wall-clock figures, so the same results
// give the same report.
func writeReport(w io.Writer, m *Manifest, recs []*Record, best int, obj Objective, plots []Plot, mrc []MRCPoint) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", m.Title)
	if q := strings.TrimSpace(m.Question); q != "" {
		fmt.Fprintf(&b, "%s\n\n", q)
	}
	b.WriteString("## Answer\n\n")
	switch {
	case len(recs) == 0:
		b.WriteString("No point has a result yet.\n\n")
	case best < 0:
		fmt.Fprintf(&b, "No point meets the constraints of the objective `%s`. The table shows how far each point is from them.\n\n", obj)
	default:
		r := recs[best]
		v, _ := r.Metric(obj.Metric)
		fmt.Fprintf(&b, "For the objective `%s`, the best point is **point %d: %s** (%s = %s). ", obj, r.Point, recordParams(m, r), obj.Metric, fmtNum(v))
		s := r.Metrics
		fmt.Fprintf(&b, "It serves %.1f%% of prompt tokens from cache (%.1f%% from the device, %.1f%% from host memory", 100*s.CacheHitRate, 100*s.DeviceHitRate, 100*s.HostHitRate)
		if s.StorageHitRate > 0 {
			fmt.Fprintf(&b, ", %.1f%% from storage", 100*s.StorageHitRate)
		}
		fmt.Fprintf(&b, "), with a median TTFT of %s and a p99 of %s, %.0f tokens/s, and KV pools of %s GB of HBM and %s GB of host memory per GPU.\n\n",
			ms(s.MedianTTFT), ms(s.P99TTFT), s.TotalThroughput, gb(r.Sizing.DeviceKVGB), gb(r.Sizing.HostKVGB))
		b.WriteString(optSentence(mrc, r.Sizing.CacheCapacityTokens))
	}
	if missing := m.Points - len(recs); missing > 0 {
		fmt.Fprintf(&b, "**%d of %d points have no result yet**: run the study again (it resumes) or merge the missing shards.\n\n", missing, m.Points)
	}
	b.WriteString("## Results\n\n")
	writeMarkdownTable(&b, m, recs, best, obj)
	b.WriteString("\n")
	b.WriteString("hit, device, host: SGLang's `cached_tokens` over prompt tokens, in total and by the tier the tokens came from. ")
	b.WriteString("TTFT: time to first token (median, 99th percentile). tok/s: prompt plus generated tokens per second. ")
	b.WriteString("KV GB/GPU: the device and host KV pools per GPU from SGLang's memory derivation (10^9 bytes).")
	if len(obj.Constraints) > 0 {
		b.WriteString(" meets: whether the point meets every constraint of the objective.")
	}
	b.WriteString(" The best point is in bold. Every metric of every point is in `results.csv` and `results.jsonl`.\n\n")
	if len(plots) > 0 {
		b.WriteString("## Figures\n\n")
		for _, p := range plots {
			fmt.Fprintf(&b, "![%s](plots/%s.png)\n\n%s ([SVG](plots/%s.svg))\n\n", p.Name, p.Name, p.Caption, p.Name)
		}
	}
	b.WriteString("## How it was computed\n\n")
	fmt.Fprintf(&b, "Each point is one deterministic kvsim simulation of the whole trace with the base configuration and the point's swept values; %d points in all. ", m.Points)
	b.WriteString("Swept:\n\n")
	for _, a := range m.Axes {
		var vals []string
		for _, v := range a.Values {
			var parts []string
			for _, x := range v {
				parts = append(parts, formatValue(jsonNumber(x)))
			}
			vals = append(vals, strings.Join(parts, " & "))
		}
		fmt.Fprintf(&b, "- `%s`: %s\n", strings.Join(a.Keys, "` & `"), strings.Join(vals, ", "))
	}
	fmt.Fprintf(&b, "\nObjective: `%s` (ties go to the lowest point index).\n\n", obj)
	if m.Study != "" {
		fmt.Fprintf(&b, "Reproduce: `kvsim study %s`. ", m.Study)
	}
	versions := map[string]bool{}
	for _, r := range recs {
		versions[r.Version] = true
	}
	seeds := map[uint64]bool{}
	for _, r := range recs {
		seeds[r.Seed] = true
	}
	var seedList []string
	for s := range seeds {
		seedList = append(seedList, fmt.Sprint(s))
	}
	fmt.Fprintf(&b, "kvsim %s, seed %s, study digest `%.16s`.\n\n", strings.Join(sortedKeys(versions), ", "), strings.Join(sortedStrings(seedList), ", "), m.StudyDigest)
	fmt.Fprintf(&b, "Base configuration (%s):\n\n```toml\n%s\n```\n", m.Base, strings.TrimRight(m.BaseTOML, "\n"))
	_, err := io.WriteString(w, b.String())
	return err
}

// ms prints a duration given in ms, in s from 10 s on.
func ms(v float64) string {
	if v >= 1e4 {
		return fmt.Sprintf("%.1f s", v/1e3)
	}
	return fmt.Sprintf("%.1f ms", v)
}

func sortedStrings(s []string) []string {
	m := map[string]bool{}
	for _, x := range s {
		m[x] = true
	}
	return sortedKeys(m)
}

// optSentence compares, at a point's cache capacity, LRU with Belady's
// offline optimum on the miss-ratio curve: how much of the trace's prompt
// tokens any eviction policy could serve from that much cache. It uses the
// curve's largest capacity at or below the point's at which OPT was
// computed; "" when there is none.
func optSentence(mrc []MRCPoint, capacity int64) string {
	at := -1
	for i, p := range mrc {
		if p.CapacityTokens <= capacity && !math.IsNaN(p.OPTMissRatio) {
			at = i
		}
	}
	if at < 0 {
		return ""
	}
	p := mrc[at]
	lru, opt := 100*(1-p.MissRatio), 100*(1-p.OPTMissRatio)
	if opt < lru {
		// Only where the trace's block ids are not prefix-chained: the LRU
		// curve counts a block by its id, the optimum by its whole prefix,
		// and the two do not compare.
		return ""
	}
	verdict := "LRU is already as good as any eviction policy at this capacity."
	if opt-lru >= 0.05 {
		verdict = fmt.Sprintf("a smarter eviction policy could add at most %.1f percentage points with this much memory; past that, only more memory helps.", opt-lru)
	}
	return fmt.Sprintf("At this point's cache capacity (%s tokens across its tiers; the miss-ratio curve is read at %s tokens, its nearest optimum at or below it), "+
		"LRU eviction serves %.1f%% of the trace's prompt tokens from cache and Belady's offline optimum %.1f%%: %s\n\n",
		humanTokens(capacity), humanTokens(p.CapacityTokens), lru, opt, verdict)
}

// humanTokens prints a token count with thousands separators.
func humanTokens(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
