package offheap

import (
	"runtime"
	"testing"

	"pgregory.net/rapid"
)

type pair struct{ a, b uint64 }

// An Array behaves as a slice under appends, writes through At, truncations
// and Free, across many chunks (a chunk holds 4,096 pairs).
func TestPropArrayIsSlice(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var a Array[pair]
		var model []pair
		steps := rapid.IntRange(1, 40).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 0, 1: // append a run
				n := rapid.IntRange(0, 9000).Draw(t, "append")
				base := uint64(len(model))
				for i := range uint64(n) {
					p := pair{base + i, ^(base + i)}
					a.Append(p)
					model = append(model, p)
				}
			case 2:
				n := rapid.IntRange(0, len(model)).Draw(t, "truncate")
				a.Truncate(n)
				model = model[:n]
			case 3:
				if len(model) > 0 {
					i := rapid.IntRange(0, len(model)-1).Draw(t, "write")
					a.At(i).b = 7
					model[i].b = 7
				}
			case 4:
				if rapid.IntRange(0, 5).Draw(t, "free") == 0 {
					a.Free()
					model = nil
				}
			}
			if a.Len() != len(model) {
				t.Fatalf("Len %d, want %d", a.Len(), len(model))
			}
			for i, p := range model {
				if *a.At(i) != p {
					t.Fatalf("At(%d) = %v, want %v", i, *a.At(i), p)
				}
			}
		}
	})
}

// An Array's chunks are mapped outside the heap: a million pairs (16 MB)
// grow the heap by far less.
func TestArrayIsOffHeap(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("mapped memory on Linux")
	}
	var a Array[pair]
	grew := heapGrowth(func() {
		for i := range uint64(1 << 20) {
			a.Append(pair{i, i})
		}
	})
	if grew > 1<<20 {
		t.Fatalf("the heap grew by %d bytes for 16 MiB in an Array", grew)
	}
	if a.At(1<<20-1).a != 1<<20-1 {
		t.Fatal("lost the last value")
	}
	a.Free()
}

// Types the collector would have to scan, or that do not divide a chunk,
// are refused.
func TestArrayRefusesPointersAndOddSizes(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		f()
	}
	mustPanic("pointer", func() { new(Array[*int]).Append(nil) })
	mustPanic("struct with a slice", func() { new(Array[struct{ a, b []byte }]).Append(struct{ a, b []byte }{}) })
	mustPanic("array of strings", func() { new(Array[[2]string]).Append([2]string{}) })
	mustPanic("12 bytes", func() { new(Array[[3]int32]).Append([3]int32{}) })
	mustPanic("out of range", func() {
		var a Array[int64]
		a.Append(1)
		a.At(1)
	})
	var ok Array[struct {
		x [2]int32
		f float64
	}]
	ok.Append(ok.zero())
}

func (a *Array[T]) zero() (z T) { return z }
