package router

import (
	"math"
	"strconv"

	"github.com/emirpasic/gods/maps/treemap"
	"github.com/emirpasic/gods/utils"
)

// ring is consistent_hash's hash ring (SMG worker/hash_ring.rs): each
// replica owns VirtualNodes points; a key goes to the owner of the first
// point at or after the key's hash, clockwise, skipping unavailable
// replicas. It is a typed wrapper over gods' red-black tree map (uint64
// point -> replica), queried by ceiling.
type ring struct{ m *treemap.Map }

// FNV-1a's 64-bit offset basis and prime.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// hashKey is 64-bit FNV-1a finished with splitmix64's mixer, so that keys
// differing in their last bytes spread over the whole ring. SMG hashes with
// blake3; any well-mixed 64-bit hash gives the same distribution, and this
// one needs nothing outside the standard library.
func hashKey(s string) uint64 {
	x := uint64(fnvOffset)
	for i := 0; i < len(s); i++ {
		x = (x ^ uint64(s[i])) * fnvPrime
	}
	return splitmix(x)
}

// splitmix is splitmix64's finalizer: every bit of x reaches every bit of
// the result.
func splitmix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// newRing places replica i's v-th point at hashKey("replica-i#v"): SMG
// hashes "url#v"; kvsim's replicas have no URL, so the index stands in.
// A point hashed twice keeps the higher replica (a 64-bit collision, in
// practice never).
func newRing(replicas, virtualNodes int) *ring {
	m := treemap.NewWith(utils.UInt64Comparator)
	for i := range replicas {
		for v := range virtualNodes {
			m.Put(hashKey("replica-"+strconv.Itoa(i)+"#"+strconv.Itoa(v)), i)
		}
	}
	return &ring{m}
}

// lookup returns the replica for key: the owner of the first point
// clockwise from its hash whose replica is available. At least one replica
// must be available.
func (g *ring) lookup(key string, available []bool) int {
	return g.lookupHash(hashKey(key), available)
}

// lookupHash returns the replica for a key hashed to h, as lookup.
func (g *ring) lookupHash(h uint64, available []bool) int {
	for range g.m.Size() {
		k, v := g.m.Ceiling(h)
		if k == nil {
			k, v = g.m.Min()
		}
		if r := v.(int); available[r] {
			return r
		}
		p := k.(uint64)
		if p == math.MaxUint64 {
			h = 0
		} else {
			h = p + 1
		}
	}
	panic("router: hash ring lookup with no available replica")
}
