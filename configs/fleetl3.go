package configs

import (
	"fmt"

	"github.com/kvsim/kvsim/internal/fielderr"
	"github.com/kvsim/kvsim/sim/hw"
)

// L3Namespace returns the namespace of the file's server in a fleet's
// shared L3 store (storage.shared, fleet-spec 3.1 and 5.20), or "" when
// its storage is not shared. SGLang's storage backends suffix a page's
// key with the model, and for MHA models with the tensor-parallel layout
// (rank and size; context-parallel parts too), so only servers of the same
// model and, for MHA, the same tp_size and dcp_size share pages: the
// namespace is the model's name, plus "tp<N> dcp<M>" for an MHA model. A
// server without a radix cache (a disaggregated fleet's chunk-cache decode
// side) has no storage tier to share, unless it offloads to it
// (disaggregation.decode_offload).
// The fleet keeps one store per namespace and page size (docs/fleet.md).
func (f *File) L3Namespace() string {
	if !f.Storage.Shared || !f.Storage.Enabled || f.Cache.Disable && !f.Storage.DecodeOffload || f.IsLlamaCpp() {
		return ""
	}
	if f.Model.Attention == hw.MLA {
		return f.Model.Name
	}
	return fmt.Sprintf("%s tp%d dcp%d", f.Model.Name, max(f.Server.TPSize, 1), max(f.Server.DCPSize, 1))
}

// sharedL3Keys are the storage keys every replica of a shared L3 store
// must agree on, one store having one capacity and one eviction, with the
// value a file gives each (as written; the zero value is the default).
var sharedL3Keys = []struct {
	key string
	get func(*File) any
}{
	{"capacity_tokens", func(f *File) any { return f.Storage.CapacityTokens }},
	{"eviction", func(f *File) any { return evictionName(f.Storage.Eviction) }},
	{"high_watermark", func(f *File) any { return f.Storage.HighWatermark }},
	{"eviction_ratio", func(f *File) any { return f.Storage.EvictionRatio }},
	{"lease_ttl", func(f *File) any { return f.Storage.LeaseTTL }},
	{"aggregate_gbps", func(f *File) any { return f.Storage.AggregateGBps }},
}

// evictionName is storage.eviction with the default spelled out.
func evictionName(s string) string {
	if s == "" {
		return "lru"
	}
	return s
}

// validateSharedL3 checks that every replica group whose storage is
// shared has the same storage.capacity_tokens and eviction settings
// ([sharedL3Keys]): the replicas of a shared store share its capacity and
// its eviction. A group that differs from the first shared group is
// refused at the key that sets the first value that differs (its set's,
// else the file's storage key, else its set).
func (f *File) validateSharedL3(name string, ps Positions) []error {
	var errs []error
	first := -1
	var firstFile *File
	for i, g := range f.Fleet.Groups {
		if g.Count < 1 {
			continue
		}
		gf, err := f.groupFile(g)
		if err != nil || gf.L3Namespace() == "" {
			continue // its errors are reported with the group's
		}
		if first < 0 {
			first, firstFile = i, gf
			continue
		}
		for _, k := range sharedL3Keys {
			v, want := k.get(gf), k.get(firstFile)
			if v == want {
				continue
			}
			key := groupKey(i).Key("set")
			where := key
			for _, p := range []fielderr.Path{key.Key("storage." + k.key), key.Key("storage", k.key), fielderr.Dotted("storage." + k.key)} {
				if _, ok := ps[p.String()]; ok {
					where = p
					break
				}
			}
			p, _ := ps.Find(where)
			errs = append(errs, &fielderr.At{File: name, Line: p.Line, Col: p.Col, Err: fielderr.New(key.Key("storage", k.key),
				"%v differs from group %d's %v: the replicas of a shared L3 store (storage.shared) share one capacity, eviction and bandwidth cap", v, first, want)})
			break
		}
	}
	return errs
}
