package planner

import (
	"errors"
	"fmt"
	"math"
)

// Node is one node of a tree snapshot, as the planner sees it. The root has
// ID 0 and is never listed; every other node names its parent by ID.
type Node struct {
	// ID identifies the node; any value but 0 (the root), unique in the snapshot.
	ID int64
	// Parent is the parent's ID: 0 for a child of the root, otherwise a node
	// listed earlier in the same snapshot.
	Parent int64
	// Counts[o] is the number of device pages the node holds on owner lane o,
	// for o in [0, cp); every count is >= 0. Evicting the node frees them.
	Counts []int64
	// Device reports whether the node is resident on the device (GPU).
	// Residency is prefix-closed: a device node's parent is the root or a
	// device node.
	Device bool
	// Locked reports whether a running request holds the node (lock_ref > 0);
	// a locked node is never evicted.
	Locked bool
	// SLRU is the node's eviction key; smaller is evicted first.
	SLRU Priority
}

// Plan is the planner's answer for one snapshot.
type Plan struct {
	// Victims lists the IDs of the nodes to evict, in the order chosen. Every
	// victim is a leaf of the device-resident tree once the victims before it
	// are gone, so evicting them in this order is always legal.
	Victims []int64
	// PlannedFreed[o] is the number of lane-o pages the victims free.
	PlannedFreed []int64
	// Remaining[o] is max(0, deficits[o] - PlannedFreed[o]): the lane-o
	// deficit the plan leaves uncovered.
	Remaining []int64
}

// ErrInvalid is matched by every input error: errors.Is(err, ErrInvalid)
// reports whether a snapshot or deficit vector was rejected.
var ErrInvalid = errors.New("planner: invalid input")

// InputError describes one problem with a snapshot or its deficits, naming
// the node (by position and ID) and the field.
type InputError struct {
	// Node is the position of the offending node in the nodes slice, or -1
	// when the problem is in the deficits.
	Node int
	// ID is the offending node's ID (meaningless when Node is -1).
	ID int64
	// Field names the field: "id", "parent", "counts", "counts[2]",
	// "device", "deficits", "deficits[1]".
	Field string
	// Msg says what is wrong with it.
	Msg string
}

// Error formats the problem as `nodes[3] (id 9): counts: want 4 lanes, got 3`
// or `deficits[1]: must be >= 0 (got -2)`.
func (e *InputError) Error() string {
	if e.Node < 0 {
		return e.Field + ": " + e.Msg
	}
	return fmt.Sprintf("nodes[%d] (id %d): %s: %s", e.Node, e.ID, e.Field, e.Msg)
}

// Is makes errors.Is(err, ErrInvalid) true for every InputError.
func (e *InputError) Is(target error) bool { return target == ErrInvalid }

func nodeErr(i int, id int64, field, format string, args ...any) error {
	return &InputError{Node: i, ID: id, Field: field, Msg: fmt.Sprintf(format, args...)}
}

func deficitErr(field, format string, args ...any) error {
	return &InputError{Node: -1, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// root is the internal index of the root. Listed node nodes[k] has internal
// index k+1, so parent indices fit the same arrays as node indices.
const root = 0

// snapshot is the planner's working copy of one input: nodes by internal
// index, counts as one flat cp-strided slice, and the mutable state of a
// plan in progress. Both planners use it; the Planner reuses its slices from
// call to call so that a tick's plan allocates only its result.
type snapshot struct {
	cp       int
	n        int     // number of internal indices: len(nodes) + 1 for the root
	id       []int64 // id[i]; id[root] = 0
	parent   []int32 // parent[i]; parent[root] = -1
	counts   []int64 // counts[i*cp+o]; the root's row is zero
	device   []bool
	locked   []bool
	slru     []Priority
	children []int32 // children[i]: device-resident children of i not yet chosen
	lastKid  []int32 // XOR of the indices of those children: the last one when children[i] == 1
	deficits []int64 // current deficits
	freed    []int64 // planned_freed so far
	positive int     // number of lanes with deficits[o] > 0
	bound    int64   // an upper bound on every contribution of the plan
	laneMax  []int64 // laneMax[o]: the largest count on lane o
	victims  []int64

	// id -> internal index: a dense table when the IDs are small positive
	// integers (the usual case: the simulator numbers nodes from 1), else a map.
	useDense bool
	dense    []int32
	sparse   map[int64]int32
}

// maxDenseSlack bounds the dense ID table: it is used when every ID lies in
// [1, 4*len(nodes)+1024], so its size stays linear in the snapshot.
const maxDenseSlack = 1024

// load validates nodes and deficits and fills s, reusing its slices. It
// returns the first problem found, in input order (deficits first).
func (s *snapshot) load(nodes []Node, deficits []int64) error {
	if err := checkDeficits(nodes, deficits); err != nil {
		return err
	}
	cp := len(deficits)
	s.reset(len(nodes)+1, deficits)
	s.resetIndex(nodes)
	laneTotal := s.freed // zero now; used as scratch and cleared again below
	s.laneMax = resize(s.laneMax, cp)
	laneMax := s.laneMax
	clear(laneMax)
	for k := range nodes {
		nd := &nodes[k]
		i := int32(k + 1)
		p, err := s.parentOf(nodes, k)
		if err != nil {
			return err
		}
		s.insert(nd.ID, i)
		if len(nd.Counts) != cp {
			return nodeErr(k, nd.ID, "counts", "want %d lanes, got %d", cp, len(nd.Counts))
		}
		row := s.counts[int(i)*cp : int(i+1)*cp]
		// One combined sign test for the whole row: a count is negative or
		// a lane total overflows exactly when some c or new total is
		// negative (counts and totals are otherwise >= 0).
		var bad int64
		laneTotal, laneMax := laneTotal[:len(row)], laneMax[:len(row)]
		for o, c := range nd.Counts {
			t := laneTotal[o] + c
			bad |= c | t
			laneTotal[o] = t
			row[o] = c
			laneMax[o] = max(laneMax[o], c)
		}
		if bad < 0 {
			if err := countsErr(k, nd, laneTotal); err != nil {
				return err
			}
		}
		if nd.Device && !s.device[p] {
			return nodeErr(k, nd.ID, "device", "true under non-device parent %d (device residency is prefix-closed)", nd.Parent)
		}
		s.id[i], s.parent[i] = nd.ID, p
		s.device[i], s.locked[i], s.slru[i] = nd.Device, nd.Locked, nd.SLRU
		if nd.Device {
			s.children[p]++
			s.lastKid[p] ^= i
		}
	}
	clear(s.freed)
	// contribution(i) = Σ_o min(counts[i][o], d[o]) <= Σ_o min(laneMax[o], d[o]),
	// and deficits only shrink; the sum is at most total, so it fits.
	s.bound = 0
	for o, d := range deficits {
		s.bound += min(s.laneMax[o], d)
	}
	return nil
}

// checkDeficits checks the deficits (at least one lane, each >= 0, a total
// that fits in int64) and the number of nodes.
func checkDeficits(nodes []Node, deficits []int64) error {
	if len(deficits) == 0 {
		return deficitErr("deficits", "need at least one lane")
	}
	var total int64
	for o, d := range deficits {
		if d < 0 {
			return deficitErr(fmt.Sprintf("deficits[%d]", o), "must be >= 0 (got %d)", d)
		}
		if d > math.MaxInt64-total {
			return deficitErr("deficits", "total overflows int64")
		}
		total += d
	}
	if len(nodes) >= math.MaxInt32 {
		return deficitErr("nodes", "too many nodes (%d)", len(nodes))
	}
	return nil
}

// reset sizes the snapshot for n internal indices (the root and the nodes)
// and the given deficits, and sets up the root.
func (s *snapshot) reset(n int, deficits []int64) {
	cp := len(deficits)
	s.cp, s.n = cp, n
	s.id = resize(s.id, n)
	s.parent = resize(s.parent, n)
	s.counts = resize(s.counts, n*cp)
	s.device = resize(s.device, n)
	s.locked = resize(s.locked, n)
	s.slru = resize(s.slru, n)
	s.children = resize(s.children, n)
	s.lastKid = resize(s.lastKid, n)
	s.deficits = append(s.deficits[:0], deficits...)
	s.freed = resize(s.freed, cp)
	s.victims = s.victims[:0]
	clear(s.children)
	clear(s.lastKid)
	clear(s.freed)
	clear(s.counts[:cp])
	s.id[root], s.parent[root], s.device[root], s.locked[root] = 0, -1, true, true
	s.slru[root] = Priority{}
	s.positive = 0
	for _, d := range deficits {
		if d > 0 {
			s.positive++
		}
	}
}

// parentOf checks nodes[k]'s id (not the root's, not a duplicate) and
// returns its parent's internal index.
func (s *snapshot) parentOf(nodes []Node, k int) (int32, error) {
	nd := &nodes[k]
	if nd.ID == 0 {
		return 0, nodeErr(k, nd.ID, "id", "0 is the root, which must not be listed")
	}
	if prev, dup := s.lookup(nd.ID); dup {
		return 0, nodeErr(k, nd.ID, "id", "duplicate of nodes[%d]", prev-1)
	}
	switch {
	case nd.Parent == 0:
		return root, nil
	case nd.Parent == nd.ID:
		return 0, nodeErr(k, nd.ID, "parent", "a node cannot be its own parent")
	}
	p, ok := s.lookup(nd.Parent)
	if ok {
		return p, nil
	}
	for j := k + 1; j < len(nodes); j++ {
		if nodes[j].ID == nd.Parent {
			return 0, nodeErr(k, nd.ID, "parent", "id %d is listed after this node (nodes[%d]); list parents first", nd.Parent, j)
		}
	}
	return 0, nodeErr(k, nd.ID, "parent", "unknown id %d", nd.Parent)
}

// countsErr names the first negative count or overflowing lane total of
// nodes[k], whose counts have just been added (wrapping) to laneTotal.
func countsErr(k int, nd *Node, laneTotal []int64) error {
	for o, c := range nd.Counts {
		prev := laneTotal[o] - c // undo the (wrapping) addition
		if c < 0 {
			return nodeErr(k, nd.ID, fmt.Sprintf("counts[%d]", o), "must be >= 0 (got %d)", c)
		}
		if c > math.MaxInt64-prev {
			return nodeErr(k, nd.ID, fmt.Sprintf("counts[%d]", o), "lane total overflows int64")
		}
	}
	return nil
}
func (s *snapshot) resetIndex(nodes []Node) {
	limit := int64(4*len(nodes) + maxDenseSlack)
	dense := true
	for k := range nodes {
		if id := nodes[k].ID; id < 1 || id > limit {
			dense = false
			break
		}
	}
	if dense {
		var hi int64
		for k := range nodes {
			hi = max(hi, nodes[k].ID)
		}
		s.useDense = true
		s.dense = resize(s.dense, int(hi)+1)
		clear(s.dense)
		return
	}
	s.useDense = false
	if s.sparse == nil {
		s.sparse = make(map[int64]int32, len(nodes))
	}
	clear(s.sparse)
}

// lookup returns the internal index of a listed ID seen so far.
func (s *snapshot) lookup(id int64) (int32, bool) {
	if s.useDense {
		if id < 1 || id >= int64(len(s.dense)) || s.dense[id] == 0 {
			return 0, false
		}
		return s.dense[id], true
	}
	i, ok := s.sparse[id]
	return i, ok
}

func (s *snapshot) insert(id int64, i int32) {
	if s.useDense {
		s.dense[id] = i
		return
	}
	s.sparse[id] = i
}

// resize returns a slice of length n, reusing b's array when it is big enough.
// The contents are unspecified.
func resize[T any](b []T, n int) []T {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]T, n)
}

// eligible reports whether node i may be evicted now: device-resident,
// unlocked, not the root, not yet chosen, and without a device-resident
// child that has not been chosen. Chosen nodes have device[i] == false.
func (s *snapshot) eligible(i int32) bool {
	return i != root && s.device[i] && !s.locked[i] && s.children[i] == 0
}

// contribution is sum over lanes o of min(counts[i][o], deficits[o]).
func (s *snapshot) contribution(i int32) int64 {
	d := s.deficits
	row := s.counts[int(i)*s.cp:][:len(d)] // len(d) == cp; lets the loop skip bounds checks
	var c int64
	for o := range d {
		c += min(row[o], d[o])
	}
	return c
}

// unlock is the contribution of i's parent if evicting the eligible node i
// would make that parent eligible, else 0.
func (s *snapshot) unlock(i int32) int64 {
	p := s.parent[i]
	if p == root || !s.device[p] || s.locked[p] || s.children[p] != 1 {
		return 0
	}
	return s.contribution(p)
}

// choose records the eligible node i as the next victim and returns its
// parent's index.
func (s *snapshot) choose(i int32) int32 {
	s.victims = append(s.victims, s.id[i])
	row := s.counts[int(i)*s.cp : int(i+1)*s.cp]
	for o, c := range row {
		s.freed[o] += c
		if d := s.deficits[o]; d > 0 {
			d -= min(c, d)
			s.deficits[o] = d
			if d == 0 {
				s.positive--
			}
		}
	}
	s.device[i] = false
	p := s.parent[i]
	s.children[p]--
	s.lastKid[p] ^= i
	return p
}

// result copies the plan out of the scratch slices.
func (s *snapshot) result() Plan {
	return Plan{
		Victims:      append(make([]int64, 0, len(s.victims)), s.victims...),
		PlannedFreed: append([]int64(nil), s.freed...),
		Remaining:    append([]int64(nil), s.deficits...),
	}
}
