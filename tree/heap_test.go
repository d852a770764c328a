package tree

import "testing"

// BenchmarkEvictionHeaps runs a stream of requests whose keys share
// prefixes from a small pool through a device tier that holds a tenth of
// them, with a host tier written through: every request matches (and so
// re-keys nodes in the device and protected heaps), inserts, and evicts
// from the device and host heaps to make room.
func BenchmarkEvictionHeaps(b *testing.B) {
	for _, s := range []Strategy{LRU, SegmentedLRU} {
		b.Run(s.String(), func(b *testing.B) {
			tr, err := New(Config{PageSize: 1, CP: 1, DeviceTokens: 1 << 14, HostTokens: 1 << 15,
				Eviction: s, WritePolicy: WriteThrough, ProtectedHits: 2, ProtectedShare: 0.5})
			if err != nil {
				b.Fatal(err)
			}
			const prefixes, keyLen = 64, 256
			key := make([]PageID, keyLen)
			x := uint64(1)
			now := int64(0)
			b.ReportAllocs()
			for b.Loop() {
				now++
				x = x*6364136223846793005 + 1442695040888963407
				p := x >> 40 % prefixes
				for j := range key {
					if j < keyLen/2 {
						key[j] = PageID(p<<32 | uint64(j))
					} else {
						key[j] = PageID(uint64(now)<<32 | uint64(j))
					}
				}
				m := tr.Match(key, now)
				need := int64(len(key)) - m.DeviceTokens
				if !tr.Reserve([]int64{need}) {
					tr.Evict(need - tr.DeviceFree(0))
					if !tr.Reserve([]int64{need}) {
						b.Fatal("no room after eviction")
					}
				}
				res := tr.Insert(key, now, InsertOptions{})
				tr.Release([]int64{need - res.Adopted[0]})
				tr.AckWrites(len(tr.Writes()))
				if tr.HostFree(0) < keyLen {
					tr.EvictHost(keyLen)
				}
			}
		})
	}
}
