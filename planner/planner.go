package planner

import (
	"fmt"

	"github.com/kvsim/kvsim/internal/invariants"
)

// Config configures a [Planner].
type Config struct {
	// Lanes is the number of context-parallel owner lanes (cp): the length
	// of every deficit vector and every node's Counts. Default 1; valid
	// range [1, ∞).
	Lanes int
}

// Default returns the configuration of a planner without context
// parallelism (one lane).
func Default() Config { return Config{Lanes: 1} }

// Validate reports whether the configuration is usable.
func (c Config) Validate() error {
	if c.Lanes < 1 {
		return fmt.Errorf("planner.lanes: must be >= 1 (got %d)", c.Lanes)
	}
	return nil
}

// Planner plans owner-lane evictions with the lazy re-evaluation queue
// described in the package documentation. Its output is identical to
// [Reference]'s. A Planner keeps its scratch space (queue, versions, working
// copies) between calls, so a simulator that plans every scheduler tick
// allocates only the returned [Plan]. A Planner is not safe for concurrent
// use.
type Planner struct {
	cfg  Config
	s    snapshot
	h    scoreQueue
	stat Stats

	liveAt []*entry // checkInvariants' scratch: node -> its live entry
}

// Stats counts the work done by the last [Planner.Plan] call.
type Stats struct {
	// Candidates is the number of nodes eligible at the start.
	Candidates int
	// Evaluations is the number of scores computed, including the initial
	// ones: Candidates + parent pushes + sibling refreshes + Stale.
	Evaluations int
	// Stale is the number of entries whose stored score was found out of
	// date (when their bucket was settled, or at the top of the queue) and
	// that were re-keyed instead of consumed.
	Stale int
}

// New returns a planner for cfg.Lanes owner lanes.
func New(cfg Config) (*Planner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Planner{cfg: cfg}, nil
}

// Stats reports the work done by the last call to Plan.
func (p *Planner) Stats() Stats { return p.stat }

// Plan chooses the victims for a snapshot (nodes, with the root as ID 0 not
// listed and parents listed before their children) and per-lane deficits,
// which must have Config.Lanes entries. It returns the same plan as
// [Reference], or an [*InputError] for malformed input. nodes and deficits
// are only read; the returned slices belong to the caller.
func (p *Planner) Plan(nodes []Node, deficits []int64) (Plan, error) {
	if len(deficits) != p.cfg.Lanes {
		return Plan{}, deficitErr("deficits", "want %d lanes, got %d", p.cfg.Lanes, len(deficits))
	}
	s, h := &p.s, &p.h
	if err := s.load(nodes, deficits); err != nil {
		return Plan{}, err
	}
	p.stat = Stats{}
	h.reset(s.n, s.bound)
	if s.positive > 0 {
		for i := int32(1); i < int32(s.n); i++ {
			if s.eligible(i) {
				h.push(p.evaluate(i))
				p.stat.Candidates++
			}
		}
	}
	for s.positive > 0 {
		k := h.top()
		if k < 0 {
			break // nothing eligible
		}
		if !h.ordered[k] {
			p.settle(k)
			continue
		}
		top := &h.b[k][0]
		if !h.live(top) {
			h.pop(k) // replaced by a sibling refresh
			continue
		}
		i := top.node
		c, u := s.contribution(i), s.unlock(i)
		if c != top.contrib || u != top.unlock {
			// Stale: re-key and look again. See doc.go for why the first
			// up-to-date minimum is the rescan's choice.
			x := h.pop(k)
			x.contrib, x.unlock = c, u
			h.push(x)
			p.stat.Stale++
			p.stat.Evaluations++
			continue
		}
		if c == 0 && u == 0 {
			break // every eligible node scores (0, 0): nothing left helps
		}
		h.pop(k)
		par := s.choose(i)
		if par != root && s.device[par] && !s.locked[par] {
			switch s.children[par] {
			case 0:
				// parent-push: the parent just became eligible.
				h.push(p.evaluate(par))
			case 1:
				// The last remaining sibling's unlock may have grown from 0
				// to the parent's contribution: its entry would no longer be
				// optimistic, so refresh it now.
				if sib := s.lastKid[par]; s.eligible(sib) {
					h.kill(sib)
					h.push(p.evaluate(sib))
				}
			}
		}
		if invariants.Enabled {
			p.checkInvariants()
		}
	}
	return s.result(), nil
}

// settle orders bucket k, which has just become the highest non-empty one.
// First it re-evaluates the bucket's entries: dead ones are dropped and
// stale ones move to the lower buckets of their fresh scores, each in O(1),
// so that the heap is built from up-to-date entries only. Every entry of the
// highest bucket is popped or re-keyed before any lower one is used, so
// this moves work forward rather than adding it, except at the end of a
// plan; and a stale entry re-keyed here costs no sift through the heap.
func (p *Planner) settle(k int) {
	s, h := &p.s, &p.h
	e := h.b[k]
	n := 0
	for _, x := range e {
		if !h.live(&x) {
			continue
		}
		c, u := s.contribution(x.node), s.unlock(x.node)
		if c != x.contrib || u != x.unlock {
			p.stat.Stale++
			p.stat.Evaluations++
			x.contrib, x.unlock = c, u
			if h.index(c, u) != k {
				// Stale scores are optimistic, so the fresh one belongs
				// to a lower bucket, never to a higher one.
				h.push(x)
				continue
			}
		}
		e[n] = x
		n++
	}
	h.order(k, n)
}

// evaluate returns a fresh live queue entry for node i.
func (p *Planner) evaluate(i int32) entry {
	p.stat.Evaluations++
	s := &p.s
	return entry{contrib: s.contribution(i), unlock: s.unlock(i), slru: s.slru[i], id: s.id[i], node: i, ver: p.h.ver[i]}
}

// checkInvariants panics unless every entry is in its bucket, ordered buckets
// are heaps, the non-empty bits are right, the live entries are exactly
// one per eligible node, and every stored score is optimistic (no larger
// than the node's current score). O(buckets + n * cp).
func (p *Planner) checkInvariants() {
	s, h := &p.s, &p.h
	p.liveAt = resize(p.liveAt, s.n)
	clear(p.liveAt)
	liveAt := p.liveAt
	for k := range h.last + 1 {
		e := h.b[k]
		if (len(e) > 0) != (h.bits[k/64]&(1<<(k%64)) != 0) {
			panic(fmt.Sprintf("planner: non-empty bit of bucket %d is wrong", k))
		}
		if (h.bits[k/64] != 0) != (h.summary[k/4096]&(1<<(k/64%64)) != 0) {
			panic(fmt.Sprintf("planner: summary bit of bucket %d is wrong", k))
		}
		for j := range e {
			if h.index(e[j].contrib, e[j].unlock) != k {
				panic(fmt.Sprintf("planner: node %d with score (%d, %d) is in bucket %d", e[j].node, e[j].contrib, e[j].unlock, k))
			}
			if h.ordered[k] && j > 0 && less(&e[j], &e[(j-1)/2]) {
				panic(fmt.Sprintf("planner: order of bucket %d broken at slot %d", k, j))
			}
			if h.live(&e[j]) {
				if liveAt[e[j].node] != nil {
					panic(fmt.Sprintf("planner: node %d has two live entries", e[j].node))
				}
				liveAt[e[j].node] = &e[j]
			}
		}
	}
	for i := int32(1); i < int32(s.n); i++ {
		if s.eligible(i) != (liveAt[i] != nil) {
			panic(fmt.Sprintf("planner: node %d eligible=%v but in queue=%v", s.id[i], s.eligible(i), liveAt[i] != nil))
		}
		if liveAt[i] == nil {
			continue
		}
		cur := p.evaluate(i)
		p.stat.Evaluations--
		if less(&cur, liveAt[i]) {
			panic(fmt.Sprintf("planner: stored score of node %d is pessimistic", s.id[i]))
		}
	}
}
