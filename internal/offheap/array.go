package offheap

import (
	"math/bits"
	"reflect"
	"unsafe"
)

// Array is a growable array of pointer-free values kept outside the heap
// in chunks of MinSize bytes that are never copied: appending maps a chunk
// when the last is full. Against a slice grown by append it holds at most one
// partly used chunk where a slice holds up to twice its length (and the
// collector's headroom twice that again), and growing copies nothing. T
// must hold no pointers and its size must be a power of two (the first
// Append panics otherwise): the
// collector does not scan the chunks.
//
// The zero Array is empty and ready to use. An Array must not be copied
// after its first Append.
type Array[T any] struct {
	chunks [][]T // each a view of the memory of own[i]
	own    []*Bytes
	n      int
	shift  uint // a chunk holds 1<<shift values; 0 until the first Append
}

// Len returns the number of values.
func (a *Array[T]) Len() int { return a.n }

// At returns the address of value i (0 <= i < Len()), valid until a
// Truncate below i+1.
func (a *Array[T]) At(i int) *T {
	if uint(i) >= uint(a.n) {
		panic("offheap: Array index out of range")
	}
	return &a.chunks[i>>a.shift][i&(1<<a.shift-1)]
}

// Append adds v at the end.
func (a *Array[T]) Append(v T) {
	if a.shift == 0 {
		a.shift = chunkShift[T]()
	}
	if a.n == len(a.chunks)<<a.shift { // full: a new chunk
		b := New(MinSize)
		a.own = append(a.own, b)
		a.chunks = append(a.chunks, unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b.B))), 1<<a.shift))
	}
	a.chunks[a.n>>a.shift][a.n&(1<<a.shift-1)] = v
	a.n++
}

// Truncate shortens the array to its first n (<= Len()) values. It keeps
// every chunk for the values appended next, as a slice keeps its
// capacity: an array that shrinks and grows again (a list swept from time
// to time) maps no new memory until it passes its longest, and unmapping
// and mapping chunks again would cost a system call and fresh page faults
// each time. [Array.Free] returns the memory.
func (a *Array[T]) Truncate(n int) {
	if n < 0 || n > a.n {
		panic("offheap: Array.Truncate past the end")
	}
	a.n = n
}

// Free empties the array and returns its memory now.
func (a *Array[T]) Free() {
	for _, o := range a.own {
		o.Free()
	}
	a.chunks, a.own, a.n = nil, nil, 0
}

// chunkShift returns log2 of the values of T in a chunk, and panics if T
// holds pointers or its size is not a power of two below MinSize.
func chunkShift[T any]() uint {
	t := reflect.TypeFor[T]()
	if hasPointers(t) {
		panic("offheap: Array of " + t.String() + ", which holds pointers")
	}
	sz := t.Size()
	if sz == 0 || sz&(sz-1) != 0 || sz >= MinSize {
		panic("offheap: Array of " + t.String() + ": its size is not a power of two below 64 KiB")
	}
	return uint(bits.TrailingZeros(uint(MinSize / sz)))
}

// hasPointers reports whether a value of t holds a pointer the collector
// would have to see.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	default:
		return true
	}
}
