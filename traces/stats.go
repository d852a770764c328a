package traces

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
)

// DefaultLRUFractions are the cache capacities, as fractions of the unique
// blocks, at which Stats reports block-level LRU (and OPT) hit rates.
var DefaultLRUFractions = []float64{0.01, 0.05, 0.1, 0.25, 0.5}

// DefaultTokenBlockSize is the block size used to hash token-id traces into
// chained blocks for the prefix statistics.
const DefaultTokenBlockSize = 16

// StatsOptions tunes ComputeStats. The zero value uses the defaults.
type StatsOptions struct {
	// TokenBlockSize is the block size for chained hashes of token ids
	// (default DefaultTokenBlockSize); only full blocks are hashed.
	TokenBlockSize int
	// Fractions are the LRU and OPT capacities as fractions of the unique
	// blocks (default DefaultLRUFractions), each in (0, 1].
	Fractions []float64
	// NoOPT leaves out the OPT hit rates, the one figure whose memory
	// grows with the trace's length (two int32 per block reference)
	// rather than with its unique blocks.
	NoOPT bool
}

// Dist summarises a distribution of token counts. Percentiles interpolate
// linearly between order statistics (numpy's default).
type Dist struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  int     `json:"max"`
}

// Stats describes a trace. The prefix figures are block-level:
//
//   - Ideal hit rate: an unbounded cache with prefix-contiguous matching. A
//     request's hit is the number k of its leading blocks that were seen
//     before, stopping at the first unseen one; the rate is Σk / Σblocks.
//   - LRU hit rate at fraction x: the same with a block LRU holding
//     max(1, floor(unique_blocks * x)) blocks. For each request, k is
//     counted first; then every block, in order, is moved to (or inserted
//     as) most recently used, evicting the least recently used block when
//     over capacity.
//   - OPT hit rate at fraction x: the same capacity under Belady's offline
//     optimum ([OPT]): for each request k is counted first; then all its
//     blocks are cached and, while over capacity, the block whose next use
//     is furthest is evicted. No eviction policy gets more hits from that
//     capacity. Blocks are identified by their prefix (trie node), which
//     for chained hashes, as in every Mooncake trace and in token-id
//     traces, is the same as the block id.
//
// This is the procedure of the shared traces' README, so the figures can be
// compared with the published ones. For token-id traces the blocks are
// chained hashes of TokenBlockSize tokens (full blocks only).
type Stats struct {
	Format      string  `json:"format"`
	Requests    int     `json:"requests"`
	DurationS   float64 `json:"duration_s"`
	ArrivalRate float64 `json:"arrival_rate"`
	Input       Dist    `json:"input_len"`
	Output      Dist    `json:"output_len"`
	// Sessions counts distinct non-empty sessions; MaxTurn is the largest
	// turn number; Dependent counts requests with a Parent.
	Sessions  int `json:"sessions"`
	MaxTurn   int `json:"max_turn"`
	Dependent int `json:"dependent_requests"`
	// PrefixInfo is "blocks" (hash traces), "tokens" (token ids) or
	// "none" (lengths only; the fields below are then absent).
	PrefixInfo   string             `json:"prefix_info"`
	BlockSize    int                `json:"block_size,omitempty"`
	TotalBlocks  int                `json:"total_blocks"`
	UniqueBlocks int                `json:"unique_blocks"`
	IdealHitRate *float64           `json:"ideal_hit_rate,omitempty"`
	LRUHitRate   map[string]float64 `json:"lru_hit_rate,omitempty"`
	OPTHitRate   map[string]float64 `json:"opt_hit_rate,omitempty"`
	// Note explains missing figures.
	Note string `json:"note,omitempty"`
}

// blockStream turns records into block-id sequences for the prefix
// statistics: hash ids as they are, token ids as chained full blocks
// interned exactly (no hash collisions).
type blockStream struct {
	bs     int
	intern map[chainKey]uint64
	buf    []uint64
}

type chainKey struct {
	parent uint64 // 1 + id of the previous block, 0 at the start
	toks   string // the block's token ids, 4 bytes each
}

func (s *blockStream) blocks(r *Record) []uint64 {
	if r.Blocks != nil {
		return r.Blocks
	}
	if r.Tokens == nil {
		return nil
	}
	s.buf = s.buf[:0]
	var parent uint64
	key := make([]byte, 4*s.bs)
	for i := 0; i+s.bs <= len(r.Tokens); i += s.bs {
		for j, t := range r.Tokens[i : i+s.bs] {
			key[4*j] = byte(t)
			key[4*j+1] = byte(t >> 8)
			key[4*j+2] = byte(t >> 16)
			key[4*j+3] = byte(t >> 24)
		}
		k := chainKey{parent: parent, toks: string(key)}
		id, ok := s.intern[k]
		if !ok {
			id = uint64(len(s.intern))
			s.intern[k] = id
		}
		s.buf = append(s.buf, id)
		parent = id + 1
	}
	return s.buf
}

// ComputeStats reads the trace once: it calls open once and reads the
// reader to the end, so a pipe or standard input works. The LRU hit rates,
// whose capacities depend on the unique block count known only at the end,
// come from LRU stack distances (see stackDist): a block hits in an LRU of
// capacity c exactly when its distance is < c. The OPT hit rates replay
// the trace's blocks, kept in memory (two int32 per block), once per
// fraction (unless opt.NoOPT). Memory is proportional to the unique blocks
// (and distinct lengths and sessions), plus the block references for OPT.
func ComputeStats(open func() (*Reader, error), opt StatsOptions) (*Stats, error) {
	if opt.TokenBlockSize <= 0 {
		opt.TokenBlockSize = DefaultTokenBlockSize
	}
	if opt.Fractions == nil {
		opt.Fractions = DefaultLRUFractions
	}
	for _, f := range opt.Fractions {
		if !(f > 0 && f <= 1) {
			return nil, fmt.Errorf("stats: capacity fraction %v: expected a value in (0, 1]", f)
		}
	}
	r, err := open()
	if err != nil {
		return nil, err
	}
	a := &statsAcc{
		opt:      opt,
		st:       &Stats{Format: r.Format().String()},
		ins:      lengthCounts{},
		outs:     lengthCounts{},
		sessions: map[string]bool{},
		sd:       newStackDist(),
		stream:   &blockStream{bs: opt.TokenBlockSize, intern: map[chainKey]uint64{}},
		future:   NewOPTBuilder(),
		sizes:    map[int]bool{},
	}
	if err := eachRecord(r, a.add); err != nil {
		return nil, err
	}
	if a.optErr != nil {
		return nil, fmt.Errorf("stats: %w", a.optErr)
	}
	a.summarise()
	if !a.prefixInfo() {
		return a.st, nil
	}
	a.hitRates()
	return a.st, nil
}

// statsAcc is ComputeStats's state while it reads the trace.
type statsAcc struct {
	opt         StatsOptions
	st          *Stats
	ins, outs   lengthCounts
	first, last int64
	sessions    map[string]bool
	sd          *stackDist
	// hist[d] counts the leading blocks (of all requests) whose largest
	// stack distance among the blocks up to and including them is d: in
	// an LRU of capacity c they hit exactly when d < c.
	hist                 []int
	stream               *blockStream
	future               *OPTBuilder
	optErr               error
	hits, total          int
	sizes                map[int]bool // block sizes seen
	hasBlocks, hasTokens bool
}

// add counts one record.
func (a *statsAcc) add(rec *Record) error {
	st := a.st
	if st.Requests == 0 {
		a.first = rec.Arrival
	}
	a.last = rec.Arrival
	st.Requests++
	a.ins[rec.InputLen]++
	a.outs[rec.OutputLen]++
	if rec.Session != "" {
		a.sessions[rec.Session] = true
	}
	st.MaxTurn = max(st.MaxTurn, rec.Turn)
	if rec.Parent != "" {
		st.Dependent++
	}
	if rec.Blocks != nil || (rec.BlockSize > 0 && rec.Tokens == nil) {
		a.hasBlocks = true
		a.sizes[rec.BlockSize] = true
	} else if rec.Tokens != nil {
		a.hasTokens = true
	}
	bl := a.stream.blocks(rec)
	m := 0
	for _, b := range bl {
		d := a.sd.dist(b)
		if d < 0 {
			break
		}
		m = max(m, d)
		for len(a.hist) <= m {
			a.hist = append(a.hist, 0)
		}
		a.hist[m]++
		a.hits++
	}
	for _, b := range bl {
		a.sd.use(b)
	}
	a.total += len(bl)
	if a.optErr == nil && !a.opt.NoOPT {
		a.optErr = a.future.Add(bl)
	}
	return nil
}

// summarise fills in the counts, duration, rate and length distributions.
func (a *statsAcc) summarise() {
	st := a.st
	st.Sessions = len(a.sessions)
	st.DurationS = float64(a.last-a.first) / 1e9
	if st.DurationS > 0 {
		st.ArrivalRate = float64(st.Requests) / st.DurationS
	}
	st.Input = a.ins.dist()
	st.Output = a.outs.dist()
}

// prefixInfo says what prefix information the trace has; it reports false
// when there is none, so no hit rate can be computed.
func (a *statsAcc) prefixInfo() bool {
	st := a.st
	switch {
	case a.hasBlocks && a.hasTokens:
		st.PrefixInfo = "mixed"
		st.Note = "hash-block and token-id records mixed: hit rates mix two block sizes"
	case a.hasBlocks:
		st.PrefixInfo = "blocks"
	case a.hasTokens:
		st.PrefixInfo = "tokens"
		a.sizes[a.opt.TokenBlockSize] = true
		st.Note = fmt.Sprintf("blocks are chained hashes of %d token ids (full blocks only)", a.opt.TokenBlockSize)
	default:
		st.PrefixInfo = "none"
		st.Note = "the trace has no prefix information (no block hashes or token ids): only arrivals and lengths are known, so hit rates cannot be computed"
		return false
	}
	if len(a.sizes) == 1 {
		for bs := range a.sizes {
			st.BlockSize = bs
		}
	}
	return true
}

// hitRates fills in the ideal hit rate and the LRU and OPT hit rates at
// each capacity fraction.
func (a *statsAcc) hitRates() {
	st := a.st
	st.TotalBlocks = a.total
	st.UniqueBlocks = a.sd.unique()
	ideal := ratio(a.hits, a.total)
	st.IdealHitRate = &ideal
	st.LRUHitRate = map[string]float64{}
	st.OPTHitRate = map[string]float64{}
	oracle := a.future.Build()
	for _, f := range a.opt.Fractions {
		c := max(1, int(math.Floor(float64(st.UniqueBlocks)*f)))
		h := 0
		for d := 0; d < min(c, len(a.hist)); d++ {
			h += a.hist[d]
		}
		key := strconv.FormatFloat(f, 'f', -1, 64)
		st.LRUHitRate[key] = ratio(h, a.total)
		if !a.opt.NoOPT {
			st.OPTHitRate[key] = ratio(oracle.Run(c).HitPages, a.total)
		}
	}
	if a.opt.NoOPT {
		st.OPTHitRate = nil
	}
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// lengthCounts counts the requests of each length, so that the exact
// distribution takes memory per distinct length, not per request.
type lengthCounts map[int]int

// dist summarises the lengths as if they were sorted in a slice: the mean
// sums them in ascending order (so the figure is the same to the bit) and
// the percentiles interpolate between order statistics.
func (c lengthCounts) dist() Dist {
	if len(c) == 0 {
		return Dist{}
	}
	vals := slices.Sorted(maps.Keys(c))
	n, sum := 0, 0.0
	for _, v := range vals {
		for range c[v] {
			sum += float64(v)
		}
		n += c[v]
	}
	// rank returns the value of order statistic i (0-based).
	rank := func(i int) int {
		for _, v := range vals {
			if i < c[v] {
				return v
			}
			i -= c[v]
		}
		return vals[len(vals)-1]
	}
	return Dist{
		Mean: sum / float64(n),
		P50:  percentile(n, rank, 50),
		P90:  percentile(n, rank, 90),
		P99:  percentile(n, rank, 99),
		Max:  vals[len(vals)-1],
	}
}

// percentile interpolates linearly between the closest ranks of n sorted
// values, rank(i) being the i-th.
func percentile(n int, rank func(int) int, p float64) float64 {
	pos := p / 100 * float64(n-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, n-1)
	frac := pos - float64(lo)
	return float64(rank(lo)) + frac*float64(rank(hi)-rank(lo))
}
