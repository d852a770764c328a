package fleet

import (
	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/tree"
)

// KVCachedPrefix is kv_aware's oracle as the router would ask it now:
// the events due by the fleet's time applied, then CachedPrefix.
func (o *Online) KVCachedPrefix(i int, req *router.Request) router.Cached {
	k := o.r.f.kv
	k.advance(o.r.now)
	return k.CachedPrefix(i, req)
}

// KVPager is the page-id space of a kv_aware fleet's replicas.
func (o *Online) KVPager() *tree.Pager { return o.r.f.kv.pager }
