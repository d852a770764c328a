package tree

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// dumpTree prints every node with every field that Insert can change, in
// child order, and the eviction heaps' contents in heap order: two trees
// that dump alike behave alike from then on.
func dumpTree(t *Tree) string {
	var b strings.Builder
	var visit func(n *Node, indent string)
	visit = func(n *Node, indent string) {
		fmt.Fprintf(&b, "%sid=%d pages=%v depth=%d lanes=%v dev=%v host=%v lock=%d hostRef=%d seq=%d/%d at=%d/%d hits=%d prio=%d prot=%v devKids=%d idx=%d/%d/%d\n",
			indent, n.id, keyPages(n), n.depth, n.lanes, n.device, n.host, n.lockRef, n.hostRef,
			n.accessSeq, n.createdSeq, n.lastAccess, n.created, n.hitCount, n.priority, n.protected, n.devKids,
			n.devIdx, n.hostIdx, n.protIdx)
		for _, c := range n.kids {
			visit(c, indent+"  ")
		}
	}
	visit(t.root, "")
	fmt.Fprintf(&b, "seq=%d next=%d nodes=%d dev=%v held=%v host=%v evict=%v prot=%v stats=%+v writes=%d\n",
		t.seq, t.nextID, t.nodes, t.treeDev, t.held, t.hostUsed, t.evict, t.prot, t.stats, len(t.writes))
	return b.String()
}

// TestPropInsertFromIsInsert drives two trees through the same requests as
// the simulator drives its tree (match and lock a prefix, reserve, insert the
// computed pages, move the lock to the insert's last node, grow the key,
// insert again, finish), one with Insert and one with InsertFrom from the
// request's locked node, and checks that results and whole trees stay
// identical after every step.
func TestPropInsertFromIsInsert(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ps := rapid.SampledFrom([]int{1, 2, 4}).Draw(rt, "page_size")
		cfg := Config{
			PageSize:     ps,
			CP:           rapid.IntRange(1, 3).Draw(rt, "cp"),
			DeviceTokens: int64(rapid.IntRange(16, 96).Draw(rt, "device_tokens")),
			Eviction:     rapid.SampledFrom([]Strategy{LRU, LFU, FIFO, Priority, SLRU, SegmentedLRU}).Draw(rt, "eviction"),
		}
		if rapid.Bool().Draw(rt, "host") {
			cfg.HostTokens = int64(rapid.IntRange(8, 128).Draw(rt, "host_tokens"))
			cfg.WritePolicy = rapid.SampledFrom([]WritePolicy{WriteThrough, WriteThroughSelective, WriteBack}).Draw(rt, "write_policy")
		}
		a, err := New(cfg)
		if err != nil {
			rt.Fatalf("New: %v", err)
		}
		b, _ := New(cfg)
		pager := NewPager(ps)
		type req struct {
			pages  []PageID
			lastA  *Node
			lastB  *Node
			held   []int64 // device tokens reserved, identical on both trees
			inTree int     // pages inserted so far
		}
		var reqs []*req
		var prompts [][]Token
		now := int64(0)
		lanes := func(from, to int) []int64 {
			return a.LaneTokens(int64(from*ps), int64(to*ps), make([]int64, cfg.CP))
		}
		reserve := func(need []int64) bool {
			if !a.Reserve(need) {
				a.Evict(sum(need))
				b.Evict(sum(need))
				if !a.Reserve(need) {
					if b.Reserve(need) {
						rt.Fatalf("Reserve differs after eviction")
					}
					return false
				}
			}
			if !b.Reserve(need) {
				rt.Fatalf("Reserve succeeded on one tree only")
			}
			return true
		}
		lockLast := func(r *req, la, lb *Node) {
			if r.lastA != nil {
				a.Unlock(r.lastA)
				b.Unlock(r.lastB)
				r.lastA, r.lastB = nil, nil
			}
			if !la.IsRoot() {
				a.Lock(la)
				b.Lock(lb)
				r.lastA, r.lastB = la, lb
			}
		}
		insert := func(r *req, upto int, chunked bool) {
			opt := InsertOptions{Chunked: chunked, Priority: int64(rapid.IntRange(0, 2).Draw(rt, "priority"))}
			ra := a.Insert(r.pages[:upto], now, opt)
			adoptedA := append([]int64(nil), ra.Adopted...)
			from := b.Root()
			if r.lastB != nil {
				from = r.lastB
			}
			rb := b.InsertFrom(from, r.pages[:upto], now, opt)
			if ra.PrefixTokens != rb.PrefixTokens || fmt.Sprint(adoptedA) != fmt.Sprint(rb.Adopted) || ra.Last.id != rb.Last.id {
				rt.Fatalf("Insert = %d %v node %d, InsertFrom = %d %v node %d", ra.PrefixTokens, adoptedA, ra.Last.id, rb.PrefixTokens, rb.Adopted, rb.Last.id)
			}
			for o := range r.held {
				r.held[o] -= adoptedA[o]
			}
			r.inTree = upto
			lockLast(r, ra.Last, rb.Last)
		}
		finish := func(i int) {
			r := reqs[i]
			a.Release(r.held)
			b.Release(r.held)
			lockLast(r, a.Root(), b.Root())
			reqs = append(reqs[:i], reqs[i+1:]...)
		}
		rt.Repeat(map[string]func(*rapid.T){
			"admit": func(rt *rapid.T) {
				var toks []Token
				if len(prompts) > 0 && rapid.Bool().Draw(rt, "reuse") {
					base := rapid.SampledFrom(prompts).Draw(rt, "base")
					toks = append(toks, base[:rapid.IntRange(0, len(base)).Draw(rt, "cut")]...)
				}
				for _, x := range rapid.SliceOfN(rapid.Int32Range(0, 2), 1, 16).Draw(rt, "ext") {
					toks = append(toks, Token(x))
				}
				prompts = append(prompts, toks)
				r := &req{pages: pager.TokenPages(toks, nil), held: make([]int64, cfg.CP)}
				ma, mb := a.Match(r.pages, now), b.Match(r.pages, now)
				if ma.DeviceTokens != mb.DeviceTokens || ma.LastDevice.id != mb.LastDevice.id {
					rt.Fatalf("Match differs: %+v, %+v", ma, mb)
				}
				// Lock the prefix before reserving, which may evict (as the
				// simulator's admission does).
				lockLast(r, ma.LastDevice, mb.LastDevice)
				pre := int(ma.DeviceTokens) / ps
				need := lanes(pre, len(r.pages))
				if !reserve(need) {
					lockLast(r, a.Root(), b.Root())
					return
				}
				copy(r.held, need)
				r.inTree = pre
				reqs = append(reqs, r)
			},
			"insert": func(rt *rapid.T) {
				if len(reqs) == 0 {
					rt.Skip("no request")
				}
				r := rapid.SampledFrom(reqs).Draw(rt, "req")
				if r.inTree < len(r.pages) {
					upto := rapid.IntRange(r.inTree+1, len(r.pages)).Draw(rt, "upto")
					insert(r, upto, upto < len(r.pages) && rapid.Bool().Draw(rt, "chunked"))
					return
				}
				// Decode: the key grows by fresh pages, reserved first.
				grow := rapid.IntRange(1, 3).Draw(rt, "grow")
				need := lanes(len(r.pages), len(r.pages)+grow)
				if !reserve(need) {
					return
				}
				addLanes(r.held, need, 1)
				for range grow {
					r.pages = append(r.pages, pager.Fresh())
				}
				insert(r, len(r.pages), false)
			},
			"finish": func(rt *rapid.T) {
				if len(reqs) == 0 {
					rt.Skip("no request")
				}
				finish(rapid.IntRange(0, len(reqs)-1).Draw(rt, "i"))
			},
			"evict": func(rt *rapid.T) {
				n := int64(rapid.IntRange(1, 32).Draw(rt, "tokens"))
				a.Evict(n)
				b.Evict(n)
			},
			"ack": func(rt *rapid.T) {
				a.AckWrites(len(a.Writes()))
				b.AckWrites(len(b.Writes()))
			},
			"tick": func(rt *rapid.T) {
				now += int64(rapid.IntRange(1, 3).Draw(rt, "dt"))
			},
			"": func(rt *rapid.T) {
				if da, db := dumpTree(a), dumpTree(b); da != db {
					rt.Fatalf("trees differ:\nInsert:\n%s\nInsertFrom:\n%s", da, db)
				}
				if err := b.Check(); err != nil {
					rt.Fatalf("Check: %v", err)
				}
			},
		})
	})
}

// TestInsertFromPastKeyPanics checks the one check InsertFrom always makes.
func TestInsertFromPastKeyPanics(t *testing.T) {
	tr, err := New(Config{PageSize: 1, CP: 1, DeviceTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Reserve([]int64{4}) {
		t.Fatal("Reserve failed")
	}
	res := tr.Insert([]PageID{1, 2, 3, 4}, 0, InsertOptions{})
	defer func() {
		if recover() == nil {
			t.Fatal("InsertFrom with a node past the key did not panic")
		}
	}()
	tr.InsertFrom(res.Last, []PageID{1, 2}, 0, InsertOptions{})
}
