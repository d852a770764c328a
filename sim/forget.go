package sim

import "github.com/kvsim/kvsim/tree"

// forgetEvery is the fewest blocks the pager remembers before it looks for
// blocks to forget (see tree.Pager.Forget): 16 Ki blocks, a few hundred KiB.
const forgetEvery = 1 << 14

// forgetUnheld lets the simulator's pager forget the blocks whose page ids
// nothing of the simulator holds any more (markHeld), so that a long
// trace's memory follows the cache and the requests in flight, not every
// block ever seen. The Belady oracle keeps every page of the trace, so
// with it the pager remembers everything. A simulator that takes a shared
// pager instead (a fleet's shared storage) leaves its own unused.
func (s *Sim) forgetUnheld() {
	if s.cfg.Cache.Eviction != tree.Belady {
		s.pager.Forget(s.markHeld, forgetEvery)
	}
}

// markHeld marks every page id the simulator holds: the tree's keys, the
// pages of every request not yet finished, and storage's trie and the
// paths of its operations in flight.
func (s *Sim) markHeld(m tree.Marks) {
	stack := []*tree.Node{s.tree.Root()}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if rs := n.Runs(); rs != nil {
			for _, x := range rs {
				m.Run(x.First, x.N)
			}
		} else {
			m.Pages(n.Pages())
		}
		n.Children(func(c *tree.Node) bool {
			stack = append(stack, c)
			return true
		})
	}
	for _, r := range s.live {
		m.Pages(r.pages)
		for _, x := range r.runs {
			m.Run(x.First, x.N)
		}
	}
	if st := s.st; st != nil {
		st.l3.markHeld(m)
		for _, op := range st.reads {
			op.key.markHeld(m)
		}
		for _, op := range st.backups {
			op.path.markHeld(m)
		}
		if st.touchOp != nil {
			st.touchOp.key.markHeld(m)
		}
	}
}

// markHeld marks the pages of every node of the storage trie, stored or
// not.
func (l *l3Store) markHeld(m tree.Marks) {
	stack := []*l3Node{l.root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		m.Pages(n.pages)
		stack = append(stack, n.kids...)
		for _, c := range n.index { // marks are a set: the order cannot matter
			stack = append(stack, c)
		}
	}
}

// markHeld marks the pages of the path.
func (k pathKey) markHeld(m tree.Marks) {
	for _, run := range k.runs {
		m.Pages(run)
	}
}

// addLive registers a request whose pages the pager must not forget until
// dropLive.
func (s *Sim) addLive(r *request) {
	r.liveIdx = len(s.live)
	s.live = append(s.live, r)
}

// dropLive unregisters a finished request.
func (s *Sim) dropLive(r *request) {
	last := s.live[len(s.live)-1]
	s.live[r.liveIdx], last.liveIdx = last, r.liveIdx
	s.live[len(s.live)-1] = nil
	s.live = s.live[:len(s.live)-1]
}
