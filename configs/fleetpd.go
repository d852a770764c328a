package configs

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/internal/fielderr"
)

// DisaggregationSection is the [disaggregation] table of a fleet file:
// prefill/decode disaggregation (fleet-spec 2), which groups serve each
// role and the KV transfer between them. A fleet without it is regular.
type DisaggregationSection struct {
	// Prefill and Decode name the groups ([[fleet.groups]] name) of each
	// role: a name or an array of names. Every group has one role.
	Prefill any `toml:"prefill"`
	Decode  any `toml:"decode"`
	// TransferGbps is each prefill replica's KV link, Gbit/s (required).
	TransferGbps float64 `toml:"transfer_gbps"`
	// TransferLatency is added to every transfer, seconds; default 0.
	TransferLatency *float64 `toml:"transfer_latency"`
	// TransferQueues is SGLANG_DISAGGREGATION_QUEUE_SIZE; default 4.
	TransferQueues *int `toml:"transfer_queues"`
	// NumReservedDecodeTokens is --num-reserved-decode-tokens; default 512.
	NumReservedDecodeTokens *int `toml:"num_reserved_decode_tokens"`
	// BootstrapTimeout is SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT and
	// WaitingTimeout SGLANG_DISAGGREGATION_WAITING_TIMEOUT, seconds;
	// default 300 each.
	BootstrapTimeout *float64 `toml:"bootstrap_timeout"`
	WaitingTimeout   *float64 `toml:"waiting_timeout"`
	// DecodeOffload is --disaggregation-decode-enable-offload-kvcache:
	// the decode replicas write every finished request's generated pages
	// to their storage tier; default false.
	DecodeOffload bool `toml:"decode_offload"`
	// DecodeCache is the decode replicas' cache: "chunk" (the default,
	// SGLang's classic decode: no prefix reuse) or "radix"
	// (--disaggregation-decode-enable-radix-cache).
	DecodeCache string `toml:"decode_cache"`
}

// PD is a disaggregated fleet's settings, built from the file: the
// fleet's (its Prefill and Decode routers are router.Config over [router]
// and [router.prefill] or [router.decode]) and each group's role.
type PD struct {
	fleet.PDConfig
	// IsPrefill is every group's role, in group order: true for prefill.
	IsPrefill []bool
	// DecodeRadix: decode_cache = "radix".
	DecodeRadix bool
}

// Bounds of the [disaggregation] keys.
const (
	maxTransferGbps   = 1e6
	maxTransferQueues = 1024
	maxReservedTokens = 1 << 24
	minTimeout        = 1e-6 // seconds: a timeout is at least a microsecond
)

// IsPD reports whether the file describes a disaggregated fleet.
func (f *File) IsPD() bool { return f.IsFleet() && f.Disaggregation.set() }

// set reports whether any key of the table is written.
func (d *DisaggregationSection) set() bool {
	return d.Prefill != nil || d.Decode != nil || d.TransferGbps != 0 || d.TransferLatency != nil ||
		d.TransferQueues != nil || d.NumReservedDecodeTokens != nil || d.DecodeCache != "" ||
		d.BootstrapTimeout != nil || d.WaitingTimeout != nil || d.DecodeOffload
}

// PDConfig returns the disaggregation settings of a disaggregated fleet
// file (IsPD). The file must have been validated (Parse does).
func (f *File) PDConfig() PD {
	pd, _ := f.pdConfig(func(_ fielderr.Path, err error) error { return err })
	return pd
}

// pdConfig builds and checks [disaggregation], [router.prefill] and
// [router.decode]; a required key's absence is placed at the table by
// place.
func (f *File) pdConfig(place func(fielderr.Path, error) error) (PD, error) {
	d := f.Disaggregation
	table := fielderr.Key("disaggregation")
	var errs []error
	key := func(k string) fielderr.Path { return fielderr.Key("disaggregation", k) }
	pd := PD{PDConfig: fleet.PDConfig{TransferGbps: d.TransferGbps, TransferQueues: 4, ReservedDecodeTokens: 512, BootstrapTimeout: 300 * time.Second, WaitingTimeout: 300 * time.Second}}
	roles := map[string]int{} // group name -> 1 prefill, 2 decode
	for k, names := range [2]any{d.Prefill, d.Decode} {
		role := [2]string{"prefill", "decode"}[k]
		list, ok := groupNames(names)
		if !ok || len(list) == 0 {
			errs = append(errs, place(table, fielderr.New(key(role), "required: the name of a [[fleet.groups]] (or an array of names) serving %s", role)))
			continue
		}
		for _, n := range list {
			found := false
			for i, g := range f.Fleet.Groups {
				found = found || groupName(i, g) == n
			}
			switch {
			case !found:
				errs = append(errs, fielderr.New(key(role), "no [[fleet.groups]] is named %q", n))
			case roles[n] != 0:
				errs = append(errs, fielderr.New(key(role), "group %q has a role already: a group serves prefill or decode", n))
			default:
				roles[n] = k + 1
			}
		}
	}
	for i, g := range f.Fleet.Groups {
		r := roles[groupName(i, g)]
		if r == 0 && len(errs) == 0 {
			errs = append(errs, place(table, fielderr.New(table, "group %q serves neither prefill nor decode: name it in disaggregation.prefill or disaggregation.decode", groupName(i, g))))
		}
		pd.IsPrefill = append(pd.IsPrefill, r == 1)
	}
	switch {
	case d.TransferGbps == 0:
		errs = append(errs, place(table, fielderr.New(key("transfer_gbps"), "required: each prefill replica's KV link, Gbit/s")))
	case !(d.TransferGbps > 0 && d.TransferGbps <= maxTransferGbps):
		errs = append(errs, fielderr.Range(key("transfer_gbps"), fmt.Sprintf("Gbit/s in (0, %g]", float64(maxTransferGbps)), d.TransferGbps))
	}
	if v := d.TransferLatency; v != nil {
		if !(*v >= 0 && *v <= maxRouterSeconds) {
			errs = append(errs, fielderr.Range(key("transfer_latency"), fmt.Sprintf("seconds in [0, %d]", maxRouterSeconds), *v))
		} else {
			pd.TransferLatency = time.Duration(math.Round(*v * 1e9))
		}
	}
	if v := d.TransferQueues; v != nil {
		if *v < 1 || *v > maxTransferQueues {
			errs = append(errs, fielderr.Range(key("transfer_queues"), fmt.Sprintf("in [1, %d]", maxTransferQueues), *v))
		}
		pd.TransferQueues = *v
	}
	if v := d.NumReservedDecodeTokens; v != nil {
		if *v < 0 || *v > maxReservedTokens {
			errs = append(errs, fielderr.Range(key("num_reserved_decode_tokens"), fmt.Sprintf("tokens in [0, %d]", maxReservedTokens), *v))
		}
		pd.ReservedDecodeTokens = int64(*v)
	}
	for _, t := range []struct {
		name string
		v    *float64
		out  *time.Duration
	}{{"bootstrap_timeout", d.BootstrapTimeout, &pd.BootstrapTimeout}, {"waiting_timeout", d.WaitingTimeout, &pd.WaitingTimeout}} {
		if t.v == nil {
			continue
		}
		if !(*t.v >= minTimeout && *t.v <= maxRouterSeconds) {
			errs = append(errs, fielderr.Range(key(t.name), fmt.Sprintf("seconds in [%g, %d]", minTimeout, maxRouterSeconds), *t.v))
		} else {
			*t.out = time.Duration(math.Round(*t.v * 1e9))
		}
	}
	switch d.DecodeCache {
	case "", "chunk":
	case "radix":
		pd.DecodeRadix = true
	case "hicache":
		errs = append(errs, fielderr.New(key("decode_cache"), "\"hicache\" is not supported yet: \"chunk\" or \"radix\""))
	default:
		errs = append(errs, fielderr.New(key("decode_cache"), "must be \"chunk\" or \"radix\" (got %q)", d.DecodeCache))
	}
	if pd.DecodeOffload = d.DecodeOffload; d.DecodeOffload && pd.DecodeRadix {
		errs = append(errs, fielderr.New(key("decode_offload"), "only with decode_cache = \"chunk\" (a radix decode replica has no storage tier)"))
	}
	if _, err := f.Router.config(); err == nil {
		var err error
		if pd.Prefill, err = routerConfig("router.prefill", f.Router.RouterKeys, deref(f.Router.Prefill)); err != nil {
			errs = append(errs, err)
		}
		if pd.Decode, err = routerConfig("router.decode", f.Router.RouterKeys, deref(f.Router.Decode)); err != nil {
			errs = append(errs, err)
		}
	}
	return pd, errors.Join(errs...)
}

func deref(k *RouterKeys) RouterKeys {
	if k == nil {
		return RouterKeys{}
	}
	return *k
}

// groupNames reads a group name or an array of names.
func groupNames(v any) ([]string, bool) {
	switch v := v.(type) {
	case string:
		return []string{v}, true
	case []any:
		var out []string
		for _, x := range v {
			s, ok := x.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

// validatePD checks the disaggregation tables of a fleet file, or that a
// file without [disaggregation] has no [router.prefill] or
// [router.decode]. at places an error at a path's position.
func (f *File) validatePD(at func(fielderr.Path, error) error) error {
	if !f.IsPD() {
		var errs []error
		if f.Disaggregation.set() {
			errs = append(errs, fielderr.New(fielderr.Key("disaggregation"), "only with a [fleet] table (add [[fleet.groups]])"))
		}
		for _, p := range []struct {
			name string
			k    *RouterKeys
		}{{"prefill", f.Router.Prefill}, {"decode", f.Router.Decode}} {
			if p.k != nil {
				errs = append(errs, fielderr.New(fielderr.Key("router", p.name), "only with a [disaggregation] table"))
			}
		}
		return errors.Join(errs...)
	}
	_, err := f.pdConfig(at)
	return err
}
