package configs

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/internal/fielderr"
)

// FleetSection is the [fleet] table: the replica groups of a fleet behind
// a router (issue 21). A file without groups describes one server.
type FleetSection struct {
	// Groups are the replica groups ([[fleet.groups]]), in replica order:
	// group 0's replicas come first.
	Groups []FleetGroup `toml:"groups"`
}

// FleetGroup is Count identical replicas: the file's server with the keys
// of Set overriding it.
type FleetGroup struct {
	// Name names the group in reports; default "group<i>".
	Name string `toml:"name"`
	// Count is the number of replicas, >= 1.
	Count int `toml:"count"`
	// Set overrides keys of the file for this group's replicas: any key
	// of the server's tables, written dotted ("gpu.preset") or as nested
	// tables. [workload], [fleet], [router] and [disaggregation] are the
	// fleet's and cannot be set per group.
	Set map[string]any `toml:"set"`
}

// RouterSection is the [router] table, SGLang's router (fleet/router's
// Config) with SGLang's parameter names. Unset keys keep SGLang's deployed
// defaults ([router.Default]). Durations are seconds. In a disaggregated
// fleet, [router.prefill] and [router.decode] set the two pools' keys over
// it (SGLang's --prefill-policy and --decode-policy fall back to
// --policy).
type RouterSection struct {
	RouterKeys
	Prefill *RouterKeys `toml:"prefill"`
	Decode  *RouterKeys `toml:"decode"`
}

// RouterKeys are a router's keys: [router]'s, [router.prefill]'s or
// [router.decode]'s.
type RouterKeys struct {
	Policy                      string   `toml:"policy"`
	CacheThreshold              *float64 `toml:"cache_threshold"`
	BalanceAbsThreshold         *int     `toml:"balance_abs_threshold"`
	BalanceRelThreshold         *float64 `toml:"balance_rel_threshold"`
	EvictionInterval            *float64 `toml:"eviction_interval"`
	MaxTreeSize                 *int     `toml:"max_tree_size"`
	MissRule                    string   `toml:"miss_rule"`
	BalanceTokenUsageThreshold  *float64 `toml:"balance_token_usage_threshold"`
	OverloadTokenUsageThreshold *float64 `toml:"overload_token_usage_threshold"`
	TreePageSize                *int     `toml:"tree_page_size"`
	LoadPollInterval            *float64 `toml:"load_poll_interval"`
	VirtualNodes                *int     `toml:"virtual_nodes"`
	KVPrefixWeight              *float64 `toml:"kv_prefix_weight"`
	KVLoadWeight                *float64 `toml:"kv_load_weight"`
	KVUsageWeight               *float64 `toml:"kv_usage_weight"`
	KVDeviceWeight              *float64 `toml:"kv_device_weight"`
	KVHostWeight                *float64 `toml:"kv_host_weight"`
	KVStorageWeight             *float64 `toml:"kv_storage_weight"`
	KVSignalDelay               *float64 `toml:"kv_signal_delay"`
	OracleStorage               *bool    `toml:"oracle_storage"`
	PrefixTokenCount            *int     `toml:"prefix_token_count"`
	PrefixHashLoadFactor        *float64 `toml:"prefix_hash_load_factor"`
	AssignmentMode              string   `toml:"assignment_mode"`
	MaxIdle                     *float64 `toml:"max_idle"`
	LeastLoadKVPressureWeight   *float64 `toml:"least_load_kv_pressure_weight"`
	LeastLoadDefaultThroughput  *float64 `toml:"least_load_default_throughput"`
	LeastLoadMeanPrefillTokens  *int     `toml:"least_load_mean_prefill_tokens"`
	// Upstreams are nginx_hash's server names, one per replica
	// (router.Nginx.Upstreams).
	Upstreams []string `toml:"upstreams"`
}

// isZero reports whether no key of the table was set.
func (r RouterSection) isZero() bool { return reflect.ValueOf(r).IsZero() }

// maxFleetReplicas bounds a fleet's replica count: each replica is a full
// simulator.
const maxFleetReplicas = 4096

// maxRouterSeconds bounds the router's durations (a year).
const maxRouterSeconds = 365 * 24 * 3600

// IsFleet reports whether the file describes a fleet ([fleet] groups).
func (f *File) IsFleet() bool { return len(f.Fleet.Groups) > 0 }

// OneServer returns an error naming [fleet] when the file describes a
// fleet, for the commands that simulate one server (who, e.g. "kvsim
// calibrate fits"; replay --target sim, compare and calibrate): they must
// refuse a fleet rather than run its base server alone. kvsim sim, study
// and serve run fleets.
func (f *File) OneServer(who string) error {
	if f.IsFleet() {
		return fmt.Errorf("fleet: %s one server, and this file describes a fleet of %d groups behind a router; only kvsim sim, study, serve and replay --target sim run a fleet so far (docs/fleet.md)", who, len(f.Fleet.Groups))
	}
	return nil
}

// FleetGroupFile is a replica group built: its replicas' server file (the
// base file with the group's keys set).
type FleetGroupFile struct {
	Name  string
	Count int
	File  *File
}

// RouterConfig returns the [router] table as fleet/router's Config. The
// file must have been validated (Parse does).
func (f *File) RouterConfig() router.Config {
	c, _ := f.Router.config()
	return c
}

// FleetGroups returns the replica groups, each with its server file. The
// file must have been validated (Parse does).
func (f *File) FleetGroups() ([]FleetGroupFile, error) {
	var out []FleetGroupFile
	for i, g := range f.Fleet.Groups {
		gf, err := f.groupFile(g)
		if err != nil {
			return nil, fielderr.Wrap(groupKey(i).Key("set"), errors.Join(groupErrors(err)...))
		}
		out = append(out, FleetGroupFile{Name: groupName(i, g), Count: g.Count, File: gf})
	}
	return out, nil
}

func groupKey(i int) fielderr.Path { return fielderr.Key("fleet", "groups").At(i) }

func groupName(i int, g FleetGroup) string {
	if g.Name != "" {
		return g.Name
	}
	return fmt.Sprintf("group%d", i)
}

// validateFleet checks [fleet] and [router]: every group's count, name
// and overridden keys, and the server each group's overrides make (its
// errors named under the group's set, at the key in the file), and the
// router's keys. name and ps are the file's name and key positions, for
// the errors it places itself; base is Validate's error, which reports the
// keys written outside the groups.
func (f *File) validateFleet(name string, ps Positions, base error) error {
	var errs []error
	// at places err at where path is written (or its group, or nowhere).
	at := func(path fielderr.Path, err error) error {
		p, _ := ps.Find(path)
		return &fielderr.At{File: name, Line: p.Line, Col: p.Col, Err: err}
	}
	written := func(path fielderr.Path) bool { _, ok := ps[path.String()]; return ok }
	if err := f.validatePD(at); err != nil {
		errs = append(errs, err) // configs/fleetpd.go
	}
	if !f.IsFleet() {
		if fl := fielderr.Key("fleet"); written(fl) {
			// [fleet] alone or groups = []: not one server silently.
			errs = append(errs, at(fl, fielderr.New(fl.Key("groups"), "at least one group ([[fleet.groups]] with a count)")))
		} else if !f.Router.isZero() {
			errs = append(errs, fielderr.New(fielderr.Key("router"), "only with a [fleet] table (add [[fleet.groups]])"))
		}
		return errors.Join(errs...)
	}
	total := 0
	keys := schemaKeys()
	baseErrs := map[string]bool{} // Validate's errors: the file's keys outside the groups
	for _, e := range fielderr.Flatten(base) {
		baseErrs[e.Error()] = true
	}
	names := map[string]int{}
	for i, g := range f.Fleet.Groups {
		switch {
		case !written(groupKey(i).Key("count")):
			errs = append(errs, fielderr.New(groupKey(i).Key("count"), "required: the group's number of replicas, in [1, %d]", maxFleetReplicas))
		case g.Count < 1 || g.Count > maxFleetReplicas:
			errs = append(errs, fielderr.Range(groupKey(i).Key("count"), fmt.Sprintf("in [1, %d]", maxFleetReplicas), g.Count))
		}
		if n := groupName(i, g); names[n] > 0 {
			j := names[n] - 1
			p, _ := ps.Find(groupKey(j).Key("name"))
			errs = append(errs, fielderr.New(groupKey(i).Key("name"), "%q is also group %d's name (%s:%d:%d)", n, j, name, p.Line, p.Col))
		} else {
			names[n] = i + 1
		}
		total += max(g.Count, 0)
		set := groupKey(i).Key("set")
		sts, dups := flattenKeys(g.Set)
		bad := len(dups) > 0
		for _, d := range dups {
			// At the later of the two, naming the earlier.
			first, second := set.Key(d[0].spelling...), set.Key(d[1].spelling...)
			p1, _ := ps.Find(first)
			p2, _ := ps.Find(second)
			if p2.Line < p1.Line || p2.Line == p1.Line && p2.Col < p1.Col {
				first, second, p1 = second, first, p2
			}
			errs = append(errs, at(second, fielderr.New(second, "sets %s again, as %s does (%s:%d:%d); write it once",
				fielderr.Key(d[0].key...), first, name, p1.Line, p1.Col)))
		}
		for _, st := range sts {
			k := st.key
			p := set.Key(st.spelling...)
			switch dotted := strings.Join(k, "."); {
			case k[0] == "workload" || k[0] == "fleet" || k[0] == "router" || k[0] == "disaggregation":
				errs = append(errs, at(p, fielderr.New(set.Key(k...), "[%s] is the fleet's, not a group's", k[0])))
				bad = true
			case !slices.Contains(keys, dotted):
				errs = append(errs, at(p, fielderr.New(set, "unknown key %q", dotted)))
				bad = true
			}
		}
		if !bad && g.Count >= 1 {
			if _, err := f.groupFile(g); err != nil {
				for _, e := range groupErrors(err) {
					// At the key of the set whose error it is, if any.
					p, fromSet := set, false
					for _, st := range sts {
						if strings.HasPrefix(e.Error(), fielderr.Key(st.key...).String()+": ") {
							p, fromSet = set.Key(st.spelling...), true
						}
					}
					// A key outside the groups that is wrong alone is
					// reported once, by Validate, not again for each group.
					if !fromSet && baseErrs[e.Error()] {
						continue
					}
					errs = append(errs, at(p, fielderr.Wrap(set, e)))
				}
			}
		}
	}
	errs = append(errs, f.validateSharedL3(name, ps)...)
	if total > maxFleetReplicas {
		errs = append(errs, fielderr.New(fielderr.Key("fleet", "groups"), "at most %d replicas in all (got %d)", maxFleetReplicas, total))
	}
	if _, err := f.Router.config(); err != nil {
		errs = append(errs, err)
	}
	if n := len(f.Router.Upstreams); n > 0 && n != total {
		k := fielderr.Key("router", "upstreams")
		errs = append(errs, at(k, fielderr.New(k, "%d server names for %d replicas (one per replica, in replica order)", n, total)))
	}
	return errors.Join(errs...)
}

// setting is one key a group sets: its path, its value and its spelling
// (the path as written: "server.tp_size" quoted is one part).
type setting struct {
	key, spelling []string
	v             any
}

// flattenKeys lists the leaves of m sorted by key path, a dotted key
// ("gpu.preset") split at its dots, then by spelling: deterministic, not
// in map order. Two spellings of one key ("server.tp_size" quoted and
// server.tp_size, or server = {tp_size = 4}) are returned in dups, in
// that order, and only their first in the list.
func flattenKeys(m map[string]any) (list []setting, dups [][2]setting) {
	var all []setting
	var walk func(m map[string]any, key, spelling []string)
	walk = func(m map[string]any, key, spelling []string) {
		for k, v := range m {
			p := append(slices.Clone(key), strings.Split(k, ".")...)
			sp := append(slices.Clone(spelling), k)
			if sub, ok := v.(map[string]any); ok {
				walk(sub, p, sp)
				continue
			}
			all = append(all, setting{p, sp, v})
		}
	}
	walk(m, nil, nil)
	slices.SortFunc(all, func(a, b setting) int {
		return cmp.Or(slices.Compare(a.key, b.key), slices.Compare(a.spelling, b.spelling))
	})
	for _, st := range all {
		if n := len(list); n > 0 && slices.Equal(list[n-1].key, st.key) {
			dups = append(dups, [2]setting{list[n-1], st})
			continue
		}
		list = append(list, st)
	}
	return list, dups
}

// groupDoc names the regenerated document of a group's file in its
// errors, which [groupErrors] takes off.
const groupDoc = "\x00group"

// groupErrors lists the errors of a group's file without the regenerated
// document's name and positions: "key: what" each.
func groupErrors(err error) []error {
	var out []error
	for _, e := range fielderr.Flatten(err) {
		if at, ok := e.(*fielderr.At); ok {
			out = append(out, at.Err)
			continue
		}
		msg := strings.TrimPrefix(e.Error(), groupDoc+":")
		if msg != e.Error() {
			msg = strings.TrimLeft(strings.TrimLeft(msg, "0123456789:"), " ")
		}
		out = append(out, errors.New(msg))
	}
	return out
}

// groupFile is the file of g's replicas: the document with g's keys set
// and without [fleet] and [router], parsed again. Its errors name the
// regenerated document groupDoc ([groupErrors] takes it off).
func (f *File) groupFile(g FleetGroup) (*File, error) {
	var doc map[string]any
	if err := toml.Unmarshal(f.data, &doc); err != nil {
		return nil, err
	}
	delete(doc, "fleet")
	delete(doc, "router")
	delete(doc, "disaggregation")
	sts, _ := flattenKeys(g.Set)
	for _, st := range sts {
		k := st.key
		t := doc
		for _, part := range k[:len(k)-1] {
			sub, ok := t[part].(map[string]any)
			if !ok {
				sub = map[string]any{}
				t[part] = sub
			}
			t = sub
		}
		t[k[len(k)-1]] = st.v
	}
	data, err := toml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	gf, err := Parse(data, groupDoc)
	if err != nil {
		return nil, err
	}
	gf.path, gf.bundled = f.path, f.bundled
	return gf, nil
}

// config turns the table into fleet/router's Config over SGLang's
// defaults, reporting every invalid key.
func (r RouterSection) config() (router.Config, error) {
	return routerConfig("router", r.RouterKeys)
}

// routerConfig is fleet/router's Config of the layers' keys, each over the
// ones before, over SGLang's defaults; errors name prefix.KEY.
func routerConfig(prefix string, layers ...RouterKeys) (router.Config, error) {
	c := router.Default()
	var errs []error
	key := func(k string) fielderr.Path { return fielderr.Dotted(prefix).Key(k) }
	for _, r := range layers {
		errs = append(errs, r.apply(&c, key)...)
	}
	// The router's own checks, "router.KEY: what", as field errors.
	for _, e := range fielderr.Flatten(c.Validate()) {
		k, what, ok := strings.Cut(e.Error(), ": ")
		if !ok {
			errs = append(errs, fielderr.Wrap(fielderr.Dotted(prefix), e))
			continue
		}
		errs = append(errs, fielderr.Wrap(fielderr.Dotted(prefix+strings.TrimPrefix(k, "router")), errors.New(what)))
	}
	return c, errors.Join(errs...)
}

// apply sets the keys r sets on c, returning the errors the router's
// Validate does not report.
func (r RouterKeys) apply(c *router.Config, key func(string) fielderr.Path) []error {
	var errs []error
	if r.Policy != "" {
		if err := c.Policy.UnmarshalText([]byte(r.Policy)); err != nil {
			errs = append(errs, fielderr.New(key("policy"), `must be "cache_aware", "round_robin", "random", "power_of_two", "consistent_hash", "kv_aware", "nginx_round_robin", "nginx_hash", "cache_aware_oracle", "prefix_hash", "manual" or "least_load" (got %q)`, r.Policy))
		}
	}
	if r.MissRule != "" {
		if err := c.CacheAware.MissRule.UnmarshalText([]byte(r.MissRule)); err != nil {
			errs = append(errs, fielderr.New(key("miss_rule"), `must be "min_load" or "smallest_tree" (got %q)`, r.MissRule))
		}
	}
	if r.AssignmentMode != "" {
		m, err := router.ParseAssignmentMode(r.AssignmentMode)
		if err != nil {
			errs = append(errs, fielderr.Wrap(key("assignment_mode"), err))
		}
		c.Manual.MinLoad = m
	}
	setF := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	setI := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	setD := func(dst *time.Duration, v *float64, k string) {
		if v == nil {
			return
		}
		if !(*v >= 0 && *v <= maxRouterSeconds) {
			errs = append(errs, fielderr.Range(key(k), fmt.Sprintf("seconds in [0, %d]", maxRouterSeconds), *v))
			return
		}
		*dst = time.Duration(math.Round(*v * 1e9))
	}
	ca := &c.CacheAware
	setF(&ca.CacheThreshold, r.CacheThreshold)
	setI(&ca.BalanceAbsThreshold, r.BalanceAbsThreshold)
	setF(&ca.BalanceRelThreshold, r.BalanceRelThreshold)
	setD(&ca.EvictionInterval, r.EvictionInterval, "eviction_interval")
	setI(&ca.MaxTreeSize, r.MaxTreeSize)
	setF(&ca.BalanceTokenUsageThreshold, r.BalanceTokenUsageThreshold)
	setF(&ca.OverloadTokenUsageThreshold, r.OverloadTokenUsageThreshold)
	setI(&ca.TreePageSize, r.TreePageSize)
	if r.OracleStorage != nil {
		ca.OracleStorage = *r.OracleStorage
	}
	setD(&c.PowerOfTwo.LoadPollInterval, r.LoadPollInterval, "load_poll_interval")
	setI(&c.ConsistentHash.VirtualNodes, r.VirtualNodes)
	kv := &c.KVAware
	setF(&kv.PrefixWeight, r.KVPrefixWeight)
	setF(&kv.LoadWeight, r.KVLoadWeight)
	setF(&kv.UsageWeight, r.KVUsageWeight)
	setF(&kv.DeviceWeight, r.KVDeviceWeight)
	setF(&kv.HostWeight, r.KVHostWeight)
	setF(&kv.StorageWeight, r.KVStorageWeight)
	setD(&kv.SignalDelay, r.KVSignalDelay, "kv_signal_delay")
	setI(&c.PrefixHash.TokenCount, r.PrefixTokenCount)
	setF(&c.PrefixHash.LoadFactor, r.PrefixHashLoadFactor)
	setD(&c.Manual.MaxIdle, r.MaxIdle, "max_idle")
	ll := &c.LeastLoad
	setF(&ll.KVPressureWeight, r.LeastLoadKVPressureWeight)
	setF(&ll.DefaultThroughput, r.LeastLoadDefaultThroughput)
	setI(&ll.MeanPrefillTokens, r.LeastLoadMeanPrefillTokens)
	if r.Upstreams != nil {
		c.Nginx.Upstreams = slices.Clone(r.Upstreams)
	}
	return errs
}
