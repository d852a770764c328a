package router

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// prefixes is the model of one tenant's part of the approximate tree: every
// non-empty prefix of every key inserted for it, with the stamp of the last
// insert that passed it.
type prefixes map[string]uint64

func keyString(k []symbol) string {
	var b strings.Builder
	for _, s := range k {
		fmt.Fprintf(&b, "%d,", s)
	}
	return b.String()
}

// tenantPrefixes reads the tree back into the model's shape.
func tenantPrefixes(t *approxTree) []prefixes {
	out := make([]prefixes, len(t.size))
	for i := range out {
		out[i] = prefixes{}
	}
	var walk func(n *anode, path []symbol)
	walk = func(n *anode, path []symbol) {
		for _, c := range n.children {
			p := append(slices.Clip(path), c.edge...)
			for _, ts := range c.tenants {
				for j := len(path) + 1; j <= len(p); j++ {
					out[ts.r][keyString(p[:j])] = ts.stamp
				}
			}
			walk(c, p)
		}
	}
	walk(t.root, nil)
	return out
}

type approxMachine struct {
	t     *approxTree
	model []prefixes
	clock uint64
	keys  [][]symbol
}

func drawKey(rt *rapid.T, label string) []symbol {
	return rapid.SliceOfN(rapid.Map(rapid.Uint64Range(0, 3), func(v uint64) symbol { return symbol(v) }), 0, 12).Draw(rt, label)
}

func (m *approxMachine) insert(rt *rapid.T) {
	k := drawKey(rt, "key")
	if len(m.keys) > 0 && rapid.Bool().Draw(rt, "extend") {
		// extend a key seen before, so that prefixes are shared
		base := rapid.SampledFrom(m.keys).Draw(rt, "base")
		k = append(slices.Clone(base[:rapid.IntRange(0, len(base)).Draw(rt, "cut")]), k...)
	}
	r := rapid.IntRange(0, len(m.model)-1).Draw(rt, "replica")
	m.t.insert(k, r)
	m.clock++
	for j := 1; j <= len(k); j++ {
		m.model[r][keyString(k[:j])] = m.clock
	}
	m.keys = append(m.keys, k)
}

func (m *approxMachine) match(rt *rapid.T) {
	k := drawKey(rt, "key")
	if len(m.keys) > 0 && rapid.Bool().Draw(rt, "seen") {
		k = rapid.SampledFrom(m.keys).Draw(rt, "seen_key")
	}
	got, tenant := m.t.match(k)
	want := 0
	for j := len(k); j > 0 && want == 0; j-- {
		for _, p := range m.model {
			if _, ok := p[keyString(k[:j])]; ok {
				want = j
			}
		}
	}
	if got != want {
		rt.Fatalf("match(%v) = %d, want %d", k, got, want)
	}
	if want == 0 {
		if tenant != -1 {
			rt.Fatalf("match(%v): tenant %d for no match, want -1", k, tenant)
		}
		return
	}
	if _, ok := m.model[tenant][keyString(k[:want])]; !ok {
		rt.Fatalf("match(%v) = %d on tenant %d, which does not hold that prefix", k, got, tenant)
	}
}

func (m *approxMachine) evict(rt *rapid.T) {
	budget := rapid.IntRange(0, 24).Draw(rt, "budget")
	m.t.evict(budget)
	after := tenantPrefixes(m.t)
	for r, before := range m.model {
		kept := after[r]
		if len(before) <= budget && len(kept) != len(before) {
			rt.Fatalf("tenant %d: %d symbols within budget %d, eviction left %d", r, len(before), budget, len(kept))
		}
		if len(kept) > budget {
			rt.Fatalf("tenant %d: %d symbols after eviction to %d", r, len(kept), budget)
		}
		newestDropped, oldestKept := uint64(0), ^uint64(0)
		for p, s := range before {
			if ks, ok := kept[p]; !ok {
				newestDropped = max(newestDropped, s)
			} else if ks != s {
				rt.Fatalf("tenant %d: eviction changed the stamp of %s from %d to %d", r, p, s, ks)
			} else {
				oldestKept = min(oldestKept, s)
			}
		}
		for p := range kept {
			if _, ok := before[p]; !ok {
				rt.Fatalf("tenant %d: eviction added prefix %s", r, p)
			}
		}
		if newestDropped > oldestKept {
			rt.Fatalf("tenant %d: eviction dropped a prefix stamped %d and kept one stamped %d", r, newestDropped, oldestKept)
		}
		// Eviction stops once the tenant is within budget: its last
		// detached node (stamped newestDropped, pops being in stamp order)
		// was still needed, so putting back every dropped prefix of that
		// stamp would exceed the budget.
		if len(kept) < len(before) {
			last := 0
			for p, s := range before {
				if _, ok := kept[p]; !ok && s == newestDropped {
					last++
				}
			}
			if len(kept)+last <= budget {
				rt.Fatalf("tenant %d: eviction to %d left %d symbols though the last %d it dropped were not needed", r, budget, len(kept), last)
			}
		}
		m.model[r] = kept
	}
}

func (m *approxMachine) removeTenant(rt *rapid.T) {
	r := rapid.IntRange(0, len(m.model)-1).Draw(rt, "replica")
	m.t.removeTenant(r)
	m.model[r] = prefixes{}
}

func (m *approxMachine) checkModel(rt *rapid.T) {
	m.t.check()
	got := tenantPrefixes(m.t)
	for r := range m.model {
		if m.t.size[r] != len(m.model[r]) {
			rt.Fatalf("tenant %d: size %d, model holds %d prefixes", r, m.t.size[r], len(m.model[r]))
		}
		for p, s := range m.model[r] {
			if gs, ok := got[r][p]; !ok || gs != s {
				rt.Fatalf("tenant %d: prefix %s stamp %d (held %v), model %d", r, p, gs, ok, s)
			}
		}
		if len(got[r]) != len(m.model[r]) {
			rt.Fatalf("tenant %d: tree holds %d prefixes, model %d", r, len(got[r]), len(m.model[r]))
		}
	}
}

// TestApproxTreeStateMachine drives the approximate tree with inserts,
// matches, evictions and tenant removals against a map-of-prefixes model:
// after every step each tenant holds exactly the model's prefixes with the
// model's stamps; matches equal the longest prefix any tenant holds and
// name a tenant that holds it; an eviction leaves each tenant within
// budget, touches no tenant already within it, stops once a tenant is
// within it, and never drops a prefix newer than one it keeps.
func TestApproxTreeStateMachine(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 4).Draw(rt, "replicas")
		m := &approxMachine{t: newApproxTree(n), model: make([]prefixes, n)}
		for i := range m.model {
			m.model[i] = prefixes{}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"insert":       m.insert,
			"match":        m.match,
			"evict":        m.evict,
			"removeTenant": m.removeTenant,
			"":             m.checkModel,
		})
	})
}

func syms(s string) []symbol {
	out := make([]symbol, 0, len(s))
	for _, c := range s {
		out = append(out, symbol(c))
	}
	return out
}

// TestApproxTreeMatchTenant pins the tenant rule on a shared node: the
// creator while it is attached, else the lowest replica index.
func TestApproxTreeMatchTenant(t *testing.T) {
	tr := newApproxTree(3)
	tr.insert(syms("hello world"), 2)
	tr.insert(syms("hello there"), 1)
	tr.insert(syms("hello world"), 0)
	if m, r := tr.match(syms("hello")); m != 5 || r != 2 {
		t.Fatalf("match(hello) = %d, %d; want 5, 2 (the creator of the split node)", m, r)
	}
	tr.removeTenant(2)
	if m, r := tr.match(syms("hello world!")); m != 11 || r != 0 {
		t.Fatalf("after removing 2: match(hello world!) = %d, %d; want 11, 0 (lowest index)", m, r)
	}
	if m, r := tr.match(syms("help")); m != 3 || r != 0 {
		t.Fatalf("match(help) = %d, %d; want 3, 0", m, r)
	}
}

// TestApproxTreeEvictOldestFirst checks SGLang's eviction order on a small
// case: the budget is per tenant and the oldest leaf goes first.
func TestApproxTreeEvictOldestFirst(t *testing.T) {
	tr := newApproxTree(2)
	tr.insert(syms("aaaa"), 0)
	tr.insert(syms("bbbb"), 0)
	tr.insert(syms("cccc"), 0)
	tr.insert(syms("aaaa"), 1)
	tr.evict(8)
	if got := tr.size; got[0] != 8 || got[1] != 4 {
		t.Fatalf("sizes after evict(8) = %v, want [8 4]", got)
	}
	if m, r := tr.match(syms("aaaa")); m != 4 || r != 1 {
		t.Fatalf("match(aaaa) = %d, %d; want 4, 1 (tenant 0's copy was its oldest)", m, r)
	}
	if m, r := tr.match(syms("cccc")); m != 4 || r != 0 {
		t.Fatalf("match(cccc) = %d, %d; want 4, 0", m, r)
	}
	tr.evict(0)
	if len(tr.root.children) != 0 || tr.size[0] != 0 || tr.size[1] != 0 {
		t.Fatalf("evict(0) left %d root children and sizes %v", len(tr.root.children), tr.size)
	}
}
