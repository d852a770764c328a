package fleet_test

import (
	"slices"
	"testing"

	"github.com/kvsim/kvsim/sim/engine"
	"pgregory.net/rapid"
)

// opaque is a factory whose engines show nothing but engine.Engine and
// the load report a router polls: the fleet cannot have them record their
// inter-token latencies in its summary and computes those from their token
// events.
type opaque struct{ engine.Factory }

// loadReporter is what least_load's poll reads of an SGLang replica.
type loadReporter interface {
	LoadReport() (usage float64, queued, generated int64)
}

func (o opaque) New() (engine.Engine, error) {
	e, err := o.Factory.New()
	if lr, ok := e.(loadReporter); ok {
		return struct {
			engine.Engine
			loadReporter
		}{e, lr}, err
	}
	return struct{ engine.Engine }{e}, err
}

// The replicas that record their inter-token latencies in the fleet's
// summary themselves give it the same latencies, in the same order, as the
// fleet computes from their token events: a mixed fleet with some
// replicas opaque gives byte-identical results to the same fleet without.
func TestReplicasRecordTheFleetsLatencies(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reps := drawMixed(t, 4)
		hidden := slices.Clone(reps)
		for i := range hidden {
			if rapid.Bool().Draw(t, "opaque") {
				hidden[i].Factory = opaque{hidden[i].Factory}
			}
		}
		cfg, seed, recs := drawRouter(t), rapid.Uint64().Draw(t, "seed"), drawTrace(t)
		_, res := runFleet(t, reps, cfg, seed, recs)
		_, want := runFleet(t, hidden, cfg, seed, recs)
		if g, w := jsonOf(t, res), jsonOf(t, want); g != w {
			t.Fatalf("replicas recording their latencies:\n%s\nthe fleet computing them:\n%s", g, w)
		}
	})
}
