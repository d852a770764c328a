package configs

import (
	"fmt"

	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/internal/fielderr"
)

// FleetBuilt is a fleet file built: the fleet's factory (its replicas,
// router, seed and, for a disaggregated fleet, their roles) and, per
// group, its built server and a line that describes it.
type FleetBuilt struct {
	// Factory builds and runs the fleet.
	Factory fleet.Factory
	// Groups are the replica groups, in replica order.
	Groups []FleetGroupFile
	// Servers are each group's built server.
	Servers []*Server
	// Describe is "name: count x server" per group ("name (role): ..."
	// in a disaggregated fleet), for reports.
	Describe []string
}

// BuildFleet builds the fleet a fleet file describes: every group's
// replicas, each on the fleet's shared L3 store of its namespace when its
// storage is shared (storage.shared), behind the file's router; with
// [disaggregation], each group in its role, the decode groups with their
// radix cache off (decode_cache = "chunk": SGLang forces the chunk cache
// on decode) or without a host tier and storage ("radix"), and each
// replica's KV bytes per token over its TP ranks from its model and GPU
// sizing. seed, when not 0, replaces the file's seed and every group's
// (kvsim sim --seed). Errors name the group whose server does not build.
func (f *File) BuildFleet(opt ServerOptions, seed uint64) (*FleetBuilt, error) {
	if !f.IsFleet() {
		return nil, fmt.Errorf("%s: not a fleet: no [[fleet.groups]]", f.path)
	}
	if seed != 0 {
		f.Seed = seed
	}
	groups, err := f.FleetGroups()
	if err != nil {
		return nil, err
	}
	out := &FleetBuilt{Groups: groups, Factory: fleet.Factory{Router: f.RouterConfig(), Seed: f.Seed, OpenLoop: f.Workload.OpenLoop}}
	var pd *PD
	if f.IsPD() {
		c := f.PDConfig()
		pd = &c
		out.Factory.PD = &fleet.PDFactory{Config: pd.PDConfig}
	}
	for i, g := range groups {
		if seed != 0 {
			g.File.Seed = seed
		}
		name := g.Name
		var role fleet.Role
		if pd != nil {
			role = pdRole(pd, i, g.File)
			name = fmt.Sprintf("%s (%v)", g.Name, role)
		}
		srv, err := g.File.BuildServer(opt)
		if err != nil {
			return nil, fmt.Errorf("group %s: %w", name, err)
		}
		if st, ok := srv.Factory.(interface{ HasStorage() bool }); role == fleet.Decode && pd.DecodeOffload && (!ok || !st.HasStorage()) {
			return nil, fielderr.New(fielderr.Key("disaggregation", "decode_offload"), "group %s has no storage tier to offload to: set storage.enabled and a host tier (cache.hierarchical) for it", name)
		}
		var perToken float64
		if pd != nil {
			b, err := g.File.Build()
			if err != nil {
				return nil, fmt.Errorf("group %s: %w", name, err)
			}
			perToken = float64(b.Sizing.CellBytes) * float64(b.Sizing.TPSize)
		}
		for range g.Count {
			out.Factory.Replicas = append(out.Factory.Replicas, fleet.Replica{Group: g.Name, Factory: srv.Factory, SharedL3: g.File.L3Namespace()})
			if pd != nil {
				out.Factory.PD.Roles = append(out.Factory.PD.Roles, role)
				out.Factory.PD.KVBytesPerToken = append(out.Factory.PD.KVBytesPerToken, perToken)
			}
		}
		out.Servers = append(out.Servers, srv)
		out.Describe = append(out.Describe, fmt.Sprintf("%s: %d x %s", name, g.Count, g.File.Describe()))
	}
	return out, nil
}

// pdRole is group i's role in a disaggregated fleet; a decode group's
// file is set as SGLang runs a decode server: the chunk cache, or with
// decode_cache = "radix" a radix cache without a host tier or storage
// (--disaggregation-decode-enable-radix-cache without HiCache).
func pdRole(pd *PD, i int, g *File) fleet.Role {
	if pd.IsPrefill[i] {
		return fleet.Prefill
	}
	if pd.DecodeRadix {
		off := false
		g.Cache.Hierarchical, g.Storage.Enabled = &off, false
	} else {
		g.Cache.Disable = true
		g.Storage.DecodeOffload = pd.DecodeOffload
	}
	return fleet.Decode
}
