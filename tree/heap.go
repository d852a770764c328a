package tree

import "github.com/kvsim/kvsim/internal/heap"

// nodeHeap is the tree's heap of nodes: a typed min-heap with index
// tracking, each heap keeping its index in its own field of Node (devIdx,
// hostIdx, protIdx).
type nodeHeap = heap.Indexed[*Node]
