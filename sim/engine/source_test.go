package engine

import (
	"fmt"
	"testing"

	"github.com/kvsim/kvsim/traces"
	"pgregory.net/rapid"
)

// A Queue is a FIFO against a slice model through any interleaving of
// pushes, peeks and takes, and reuses its memory once emptied: a queue
// that never holds more than one record never grows past it.
func TestQueueIsAFIFO(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var q Queue
		var model []traces.Record
		n := 0
		for range rapid.IntRange(0, 200).Draw(t, "ops") {
			if rapid.Bool().Draw(t, "push") {
				n++
				rec := traces.Record{ID: fmt.Sprint(n), Arrival: int64(n)}
				q.Push(rec)
				model = append(model, rec)
			} else if len(model) > 0 {
				if p := q.Peek(); p.ID != model[0].ID {
					t.Fatalf("Peek() = %s, want %s", p.ID, model[0].ID)
				}
				rec, err := q.Next()
				if err != nil || rec.ID != model[0].ID {
					t.Fatalf("Next() = %s, %v, want %s", rec.ID, err, model[0].ID)
				}
				model = model[1:]
			} else if _, err := q.Next(); err != ErrNoneYet {
				t.Fatalf("Next() on an empty queue: %v, want ErrNoneYet", err)
			}
			if q.Len() != len(model) {
				t.Fatalf("Len() = %d, want %d", q.Len(), len(model))
			}
		}
	})
	var q Queue
	for i := range 1000 {
		q.Push(traces.Record{ID: fmt.Sprint(i)})
		if _, err := q.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if c := cap(q.recs); c > 1 {
		t.Fatalf("a queue of at most one record grew to %d", c)
	}
}
