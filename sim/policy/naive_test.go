package policy

import (
	"strconv"
)

// naive is a brute-force twin of Simulator, written straight from the rules
// in doc.go: a pointer trie, and every eviction choice made by scanning all
// nodes for the smallest (last access, path key), where the path key is
// SGLang's literal tie-break, the tuple of the decimal strings of the page
// keys compared lexicographically. Simulator replaces that key by the depth
// (doc.go, "Tie-breaking"); the properties check the two agree.
type naive struct {
	cfg     Config
	root    *nnode
	clock   int64
	res     Result
	aborted bool
}

type nnode struct {
	page       uint64
	parent     *nnode
	children   map[uint64]*nnode
	key        []string
	d, h       bool
	hits       int
	lastAccess int64
}

func newNaive(cfg Config) *naive {
	return &naive{cfg: cfg, root: &nnode{children: map[uint64]*nnode{}}, res: Result{Policy: cfg.Policy}}
}

func (n *naive) all() []*nnode {
	var out []*nnode
	stack := []*nnode{n.root}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if x != n.root {
			out = append(out, x)
		}
		for _, c := range x.children {
			stack = append(stack, c)
		}
	}
	return out
}

func keyLess(a, b *nnode) bool {
	if a.lastAccess != b.lastAccess {
		return a.lastAccess < b.lastAccess
	}
	for i := 0; i < len(a.key) && i < len(b.key); i++ {
		if a.key[i] != b.key[i] {
			return a.key[i] < b.key[i]
		}
	}
	return len(a.key) < len(b.key)
}

func anyChild(x *nnode, f func(*nnode) bool) bool {
	for _, c := range x.children {
		if f(c) {
			return true
		}
	}
	return false
}

func isD(x *nnode) bool { return x.d }
func isH(x *nnode) bool { return x.h }

func hasHDesc(x *nnode) bool {
	for _, c := range x.children {
		if c.h || hasHDesc(c) {
			return true
		}
	}
	return false
}

// pick returns the first valid, unprotected node in eviction order, or nil.
func (n *naive) pick(valid func(*nnode) bool, protected map[*nnode]bool) *nnode {
	var best *nnode
	for _, x := range n.all() {
		if valid(x) && !protected[x] && (best == nil || keyLess(x, best)) {
			best = x
		}
	}
	return best
}

func l1Leaf(x *nnode) bool   { return x.d && !anyChild(x, isD) }
func hostLeaf(x *nnode) bool { return x.h && !x.d && !anyChild(x, isH) }
func dupLeaf(x *nnode) bool  { return x.d && x.h && !anyChild(x, isH) }

func (n *naive) counts() (d, h, dh int) {
	for _, x := range n.all() {
		if x.d {
			d++
		}
		if x.h {
			h++
		}
		if x.d && x.h {
			dh++
		}
	}
	return
}

// process replays one request; ok is false when SGLang would abort.
func (n *naive) process(pages []uint64) (l1, l2 int, ok bool) {
	if n.aborted {
		return 0, 0, false
	}
	n.clock++
	cur := n.root
	for _, p := range pages {
		c := cur.children[p]
		if c == nil {
			break
		}
		if c.d {
			l1++
		} else if c.h {
			l2++
		} else {
			break
		}
		cur = c
	}
	n.res.Requests++
	n.res.TotalInputPages += len(pages)
	n.res.L1HitPages += l1
	n.res.L2HitPages += l2
	n.res.MissPages += len(pages) - l1 - l2
	var path []*nnode
	cur = n.root
	for _, p := range pages {
		c := cur.children[p]
		if c == nil {
			key := append(append([]string(nil), cur.key...), strconv.FormatUint(p, 10))
			c = &nnode{page: p, parent: cur, children: map[uint64]*nnode{}, key: key}
			cur.children[p] = c
		}
		path = append(path, c)
		cur = c
	}
	for _, x := range path {
		x.lastAccess = n.clock
		x.d = true
	}
	if n.cfg.Policy == MainWriteThrough {
		for _, x := range path {
			x.hits++
			if x.h || x.hits < n.cfg.WriteThroughThreshold {
				continue
			}
			if x.parent != n.root && !x.parent.h {
				continue
			}
			n.reserve([]*nnode{x}, nil)
		}
	} else {
		n.reserve(path, nil)
	}
	for {
		d, _, _ := n.counts()
		if d <= n.cfg.L1Pages {
			break
		}
		v := n.pick(l1Leaf, nil)
		if n.cfg.Policy == MainWriteThrough {
			if v.h {
				v.d = false
			} else {
				n.deleteD(v)
			}
		} else if !n.boundaryEvict(v) {
			n.aborted = true
			return 0, 0, false
		}
		n.res.L1Evictions++
	}
	return l1, l2, true
}

func (n *naive) boundaryEvict(v *nnode) bool {
	p := v.parent
	needParent := p != n.root && p.d && !p.h
	if v.h {
		if !needParent || n.reserve([]*nnode{p}, v) {
			v.d = false
			return true
		}
		if hasHDesc(v) {
			return false
		}
		v.h = false
		n.res.L2Evictions++
		n.res.DeletedL2Evictions++
		return n.deleteD(v)
	}
	req := []*nnode{v}
	if needParent {
		req = []*nnode{p, v}
	}
	if n.reserve(req, nil) {
		v.d = false
		n.res.DToHDemotions++
		return true
	}
	return n.deleteD(v)
}

func (n *naive) deleteD(v *nnode) bool {
	if v.h || anyChild(v, isD) || hasHDesc(v) {
		return false
	}
	v.d = false
	n.detach(v)
	return true
}

func (n *naive) detach(v *nnode) {
	for v != n.root && !v.d && !v.h && len(v.children) == 0 {
		delete(v.parent.children, v.page)
		v = v.parent
	}
}

func (n *naive) reserve(nodes []*nnode, extra *nnode) bool {
	prot := map[*nnode]bool{}
	if extra != nil {
		prot[extra] = true
	}
	var missing []*nnode
	for _, x := range nodes {
		prot[x] = true
		if !x.h {
			missing = append(missing, x)
		}
	}
	if len(missing) == 0 {
		return true
	}
	if len(missing) > n.cfg.L2Pages {
		n.res.FailedHAllocations++
		return false
	}
	for {
		_, h, _ := n.counts()
		if h+len(missing) <= n.cfg.L2Pages {
			break
		}
		if n.cfg.Policy == BoundaryL1L2 {
			if x := n.pick(dupLeaf, prot); x != nil {
				x.h = false
				n.res.L2Evictions++
				n.res.DedupL2Evictions++
				continue
			}
		}
		x := n.pick(hostLeaf, prot)
		if x == nil {
			n.res.FailedHAllocations++
			return false
		}
		x.h = false
		n.res.L2Evictions++
		n.res.DeletedL2Evictions++
		n.detach(x)
	}
	for _, x := range missing {
		x.h = true
	}
	return true
}

func (n *naive) result() Result {
	r := n.res
	if r.TotalInputPages > 0 {
		r.L1HitRate = float64(r.L1HitPages) / float64(r.TotalInputPages)
		r.L1L2HitRate = float64(r.L1HitPages+r.L2HitPages) / float64(r.TotalInputPages)
	}
	r.DPages, r.HPages, r.DHPages = n.counts()
	r.UniqueCachedPages = r.DPages + r.HPages - r.DHPages
	if r.HPages > 0 {
		r.DuplicateRatio = float64(r.DHPages) / float64(r.HPages)
	}
	return r
}
