package sim

import (
	"fmt"
	"slices"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
	"github.com/kvsim/kvsim/tree"
)

// request is one request's state inside the simulator.
type request struct {
	id      string
	idx     int // arrival order
	liveIdx int // position in Sim.live while not finished
	arrive  engine.Time
	input   int64 // prompt tokens
	maxNew  int64 // tokens to generate (max_new_tokens with ignore_eos)

	// pages holds the page keys of the sequence (prompt, then output) as far
	// as they are known; see pagesFor.
	pages     []tree.PageID
	runs      []tree.PageRun // instead of pages until first needed: see keepRuns
	runsCap   int            // the capacity pages gets when runs are expanded
	seqTokens []tree.Token   // prompt + output token ids when the trace has both

	out       int64      // tokens generated so far
	kv        int64      // tokens whose KV is allocated (tree-locked or held)
	protected int64      // leading tokens owned by the tree and locked via last
	last      *tree.Node // node locked for the request (nil: none)
	held      []int64    // device tokens the request holds outside the tree, per lane

	// The current forward pass.
	extend int64 // tokens computed
	prefix int64 // tokens of KV already present

	admitted    bool // admitted at least once (cached tokens counted)
	batchMark   bool // in the batch being formed or run
	chunkCont   bool // in the batch as the continuing chunked request
	retractMark bool // chosen by the retraction in progress
	gotFirst    bool // the first token was emitted
	countedNow  bool // cached tokens were counted by the admission in progress
	sortKey     int64
	prefetch    *prefetchOp // storage prefetch in flight (nil: none)
	l3From      int64       // tokens [l3From, l3To) of the sequence came from storage
	l3To        int64
	res         engine.RequestResult
	lastToken   engine.Time
}

func (r *request) fill() int64 { return r.input + r.out }

// newRequest builds a request from a trace record.
func newRequest(rec *traces.Record, idx int, lanes int) *request {
	r := &request{
		id: rec.ID, idx: idx, arrive: engine.Time(rec.Arrival),
		input: int64(rec.InputLen), maxNew: int64(max(rec.OutputLen, 1)),
		held: make([]int64, lanes),
	}
	r.res = engine.RequestResult{ID: rec.ID, Arrival: engine.Time(rec.Arrival), PromptTokens: r.input}
	return r
}

// computePromptPages turns the record's prompt into page keys with the
// simulator's pager. Tokens are paged exactly; block hashes by block; a
// record without prefix information gets pages that never match.
func (s *Sim) computePromptPages(r *request, rec *traces.Record) error {
	ps := s.cfg.Cache.PageSize
	want := int(r.input) / ps
	capacity := int(r.input+r.maxNew)/ps + 1 // room for the output's pages too
	switch {
	case rec.Tokens != nil:
		toks := make([]tree.Token, 0, len(rec.Tokens)+len(rec.OutputTokens))
		for _, t := range rec.Tokens {
			toks = append(toks, tree.Token(t))
		}
		if rec.OutputTokens != nil {
			for _, t := range rec.OutputTokens {
				toks = append(toks, tree.Token(t))
			}
			r.seqTokens = toks
		}
		r.pages = s.pager.TokenPages(toks[:len(rec.Tokens)], make([]tree.PageID, 0, capacity))
	case rec.Blocks != nil:
		// Block pages are runs of consecutive ids (a block's pages, and the
		// blocks first seen together): keep the runs while the request
		// waits (see keepRuns).
		runs, ok, err := s.pager.BlockRuns(rec.Blocks, rec.BlockSize, rec.InputLen, s.runBuf[:0])
		if err != nil {
			return err
		}
		if ok {
			n := 0
			for _, x := range runs {
				n += int(x.N)
			}
			for ; n < want; n++ {
				runs = tree.AppendRun(runs, s.pager.Fresh(), 1)
			}
			s.runBuf = runs
			r.keepRuns(runs, n, capacity)
			return nil
		}
		if r.pages, err = s.pager.BlockPages(rec.Blocks, rec.BlockSize, rec.InputLen, make([]tree.PageID, 0, capacity)); err != nil {
			return err
		}
	default:
		r.pages = make([]tree.PageID, 0, capacity)
	}
	for len(r.pages) < want {
		r.pages = append(r.pages, s.pager.Fresh())
	}
	return nil
}

// keepRuns stores the prompt's n pages, given as runs, in r: as the runs
// themselves when they take at most a quarter of the memory of a slice,
// else as a slice with room for capacity pages. A request waiting in the
// queue then holds a few hundred bytes instead of 8 bytes a page (96 KiB
// for a 12k-token prompt at page size 1), so an overloaded server's
// backlog costs little memory; the slice is built when the request is
// first matched (pagesFor).
func (r *request) keepRuns(runs []tree.PageRun, n, capacity int) {
	r.runs, r.runsCap = slices.Clone(runs), capacity
	if len(runs)*16 > n*2 {
		r.expandPages()
	}
}

// expandPages turns r's runs back into a page slice.
func (r *request) expandPages() {
	n := r.runPages()
	r.pages = tree.AppendRunPages(make([]tree.PageID, 0, max(int64(r.runsCap), n)), r.runs)
	r.runs = nil
}

// pagesFor returns the page keys of the first n tokens of the sequence (n is
// cut down to whole pages). Pages past the prompt are exact when the trace
// gave output token ids, and otherwise fresh (never matched), like the page
// that holds both the prompt's tail and the output's head.
func (s *Sim) pagesFor(r *request, n int64) []tree.PageID {
	if r.runs != nil {
		r.expandPages()
	}
	ps := int64(s.cfg.Cache.PageSize)
	want := int(n / ps)
	if want > len(r.pages) && r.seqTokens != nil && int64(len(r.seqTokens)) >= n {
		r.pages = s.pager.TokenPages(r.seqTokens[:want*int(ps)], r.pages[:0])
	}
	for len(r.pages) < want {
		r.pages = append(r.pages, s.pager.Fresh())
	}
	return r.pages[:want]
}

// keyFor is pagesFor as runs of consecutive page ids, for the tree's run
// keys: the same pages, with the same fresh ids handed out in the same
// order. A request that keeps its prompt as runs (a block trace's) is
// never expanded to one id a page; any other is cut into runs. The result
// is in a buffer that the next call reuses.
func (s *Sim) keyFor(r *request, n int64) []tree.PageRun {
	if r.runs == nil {
		s.keyBuf = tree.AppendRuns(s.keyBuf[:0], s.pagesFor(r, n))
		return s.keyBuf
	}
	want := n / int64(s.cfg.Cache.PageSize)
	for have := r.runPages(); have < want; have++ {
		r.runs = tree.AppendRun(r.runs, s.pager.Fresh(), 1)
	}
	s.keyBuf = tree.AppendRunRange(s.keyBuf[:0], r.runs, 0, want)
	return s.keyBuf
}

// runPages returns the number of pages in r.runs.
func (r *request) runPages() int64 {
	var n int64
	for _, x := range r.runs {
		n += x.N
	}
	return n
}

// admissionError is why a request fails on arrival, or "" if it may
// queue: SGLang's request-level length checks. The tokenizer manager
// (tokenizer_manager.py, _validate_one_request) rejects a prompt of at
// least context_len tokens ("The input (N tokens) is longer than the
// model's context length (C tokens).") and a prompt whose max_new_tokens
// take it to context_len ("Requested token count exceeds the model's
// maximum context length of C tokens. ..."), and a request whose prompt
// and output cannot fit the KV pool at all (the scheduler's max_req_len,
// at most max_total_num_tokens - 1) never runs. Checking before paging also
// keeps an absurd length in a trace from costing memory or time. Every
// reason says "exceeds", which replay's server maps to HTTP 400 as SGLang
// answers these.
func admissionError(cfg *Config, lanes int, input, maxNew int64) string {
	if l := cfg.Scheduler.ContextLen; l > 0 {
		switch {
		case input >= l:
			return fmt.Sprintf("prompt of %d tokens exceeds the model's context length of %d tokens", input, l)
		case input+maxNew >= l:
			return fmt.Sprintf("prompt of %d tokens plus %d output tokens exceeds the model's context length of %d tokens", input, maxNew, l)
		}
	}
	if capTokens := cfg.Cache.DeviceTokens * int64(lanes); input+maxNew > capTokens {
		return fmt.Sprintf("prompt of %d tokens plus %d output tokens exceeds the KV pool of %d tokens", input, maxNew, capTokens)
	}
	return ""
}
