package fleet

import (
	"testing"
	"time"

	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/sim/engine"
)

// reporter is an engine that only reports load, its tokens generated set
// by the test.
type reporter struct {
	engine.Engine
	queued, gen int64
}

func (r *reporter) LoadReport() (float64, int64, int64) { return 0, r.queued, r.gen }

// least_load's poll turns tokens generated into a rate over the time since
// the previous poll, and a second poll at the same instant (poll interval
// 0) keeps that rate rather than reporting none.
func TestLeastLoadPollRate(t *testing.T) {
	cfg := router.Default()
	cfg.Policy, cfg.PowerOfTwo.LoadPollInterval = router.LeastLoad, 0
	rt, err := router.New(cfg, 2, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	p := newLoadPoll(cfg)
	a, b := &reporter{queued: 3000}, &reporter{queued: 1000}
	engines := []engine.Engine{a, b}
	p.maybe(0, rt, engines, nil)
	// over the next second 4000 and 1000 tokens/s: waits 0.75 s and 1 s
	// (at the default 2000 tokens/s they would be 1.5 s and 0.5 s)
	a.gen, b.gen = 4000, 1000
	for range 2 { // two decisions at t = 1 s
		p.maybe(engine.Time(time.Second), rt, engines, nil)
		if d, err := rt.Route(&router.Request{Len: 100}); err != nil || d.Replica != 0 {
			t.Fatalf("routed %+v, %v; want replica 0, the faster drain", d, err)
		}
	}
}
