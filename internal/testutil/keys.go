package testutil

import "pgregory.net/rapid"

// DrawPrefixTrace draws a trace of page keys with heavy prefix sharing:
// up to most requests, each either extending a prefix of an earlier
// request or starting afresh, with up to add keys more drawn from an
// alphabet of 1 to alphabet keys, offset+1 upwards (so keys also repeat at
// different depths).
func DrawPrefixTrace(t *rapid.T, most, add int, alphabet, offset uint64) [][]uint64 {
	n := rapid.IntRange(0, most).Draw(t, "requests")
	alpha := rapid.Uint64Range(1, alphabet).Draw(t, "alphabet")
	var reqs [][]uint64
	for range n {
		var r []uint64
		if len(reqs) > 0 && rapid.Bool().Draw(t, "extend") {
			prev := reqs[rapid.IntRange(0, len(reqs)-1).Draw(t, "prev")]
			r = append(r, prev[:rapid.IntRange(0, len(prev)).Draw(t, "keep")]...)
		}
		for k := rapid.IntRange(0, add).Draw(t, "add"); k > 0; k-- {
			r = append(r, rapid.Uint64Range(1, alpha).Draw(t, "page")+offset)
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// ChainKeys rewrites requests' block keys as chained hashes, as in
// Mooncake traces: two blocks get the same id exactly when their prefixes
// (the keys up to and including theirs) are equal. Ids count from 1 in
// order of first appearance.
func ChainKeys(reqs [][]uint64) [][]uint64 {
	type edge struct{ parent, key uint64 }
	ids := map[edge]uint64{}
	out := make([][]uint64, len(reqs))
	for i, r := range reqs {
		var cur uint64
		for _, k := range r {
			id, ok := ids[edge{cur, k}]
			if !ok {
				id = uint64(len(ids) + 1)
				ids[edge{cur, k}] = id
			}
			out[i] = append(out[i], id)
			cur = id
		}
	}
	return out
}

// RelabelFar returns two traces of page keys equal up to a one-to-one
// relabelling: every third request of reqs gets the key unused (which no
// request of reqs may hold) in front, and far has the same requests with
// unused as 0, even keys kept and odd keys sent far up (above 1<<63) by an
// odd multiplier. A dense key table and an edge map both take part.
func RelabelFar(reqs [][]uint64, unused uint64) (near, far [][]uint64) {
	for i, r := range reqs {
		var s []uint64
		if i%3 == 0 {
			s = append(s, 0)
			r = append([]uint64{unused}, r...)
		}
		for _, h := range r[len(s):] {
			if h%2 == 1 {
				h = h*0x9e3779b97f4a7c15 | 1<<63 // odd multiplier: one to one
			}
			s = append(s, h)
		}
		near = append(near, r)
		far = append(far, s)
	}
	return near, far
}
