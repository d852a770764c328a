package synth

import (
	"fmt"
	"math/rand/v2"

	"github.com/kvsim/kvsim/planner"
)

// Config describes a synthetic snapshot.
type Config struct {
	// Candidates is the number of initially eligible leaves; >= 1.
	Candidates int
	// Deficit is the total page deficit over all lanes; >= 0.
	Deficit int64
	// Lanes is the number of owner lanes (cp); in [1, 1024].
	Lanes int
	// Seed seeds the generator; any value.
	Seed uint64
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	switch {
	case c.Candidates < 1:
		return fmt.Errorf("candidates: must be >= 1 (got %d)", c.Candidates)
	case c.Candidates > 50_000_000:
		return fmt.Errorf("candidates: must be <= 50000000 (got %d)", c.Candidates)
	case c.Deficit < 0 || c.Deficit > 1<<40:
		return fmt.Errorf("deficit: must be from 0 to %d pages (got %d)", int64(1<<40), c.Deficit)
	case c.Lanes < 1 || c.Lanes > 1024:
		return fmt.Errorf("cp: must be in [1, 1024] (got %d)", c.Lanes)
	}
	return nil
}

// stream is the PCG stream constant of the generator ("synth" in ASCII).
const stream = 0x73796e7468

// builder accumulates nodes in creation order (parents before children).
type builder struct {
	r      *rand.Rand
	lanes  int
	nodes  []planner.Node
	offset []int64 // page offset of each node's first page (its depth in pages)
	kids   []int   // number of children of each node (index = id)
	// conversation owner lane per node; -1 for shared prompts.
	owner []int
	clock int64
}

// Snapshot returns the nodes and deficits described by c.
func Snapshot(c Config) ([]planner.Node, []int64, error) {
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	b := &builder{r: rand.New(rand.NewPCG(c.Seed, stream)), lanes: c.Lanes}
	b.nodes = make([]planner.Node, 0, 3*c.Candidates)
	b.offset = append(make([]int64, 0, 3*c.Candidates+1), 0) // the root, id 0
	b.kids = append(make([]int, 0, 3*c.Candidates+1), 0)
	b.owner = append(make([]int, 0, 3*c.Candidates+1), -1)

	// prompts[k] is the last node of system prompt k, created on first use
	// so that every prompt has a conversation under it (0 = not yet).
	prompts := make([]int64, max(1, c.Candidates/50))
	var used []int64 // the prompts created so far
	prompt := func(k int) int64 {
		if prompts[k] == 0 {
			parent := int64(0)
			for range 1 + b.r.IntN(3) {
				parent = b.add(parent, 16+b.r.Int64N(113), -1)
			}
			prompts[k] = parent
			used = append(used, parent)
		}
		return prompts[k]
	}
	// turns holds the internal conversation nodes that later requests may
	// fork from.
	var turns []int64
	leaf := func() int64 {
		var parent int64
		var owner int
		if len(turns) == 0 || b.r.IntN(4) == 0 {
			// A new conversation under a popular prompt (skewed: the
			// square of a uniform favours low indices).
			u := b.r.Float64()
			parent = prompt(int(u * u * float64(len(prompts))))
			owner = b.r.IntN(b.lanes)
			for range b.r.IntN(5) {
				parent = b.add(parent, 2+b.r.Int64N(23), owner)
				turns = append(turns, parent)
			}
		} else {
			// A later request of a conversation forks at an earlier turn.
			parent = turns[b.r.IntN(len(turns))]
			owner = b.owner[parent]
			for range b.r.IntN(3) {
				parent = b.add(parent, 2+b.r.Int64N(23), owner)
				turns = append(turns, parent)
			}
		}
		return b.add(parent, 1+b.r.Int64N(16), owner)
	}
	for range c.Candidates {
		leaf()
	}
	// Running requests lock their leaf and its whole path.
	for range c.Candidates * 3 / 100 {
		for id := leaf(); id != 0; id = b.nodes[id-1].Parent {
			b.nodes[id-1].Locked = true
		}
	}
	// Host-only leaves under internal nodes: not device-resident, so they
	// change no eligibility.
	for range c.Candidates * 5 / 100 {
		parent := used[b.r.IntN(len(used))]
		if len(turns) > 0 && b.r.IntN(2) == 0 {
			parent = turns[b.r.IntN(len(turns))]
		}
		id := b.add(parent, 1+b.r.Int64N(16), b.owner[parent])
		b.nodes[id-1].Device = false
	}
	b.finishSLRU()
	return b.nodes, b.deficits(c.Deficit), nil
}

// add appends a device-resident node of pages pages under parent and returns
// its ID. owner < 0 stripes the pages over the lanes; otherwise a node is
// striped or on lane owner with equal odds.
func (b *builder) add(parent, pages int64, owner int) int64 {
	id := int64(len(b.nodes) + 1)
	start := b.offset[parent]
	if parent != 0 {
		start += sum(b.nodes[parent-1].Counts)
	}
	counts := make([]int64, b.lanes)
	if owner < 0 || b.r.IntN(2) == 0 {
		cp := int64(b.lanes)
		for o := range counts {
			// pages p in [start, start+pages) with p mod cp == o
			counts[o] = ceilDiv(start+pages-int64(o), cp) - ceilDiv(start-int64(o), cp)
		}
	} else {
		counts[owner] = pages
	}
	b.clock += 1 + b.r.Int64N(1_000_000) // ns between node creations
	b.nodes = append(b.nodes, planner.Node{
		ID: id, Parent: parent, Counts: counts, Device: true,
		SLRU: planner.Priority{LastAccess: b.clock},
	})
	b.offset = append(b.offset, start)
	b.kids = append(b.kids, 0)
	b.owner = append(b.owner, owner)
	b.kids[parent]++
	return id
}

// finishSLRU makes every node's last access at least its descendants' and
// puts shared nodes (>= 2 children) and 20% of leaves in the protected
// segment.
func (b *builder) finishSLRU() {
	for k := len(b.nodes) - 1; k >= 0; k-- {
		nd := &b.nodes[k]
		switch {
		case b.kids[nd.ID] >= 2:
			nd.SLRU.Segment = 1
		case b.kids[nd.ID] == 0 && b.r.IntN(5) == 0:
			nd.SLRU.Segment = 1
		}
		if nd.Parent != 0 {
			p := &b.nodes[nd.Parent-1]
			p.SLRU.LastAccess = max(p.SLRU.LastAccess, nd.SLRU.LastAccess)
		}
	}
}

// deficits spreads total over the lanes unevenly (see the package doc).
func (b *builder) deficits(total int64) []int64 {
	w := make([]float64, b.lanes)
	var sw float64
	for o := range w {
		w[o] = 0.25 + 1.5*b.r.Float64()
	}
	w[b.r.IntN(b.lanes)] *= 3
	for _, x := range w {
		sw += x
	}
	d := make([]int64, b.lanes)
	var given int64
	for o := range d {
		d[o] = int64(float64(total) * w[o] / sw)
		given += d[o]
	}
	for o := 0; given < total; o = (o + 1) % b.lanes {
		d[o]++
		given++
	}
	for o := 0; given > total; o = (o + 1) % b.lanes { // float rounding
		if d[o] > 0 {
			d[o]--
			given--
		}
	}
	return d
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// ceilDiv is ceil(a/b) for b > 0 and any a.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a > 0 {
		q++
	}
	return q
}
