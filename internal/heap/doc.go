// Package heap is a typed binary min-heap with index tracking: the
// container/heap of the standard library with Fix and Remove, but generic,
// so that no interface conversion sits on a simulator's hot path, and with
// each element's index kept in a field of the element (slot) instead of a
// Swap method.
//
// An [Indexed] heap holds references (pointers, typically) whose order is
// given by a strict total order less; slot returns a pointer to the int in
// which the element's index is kept, -1 when it is not in the heap. Ties
// must be broken inside less (by an id or a sequence number): the heap is
// deterministic only as far as its order is total.
//
// Heaps of values with lazy deletion instead of index tracking (the
// planner's bucket queue, the simulator's event queue) are a different
// structure and do not use this package.
package heap
