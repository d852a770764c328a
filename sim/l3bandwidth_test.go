package sim

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// bwTransfer is one drawn transfer: start, bytes per lane, link rate per
// lane, lanes.
type bwTransfer struct {
	start engine.Time
	bytes float64
	link  float64
	lanes int
}

func drawBwTransfer(t *rapid.T, label string) bwTransfer {
	return bwTransfer{
		start: engine.Time(rapid.Int64Range(0, 2e6).Draw(t, label+" start")),
		bytes: float64(rapid.Int64Range(0, 4e6).Draw(t, label+" bytes")),
		link:  float64(rapid.SampledFrom([]int64{1e9, 3e9, 5e9, 7e8}).Draw(t, label+" link")),
		lanes: rapid.IntRange(1, 2).Draw(t, label+" lanes"),
	}
}

// rateModel is the reserved rate at t by the model: the sum of the runs
// covering t.
func rateModel(runs []bwRun, t engine.Time) int64 {
	var r int64
	for _, x := range runs {
		if x.lo <= t && t < x.hi {
			r += x.rate
		}
	}
	return r
}

// Reservations made one after another: the profile is the sum of the
// reservations' runs at every breakpoint (and between them) and never
// above the cap; each transfer moves its bytes (the integral of its
// per-lane share reaches them at its end, to rounding) and never ends
// before its link alone would end it; with the cap at or above every
// transfer's aggregate link rate plus all others', each ends exactly when
// its link alone would.
func TestL3BandwidthProfile(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capRate := rapid.SampledFrom([]int64{1e9, 4e9, 12e9, 1e12}).Draw(t, "cap")
		b := &l3Bandwidth{cap: capRate}
		b.attach()
		var all []bwRun
		n := rapid.IntRange(1, 12).Draw(t, "transfers")
		var sumLinks float64
		for i := range n {
			x := drawBwTransfer(t, "t")
			sumLinks += x.link * float64(x.lanes)
			end, alone := b.reserve(x.start, x.bytes, x.link, x.lanes)
			var moved float64
			for _, r := range b.runs {
				if r.lo < x.start || r.hi > end || r.rate <= 0 {
					t.Fatalf("transfer %d (%+v, end %d): run %+v", i, x, end, r)
				}
				moved += float64(r.rate) / float64(x.lanes) * float64(r.hi-r.lo) / 1e9
			}
			all = append(all, b.runs...)
			if end < alone {
				t.Fatalf("transfer %d ends at %d, before its link alone (%d)", i, end, alone)
			}
			if float64(capRate) >= sumLinks+float64(n) && end != alone {
				t.Fatalf("transfer %d ends at %d with the cap above the links, alone %d", i, end, alone)
			}
			// The runs' rates are rounded up to whole bytes/s, and the
			// last run to a whole ns.
			if moved < x.bytes*(1-1e-9)-1 {
				t.Fatalf("transfer %d moved %v of %v bytes a lane", i, moved, x.bytes)
			}
			for k, p := range b.pts {
				if p.rate > capRate || p.rate < 0 {
					t.Fatalf("rate %d at %d, cap %d", p.rate, p.at, capRate)
				}
				if m := rateModel(all, p.at); m != p.rate {
					t.Fatalf("breakpoint %d at %d: rate %d, the reservations sum to %d", k, p.at, p.rate, m)
				}
			}
			if b.rateAt(-1) != 0 || b.rateAt(engine.Never-1) != 0 {
				t.Fatal("rate outside the reservations")
			}
		}
	})
}

// A lone transfer takes exactly B / min(r, cap / lanes).
func TestL3BandwidthLone(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capRate := rapid.Int64Range(1, 2e10).Draw(t, "cap")
		x := drawBwTransfer(t, "t")
		b := &l3Bandwidth{cap: capRate}
		end, _ := b.reserve(x.start, x.bytes, x.link, x.lanes)
		want := x.start + engine.Time(math.Ceil(x.bytes/min(x.link, float64(capRate)/float64(x.lanes))*1e9))
		if end != want {
			t.Fatalf("lone transfer ends at %d, want %d", end, want)
		}
	})
}

// On a fixed set of reservations, a lower cap never makes a transfer end
// earlier.
func TestL3BandwidthLowerCapNeverEarlier(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		hi := rapid.Int64Range(2, 2e10).Draw(t, "cap")
		lo := rapid.Int64Range(1, hi).Draw(t, "lower cap")
		b := &l3Bandwidth{cap: hi}
		for range rapid.IntRange(0, 10).Draw(t, "reserved") {
			x := drawBwTransfer(t, "r")
			b.reserve(x.start, x.bytes, x.link, x.lanes)
		}
		x := drawBwTransfer(t, "t")
		low := &l3Bandwidth{cap: lo, pts: slices.Clone(b.pts)}
		want, _ := b.reserve(x.start, x.bytes, x.link, x.lanes)
		got, _ := low.reserve(x.start, x.bytes, x.link, x.lanes)
		if got < want {
			t.Fatalf("cap %d: ends at %d, before %d under cap %d", lo, got, want, hi)
		}
	})
}

// Pruning keeps the rate at and after the floor.
func TestL3BandwidthPrune(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := &l3Bandwidth{cap: 4e9}
		for range rapid.IntRange(0, 10).Draw(t, "reserved") {
			x := drawBwTransfer(t, "r")
			b.reserve(x.start, x.bytes, x.link, x.lanes)
		}
		full := &l3Bandwidth{cap: b.cap, pts: slices.Clone(b.pts)}
		floor := engine.Time(rapid.Int64Range(0, 3e6).Draw(t, "floor"))
		b.prune(floor)
		for _, p := range full.pts {
			if t0 := max(p.at, floor); b.rateAt(t0) != full.rateAt(t0) {
				t.Fatalf("rate at %d: %d after pruning at %d, %d before", t0, b.rateAt(t0), floor, full.rateAt(t0))
			}
		}
	})
}

// TestPropStorageTierCapped runs TestPropStorageTier's checks (on its
// traces or on cycled prefixes that come back from storage) with the
// store's aggregate bandwidth capped, from a hundredth of the links to
// above them, pruning the profile at every reservation (a reservation
// before the pruned horizon panics): with the cap at or above the read
// and write links together, the results are those without a cap.
func TestPropStorageTierCapped(t *testing.T) {
	defer func(n int) { bwPruneAt = n }(bwPruneAt)
	bwPruneAt = 0
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		cfg.Cache.Disable = false
		cfg.Cache.HostTokens = cfg.Cache.DeviceTokens * int64(rapid.IntRange(1, 3).Draw(t, "host_ratio"))
		cfg.Storage = drawStorage(t)
		if rapid.Bool().Draw(t, "no call latency") {
			// Transfers then start right at their link's free time.
			cfg.Storage.ReadLatency, cfg.Storage.WriteLatency = 0, 0
		}
		links := float64(cfg.Cache.CP) * (cfg.Storage.ReadBandwidth + cfg.Storage.WriteBandwidth)
		f := rapid.SampledFrom([]float64{0.01, 0.3, 1, 3}).Draw(t, "cap share of the links")
		capped := cfg
		capped.Storage.AggregateBandwidth = math.Ceil(f * links)
		recs := drawTrace(t)
		if rapid.Bool().Draw(t, "cycled") {
			capped.Storage.CapacityTokens = 0
			cfg.Storage.CapacityTokens = 0
			recs = drawCycledTrace(t)
		}
		checkRun(t, capped, recs)
		if f >= 1 {
			_, want := simulate(t, cfg, (*Sim).Run, recs)
			_, got := simulate(t, capped, (*Sim).Run, recs)
			if !reflect.DeepEqual(want, got) {
				t.Fatal("a cap above the links changed the results")
			}
		}
	})
}

// drawCycledTrace draws requests over a few long prefixes, more than the
// device and host tiers of drawCapped hold, so that prefixes cycle through
// storage and come back through prefetches.
func drawCycledTrace(t *rapid.T) []traces.Record {
	k := rapid.IntRange(2, 6).Draw(t, "prefixes")
	n := rapid.IntRange(k, 40).Draw(t, "requests")
	var recs []traces.Record
	at := int64(0)
	for i := range n {
		p := i % k
		if i >= k {
			p = rapid.IntRange(0, k-1).Draw(t, "prefix")
		}
		prompt := append(tokens(400, int32(p)*10_000), tokens(rapid.IntRange(1, 50).Draw(t, "tail"), int32(100_000+i*100))...)
		at += int64(rapid.IntRange(0, 400).Draw(t, "gap_ms")) * 1e6
		recs = append(recs, rec(fmt.Sprint(i), at, prompt, rapid.IntRange(1, 10).Draw(t, "out")))
	}
	return recs
}
