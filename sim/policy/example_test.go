package policy_test

import (
	"fmt"

	"github.com/kvsim/kvsim/sim/policy"
)

// Two conversations share the first page. With room for two device pages
// and four host pages, main_write_through writes every page to host as it
// first appears, so the second turn of conversation 1 finds its evicted
// pages 11 and 12 on the host (2 L2 hits). Its new page 13 cannot be
// written: the host is full and holds no host-only leaf to evict (1 failed
// allocation); 13 is then deleted by L1 eviction, having no host copy.
func ExampleRun() {
	reqs := []policy.Request{
		{Timestamp: 0, Pages: []uint64{10, 11, 12}}, // conversation 1, turn 1
		{Timestamp: 1, Pages: []uint64{10, 20}},     // conversation 2
		{Timestamp: 2, Pages: []uint64{10, 11, 12, 13}},
	}
	cfg := policy.Config{Policy: policy.MainWriteThrough, L1Pages: 2, L2Pages: 4, WriteThroughThreshold: 1}
	r, err := policy.Run(cfg, reqs)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("hits: L1 %d, L2 %d, miss %d of %d pages\n", r.L1HitPages, r.L2HitPages, r.MissPages, r.TotalInputPages)
	fmt.Printf("evictions: L1 %d, L2 %d; failed host allocations %d\n", r.L1Evictions, r.L2Evictions, r.FailedHAllocations)
	fmt.Printf("end: %d pages on device, %d on host, duplicate ratio %.2f\n", r.DPages, r.HPages, r.DuplicateRatio)
	// Output:
	// hits: L1 2, L2 2, miss 5 of 9 pages
	// evictions: L1 5, L2 0; failed host allocations 1
	// end: 2 pages on device, 4 on host, duplicate ratio 0.50
}
