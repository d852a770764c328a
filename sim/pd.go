package sim

import (
	"errors"
	"fmt"
	"slices"

	"github.com/kvsim/kvsim/sim/engine"
)

// Prefill/decode disaggregation (fleet-spec 2): a server in prefill mode
// computes prompts only and reports each prefill forward of a request; a
// server in decode mode preallocates a request's KV, waits for it to
// arrive, emits the first token in a "prebuilt" step without a forward,
// then decodes. The fleet (package fleet) routes, moves the KV between
// them and tells each side when to go on. A regular server has s.pd nil
// and none of this runs.

// pdState is a disaggregated server's state.
type pdState struct {
	// Prefill mode: onChunk is called at the end of every prefill forward
	// of a request.
	onChunk func(id string, at engine.Time, computed int64, last bool)
	// hold: a prefilled request keeps its KV and tree lock in inflight
	// until KVSent (SGLang's inflight queue).
	hold     bool
	inflight []*request

	// Decode mode: reserved is num_reserved_decode_tokens; onPrealloc is
	// called when a request's KV is allocated, with its device hit.
	decode     bool
	reserved   int64
	onPrealloc func(id string, at engine.Time, cached int64)
	prealloc   []*request // DecodePreallocQueue: waiting for room
	transfer   []*request // DecodeTransferQueue: KV allocated, not arrived
	ready      []*request // KV arrived: the next iteration's prebuilt batch
	sent       []*request // KVSent: finished at the next event
	aborts     []abortReq // aborted by the caller, failed at the next event (or a forward's end)
	inForward  int        // of aborts, those in the forward in progress (prefill)
}

type abortReq struct {
	r   *request
	why string
}

// SetPrefillMode makes o a prefill server (SGLang's --disaggregation-mode
// prefill): every request's max_new_tokens is forced to 1 (its KV goes to
// a decode server, PrefillBootstrapQueue._process_req), and onChunk is
// called at the end of each prefill forward of a request, at the virtual
// time it ends, with the prompt tokens whose KV is now on the device
// (the cached prefix included) and whether the prompt is complete. The
// request then finishes as usual (its first token and completion events
// at the last forward's end). Call it before the first Submit.
func (o *Online) SetPrefillMode(onChunk func(id string, at engine.Time, computed int64, last bool)) error {
	if err := o.pdModeCheck(); err != nil {
		return err
	}
	if onChunk == nil {
		return errors.New("sim: SetPrefillMode: nil onChunk")
	}
	o.s.pd = &pdState{onChunk: onChunk}
	return nil
}

// SetDecodeMode makes o a decode server (--disaggregation-mode decode).
// With the radix cache off (cache.disable) it has SGLang's classic chunk
// cache: no prefix reuse. With it on, SGLang's
// --disaggregation-decode-enable-radix-cache: a request's prompt is
// matched on the device at preallocation (at most prompt - 1 tokens, page
// aligned), the match locked and only the rest allocated, and the
// prompt, then prompt + output, inserted as on any server; a host tier is
// refused (decode-side HiCache is not modelled). A submitted request
// joins the preallocation queue; at each scheduler iteration requests
// leave it in order while the pool's free + evictable tokens, less
// reserved for every request already in the server (running, waiting,
// preallocated, arrived), cover the page-rounded new tokens plus reserved
// (SGLang's _allocatable_tokens and _prealloc_required_tokens);
// onPrealloc is then called with the device hit (decode_prefix_len: the
// prefill side sends only the pages after it). The request waits for
// [Online.KVReady], then its first token is emitted by a prebuilt batch
// of no forward (1 ns), and it decodes as usual. A request that cannot be
// preallocated even in an empty server fails. With the chunk cache and a
// storage tier (the configuration's Storage.DecodeOffload), every
// finished request's generated pages are written to storage (SGLang's
// decode offload, see offloadDecode). Call it before the first Submit.
func (o *Online) SetDecodeMode(reserved int64, onPrealloc func(id string, at engine.Time, cached int64)) error {
	if err := o.pdModeCheck(); err != nil {
		return err
	}
	switch {
	case !o.s.cfg.Cache.Disable && o.s.tree.HasHost():
		return errors.New("sim: a decode server with a radix cache must have no host tier (decode-side HiCache is not modelled)")
	case reserved < 0:
		return fmt.Errorf("sim: reserved decode tokens must be >= 0 (got %d)", reserved)
	case onPrealloc == nil:
		return errors.New("sim: SetDecodeMode: nil onPrealloc")
	}
	o.s.pd = &pdState{decode: true, reserved: reserved, onPrealloc: onPrealloc}
	return nil
}

// HoldUntilSent makes a prefill server keep each request, once its last
// prefill forward has inserted its prompt (cache_unfinished_req), in its
// inflight queue, holding its KV and its tree lock, until [Online.KVSent]
// says its KV has been sent: only then is it finished (cache_finished_req)
// and reported complete (SGLang's process_disagg_prefill_inflight_queue).
// Without it a prefill server finishes a request at its last forward.
// Call it after SetPrefillMode, before the first Submit.
func (o *Online) HoldUntilSent() error {
	if o.s.pd == nil || o.s.pd.decode || o.s.nextIdx > 0 || o.s.pending != nil {
		return errors.New("sim: HoldUntilSent is for a prefill server, before the first Submit")
	}
	o.s.pd.hold = true
	return nil
}

// KVSent tells a prefill server that holds requests until sent
// ([Online.HoldUntilSent]) that request id's KV has all been sent, at
// virtual time at (not before Now nor after its next event): it is
// finished then, its prompt inserted, its lock released and its KV freed
// but for what the tree keeps.
func (o *Online) KVSent(id string, at engine.Time) error {
	return o.pdMove(id, at, false, func(pd *pdState) (from, to *[]*request) { return &pd.inflight, &pd.sent },
		"sim: KVSent: request %q is not in the prefill server's inflight queue")
}

// pdMove moves request id, at virtual time at, between two queues of a
// prefill (decode false) or decode server (those queues selects), and
// schedules the server's next step. missing is the error's format (with
// id's %q) when id is not in the first queue.
func (o *Online) pdMove(id string, at engine.Time, decode bool, queues func(pd *pdState) (from, to *[]*request), missing string) error {
	if err := o.pdAt(at, decode); err != nil {
		return err
	}
	if from, to := queues(o.s.pd); !moveReq(from, to, id) {
		return fmt.Errorf(missing, id)
	}
	o.s.schedule(at, evPD)
	return nil
}

// moveReq moves request id from *from to the end of *to and reports
// whether it was in *from.
func moveReq(from, to *[]*request, id string) bool {
	i := slices.IndexFunc(*from, func(r *request) bool { return r.id == id })
	if i < 0 {
		return false
	}
	*to = append(*to, (*from)[i])
	*from = slices.Delete(*from, i, i+1)
	return true
}

// pdHold keeps request r, prefilled, in a holding prefill server's
// inflight queue: its prompt is inserted as an unfinished request's. It
// reports whether it did.
func (s *Sim) pdHold(r *request) bool {
	if s.pd == nil || !s.pd.hold {
		return false
	}
	s.cacheUnfinished(r, false)
	s.pd.inflight = append(s.pd.inflight, r)
	return true
}

func (o *Online) pdModeCheck() error {
	if o.s.pd != nil || o.s.nextIdx > 0 || o.s.pending != nil {
		return errors.New("sim: the disaggregation mode is set once, before the first Submit")
	}
	return nil
}

// KVReady tells a decode server that request id's KV has arrived, at
// virtual time at (not before Now nor after its next event): the request
// joins the next prebuilt batch.
func (o *Online) KVReady(id string, at engine.Time) error {
	return o.pdMove(id, at, true, func(pd *pdState) (from, to *[]*request) { return &pd.transfer, &pd.ready },
		"sim: KVReady: request %q is not waiting for its KV")
}

// Abort fails request id at virtual time at (not before Now nor after its
// next event), freeing what it holds. On a decode server the request must
// wait for room or for its KV: its preallocation is freed at once. On a
// prefill server it must not have finished: waiting, it leaves the queue
// (its prefetch cancelled); chunked between two forwards, or prefilled and
// held until sent (HoldUntilSent), its KV is freed and its tree lock
// released at once; in the forward in progress, it
// stops at that forward's end instead of going on (SGLang's abort of a
// running request, to_finish), reporting no chunk. Its completion event
// (Failed = why) is reported by the RunUntil that reaches the time it
// fails.
func (o *Online) Abort(id string, at engine.Time, why string) error {
	if err := o.pdAt(at, false); err != nil {
		return err
	}
	s, pd := o.s, o.s.pd
	if !pd.decode {
		return s.abortPrefill(id, at, why)
	}
	for _, q := range []*[]*request{&pd.prealloc, &pd.transfer, &pd.ready} {
		if i := slices.IndexFunc(*q, func(r *request) bool { return r.id == id }); i >= 0 {
			r := (*q)[i]
			*q = slices.Delete(*q, i, i+1)
			s.dropKV(r)
			pd.aborts = append(pd.aborts, abortReq{r, why})
			s.schedule(at, evPD)
			return nil
		}
	}
	return fmt.Errorf("sim: Abort: request %q is not waiting on this decode server", id)
}

// abortPrefill is Abort on a prefill server.
func (s *Sim) abortPrefill(id string, at engine.Time, why string) error {
	pd := s.pd
	match := func(r *request) bool { return r.id == id }
	switch {
	case s.busy && !s.decode && slices.ContainsFunc(s.batch, match):
		pd.aborts = append(pd.aborts, abortReq{s.batch[slices.IndexFunc(s.batch, match)], why})
		pd.inForward++
		return nil // failed by pdForwardAborted at the forward's end
	case s.chunked != nil && s.chunked.id == id:
		r := s.chunked
		s.chunked = nil
		s.dropKV(r)
		pd.aborts = append(pd.aborts, abortReq{r, why})
	case slices.ContainsFunc(pd.inflight, match):
		i := slices.IndexFunc(pd.inflight, match)
		r := pd.inflight[i]
		pd.inflight = slices.Delete(pd.inflight, i, i+1)
		s.dropKV(r)
		pd.aborts = append(pd.aborts, abortReq{r, why})
	default:
		i := slices.IndexFunc(s.waiting, match)
		if i < 0 {
			return fmt.Errorf("sim: Abort: request %q is not on this prefill server", id)
		}
		pd.aborts = append(pd.aborts, abortReq{s.waiting[i], why})
		s.waiting = slices.Delete(s.waiting, i, i+1)
	}
	s.schedule(at, evPD)
	return nil
}

// pdForwardAborted reports whether request r, at the end of its prefill
// forward, was aborted during it (Abort on a prefill server): it then
// fails, its KV freed, and reports no chunk.
func (s *Sim) pdForwardAborted(r *request) bool {
	pd := s.pd
	if pd == nil || pd.inForward == 0 {
		return false
	}
	i := slices.IndexFunc(pd.aborts, func(a abortReq) bool { return a.r == r })
	if i < 0 {
		return false
	}
	why := pd.aborts[i].why
	pd.aborts = slices.Delete(pd.aborts, i, i+1)
	pd.inForward--
	if r == s.chunked {
		s.chunked = nil
	}
	s.dropKV(r)
	s.fail(r, why)
	return true
}

// pdAt checks a disaggregation call at virtual time at (on a decode
// server if decodeOnly) and moves the clock there.
func (o *Online) pdAt(at engine.Time, decodeOnly bool) error {
	switch {
	case o.base.Err() != nil:
		return o.base.Err()
	case o.s.pd == nil:
		return errors.New("sim: not a prefill or decode server (SetPrefillMode, SetDecodeMode)")
	case decodeOnly && !o.s.pd.decode:
		return errors.New("sim: not a decode server (SetDecodeMode)")
	case at < o.s.now:
		return fmt.Errorf("sim: time %d is before the simulation's time %d", at, o.s.now)
	}
	if t, ok := o.Next(); ok && t < at {
		return fmt.Errorf("sim: time %d is after the next pending event (%d)", at, t)
	}
	o.s.now = at
	return nil
}

// pdEvent handles evPD: aborted requests fail (but those in the forward
// in progress, which fail at its end), and an idle server iterates (a
// prebuilt batch may be ready, or a prefill batch fit).
func (s *Sim) pdEvent() {
	for _, r := range s.pd.sent {
		s.cacheFinished(r)
	}
	clear(s.pd.sent)
	s.pd.sent = s.pd.sent[:0]
	k := 0
	for _, a := range s.pd.aborts {
		if s.busy && !s.decode && slices.Contains(s.batch, a.r) {
			s.pd.aborts[k] = a
			k++
			continue
		}
		s.fail(a.r, a.why)
	}
	clear(s.pd.aborts[k:])
	s.pd.aborts = s.pd.aborts[:k]
	if !s.busy {
		s.iterate()
	}
}

// pdIterate is a decode server's part of an iteration, before the usual
// prefill and decode: preallocation, then the prebuilt batch of requests
// whose KV arrived (SGLang's get_next_disagg_decode_batch_to_run). It
// reports whether it launched a batch.
func (s *Sim) pdIterate() bool {
	pd := s.pd
	if !pd.decode {
		return false
	}
	s.popPrealloc()
	n := min(len(pd.ready), s.cfg.Scheduler.MaxRunningRequests-len(s.running))
	if n <= 0 {
		return false
	}
	b := slices.Clone(pd.ready[:n])
	pd.ready = slices.Delete(pd.ready, 0, n)
	for _, r := range b {
		r.prefix, r.extend, r.batchMark = r.input, 0, true
		r.admitted = true
		r.res.Admitted = s.now
	}
	s.batch = b
	s.decode = false
	s.busy = true
	s.schedule(s.now+1, evForwardDone) // no forward: the first token came from prefill
	return true
}

// popPrealloc is DecodePreallocQueue.pop_preallocated: in queue order,
// while the room covers the head.
func (s *Sim) popPrealloc() {
	pd := s.pd
	if len(pd.prealloc) == 0 {
		return
	}
	inServer := int64(len(s.running) + len(s.waiting) + len(pd.transfer) + len(pd.ready))
	if s.chunked != nil {
		inServer++
	}
	avail := s.freeTotal() + s.tree.EvictableTotal() - pd.reserved*inServer
	ps := int64(s.cfg.Cache.PageSize)
	k := 0
	for ; k < len(pd.prealloc); k++ {
		r := pd.prealloc[k]
		if len(pd.transfer)+len(pd.ready) >= s.cfg.Scheduler.MaxRunningRequests {
			break // DecodeReqToTokenPool's slots (kvsim: max_running_requests)
		}
		m := s.match(r) // the root with the chunk cache
		prefix, last := m.DeviceTokens, m.LastDevice
		if !last.IsRoot() {
			s.tree.Lock(last)
		}
		need := (r.input-prefix+ps-1)/ps*ps + pd.reserved
		if need > avail || !s.alloc(r, s.lanesOf(prefix, r.input, s.lanesA)) {
			if !last.IsRoot() {
				s.tree.Unlock(last)
			}
			if inServer == 0 && len(pd.transfer) == 0 {
				s.fail(r, "not enough KV memory to preallocate the request on the decode server")
				continue
			}
			break
		}
		if !last.IsRoot() {
			r.last = last
		}
		r.protected = prefix
		r.res.CachedTokens, r.res.CachedDevice = prefix, prefix // the decode side's own hit
		avail -= need
		pd.transfer = append(pd.transfer, r)
		pd.onPrealloc(r.id, s.now, prefix)
	}
	pd.prealloc = slices.Delete(pd.prealloc, 0, k)
}

// offloadDecode is SGLang's decode offload
// (decode_kvcache_offload_manager) for request r finishing on a decode
// server with the chunk cache and a storage tier: its pages from the one
// holding the prompt's end (the prefill side backs up the prompt's whole
// pages) to the last whole page of prompt + output - 1 tokens (the KV it
// has) are written to storage, keyed by their path from the prompt's
// first page (SGLang chains the hashes on from the prompt), so a later
// turn extending this one finds them there. Output pages have exact keys
// when the trace gives the output's token ids, else fresh ones nothing
// will match.
func (s *Sim) offloadDecode(r *request) {
	ps := int64(s.cfg.Cache.PageSize)
	lo, hi := r.input/ps, r.kv/ps
	if hi <= lo {
		return
	}
	pages := slices.Clone(s.pagesFor(r, hi*ps))
	s.writeStorage(nil, newPathKey(pages), int(lo), int(hi))
}

// pdHeld adds the device tokens held by a decode server's preallocated
// requests to held (checkInvariants).
func (s *Sim) pdHeld(add func(r *request)) {
	if s.pd == nil {
		return
	}
	for _, r := range s.pd.transfer {
		add(r)
	}
	for _, r := range s.pd.ready {
		add(r)
	}
	for _, r := range s.pd.inflight {
		add(r)
	}
	for _, r := range s.pd.sent {
		add(r)
	}
}
