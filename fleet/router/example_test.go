package router_test

import (
	"fmt"
	"time"

	"github.com/kvsim/kvsim/fleet/router"
)

// A cache_aware router with SGLang's defaults over three replicas: the
// first request of a conversation is a miss (least loaded), its next turn
// a hit on the same replica, another conversation a miss to an idle one.
// The caller finishes each request and ticks the router's virtual clock.
func Example() {
	r, err := router.New(router.Default(), 3, router.Deps{})
	if err != nil {
		panic(err)
	}
	for _, text := range []string{
		"You are a helpful assistant. User: hi",
		"You are a helpful assistant. User: hi Assistant: hello! User: what is KV cache?",
		"Translate to French: good morning",
	} {
		d, err := r.Route(&router.Request{Text: text})
		if err != nil {
			panic(err)
		}
		fmt.Printf("replica %d (%v, %d characters matched)\n", d.Replica, d.Reason, d.Matched)
	}
	if err := r.Finish(0); err != nil {
		panic(err)
	}
	r.Tick(120 * time.Second) // the first eviction; the tree is far below max_tree_size
	fmt.Println("in flight:", r.InFlight(0), r.InFlight(1), r.InFlight(2))
	// Output:
	// replica 0 (miss, 0 characters matched)
	// replica 0 (cache_hit, 37 characters matched)
	// replica 1 (miss, 0 characters matched)
	// in flight: 1 1 0
}
