package study

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/internal/fielderr"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// A study whose base configuration is a fleet file ([[fleet.groups]])
// runs each point as a fleet (fleet.Run, as kvsim sim --config does), and
// may sweep, besides the server's keys (which set the base server of
// every group), the router's keys (router.policy, ...) and a group's keys
// addressed by its name: fleet.groups.NAME.count and
// fleet.groups.NAME.set.KEY (KEY a key of the server's tables).

// fleetGroupsKey is the prefix of the swept keys of a fleet group.
const fleetGroupsKey = "fleet.groups."

// fleetKey splits a swept key fleet.groups.NAME.REST into NAME and REST
// ("count" or "set.KEY"); ok is false for any other key.
func fleetKey(key string) (name, rest string, ok bool) {
	after, ok := strings.CutPrefix(key, fleetGroupsKey)
	if !ok {
		return "", "", false
	}
	name, rest, ok = strings.Cut(after, ".")
	return name, rest, ok && name != ""
}

// checkFleetKey checks a swept key of a fleet group and its values, as
// checkKeyPath and configs.Check do for the server's keys.
func checkFleetKey(key string, list []any) error {
	name, rest, ok := fleetKey(key)
	switch {
	case !ok:
		return fmt.Errorf("%q: a fleet group's key is fleet.groups.NAME.count or fleet.groups.NAME.set.KEY, NAME the group's name", key)
	case rest == "count":
		for i, v := range list {
			if err := configs.Check("fleet.groups.count", v); err != nil {
				return fmt.Errorf("%q[%d]: %v", key, i, err)
			}
		}
		return nil
	}
	sk, ok := strings.CutPrefix(rest, "set.")
	if !ok {
		return fmt.Errorf("%q: group %q: only count and set.KEY can be swept (got %q)", key, name, rest)
	}
	if err := checkKeyPath(sk); err != nil {
		return fmt.Errorf("%q: %v", key, err)
	}
	if top, _, _ := strings.Cut(sk, "."); top == "workload" || top == "fleet" || top == "router" {
		return fmt.Errorf("%q: [%s] is the fleet's, not a group's: sweep %q itself", key, top, sk)
	}
	for i, v := range list {
		if err := configs.Check(sk, v); err != nil {
			return fmt.Errorf("%q[%d]: %v", key, i, err)
		}
	}
	return nil
}

// groupNames lists the names of a decoded fleet document's groups (their
// name, else "group<i>", as configs names them), in order.
func groupNames(doc map[string]any) []string {
	gs, _ := lookup(doc, []string{"fleet", "groups"}).([]any)
	var out []string
	for i, g := range gs {
		m, _ := g.(map[string]any)
		n, _ := m["name"].(string)
		if n == "" {
			n = fmt.Sprintf("group%d", i)
		}
		out = append(out, n)
	}
	return out
}

// setFleetKey sets a swept group key in a decoded fleet document: the
// group named NAME's count, or the key of its set table, replacing any
// spelling of that key the set already has.
func setFleetKey(doc map[string]any, key string, v any) error {
	name, rest, _ := fleetKey(key)
	names := groupNames(doc)
	i := slices.Index(names, name)
	if i < 0 {
		if len(names) == 0 {
			return fmt.Errorf("%s: the base configuration is not a fleet (no [[fleet.groups]])", key)
		}
		return fmt.Errorf("%s: no group named %q in the base configuration (groups: %s)", key, name, strings.Join(names, ", "))
	}
	g := lookup(doc, []string{"fleet", "groups"}).([]any)[i].(map[string]any)
	if rest == "count" {
		g["count"] = v
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(rest, "set."), ".")
	st, _ := g["set"].(map[string]any)
	if st == nil {
		st = map[string]any{}
		g["set"] = st
	}
	unsetKey(st, nil, parts)
	return set(st, parts, v)
}

// unsetKey deletes from a set table every spelling of the key path parts
// (dotted keys, nested tables), under the table's path so far.
func unsetKey(m map[string]any, prefix, parts []string) {
	for k, v := range m {
		p := append(slices.Clone(prefix), strings.Split(k, ".")...)
		if slices.Equal(p, parts) {
			delete(m, k)
			continue
		}
		if sub, ok := v.(map[string]any); ok && len(p) < len(parts) && slices.Equal(p, parts[:len(p)]) {
			unsetKey(sub, p, parts)
		}
	}
}

// fleetErrKey is the swept-key spelling of an error's key path about a
// fleet group, fleet.groups[i].REST as fleet.groups.NAME.REST, or "".
func fleetErrKey(path fielderr.Path, names []string) string {
	if len(path) < 3 || path[0].Key != "fleet" || path[1].Key != "groups" || path[2].Index < 0 || path[2].Index >= len(names) {
		return ""
	}
	parts := []string{"fleet", "groups", names[path[2].Index]}
	for _, st := range path[3:] {
		if st.Index >= 0 {
			break
		}
		parts = append(parts, st.Key)
	}
	return strings.Join(parts, ".")
}

// FleetMetrics are a fleet point's fleet-wide results beyond the seed
// metric set (which Record.Metrics holds over every request of the
// fleet).
type FleetMetrics struct {
	// Replicas is the fleet's replica count.
	Replicas int `json:"replicas"`
	// Policy is the router's policy.
	Policy string `json:"policy"`
	// MaxOverMeanInFlight and RequestsCV are the fleet's imbalance
	// (fleet.Imbalance).
	MaxOverMeanInFlight float64 `json:"max_over_mean_in_flight"`
	RequestsCV          float64 `json:"requests_cv"`
	// Decisions are the router's decision counts by reason (JSON sorts
	// them), reasons never taken left out.
	Decisions map[string]int64 `json:"decisions"`
	// The replicas' spread: the lowest and highest hit rate and the
	// highest p99 TTFT of any replica.
	MinReplicaHitRate float64 `json:"min_replica_hit_rate"`
	MaxReplicaHitRate float64 `json:"max_replica_hit_rate"`
	MaxReplicaP99TTFT float64 `json:"max_replica_p99_ttft_ms"`
	// PerReplica is each replica's share, in replica order.
	PerReplica []ReplicaMetrics `json:"per_replica"`
}

// ReplicaMetrics is one replica's share of a fleet point.
type ReplicaMetrics struct {
	Group        string  `json:"group"`
	Routed       int64   `json:"routed"`
	CacheHitRate float64 `json:"cache_hit_rate"`
	MedianTTFT   float64 `json:"median_ttft_ms"`
	P99TTFT      float64 `json:"p99_ttft_ms"`
	MeanInFlight float64 `json:"mean_in_flight"`
}

// fleetMetricsOf summarises a fleet run for its record.
func fleetMetricsOf(res *fleet.Result) *FleetMetrics {
	fm := &FleetMetrics{
		Replicas: len(res.Replicas), Policy: res.Policy,
		MaxOverMeanInFlight: res.Imbalance.MaxOverMeanInFlight, RequestsCV: res.Imbalance.RequestsCV,
		Decisions: map[string]int64{},
	}
	for _, d := range res.Decisions {
		fm.Decisions[d.Reason] = d.Count
	}
	for i, r := range res.Replicas {
		if i == 0 || r.CacheHitRate < fm.MinReplicaHitRate {
			fm.MinReplicaHitRate = r.CacheHitRate
		}
		fm.MaxReplicaHitRate = max(fm.MaxReplicaHitRate, r.CacheHitRate)
		fm.MaxReplicaP99TTFT = max(fm.MaxReplicaP99TTFT, r.P99TTFT)
		fm.PerReplica = append(fm.PerReplica, ReplicaMetrics{
			Group: r.Group, Routed: r.Routed, CacheHitRate: r.CacheHitRate,
			MedianTTFT: r.MedianTTFT, P99TTFT: r.P99TTFT, MeanInFlight: r.MeanInFlight,
		})
	}
	return fm
}

// decisionPrefix names the decision count columns: decisions_<reason>.
const decisionPrefix = "decisions_"

// fleetMetricNames lists the fleet metrics a fleet study's results.csv
// adds after the others, and the objective and report.x may name.
func fleetMetricNames() []string {
	out := []string{"replicas", "max_over_mean_in_flight", "requests_cv", "min_replica_hit_rate", "max_replica_hit_rate", "max_replica_p99_ttft_ms"}
	for _, why := range router.Reasons() {
		out = append(out, decisionPrefix+why.String())
	}
	return out
}

// fleetMetric returns a fleet metric of fm by name.
func fleetMetric(fm *FleetMetrics, name string) (float64, bool) {
	if fm == nil {
		return 0, false
	}
	switch name {
	case "replicas":
		return float64(fm.Replicas), true
	case "max_over_mean_in_flight":
		return fm.MaxOverMeanInFlight, true
	case "requests_cv":
		return fm.RequestsCV, true
	case "min_replica_hit_rate":
		return fm.MinReplicaHitRate, true
	case "max_replica_hit_rate":
		return fm.MaxReplicaHitRate, true
	case "max_replica_p99_ttft_ms":
		return fm.MaxReplicaP99TTFT, true
	}
	if why, ok := strings.CutPrefix(name, decisionPrefix); ok && slices.Contains(fleetMetricNames(), name) {
		return float64(fm.Decisions[why]), true
	}
	return 0, false
}

// sglangOnly refuses a point that is not SGLang (a study derives each
// point's memory sizing from SGLang's): the file, or any group of a fleet.
func sglangOnly(f *configs.File) error {
	if !f.IsFleet() {
		return f.SGLangOnly("studies simulate")
	}
	groups, err := f.FleetGroups()
	if err != nil {
		return err
	}
	var errs []error
	for _, g := range groups {
		if err := g.File.SGLangOnly("studies simulate"); err != nil {
			errs = append(errs, fmt.Errorf("fleet group %s: %w", g.Name, err))
		}
	}
	return errors.Join(errs...)
}

// configErrPath is the key path of one of configs.Parse's field errors,
// or nil.
func configErrPath(e error) fielderr.Path {
	var at *fielderr.At
	if errors.As(e, &at) {
		if fe, ok := at.Err.(*fielderr.Error); ok {
			return fe.Path
		}
	}
	return nil
}

// plotFleetBalance draws a fleet study's load balance against x: the
// largest replica mean in-flight count over their mean (solid) and the
// coefficient of variation of the requests routed per replica (dashed),
// one colour per line of the other plots.
func plotFleetBalance(dir string, ss []series, xl string) error {
	p := newPlot("Load balance across replicas", xl, "max/mean in-flight; CV of requests per replica")
	p.Y.Min = 0
	for i, s := range ss {
		inFl := make([]float64, len(s.recs))
		cv := make([]float64, len(s.recs))
		for j, r := range s.recs {
			inFl[j], _ = fleetMetric(r.Fleet, "max_over_mean_in_flight")
			cv[j], _ = fleetMetric(r.Fleet, "requests_cv")
			p.Y.Max = max(p.Y.Max, inFl[j]*1.15, cv[j]*1.15)
		}
		l, sc := addLine(p, s.x, inFl, plotutil.Color(i), 0, i, vg.Points(2))
		p.Legend.Add(legendTitle(s, "max/mean in-flight"), l, sc)
		l, sc = addLine(p, s.x, cv, plotutil.Color(i), 1, i, vg.Points(1.5))
		p.Legend.Add(legendTitle(s, "requests CV"), l, sc)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.X.Tick.Marker = humanTicks{}
	fromZero(p, ss)
	return save(dir, "fleet_balance", []*plot.Plot{p}, plotH)
}
