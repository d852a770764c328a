package sim

import (
	"fmt"
	"math"
	"slices"

	"github.com/kvsim/kvsim/sim/engine"
)

// l3Bandwidth is a storage tier's fleet-wide aggregate bandwidth cap
// (storage.aggregate_bandwidth, fleet-spec 5.22): every transfer to or from
// the store, any replica's read or backup batch, draws on one aggregate
// rate as well as on its own link.
//
// # First come, first served
//
// Transfers are reserved one at a time, in the order the replicas time
// them (the fleet's event order: time, replica, seq), and a reservation is
// never changed: a transfer starting at s with B bytes on a link of rate r
// takes min(r, cap - reserved(t)) at each instant t >= s (water-filling
// the rate left by the earlier reservations), ends where that integral
// reaches B, and adds its rate profile to the reservation. So no
// replica's scheduled landing or read moves when another replica's
// transfer starts or ends, which processor sharing (each transfer at its
// fair share, recomputed at every start and end) would need. The
// aggregate throughput is the same; earlier reservations are favoured.
//
// Rates are integer bytes/s, so the reserved rate never exceeds the cap
// by rounding; a link-limited transfer reserves its rate rounded up.
type l3Bandwidth struct {
	cap   int64     // bytes/s, > 0
	pts   []bwPoint // the reserved rate from pts[i].at to pts[i+1].at; 0 before pts[0] and after the last
	floor []engine.Time
	runs  []bwRun // scratch
	stats []L3BandwidthStats
	// pruned is the time before which the profile was pruned: no
	// reservation may start before it.
	pruned engine.Time
}

// bwPoint is a breakpoint of the reserved rate.
type bwPoint struct {
	at   engine.Time
	rate int64 // bytes/s from at to the next point
}

// bwRun is one piece of a transfer's reservation: rate from lo to hi.
type bwRun struct {
	lo, hi engine.Time
	rate   int64
}

// L3BandwidthStats is one replica's transfers slowed by its store's
// aggregate bandwidth cap.
type L3BandwidthStats struct {
	// Slowed is the storage calls (read or write batches) that ended later
	// than on the replica's own link alone.
	Slowed int64 `json:"l3_transfers_slowed_by_cap,omitempty"`
	// DelayNs is their total added time, ns.
	DelayNs int64 `json:"l3_cap_delay_ns,omitempty"`
}

// bwPruneAt is the breakpoint count above which reserve drops the
// breakpoints no future reservation can reach (a variable for tests).
var bwPruneAt = 16

// newL3Bandwidth returns the cap of st (nil: none).
func newL3Bandwidth(st StorageConfig) *l3Bandwidth {
	if st.AggregateBandwidth <= 0 {
		return nil
	}
	return &l3Bandwidth{cap: aggregateRate(st)}
}

// aggregateRate is st's aggregate bandwidth in whole bytes/s.
func aggregateRate(st StorageConfig) int64 {
	return max(int64(math.Round(st.AggregateBandwidth)), 1)
}

// attach adds a replica and returns its slot.
func (b *l3Bandwidth) attach() int {
	b.floor = append(b.floor, 0)
	b.stats = append(b.stats, L3BandwidthStats{})
	return len(b.floor) - 1
}

// setFloor says that replica slot will reserve nothing that starts before
// t from now on.
func (b *l3Bandwidth) setFloor(slot int, t engine.Time) {
	b.floor[slot] = t
}

// rateAt returns the reserved rate at t.
func (b *l3Bandwidth) rateAt(t engine.Time) int64 {
	i := b.index(t)
	if i < 0 {
		return 0
	}
	return b.pts[i].rate
}

// index is the last breakpoint at or before t (-1: none).
func (b *l3Bandwidth) index(t engine.Time) int {
	i, found := slices.BinarySearchFunc(b.pts, t, func(p bwPoint, t engine.Time) int {
		switch {
		case p.at < t:
			return -1
		case p.at > t:
			return 1
		}
		return 0
	})
	if found {
		return i
	}
	return i - 1
}

// share is the per-lane rate, bytes/s, a transfer on a link of link
// bytes/s per lane over lanes lanes gets while rate is reserved, and the
// aggregate rate it reserves.
func (b *l3Bandwidth) share(rate int64, link float64, lanes int) (float64, int64) {
	left := max(b.cap-rate, 0)
	if float64(left) >= link*float64(lanes) {
		return link, min(int64(math.Ceil(link*float64(lanes))), left)
	}
	return float64(left) / float64(lanes), left
}

// reserve times a transfer of bytes per lane on lanes lanes, each a link
// of link bytes/s, starting at start, and reserves it. It returns the end
// and the end the link alone would give. The arithmetic of the link alone
// is [Sim.storageTime]'s, so a transfer the cap never limits ends at the
// same nanosecond.
func (b *l3Bandwidth) reserve(start engine.Time, bytes, link float64, lanes int) (end, alone engine.Time) {
	if start < b.pruned {
		panic(fmt.Sprintf("sim: a storage transfer reserved from %d, before the bandwidth profile's pruned horizon %d", start, b.pruned))
	}
	alone = start + engine.Time(math.Ceil(bytes/link*1e9))
	b.runs = b.runs[:0]
	i := b.index(start)
	t0, rem := start, bytes
	for {
		rate := int64(0)
		if i >= 0 {
			rate = b.pts[i].rate
		}
		a, res := b.share(rate, link, lanes)
		// The run of constant share from t0.
		t1 := engine.Never
		for i+1 < len(b.pts) {
			if a2, _ := b.share(b.pts[i+1].rate, link, lanes); a2 != a {
				t1 = b.pts[i+1].at
				break
			}
			i++
		}
		if a > 0 {
			if d := rem / a * 1e9; d <= float64(t1-t0) {
				end = t0 + engine.Time(math.Ceil(d))
				if end > t0 {
					b.runs = append(b.runs, bwRun{t0, end, res})
				}
				break
			}
			rem -= a * float64(t1-t0) / 1e9
			b.runs = append(b.runs, bwRun{t0, t1, res})
		}
		t0 = t1
		i++
	}
	for _, r := range b.runs {
		b.add(r)
	}
	return end, alone
}

// reserveFor is reserve for replica slot, counting a slowed transfer.
func (b *l3Bandwidth) reserveFor(slot int, start engine.Time, bytes, link float64, lanes int) engine.Time {
	end, alone := b.reserve(start, bytes, link, lanes)
	if end > alone {
		b.stats[slot].Slowed++
		b.stats[slot].DelayNs += int64(end - alone)
	}
	if len(b.pts) > bwPruneAt {
		b.prune(slices.Min(b.floor))
	}
	return end
}

// add adds r's rate to the profile over [r.lo, r.hi).
func (b *l3Bandwidth) add(r bwRun) {
	lo := b.split(r.lo)
	hi := b.split(r.hi)
	for k := lo; k < hi; k++ {
		b.pts[k].rate += r.rate
		if b.pts[k].rate > b.cap {
			panic(fmt.Sprintf("sim: aggregate storage rate %d over the cap %d at %d", b.pts[k].rate, b.cap, b.pts[k].at))
		}
	}
}

// split makes sure a breakpoint is at t and returns its index.
func (b *l3Bandwidth) split(t engine.Time) int {
	i := b.index(t)
	if i >= 0 && b.pts[i].at == t {
		return i
	}
	rate := int64(0)
	if i >= 0 {
		rate = b.pts[i].rate
	}
	b.pts = slices.Insert(b.pts, i+1, bwPoint{t, rate})
	return i + 1
}

// prune drops the breakpoints before t that the rate at t does not need.
func (b *l3Bandwidth) prune(t engine.Time) {
	b.pruned = max(b.pruned, t)
	if i := b.index(t); i > 0 {
		b.pts = slices.Delete(b.pts, 0, i)
	}
}
