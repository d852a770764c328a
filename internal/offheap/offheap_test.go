package offheap

import (
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"unsafe"
)

// Every size gives that many zeroed, writable bytes.
func TestNewIsZeroedAndWritable(t *testing.T) {
	for _, n := range []int{0, 1, 100, MinSize - 1, MinSize, 3*MinSize + 5} {
		o := New(n)
		if len(o.B) != n {
			t.Fatalf("New(%d): %d bytes", n, len(o.B))
		}
		for i, c := range o.B {
			if c != 0 {
				t.Fatalf("New(%d)[%d] = %d", n, i, c)
			}
			o.B[i] = byte(i)
		}
		for i, c := range o.B {
			if c != byte(i) {
				t.Fatalf("New(%d)[%d] reads back %d", n, i, c)
			}
		}
	}
}

// On Linux a large allocation is a mapping of its own, outside the heap
// (the heap does not grow by it), and the mapping goes once the Bytes is
// unreachable.
func TestLargeIsMappedThenUnmapped(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/maps")
	}
	var o *Bytes
	if grew := heapGrowth(func() {
		o = New(16 << 20)
		o.B[len(o.B)-1] = 1
	}); grew > 1<<20 {
		t.Fatalf("the heap grew by %d bytes for 16 MiB off the heap", grew)
	}
	addr := uint64(uintptr(unsafe.Pointer(&o.B[0])))
	if !mapped(t, addr) {
		t.Fatalf("no mapping at %#x in /proc/self/maps", addr)
	}
	o = nil
	for range 200 {
		runtime.GC()
		runtime.Gosched()
		if !mapped(t, addr) {
			return
		}
	}
	t.Fatalf("the mapping at %#x is still there after the Bytes became unreachable", addr)
}

// heapGrowth returns how many bytes the heap's objects grew by in f,
// from a collection before it.
func heapGrowth(f func()) int64 {
	runtime.GC()
	before := heapObjects()
	f()
	return heapObjects() - before
}

// heapObjects is the bytes of the heap's objects, live or not yet swept.
func heapObjects() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// mapped reports whether a mapping of the process holds addr.
func mapped(t *testing.T, addr uint64) bool {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(maps), "\n") {
		var lo, hi uint64
		if _, err := fmt.Sscanf(l, "%x-%x", &lo, &hi); err == nil && lo <= addr && addr < hi {
			return true
		}
	}
	return false
}

// Free unmaps at once, and a second Free, or the cleanup once the Bytes is
// unreachable, does nothing more (a second munmap would panic).
func TestFreeUnmapsOnce(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/maps")
	}
	o := New(16 << 20)
	o.B[0] = 1
	addr := uint64(uintptr(unsafe.Pointer(&o.B[0])))
	o.Free()
	if o.B != nil || mapped(t, addr) {
		t.Fatalf("after Free: %d bytes, mapped %v", len(o.B), mapped(t, addr))
	}
	o.Free()
	o = nil
	for range 20 {
		runtime.GC()
		runtime.Gosched()
	}
	New(100).Free()
}
