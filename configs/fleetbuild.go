package configs

import (
	"fmt"

	"github.com/kvsim/kvsim/fleet"
)

// FleetBuilt is a fleet file built: the fleet's factory (its replicas,
// router and seed) and, per group, its built server and a line that
// describes it.
type FleetBuilt struct {
	// Factory builds and runs the fleet.
	Factory fleet.Factory
	// Groups are the replica groups, in replica order.
	Groups []FleetGroupFile
	// Servers are each group's built server.
	Servers []*Server
	// Describe is "name: count x server" per group, for reports.
	Describe []string
}

// BuildFleet builds the fleet a fleet file describes. seed, when not 0,
// replaces the file's seed and every group's (kvsim sim --seed). Errors
// name the group whose server does not build.
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
	out := &FleetBuilt{Groups: groups, Factory: fleet.Factory{Router: f.RouterConfig(), Seed: f.Seed}}
	for _, g := range groups {
		if seed != 0 {
			g.File.Seed = seed
		}
		srv, err := g.File.BuildServer(opt)
		if err != nil {
			return nil, fmt.Errorf("group %s: %w", g.Name, err)
		}
		for range g.Count {
			out.Factory.Replicas = append(out.Factory.Replicas, fleet.Replica{Group: g.Name, Factory: srv.Factory})
		}
		out.Servers = append(out.Servers, srv)
		out.Describe = append(out.Describe, fmt.Sprintf("%s: %d x %s", g.Name, g.Count, g.File.Describe()))
	}
	return out, nil
}
