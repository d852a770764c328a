package tree

import (
	"syscall"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// cpuNanos returns the process's user and system CPU time: on a shared
// machine it measures the work more steadily than the wall clock does.
func cpuNanos(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// Mooncake-like requests at page size 1: prompts of 24 blocks of 512 tokens
// (12,288 pages, about the conversation trace's mean of 12k tokens) of which
// the first 8 blocks are shared with the previous request, and 300 output
// pages.
const (
	benchBlock      = 512
	benchBlocks     = 24
	benchSharedBlks = 8
	benchOut        = 300
)

// benchPrompt returns request i's block hashes: numbered densely from 0,
// as Mooncake's hash_ids are, or scattered over 64 bits, as real hashes
// are.
func benchPrompt(i int, scattered bool) []uint64 {
	blocks := make([]uint64, benchBlocks)
	for j := range blocks {
		if j < benchSharedBlks {
			blocks[j] = uint64(i/2*benchBlocks + j) // requests 2k and 2k+1 share a prefix
		} else {
			blocks[j] = uint64(i*benchBlocks + j)
		}
		if scattered {
			blocks[j] *= 0x9E3779B97F4A7C15 // odd: a bijection of uint64
		}
	}
	return blocks
}

// BenchmarkBlockPages turns one request's block hashes into page keys, as
// the simulator does at every arrival.
func BenchmarkBlockPages(b *testing.B) {
	testutil.RunBool(b, "dense", "scattered", func(b *testing.B, scattered bool) {
		p := NewPager(1)
		dst := make([]PageID, 0, benchBlocks*benchBlock)
		prompts := make([][]uint64, 1<<14) // 200k blocks, the conversation trace's count
		for i := range prompts {
			prompts[i] = benchPrompt(i, scattered)
		}
		i := 0
		b.ReportAllocs()
		cpu0 := cpuNanos(b)
		for b.Loop() {
			var err error
			dst, err = p.BlockPages(prompts[i%len(prompts)], benchBlock, benchBlocks*benchBlock, dst[:0])
			if err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(cpuNanos(b)-cpu0)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(b.N)*benchBlocks*benchBlock/b.Elapsed().Seconds()/1e6, "Mpages/s")
	})
}

// BenchmarkRequestInserts runs the tree operations of one request's life
// in the simulator: match and lock its prefix, reserve its new pages, insert
// the prompt after prefill and move the lock to the new leaf, insert prompt
// and output at the end and unlock, evicting as needed. "Insert" walks the
// whole key at every insert; "InsertFrom" starts each insert at the node the
// request has locked, as kvsim sim does.
func BenchmarkRequestInserts(b *testing.B) {
	testutil.RunBool(b, "Insert", "InsertFrom", func(b *testing.B, from bool) {
		tr, err := New(Config{PageSize: 1, CP: 1, DeviceTokens: 1 << 20, HostTokens: 2 << 20, WritePolicy: WriteThrough})
		if err != nil {
			b.Fatal(err)
		}
		p := NewPager(1)
		insert := func(last *Node, key []PageID, now int64) InsertResult {
			if from && last != nil {
				return tr.InsertFrom(last, key, now, InsertOptions{})
			}
			return tr.Insert(key, now, InsertOptions{})
		}
		reserve := func(n int64) {
			if !tr.Reserve([]int64{n}) {
				tr.Evict(n - tr.DeviceFree(0))
				if !tr.Reserve([]int64{n}) {
					b.Fatal("no room after eviction")
				}
			}
		}
		now := int64(0)
		i := 0
		b.ReportAllocs()
		cpu0 := cpuNanos(b)
		for b.Loop() {
			now++
			key, err := p.BlockPages(benchPrompt(i, false), benchBlock, benchBlocks*benchBlock, nil)
			if err != nil {
				b.Fatal(err)
			}
			i++
			m := tr.Match(key, now)
			var last *Node
			if !m.LastDevice.IsRoot() {
				last = m.LastDevice
				tr.Lock(last)
			}
			prefill := int64(len(key)) - m.DeviceTokens
			reserve(prefill)
			res := insert(last, key, now)
			tr.Release([]int64{prefill - res.Adopted[0]})
			if last != nil {
				tr.Unlock(last)
			}
			last = res.Last
			tr.Lock(last)
			reserve(benchOut)
			for range benchOut {
				key = append(key, p.Fresh())
			}
			res = insert(last, key, now)
			tr.Release([]int64{benchOut - res.Adopted[0]})
			tr.Unlock(last)
			tr.AckWrites(len(tr.Writes()))
		}
		b.ReportMetric(float64(cpuNanos(b)-cpu0)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
	})
}
