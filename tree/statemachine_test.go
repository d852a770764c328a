package tree

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// pageState is the model's view of one page position (a path prefix).
type pageState struct{ device, host bool }

// machine drives a Tree with random operations and checks it against a
// page-level model: a map from every cached path prefix to its residency.
// The model predicts Match, Insert and LoadBack exactly; for eviction (whose
// choice is the strategy's) it checks that what changed was allowed and then
// adopts the tree's answer.
type machine struct {
	t     *Tree
	pager *Pager
	ps    int
	cfg   Config
	alpha int32 // tokens are drawn from [0, alpha): small alphabets share more
	runs  bool  // prompts extended by ascending token runs, so keys hold long page runs

	model    map[string]pageState
	prompts  [][]Token // prompts inserted so far, to draw matches from
	locks    []*Node   // harness locks (a request pinning its prefix)
	holds    [][]int64 // request-held device tokens outside the tree
	hostPins []*Node   // nodes whose host copy is pinned (ProtectHost)
	wbPins   []*Node   // write-backs taken from TakeWriteBacks, not yet released
	hostRes  [][]int64 // host reservations (ReserveHost) not yet released
	now      int64
}

func pathKey(pages []PageID) string {
	var b strings.Builder
	for _, p := range pages {
		fmt.Fprintf(&b, "%d/", p)
	}
	return b.String()
}

func newMachine(rt *rapid.T) *machine {
	ps := rapid.SampledFrom([]int{1, 2, 4}).Draw(rt, "page_size")
	cp := rapid.IntRange(1, 4).Draw(rt, "cp")
	cfg := Config{
		PageSize:     ps,
		CP:           cp,
		Lanes:        rapid.SampledFrom([]LaneMode{LanePages, LaneTokens}).Draw(rt, "lanes"),
		DeviceTokens: int64(rapid.IntRange(4, 64).Draw(rt, "device_tokens")),
		Eviction:     rapid.SampledFrom([]Strategy{LRU, LFU, FIFO, MRU, FILO, Priority, SLRU, SegmentedLRU, Belady}).Draw(rt, "eviction"),
	}
	if rapid.Bool().Draw(rt, "host") {
		cfg.HostTokens = int64(rapid.IntRange(4, 128).Draw(rt, "host_tokens"))
		cfg.WritePolicy = rapid.SampledFrom([]WritePolicy{WriteThrough, WriteThroughSelective, WriteBack}).Draw(rt, "write_policy")
		cfg.LoadBackThreshold = int64(rapid.IntRange(1, 10).Draw(rt, "load_back_threshold"))
		cfg.HoldWriteBacks = rapid.Bool().Draw(rt, "hold_write_backs")
	}
	tr, err := New(cfg)
	if err != nil {
		rt.Fatalf("New: %v", err)
	}
	alpha := int32(rapid.SampledFrom([]int{2, 3, 12}).Draw(rt, "alphabet"))
	m := &machine{t: tr, pager: NewPager(ps), ps: ps, cfg: tr.Config(), alpha: alpha, model: map[string]pageState{}}
	m.runs = rapid.Bool().Draw(rt, "run_prompts")
	if cfg.Eviction == Belady {
		// An oracle whose answers change with the clock: the heaps must
		// stay ordered whatever it says between refreshes.
		o := newPathOracle(nil)
		o.vary = &m.now
		if err := tr.SetOracle(o); err != nil {
			rt.Fatalf("SetOracle: %v", err)
		}
	}
	return m
}

// drawPrompt makes prompts that share prefixes: a known prompt (or part of
// one) extended with a few tokens from a small alphabet.
func (m *machine) drawPrompt(rt *rapid.T) []Token {
	var p []Token
	if len(m.prompts) > 0 && rapid.IntRange(0, 3).Draw(rt, "reuse") > 0 {
		base := rapid.SampledFrom(m.prompts).Draw(rt, "base")
		cut := rapid.IntRange(0, len(base)).Draw(rt, "cut")
		p = append(p, base[:cut]...)
	}
	if m.runs {
		// Ascending runs of tokens page to runs of consecutive ids where
		// they were first seen in that order, and restarting inside one
		// makes keys that enter and leave nodes' runs midway.
		for range rapid.IntRange(0, 3).Draw(rt, "pieces") {
			start := rapid.Int32Range(0, 4*m.alpha).Draw(rt, "start")
			for k := range rapid.Int32Range(1, 8).Draw(rt, "run") {
				p = append(p, Token(start+k))
			}
		}
		return p
	}
	ext := rapid.SliceOfN(rapid.Int32Range(0, m.alpha-1), 0, 12).Draw(rt, "ext")
	for _, x := range ext {
		p = append(p, Token(x))
	}
	return p
}

// cutRuns draws a cut of pages into runs of consecutive ids: not always
// the longest runs, since a key's runs may be cut anywhere.
func cutRuns(rt *rapid.T, pages []PageID) []PageRun {
	var runs []PageRun
	for i, p := range pages {
		if i > 0 && p == pages[i-1]+1 && rapid.IntRange(0, 3).Draw(rt, "join") > 0 {
			runs[len(runs)-1].N++
			continue
		}
		runs = append(runs, PageRun{First: p, N: 1})
	}
	return runs
}

func (m *machine) tick(rt *rapid.T) int64 {
	m.now += int64(rapid.IntRange(0, 3).Draw(rt, "dt"))
	return m.now
}

// predictMatch walks the model: the device run, then the host-only run.
func (m *machine) predictMatch(pages []PageID) (dev, host int64) {
	i := 0
	for ; i < len(pages); i++ {
		s, ok := m.model[pathKey(pages[:i+1])]
		if !ok || !s.device {
			break
		}
		dev += int64(m.ps)
	}
	for ; i < len(pages); i++ {
		s, ok := m.model[pathKey(pages[:i+1])]
		if !ok || s.device || !s.host {
			break
		}
		host += int64(m.ps)
	}
	return dev, host
}

// snapshot reads the tree's residency per page path.
func (m *machine) snapshot() map[string]pageState {
	out := map[string]pageState{}
	var visit func(n *Node, prefix []PageID)
	visit = func(n *Node, prefix []PageID) {
		pages := keyPages(n)
		for i := range pages {
			path := append(prefix[:len(prefix):len(prefix)], pages[:i+1]...)
			out[pathKey(path)] = pageState{n.device, n.host}
		}
		full := append(prefix[:len(prefix):len(prefix)], pages...)
		for _, c := range n.kids {
			visit(c, full)
		}
	}
	visit(m.t.root, nil)
	return out
}

// lockedPaths returns the page paths pinned by any lock holder (harness
// locks, in-flight writes and loads).
func (m *machine) lockedPaths() map[string]bool {
	out := map[string]bool{}
	add := func(n *Node) {
		var pages []PageID
		for x := n; x.parent != nil; x = x.parent {
			pages = append(append([]PageID(nil), keyPages(x)...), pages...)
		}
		for i := range pages {
			out[pathKey(pages[:i+1])] = true
		}
	}
	for _, n := range m.locks {
		add(n)
	}
	for _, w := range m.t.Writes() {
		add(w.Node)
	}
	for _, l := range m.t.Loads() {
		add(l.Node)
	}
	return out
}

func (m *machine) Check(rt *rapid.T) {
	if err := m.t.Check(); err != nil {
		rt.Fatalf("Check: %v", err)
	}
	// Lock counts: every node's lockRef is the number of holders at or below it.
	want := map[*Node]int64{}
	holders := append([]*Node(nil), m.locks...)
	for _, w := range m.t.Writes() {
		holders = append(holders, w.Node)
	}
	for _, l := range m.t.Loads() {
		holders = append(holders, l.Node)
	}
	for _, h := range holders {
		if h.parent == nil && h != m.t.root {
			rt.Fatalf("lock holder %d was deleted from the tree", h.id)
		}
		for x := h; x.parent != nil; x = x.parent {
			want[x]++
		}
	}
	// Host protections: every attached node's count is the number of pins on
	// it exactly (a split leaves the count with the lower node).
	pins := map[*Node]int64{}
	for _, list := range [][]*Node{m.hostPins, m.wbPins, m.t.heldWB} {
		for _, n := range list {
			pins[n]++
		}
	}
	var visit func(n *Node)
	visit = func(n *Node) {
		for _, c := range n.kids {
			if c.lockRef != want[c] {
				rt.Fatalf("node %d: lockRef %d, holders say %d", c.id, c.lockRef, want[c])
			}
			if c.hostRef != pins[c] {
				rt.Fatalf("node %d: hostRef %d, pins say %d", c.id, c.hostRef, pins[c])
			}
			visit(c)
		}
	}
	visit(m.t.root)
	// Host reservations: the tree's account is the sum of the holders'.
	for o := 0; o < m.cfg.CP; o++ {
		var res int64
		for _, r := range m.hostRes {
			res += r[o]
		}
		if m.t.HostReserved(o) != res {
			rt.Fatalf("lane %d: %d host tokens reserved, holders say %d", o, m.t.HostReserved(o), res)
		}
	}
	// The model and the tree agree page by page.
	snap := m.snapshot()
	if len(snap) != len(m.model) {
		rt.Fatalf("tree caches %d page positions, model %d", len(snap), len(m.model))
	}
	for k, s := range m.model {
		if snap[k] != s {
			rt.Fatalf("page %s: tree %+v, model %+v", k, snap[k], s)
		}
	}
}

// adopt checks a residency change the model could not predict and takes it.
// Locked pages never leave the device; pages only go device->host-only
// (demote), device->gone (delete), host-only->gone (host eviction), or gain a
// host copy (write) when allow says so.
func (m *machine) adopt(rt *rapid.T, op string, locked map[string]bool, allow func(before, after pageState, present bool) bool) {
	snap := m.snapshot()
	for k, before := range m.model {
		after, ok := snap[k]
		if before.device && (!ok || !after.device) && locked[k] {
			rt.Fatalf("%s evicted locked page %s", op, k)
		}
		if !allow(before, after, ok) {
			rt.Fatalf("%s: page %s went from %+v to %+v (present %v)", op, k, before, after, ok)
		}
	}
	for k := range snap {
		if _, ok := m.model[k]; !ok {
			rt.Fatalf("%s created page %s", op, k)
		}
	}
	m.model = snap
}

func (m *machine) insert(rt *rapid.T) {
	tokens := m.drawPrompt(rt)
	pages := m.pager.TokenPages(tokens, nil)
	if got := len(pages) * m.ps; got > len(tokens) || len(tokens)-got >= m.ps {
		rt.Fatalf("TokenPages(%d tokens) = %d pages of %d", len(tokens), len(pages), m.ps)
	}
	now := m.tick(rt)
	need := m.t.LaneTokens(0, int64(len(pages)*m.ps), make([]int64, m.cfg.CP))
	if !m.t.Reserve(need) {
		locked := m.lockedPaths()
		before := m.t.EvictableTotal()
		res := m.t.Evict(sum(need))
		if res.Tokens < min(sum(need), before) {
			rt.Fatalf("Evict(%d) freed %d with %d evictable", sum(need), res.Tokens, before)
		}
		m.adopt(rt, "evict", locked, m.evictAllowed)
		if !m.t.Reserve(need) {
			return // out of memory: the request would wait
		}
	}
	m.prompts = append(m.prompts, tokens)
	opt := InsertOptions{Priority: int64(rapid.IntRange(0, 2).Draw(rt, "priority")), Chunked: rapid.IntRange(0, 4).Draw(rt, "chunked") == 0}
	locked := m.lockedPaths()
	// Predict: every page of the key ends on the device; the device prefix
	// already there is reported as the prefix.
	devBefore, _ := m.predictMatch(pages)
	var res InsertResult
	if rapid.Bool().Draw(rt, "as_runs") {
		res = m.t.InsertRuns(cutRuns(rt, pages), now, opt)
	} else {
		res = m.t.Insert(pages, now, opt)
	}
	if res.PrefixTokens != devBefore {
		rt.Fatalf("Insert prefix %d, model says %d", res.PrefixTokens, devBefore)
	}
	adopted := sum(res.Adopted)
	if adopted != int64(len(pages)*m.ps)-devBefore {
		rt.Fatalf("Insert adopted %d, want %d", adopted, int64(len(pages)*m.ps)-devBefore)
	}
	rest := make([]int64, m.cfg.CP)
	for o := range rest {
		rest[o] = need[o] - res.Adopted[o]
	}
	m.t.Release(rest)
	for i := range pages {
		k := pathKey(pages[:i+1])
		s := m.model[k]
		s.device = true
		m.model[k] = s
	}
	// Write-through may have given host copies (to pages on this path) and
	// host eviction may have dropped host-only pages elsewhere.
	onPath := map[string]bool{}
	for i := range pages {
		onPath[pathKey(pages[:i+1])] = true
	}
	snap := m.snapshot()
	for k, s := range m.model {
		after, ok := snap[k]
		switch {
		case ok && after == s:
		case ok && onPath[k] && s.device && !s.host && after.device && after.host:
		case !ok && !s.device && s.host && !locked[k]:
		default:
			rt.Fatalf("insert: page %s went from %+v to %+v (present %v)", k, s, after, ok)
		}
	}
	m.model = snap
	if dev, host := m.predictMatch(pages); dev != int64(len(pages)*m.ps) || host != 0 {
		rt.Fatalf("after Insert the key is not all on the device: %d+%d of %d", dev, host, len(pages)*m.ps)
	}
}

// evictAllowed says whether a device eviction may take a page from before to
// after. Under write-back with a full host tier, a node whose write fails is
// dropped with the host-only nodes below it, which may have been demoted in
// the same call.
func (m *machine) evictAllowed(before, after pageState, present bool) bool {
	writeBack := m.t.HasHost() && m.cfg.WritePolicy == WriteBack
	switch {
	case present && after == before:
		return true
	case present && before.device && before.host && !after.device && after.host:
		return true // demoted
	case !present && before.device && !before.host:
		return true // deleted
	case !present && writeBack:
		return true // dropped with a node whose write-back failed
	case present && before.device && !before.host && !after.device && after.host:
		return true // written back, then demoted
	}
	return false
}

func (m *machine) match(rt *rapid.T) {
	tokens := m.drawPrompt(rt)
	pages := m.pager.TokenPages(tokens, nil)
	dev, host := m.predictMatch(pages)
	var r MatchResult
	if rapid.Bool().Draw(rt, "as_runs") {
		r = m.t.MatchRuns(cutRuns(rt, pages), m.tick(rt))
	} else {
		r = m.t.Match(pages, m.tick(rt))
	}
	if r.DeviceTokens != dev || r.HostTokens != host {
		rt.Fatalf("Match = device %d host %d, model %d/%d", r.DeviceTokens, r.HostTokens, dev, host)
	}
	if r.DeviceTokens+r.HostTokens > int64(len(tokens)) {
		rt.Fatalf("hits %d exceed the prompt %d", r.DeviceTokens+r.HostTokens, len(tokens))
	}
	if !r.LastDevice.device {
		rt.Fatalf("LastDevice %d not on the device", r.LastDevice.id)
	}
	if r.LastHost.parent != nil && !r.LastHost.host {
		rt.Fatalf("LastHost %d has no host copy", r.LastHost.id)
	}
}

func (m *machine) lock(rt *rapid.T) {
	if len(m.prompts) == 0 {
		rt.Skip("nothing to lock")
	}
	pages := m.pager.TokenPages(rapid.SampledFrom(m.prompts).Draw(rt, "prompt"), nil)
	r := m.t.Match(pages, m.tick(rt))
	if r.LastDevice.parent == nil {
		rt.Skip("nothing on the device")
	}
	m.t.Lock(r.LastDevice)
	m.locks = append(m.locks, r.LastDevice)
}

// takeOne draws an element of *s, removes it and returns it; an empty *s
// skips the step, saying why.
func takeOne[T any](rt *rapid.T, s *[]T, label, why string) T {
	if len(*s) == 0 {
		rt.Skip(why)
	}
	i := rapid.IntRange(0, len(*s)-1).Draw(rt, label)
	x := (*s)[i]
	*s = append((*s)[:i], (*s)[i+1:]...)
	return x
}

func (m *machine) unlock(rt *rapid.T) {
	m.t.Unlock(takeOne(rt, &m.locks, "lock", "nothing locked"))
}

func (m *machine) evict(rt *rapid.T) {
	n := int64(rapid.IntRange(1, 40).Draw(rt, "tokens"))
	locked := m.lockedPaths()
	before := m.t.EvictableTotal()
	devBefore := m.t.DeviceTotal()
	res := m.t.Evict(n)
	if res.Tokens < min(n, before) {
		rt.Fatalf("Evict(%d) freed %d with %d evictable", n, res.Tokens, before)
	}
	if devBefore-m.t.DeviceTotal() != res.Tokens || sum(res.Freed) != res.Tokens {
		rt.Fatalf("Evict freed %d (%v) but device went %d -> %d", res.Tokens, res.Freed, devBefore, m.t.DeviceTotal())
	}
	m.adopt(rt, "evict", locked, m.evictAllowed)
}

// evictNode evicts one leaf chosen at random, as a planner would.
func (m *machine) evictNode(rt *rapid.T) {
	var leaves []*Node
	var visit func(n *Node)
	visit = func(n *Node) {
		for _, c := range n.kids {
			if m.t.IsEvictableLeaf(c) != (c.device && c.lockRef == 0 && c.devKids == 0) {
				rt.Fatalf("IsEvictableLeaf(%d) wrong", c.id)
			}
			if m.t.IsEvictableLeaf(c) {
				leaves = append(leaves, c)
			}
			visit(c)
		}
	}
	visit(m.t.root)
	if len(leaves) == 0 {
		if m.t.EvictableTotal() != 0 {
			rt.Fatalf("no evictable leaf but %d evictable tokens", m.t.EvictableTotal())
		}
		if _, err := m.t.EvictNode(m.t.root); err == nil {
			rt.Fatalf("EvictNode(root) succeeded")
		}
		return
	}
	x := rapid.SampledFrom(leaves).Draw(rt, "leaf")
	locked := m.lockedPaths()
	res, err := m.t.EvictNode(x)
	if err != nil || res.Tokens != x.tokens {
		rt.Fatalf("EvictNode(%d) = %+v, %v", x.id, res, err)
	}
	m.adopt(rt, "evict node", locked, m.evictAllowed)
}

// matchPrompt matches the pages of a drawn cached prompt (skipping the
// step when nothing is cached) and returns them with the match.
func (m *machine) matchPrompt(rt *rapid.T) ([]PageID, MatchResult) {
	if len(m.prompts) == 0 {
		rt.Skip("nothing cached")
	}
	pages := m.pager.TokenPages(rapid.SampledFrom(m.prompts).Draw(rt, "prompt"), nil)
	return pages, m.t.Match(pages, m.tick(rt))
}

// protectHost pins or unpins the host copy of a host-only node.
func (m *machine) protectHost(rt *rapid.T) {
	if len(m.hostPins) > 0 && rapid.Bool().Draw(rt, "unpin") {
		m.t.ReleaseHost(takeOne(rt, &m.hostPins, "pin", ""))
		return
	}
	_, r := m.matchPrompt(rt)
	if r.HostTokens == 0 {
		rt.Skip("no host-only node")
	}
	m.t.ProtectHost(r.Last)
	m.hostPins = append(m.hostPins, r.Last)
}

func (m *machine) evictHost(rt *rapid.T) {
	if !m.t.HasHost() {
		rt.Skip("no host tier")
	}
	n := int64(rapid.IntRange(1, 40).Draw(rt, "tokens"))
	var hostOnly int64
	for _, s := range m.model {
		if s.host && !s.device {
			hostOnly += int64(m.ps)
		}
	}
	if len(m.hostPins)+len(m.wbPins)+len(m.t.heldWB) > 0 {
		hostOnly = 0 // pinned leaves keep their ancestors too: only check the step's own rules
	}
	locked := m.lockedPaths()
	freed := m.t.EvictHost(n)
	if freed < min(n, hostOnly) {
		rt.Fatalf("EvictHost(%d) freed %d with %d host-only tokens", n, freed, hostOnly)
	}
	m.adopt(rt, "evict host", locked, func(before, after pageState, present bool) bool {
		return (present && after == before) || (!present && !before.device && before.host)
	})
}

func (m *machine) loadBack(rt *rapid.T) {
	pages, r := m.matchPrompt(rt)
	if r.HostTokens == 0 {
		rt.Skip("no host hit")
	}
	locked := m.lockedPaths()
	lr := m.t.LoadBack(r.Last, m.now)
	switch {
	case lr.Tokens > 0:
		if lr.Tokens != r.HostTokens || lr.Last != r.Last {
			rt.Fatalf("LoadBack loaded %d (last %d), host hit was %d (last %d)", lr.Tokens, lr.Last.id, r.HostTokens, r.Last.id)
		}
	case r.HostTokens < m.cfg.LoadBackThreshold:
		if !lr.Skipped {
			rt.Fatalf("LoadBack of %d < threshold %d not skipped", r.HostTokens, m.cfg.LoadBackThreshold)
		}
	default:
		if !lr.Failed {
			rt.Fatalf("LoadBack loaded nothing without failing: %+v", lr)
		}
	}
	// Eviction to make room may have changed anything evictable; the
	// loaded chain must now be on the device.
	m.adopt(rt, "load back", locked, func(before, after pageState, present bool) bool {
		return m.evictAllowed(before, after, present) || (present && !before.device && before.host && after.device && after.host)
	})
	if lr.Tokens > 0 {
		if dev, _ := m.predictMatch(pages); dev != r.DeviceTokens+r.HostTokens {
			rt.Fatalf("after LoadBack device prefix %d, want %d", dev, r.DeviceTokens+r.HostTokens)
		}
	}
}

func (m *machine) ackWrites(rt *rapid.T) {
	if len(m.t.Writes()) == 0 {
		rt.Skip("no writes in flight")
	}
	m.t.AckWrites(rapid.IntRange(1, len(m.t.Writes())).Draw(rt, "k"))
}

func (m *machine) ackLoads(rt *rapid.T) {
	if len(m.t.Loads()) == 0 {
		rt.Skip("no loads in flight")
	}
	m.t.AckLoads(rapid.IntRange(1, len(m.t.Loads())).Draw(rt, "k"))
}

func (m *machine) hold(rt *rapid.T) {
	need := make([]int64, m.cfg.CP)
	for o := range need {
		need[o] = int64(rapid.IntRange(0, 6).Draw(rt, "held"))
	}
	if m.t.Reserve(need) {
		m.holds = append(m.holds, need)
	}
}

func (m *machine) release(rt *rapid.T) {
	m.t.Release(takeOne(rt, &m.holds, "hold", "nothing held"))
}

// hostEvictAllowed says whether a host eviction may take a page from before
// to after: only host-only pages are dropped.
func hostEvictAllowed(before, after pageState, present bool) bool {
	return (present && after == before) || (!present && !before.device && before.host)
}

// drawHostLanes draws a small host reservation per lane.
func (m *machine) drawHostLanes(rt *rapid.T) []int64 {
	lanes := make([]int64, m.cfg.CP)
	for o := range lanes {
		lanes[o] = int64(rapid.IntRange(0, 8).Draw(rt, "reserve"))
	}
	return lanes
}

// reserve runs ReserveHost and checks it against the free host tokens:
// it must succeed without evicting when every lane fits, and otherwise
// succeeds exactly when one host eviction made room.
func (m *machine) reserve(rt *rapid.T, lanes []int64) bool {
	fits := true
	for o, v := range lanes {
		fits = fits && m.t.HostFree(o) >= v
	}
	reserved := append([]int64(nil), lanes...)
	before := m.t.Stats().HostEvicted
	locked := m.lockedPaths()
	ok := m.t.ReserveHost(lanes)
	if fits && (!ok || m.t.Stats().HostEvicted != before) {
		rt.Fatalf("ReserveHost(%v) with room: ok %v, evicted %d", lanes, ok, m.t.Stats().HostEvicted-before)
	}
	fitsAfter := true
	for o, v := range lanes {
		fitsAfter = fitsAfter && m.t.HostFree(o) >= 0 && (ok || m.t.HostFree(o) >= v)
	}
	if !ok {
		short := false
		for o, v := range lanes {
			short = short || m.t.HostFree(o) < v
		}
		if !short {
			rt.Fatalf("ReserveHost(%v) failed with room after eviction", lanes)
		}
	} else if !fitsAfter {
		rt.Fatalf("ReserveHost(%v) overcommitted the host", lanes)
	}
	m.adopt(rt, "reserve host", locked, hostEvictAllowed)
	if ok {
		m.hostRes = append(m.hostRes, reserved)
	}
	return ok
}

func (m *machine) reserveHost(rt *rapid.T) {
	if !m.t.HasHost() {
		rt.Skip("no host tier")
	}
	m.reserve(rt, m.drawHostLanes(rt))
}

func (m *machine) releaseHostRes(rt *rapid.T) {
	m.t.ReleaseHostReservation(takeOne(rt, &m.hostRes, "reservation", "nothing reserved"))
}

// insertHost plays a storage prefetch landing: reserve the fetched pages'
// host tokens, insert them under their prefix, release the rest. The model
// predicts the outcome page by page.
func (m *machine) insertHost(rt *rapid.T) {
	if !m.t.HasHost() {
		rt.Skip("no host tier")
	}
	tokens := m.drawPrompt(rt)
	pages := m.pager.TokenPages(tokens, nil)
	from := rapid.IntRange(0, len(pages)).Draw(rt, "from")
	ps := int64(m.ps)
	lanes := m.t.LaneTokens(int64(from)*ps, int64(len(pages))*ps, make([]int64, m.cfg.CP))
	if !m.reserve(rt, lanes) {
		return
	}
	m.hostRes = m.hostRes[:len(m.hostRes)-1] // this step gives it back below
	mp := 0
	for mp < len(pages) {
		if _, ok := m.model[pathKey(pages[:mp+1])]; !ok {
			break
		}
		mp++
	}
	res := m.t.InsertHost(pages, from, m.tick(rt))
	if res.Matched != int64(mp)*ps {
		rt.Fatalf("InsertHost matched %d tokens, model %d", res.Matched, int64(mp)*ps)
	}
	switch {
	case mp < from:
		if !res.Missing || res.Inserted != 0 {
			rt.Fatalf("InsertHost with the prefix gone (%d < %d pages) = %+v", mp, from, res)
		}
	case mp == len(pages):
		if res.Missing || res.Blocked || res.Inserted != 0 {
			rt.Fatalf("InsertHost of a cached key = %+v", res)
		}
	case mp > 0 && !m.model[pathKey(pages[:mp])].host:
		if !res.Blocked || res.Inserted != 0 {
			rt.Fatalf("InsertHost under a device-only node = %+v", res)
		}
	default:
		want := m.t.LaneTokens(int64(mp)*ps, int64(len(pages))*ps, make([]int64, m.cfg.CP))
		if res.Inserted != int64(len(pages)-mp)*ps || res.Missing || res.Blocked {
			rt.Fatalf("InsertHost = %+v, want %d tokens inserted", res, int64(len(pages)-mp)*ps)
		}
		for o := range want {
			if res.Lanes[o] != want[o] {
				rt.Fatalf("InsertHost lanes %v, want %v", res.Lanes, want)
			}
		}
		for i := mp; i < len(pages); i++ {
			m.model[pathKey(pages[:i+1])] = pageState{host: true}
		}
		m.prompts = append(m.prompts, tokens)
	}
	rest := make([]int64, m.cfg.CP)
	for o := range rest {
		rest[o] = lanes[o] - res.Lanes[o]
	}
	m.t.ReleaseHostReservation(rest)
}

func (m *machine) takeWriteBacks(rt *rapid.T) {
	m.wbPins = append(m.wbPins, m.t.TakeWriteBacks()...)
	m.t.ReleaseHost(takeOne(rt, &m.wbPins, "write_back", "no write-back held"))
}

func TestStateMachineTree(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := newMachine(rt)
		rt.Repeat(map[string]func(*rapid.T){
			"insert":         m.insert,
			"match":          m.match,
			"lock":           m.lock,
			"unlock":         m.unlock,
			"evict":          m.evict,
			"evictHost":      m.evictHost,
			"evictNode":      m.evictNode,
			"protectHost":    m.protectHost,
			"loadBack":       m.loadBack,
			"ackWrites":      m.ackWrites,
			"ackLoads":       m.ackLoads,
			"hold":           m.hold,
			"release":        m.release,
			"reserveHost":    m.reserveHost,
			"releaseHostRes": m.releaseHostRes,
			"insertHost":     m.insertHost,
			"takeWriteBacks": m.takeWriteBacks,
			"":               m.Check,
		})
	})
}
