package traces

import (
	"io"
	"math"
	"testing"

	"pgregory.net/rapid"
)

func readScaled(t *testing.T, rd *Reader) ([]Record, []int) {
	t.Helper()
	var recs []Record
	var lines []int
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return recs, lines
		}
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
		lines = append(lines, rd.Line())
	}
}

// A scaled reader yields the same records, in the same order and at the
// same lines, with arrivals and think times divided by k and rounded.
func TestScaleRate(t *testing.T) {
	for _, name := range []string{"testdata/mooncake.jsonl", "testdata/kvsim.jsonl", "testdata/weka.json"} {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				k := rapid.Float64Range(0.01, 1000).Draw(rt, "k")
				plain, err := Open(name, FormatAuto)
				if err != nil {
					t.Fatal(err)
				}
				defer plain.Close()
				sc, err := Open(name, FormatAuto)
				if err != nil {
					t.Fatal(err)
				}
				defer sc.Close()
				if err := sc.ScaleRate(k); err != nil {
					t.Fatal(err)
				}
				want, wantLines := readScaled(t, plain)
				got, gotLines := readScaled(t, sc)
				if len(got) != len(want) || len(want) == 0 {
					rt.Fatalf("%d records scaled, %d plain", len(got), len(want))
				}
				for i := range want {
					w := want[i]
					w.Arrival = int64(math.Round(float64(w.Arrival) / k))
					w.ThinkTime = int64(math.Round(float64(w.ThinkTime) / k))
					if got[i].ID != w.ID || got[i].Arrival != w.Arrival || got[i].ThinkTime != w.ThinkTime || got[i].InputLen != w.InputLen || gotLines[i] != wantLines[i] {
						rt.Fatalf("record %d: got %+v at line %d, want %+v at line %d", i, got[i], gotLines[i], w, wantLines[i])
					}
					if i > 0 && got[i].Arrival < got[i-1].Arrival {
						rt.Fatalf("record %d arrives before record %d", i, i-1)
					}
				}
			})
		})
	}
	rd, err := Open("testdata/mooncake.jsonl", FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for _, k := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if rd.ScaleRate(k) == nil {
			t.Errorf("ScaleRate(%v) accepted", k)
		}
	}
}
