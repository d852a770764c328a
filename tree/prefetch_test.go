package tree

import "testing"

// Host reservations count against the host capacity, evict host-only
// leaves once (for the whole amount) when short, and are all or nothing.
func TestReserveHost(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 1, DeviceTokens: 8, HostTokens: 10})
	insertKey(t, tr, 1, InsertOptions{}, 1, 2, 3, 4) // written through: 4 host tokens
	tr.AckWrites(len(tr.Writes()))
	tr.Evict(4) // demoted: host-only
	if !tr.ReserveHost([]int64{6}) || tr.HostFree(0) != 0 || tr.HostReserved(0) != 6 {
		t.Fatalf("ReserveHost(6) with 6 free: free %d reserved %d", tr.HostFree(0), tr.HostReserved(0))
	}
	if tr.Stats().HostEvicted != 0 {
		t.Fatal("a reservation that fit evicted")
	}
	// 3 more: host-only [1 2 3 4] is evicted (4 >= 3), then it fits.
	if !tr.ReserveHost([]int64{3}) || tr.Stats().HostEvicted != 4 || tr.HostFree(0) != 1 {
		t.Fatalf("ReserveHost(3) short: evicted %d free %d", tr.Stats().HostEvicted, tr.HostFree(0))
	}
	// Nothing left to evict: 2 does not fit in 1 and nothing is taken.
	if tr.ReserveHost([]int64{2}) || tr.HostReserved(0) != 9 {
		t.Fatalf("ReserveHost(2) with 1 free succeeded or leaked: reserved %d", tr.HostReserved(0))
	}
	// A write-through now finds no host room: reservations are real.
	insertKey(t, tr, 2, InsertOptions{}, 7, 8)
	if len(tr.Writes()) != 0 || tr.Stats().WriteFailures != 1 {
		t.Fatalf("write-through beside a full reservation: writes %v failures %d", tr.Writes(), tr.Stats().WriteFailures)
	}
	tr.ReleaseHostReservation([]int64{9})
	if tr.HostFree(0) != 10 {
		t.Fatalf("after release free %d, want 10", tr.HostFree(0))
	}
}

// InsertHost hangs fetched pages under their prefix as one host-only leaf,
// splitting a partly matched node and leaving existing nodes alone.
func TestInsertHost(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 2, DeviceTokens: 64, HostTokens: 64})
	insertKey(t, tr, 1, InsertOptions{}, 1, 2, 3, 4) // 8 tokens, device + host
	tr.AckWrites(len(tr.Writes()))
	// Fetched: pages 3..6 after the prefix [1 2]; [3 4] already exist, so
	// [1 2 3 4] is split at nothing (whole match) and [5 6] is new.
	if !tr.ReserveHost([]int64{8}) {
		t.Fatal("ReserveHost failed")
	}
	res := tr.InsertHost([]PageID{1, 2, 3, 4, 5, 6}, 2, 2)
	if res.Matched != 8 || res.Inserted != 4 || res.Lanes[0] != 4 || res.Missing || res.Blocked {
		t.Fatalf("InsertHost = %+v, want 8 matched, 4 inserted", res)
	}
	if res.Last.OnDevice() || !res.Last.OnHost() || res.Last.Parent().Tokens() != 8 {
		t.Fatalf("new leaf device %v host %v under a %d-token node", res.Last.OnDevice(), res.Last.OnHost(), res.Last.Parent().Tokens())
	}
	if tr.HostReserved(0) != 4 || tr.HostUsed(0) != 12 || tr.Stats().InsertedFromStorage != 4 {
		t.Fatalf("reserved %d host used %d inserted %d", tr.HostReserved(0), tr.HostUsed(0), tr.Stats().InsertedFromStorage)
	}
	tr.ReleaseHostReservation([]int64{4})
	m := tr.Match([]PageID{1, 2, 3, 4, 5, 6}, 3)
	if m.DeviceTokens != 8 || m.HostTokens != 4 {
		t.Fatalf("Match after InsertHost = device %d host %d, want 8 and 4", m.DeviceTokens, m.HostTokens)
	}
	// A branch off the middle of a node splits it: [1 2] + [3 4].
	tr.ReserveHost([]int64{4})
	res = tr.InsertHost([]PageID{1, 2, 9, 9}, 1, 4)
	if res.Matched != 4 || res.Inserted != 4 || tr.Stats().Splits != 1 {
		t.Fatalf("InsertHost with a split = %+v, splits %d", res, tr.Stats().Splits)
	}
	// The prefix is gone: nothing is inserted.
	tr.ReserveHost([]int64{2})
	res = tr.InsertHost([]PageID{7, 7, 8}, 2, 5)
	if !res.Missing || res.Inserted != 0 || tr.HostReserved(0) != 2 {
		t.Fatalf("InsertHost without its prefix = %+v", res)
	}
	tr.ReleaseHostReservation([]int64{2})
}

// Under a device node that has no host copy, a host-only leaf would break
// host prefix-closure: InsertHost refuses.
func TestInsertHostBlockedUnderDeviceOnlyNode(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 1, DeviceTokens: 16, HostTokens: 16, WritePolicy: WriteThroughSelective})
	insertKey(t, tr, 1, InsertOptions{}, 1, 2) // one hit: not written yet
	tr.ReserveHost([]int64{2})
	res := tr.InsertHost([]PageID{1, 2, 3, 4}, 2, 2)
	if !res.Blocked || res.Inserted != 0 || res.Matched != 2 {
		t.Fatalf("InsertHost under a device-only node = %+v", res)
	}
	// At the root there is no such constraint.
	res = tr.InsertHost([]PageID{5, 6}, 0, 3)
	if res.Inserted != 2 || res.Last.Parent() != tr.Root() {
		t.Fatalf("InsertHost at the root = %+v", res)
	}
}

// A split leaves the host protection with the lower node, so that
// ReleaseHost leaves no stray count on the new upper node.
func TestSplitKeepsHostProtectionBelow(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 1, DeviceTokens: 16, HostTokens: 16})
	res := insertKey(t, tr, 1, InsertOptions{}, 1, 2, 3, 4)
	tr.AckWrites(len(tr.Writes()))
	tr.Evict(4)
	tr.ProtectHost(res.Last)
	up := tr.Match([]PageID{1, 2, 9}, 2).Last // splits [1 2 3 4]
	if up.HostRef() != 0 || res.Last.HostRef() != 1 {
		t.Fatalf("after split: upper hostRef %d, lower %d", up.HostRef(), res.Last.HostRef())
	}
	if tr.EvictHost(4) != 0 {
		t.Fatal("host eviction took a protected chain")
	}
	tr.ReleaseHost(res.Last)
	if got := tr.EvictHost(4); got != 4 {
		t.Fatalf("after release EvictHost freed %d, want 4", got)
	}
}

// With HoldWriteBacks, a write-back copy is protected until the caller
// releases it.
func TestHoldWriteBacks(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 1, DeviceTokens: 4, HostTokens: 8, WritePolicy: WriteBack, HoldWriteBacks: true})
	insertKey(t, tr, 1, InsertOptions{}, 1, 2, 3)
	if ev := tr.Evict(3); ev.WrittenBack != 3 {
		t.Fatalf("Evict wrote back %d", ev.WrittenBack)
	}
	wb := tr.TakeWriteBacks()
	if len(wb) != 1 || wb[0].HostRef() != 1 || len(tr.TakeWriteBacks()) != 0 {
		t.Fatalf("TakeWriteBacks = %v", wb)
	}
	if tr.EvictHost(3) != 0 {
		t.Fatal("host eviction took a held write-back")
	}
	tr.ReleaseHost(wb[0])
	if tr.EvictHost(3) != 3 {
		t.Fatal("released write-back not evictable")
	}
}
