package study

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kvsim/kvsim/traces"
)

// MRCPoint is one point of a miss-ratio curve: the share of prompt tokens
// that miss in a prefix cache of CapacityTokens tokens managed by LRU, and
// by Belady's offline optimum.
type MRCPoint struct {
	CapacityTokens int64
	MissRatio      float64
	// OPTMissRatio is the miss ratio under Belady's offline optimum
	// (traces.OPT), or NaN where it was not computed.
	OPTMissRatio float64
}

// mrcPoints is the number of LRU points of mrc.csv, and optEvery the
// stride of those at which OPT is computed too (about 40 capacities).
const (
	mrcPoints = 200
	optEvery  = 5
)

// mrcCurve is a trace's LRU miss-ratio curve at every capacity, from the
// LRU stack distances of its blocks (Mattson et al., "Evaluation
// techniques for storage hierarchies", 1970): one pass gives the hit rate
// of every LRU size at once.
//
// The cache model is that of traces.Stats: a request's hit is its longest
// prefix of blocks that are cached before it runs; then its blocks are
// touched in order. A block at LRU stack position d (d distinct blocks
// used more recently) is cached in an LRU of C blocks iff d < C, so
// block j of a request hits iff max(d_0..d_j) < C. The histogram of those
// running maxima, weighted by the tokens each block covers (block-weighted
// for the comparison with traces.Stats), gives the hit tokens at every C.
//
// Beside it, the optimal curve: the same cache under Belady's offline
// optimum (traces.OPT), one replay per capacity (optMissRatios) at about
// 40 of the curve's capacities.
type mrcCurve struct {
	blockSize   int
	need        []int64   // sorted distinct capacities (blocks) at which more hits appear
	tokens      []float64 // tokens that hit from need[i] blocks on (same index)
	blocks      []float64 // blocks that hit from need[i] blocks on
	totalTokens float64
	totalBlocks float64
	unique      int64

	// opt replays the blocks under Belady's optimum (trie nodes; the same
	// as block ids for chained hashes and for the token chains above), and
	// inputs are the requests' prompt tokens, to weight its hits.
	opt    *traces.OPT
	inputs []int
}

// fenwick is a binary indexed tree of counts over access times 1..n.
type fenwick []int64

func (f fenwick) add(i int, v int64) {
	for ; i < len(f); i += i & -i {
		f[i] += v
	}
}

func (f fenwick) sum(i int) int64 { // counts at times 1..i
	var s int64
	for ; i > 0; i -= i & -i {
		s += f[i]
	}
	return s
}

// computeMRC reads a trace and computes its curve. Token-id traces are cut
// into chained blocks of traces.DefaultTokenBlockSize tokens (full blocks
// only), as traces.Stats does; hash traces use their own blocks.
func computeMRC(rd *traces.Reader) (*mrcCurve, error) {
	reqs, bs, total, err := readMRCRequests(rd)
	if err != nil {
		return nil, err
	}
	c := &mrcCurve{blockSize: bs}
	future := traces.NewOPTBuilder()
	for _, q := range reqs {
		if err := future.Add(q.blocks); err != nil {
			return nil, err
		}
		c.inputs = append(c.inputs, q.input)
	}
	c.opt = future.Build()
	c.stackDistances(reqs, total)
	return c, nil
}

// mrcRequest is a request as the curve sees it: its prompt's blocks and
// its input length in tokens.
type mrcRequest struct {
	blocks []uint64
	input  int
}

// readMRCRequests reads every request's blocks: the trace's block hashes
// (of one block size), or its token ids hashed in blocks of
// traces.DefaultTokenBlockSize, each block identified by itself and its
// parent. total counts the blocks of all requests.
func readMRCRequests(rd *traces.Reader) (reqs []mrcRequest, bs, total int, err error) {
	intern := map[string]uint64{}
	for {
		r, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return reqs, bs, total, nil
		}
		if err != nil {
			return nil, 0, 0, err
		}
		var bl []uint64
		switch {
		case r.Blocks != nil:
			if bs == 0 {
				bs = r.BlockSize
			}
			if r.BlockSize != bs {
				return nil, 0, 0, fmt.Errorf("request %s: block size %d, earlier ones %d", r.ID, r.BlockSize, bs)
			}
			bl = r.Blocks
		case r.Tokens != nil:
			if bs == 0 {
				bs = traces.DefaultTokenBlockSize
			}
			bl = internTokenBlocks(r.Tokens, bs, intern)
		default:
			return nil, 0, 0, errors.New("the trace has neither block hashes nor token ids: no prefix information")
		}
		reqs = append(reqs, mrcRequest{blocks: bl, input: r.InputLen})
		total += len(bl)
	}
}

// internTokenBlocks returns the ids of the whole blocks of bs tokens of a
// prompt; a block's id stands for its tokens and its parent's id (ids
// are dense, in order of first appearance in intern).
func internTokenBlocks(tokens []int32, bs int, intern map[string]uint64) []uint64 {
	var bl []uint64
	var parent uint64
	key := make([]byte, 8+4*bs)
	for i := 0; i+bs <= len(tokens); i += bs {
		binary.LittleEndian.PutUint64(key, parent)
		for j, t := range tokens[i : i+bs] {
			binary.LittleEndian.PutUint32(key[8+4*j:], uint32(t))
		}
		id, ok := intern[string(key)]
		if !ok {
			id = uint64(len(intern))
			intern[string(key)] = id
		}
		bl = append(bl, id)
		parent = id + 1
	}
	return bl
}

// stackDistances fills the LRU curve: for each request, the capacity in
// blocks its hit run needs (the largest stack distance of its leading
// reused blocks, from a Fenwick tree over last-use times), and the tokens
// and blocks that hit at each such capacity.
func (c *mrcCurve) stackDistances(reqs []mrcRequest, total int) {
	bs := c.blockSize
	fw := make(fenwick, total+1)
	last := map[uint64]int{}
	now := 0
	tok := map[int64]float64{}
	blk := map[int64]float64{}
	inf := int64(math.MaxInt64)
	for _, q := range reqs {
		c.totalTokens += float64(q.input)
		c.totalBlocks += float64(len(q.blocks))
		var run int64 // max stack position so far; capacity needed = run+1
		distinct := int64(len(last))
		for j, b := range q.blocks {
			if run != inf {
				if t, ok := last[b]; ok {
					run = max(run, distinct-fw.sum(t))
				} else {
					run = inf
				}
			}
			w := float64(min(bs, q.input-j*bs))
			if run != inf && w > 0 {
				tok[run+1] += w
			}
			if run != inf {
				blk[run+1]++
			}
		}
		for _, b := range q.blocks {
			if t, ok := last[b]; ok {
				fw.add(t, -1)
			}
			now++
			last[b] = now
			fw.add(now, 1)
		}
	}
	c.unique = int64(len(last))
	for k := range blk {
		c.need = append(c.need, k)
	}
	slices.Sort(c.need)
	for _, k := range c.need {
		c.tokens = append(c.tokens, tok[k])
		c.blocks = append(c.blocks, blk[k])
	}
}

// optHitTokens replays the trace under Belady's optimum at capacity
// blocks and returns the prompt tokens of the hit blocks: a request whose
// first k blocks hit saves min(k·blockSize, input) tokens, the weights of
// the LRU curve.
func (c *mrcCurve) optHitTokens(capacity int64) float64 {
	run := c.opt.NewRun(int(min(capacity, math.MaxInt32)))
	var t float64
	for i := 0; !run.Done(); i++ {
		k := int64(run.Step())
		t += float64(min(k*int64(c.blockSize), int64(max(c.inputs[i], 0))))
	}
	return t
}

// optMissRatios computes the OPT miss ratio at each capacity (blocks), one
// replay per capacity, on up to jobs goroutines; each result lands at its
// index, so the output does not depend on scheduling. One pass would do
// (the optimum has the inclusion property, see traces.OPT), but its
// priority-stack update costs the stack depth per block, more than the
// O(blocks · log C) of about 40 replays.
func (c *mrcCurve) optMissRatios(caps []int64, jobs int) []float64 {
	out := make([]float64, len(caps))
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(1, min(jobs, len(caps))) {
		wg.Go(func() {
			for i := range next {
				out[i] = 1 - c.optHitTokens(caps[i])/c.totalTokens
			}
		})
	}
	for i := range caps {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// points samples the token-weighted curve at about n log-spaced capacities
// from one block to every unique block, with the OPT miss ratio at every
// optEvery-th of them and at the last (NaN elsewhere), computed on up to
// jobs goroutines.
func (c *mrcCurve) points(n, jobs int) []MRCPoint {
	if c.unique == 0 {
		return nil
	}
	var caps []int64
	hi := float64(c.unique)
	for i := range n {
		v := int64(math.Round(math.Pow(hi, float64(i)/float64(n-1))))
		if len(caps) == 0 || v > caps[len(caps)-1] {
			caps = append(caps, v)
		}
	}
	var optAt []int
	var optCaps []int64
	for i, cp := range caps {
		if i%optEvery == 0 || i == len(caps)-1 {
			optAt = append(optAt, i)
			optCaps = append(optCaps, cp)
		}
	}
	opt := c.optMissRatios(optCaps, jobs)
	var out []MRCPoint
	var t float64
	j := 0
	for _, cp := range caps {
		for j < len(c.need) && c.need[j] <= cp {
			t += c.tokens[j]
			j++
		}
		out = append(out, MRCPoint{CapacityTokens: cp * int64(c.blockSize), MissRatio: 1 - t/c.totalTokens, OPTMissRatio: math.NaN()})
	}
	for k, i := range optAt {
		out[i].OPTMissRatio = opt[k]
	}
	return out
}

// writeMRC computes the curve of the study's trace (the first point's;
// none when points replay different traces) and writes mrc.csv.
func writeMRC(s *Study, dir string) error {
	if len(s.points) == 0 {
		return nil
	}
	pt := s.points[0]
	for _, q := range s.points[1:] {
		if q.Trace != pt.Trace {
			return errors.New("the points replay different traces; no single curve")
		}
	}
	tf := traces.FormatAuto
	if name := pt.File.Workload.Format; name != "" {
		var err error
		if tf, err = traces.ParseFormat(name); err != nil {
			return err
		}
	}
	rd, err := traces.Open(pt.Trace, tf)
	if err != nil {
		return err
	}
	defer rd.Close()
	c, err := computeMRC(rd)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, MRCFile), func(w io.Writer) error {
		fmt.Fprintf(w, "# LRU and optimal (Belady) miss-ratio curves of %s: block size %d tokens, %d unique blocks\n", filepath.Base(pt.Trace), c.blockSize, c.unique)
		fmt.Fprintln(w, "capacity_tokens,miss_ratio,opt_miss_ratio")
		for _, p := range c.points(mrcPoints, runtime.GOMAXPROCS(0)) {
			opt := ""
			if !math.IsNaN(p.OPTMissRatio) {
				opt = strconv.FormatFloat(p.OPTMissRatio, 'f', 6, 64)
			}
			fmt.Fprintf(w, "%d,%s,%s\n", p.CapacityTokens, strconv.FormatFloat(p.MissRatio, 'f', 6, 64), opt)
		}
		return nil
	})
}

// readMRC reads mrc.csv (nil when absent). The opt_miss_ratio column may
// be empty or absent (mrc.csv of older runs): OPTMissRatio is then NaN.
func readMRC(dir string) ([]MRCPoint, string, error) {
	data, err := os.ReadFile(filepath.Join(dir, MRCFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	var out []MRCPoint
	var note string
	for n, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.HasPrefix(l, "#") {
			note = strings.TrimSpace(strings.TrimPrefix(l, "#"))
			continue
		}
		if strings.HasPrefix(l, "capacity_tokens") {
			continue
		}
		f := strings.Split(l, ",")
		if len(f) < 2 || len(f) > 3 {
			return nil, "", fmt.Errorf("%s:%d: bad line %q: expected capacity_tokens,miss_ratio[,opt_miss_ratio]", MRCFile, n+1, l)
		}
		x, err1 := strconv.ParseInt(f[0], 10, 64)
		y, err2 := strconv.ParseFloat(f[1], 64)
		o := math.NaN()
		var err3 error
		if len(f) == 3 && f[2] != "" {
			o, err3 = strconv.ParseFloat(f[2], 64)
		}
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, "", fmt.Errorf("%s:%d: bad line %q", MRCFile, n+1, l)
		}
		out = append(out, MRCPoint{CapacityTokens: x, MissRatio: y, OPTMissRatio: o})
	}
	return out, note, nil
}
