package fleet

import (
	"fmt"

	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/tree"
)

// l3Sharer is an engine factory whose engines can use a shared L3 store:
// the SGLang simulator's ([sim.Factory]).
type l3Sharer interface {
	NewSharedL3() *sim.SharedL3
	NewWithL3(l3 *sim.SharedL3) (engine.Engine, error)
}

var _ l3Sharer = (*sim.Factory)(nil)

// storageTier is an engine factory that says whether its servers have a
// storage tier (L3).
type storageTier interface{ HasStorage() bool }

// sharedL3s are a fleet's shared L3 stores: one per namespace and page
// size, in the order of their first replica.
type sharedL3s struct {
	stores []SharedL3Result // one per store; StoredTokens filled by l3Results
	l3     []*sim.SharedL3  // stores[i]'s store
	byKey  map[string]int   // namespace and page size -> index in stores
	of     []int            // per replica: its store, -1 for its own
	slot   []int            // per replica: its index among its store's
	pager  *tree.Pager      // when set (kv_aware), every store's page-id space
}

// newEngine builds replica i's engine, attached to its namespace's shared
// store when it has one.
func (s *sharedL3s) newEngine(i int, r Replica) (engine.Engine, error) {
	if s.byKey == nil {
		s.byKey = map[string]int{}
	}
	if r.SharedL3 == "" {
		s.of, s.slot = append(s.of, -1), append(s.slot, -1)
		return r.Factory.New()
	}
	f, ok := r.Factory.(l3Sharer)
	if !ok {
		return nil, fmt.Errorf("a shared L3 store (namespace %q) needs the sglang engine", r.SharedL3)
	}
	key := fmt.Sprintf("%s/page%d", r.SharedL3, r.Factory.Info().PageSize)
	k, ok := s.byKey[key]
	if !ok {
		k = len(s.stores)
		s.byKey[key] = k
		l3 := f.NewSharedL3()
		if s.pager != nil {
			if err := l3.SharePager(s.pager); err != nil {
				return nil, err
			}
		}
		s.l3 = append(s.l3, l3)
		s.stores = append(s.stores, SharedL3Result{Namespace: r.SharedL3, PageSize: r.Factory.Info().PageSize})
	}
	s.of, s.slot = append(s.of, k), append(s.slot, s.l3[k].Replicas())
	s.stores[k].Replicas = append(s.stores[k].Replicas, i)
	return f.NewWithL3(s.l3[k])
}

// l3Results fills the replicas' L3 results and returns the fleet's and
// the shared stores'; nil when no replica has a storage tier. hits are the prompt tokens each replica's requests took from L3.
func (s *sharedL3s) l3Results(reps []ReplicaResult, replicas []Replica, hits []int64) (*L3Result, []SharedL3Result) {
	out := make([]L3Result, len(reps))
	used := false
	for i := range reps {
		st, ok := replicas[i].Factory.(storageTier)
		used = used || ok && st.HasStorage()
	}
	for i := range reps {
		c := reps[i].Result.Counters
		ps := int64(max(replicas[i].Factory.Info().PageSize, 1))
		l3 := L3Result{
			HitTokens: hits[i], PagesRead: c.StorageReadTokens / ps, PagesWritten: c.StorageWriteTokens / ps,
			PagesEvicted: c.StorageEvictedTokens / ps, EvictionRounds: c.StorageEvictionRounds,
			PagesRefused: c.StorageRefusedTokens / ps,
		}
		if k := s.of[i]; k >= 0 {
			l3.CrossReplicaPagesRead = s.l3[k].Stats(s.slot[i]).CrossRead
			l3.L3BandwidthStats = s.l3[k].Bandwidth(s.slot[i])
		}
		out[i] = l3
	}
	if !used {
		return nil, nil
	}
	var all L3Result
	for i := range reps {
		reps[i].L3 = &out[i]
		all.HitTokens += out[i].HitTokens
		all.PagesRead += out[i].PagesRead
		all.PagesWritten += out[i].PagesWritten
		all.CrossReplicaPagesRead += out[i].CrossReplicaPagesRead
		all.PagesEvicted += out[i].PagesEvicted
		all.EvictionRounds += out[i].EvictionRounds
		all.PagesRefused += out[i].PagesRefused
		all.Slowed += out[i].Slowed
		all.DelayNs += out[i].DelayNs
	}
	for k := range s.stores {
		s.stores[k].StoredTokens = s.l3[k].StoredTokens()
	}
	return &all, s.stores
}
