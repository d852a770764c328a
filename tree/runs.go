package tree

import "slices"

// Keys inside the tree are runs of consecutive page ids ([PageRun]): a
// block-hash prompt is a handful of runs however many pages it has, so
// matching, inserting and splitting cost per run, not per page. Two run
// lists are equal keys when they spell the same pages, however the pages
// are cut into runs; the helpers below never assume a canonical cut.

// runsLen returns the number of pages in runs.
func runsLen(runs []PageRun) int64 {
	var n int64
	for _, x := range runs {
		n += x.N
	}
	return n
}

// AppendRunRange appends the pages [lo, hi) of runs to dst as runs (the
// last run of dst extended when the first page continues it).
func AppendRunRange(dst, runs []PageRun, lo, hi int64) []PageRun {
	var at int64 // pages before runs[i]
	for _, x := range runs {
		if at >= hi {
			break
		}
		from, to := max(lo, at), min(hi, at+x.N)
		if from < to {
			dst = AppendRun(dst, x.First+PageID(from-at), to-from)
		}
		at += x.N
	}
	return dst
}

// appendRun appends the n pages from first to dst, extending dst's last
// run when they continue it.
func AppendRun(dst []PageRun, first PageID, n int64) []PageRun {
	if m := len(dst); m > 0 && dst[m-1].First+PageID(dst[m-1].N) == first {
		dst[m-1].N += n
		return dst
	}
	return append(dst, PageRun{First: first, N: n})
}

// AppendRuns appends pages to dst as runs of consecutive ids (the last run
// of dst extended when the first page continues it).
func AppendRuns(dst []PageRun, pages []PageID) []PageRun {
	for i := 0; i < len(pages); {
		j := i + 1
		for j < len(pages) && pages[j] == pages[j-1]+1 {
			j++
		}
		dst = AppendRun(dst, pages[i], int64(j-i))
		i = j
	}
	return dst
}

// runsSpell reports whether runs spell exactly pages, without building
// their page slice.
func runsSpell(runs []PageRun, pages []PageID) bool {
	i := 0
	for _, x := range runs {
		if int64(len(pages)-i) < x.N {
			return false
		}
		// A run spells consecutive ids: its pages must start at x.First
		// and end at x.First+N-1 with none out of step between.
		for k := range x.N {
			if pages[i] != x.First+PageID(k) {
				return false
			}
			i++
		}
	}
	return i == len(pages)
}

// AppendRunPages appends the pages of runs to dst, one id a page.
func AppendRunPages(dst []PageID, runs []PageRun) []PageID {
	i, n := len(dst), int(runsLen(runs))
	dst = slices.Grow(dst, n)[:i+n]
	for _, x := range runs {
		run := dst[i : i+int(x.N)]
		for k := range run {
			run[k] = x.First + PageID(k)
		}
		i += int(x.N)
	}
	return dst
}

// keyCursor walks a key's pages run by run: the pages not yet consumed are
// runs[i:], less the first off pages of runs[i].
type keyCursor struct {
	runs []PageRun
	i    int
	off  int64
}

// done reports whether every page has been consumed.
func (k *keyCursor) done() bool { return k.i >= len(k.runs) }

// first returns the next page; the key must not be done.
func (k *keyCursor) first() PageID { return k.runs[k.i].First + PageID(k.off) }

// skip consumes n pages (at most what is left).
func (k *keyCursor) skip(n int64) {
	for n > 0 {
		left := k.runs[k.i].N - k.off
		if n < left {
			k.off += n
			return
		}
		n -= left
		k.i, k.off = k.i+1, 0
	}
}

// match returns the number of leading pages of node key nk that the
// cursor's next pages share, without consuming them.
func (k *keyCursor) match(nk []PageRun) int64 {
	var n int64
	i, off := k.i, k.off
	j := 0
	var offB int64
	for i < len(k.runs) && j < len(nk) {
		ra, rb := k.runs[i], nk[j]
		if ra.First+PageID(off) != rb.First+PageID(offB) {
			return n
		}
		step := min(ra.N-off, rb.N-offB)
		n += step
		off += step
		offB += step
		if off == ra.N {
			i, off = i+1, 0
		}
		if offB == rb.N {
			j, offB = j+1, 0
		}
	}
	return n
}

// matchPages returns the number of leading pages of pages that the
// cursor's next pages share, without consuming them.
func (k *keyCursor) matchPages(pages []PageID) int64 {
	var n int64
	i, off := k.i, k.off
	for n < int64(len(pages)) && i < len(k.runs) && k.runs[i].First+PageID(off) == pages[n] {
		n++
		if off++; off == k.runs[i].N {
			i, off = i+1, 0
		}
	}
	return n
}

// matchNode returns the number of leading pages of c's key that the
// cursor's next pages share, without consuming them.
func (k *keyCursor) matchNode(c *Node) int64 {
	if c.key != nil {
		return k.match(c.key)
	}
	return k.matchPages(c.pages)
}

// compactKey returns the key runs spell in the form that costs less memory:
// the runs (a clone), or one id a page when the runs average under two
// pages (16 bytes a run, 8 a page).
func compactKey(runs []PageRun) ([]PageRun, []PageID) {
	np := runsLen(runs)
	if int64(len(runs))*2 > np {
		return nil, AppendRunPages(make([]PageID, 0, np), runs)
	}
	return append([]PageRun(nil), runs...), nil
}
