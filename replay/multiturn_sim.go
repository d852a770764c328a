package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvsim/kvsim/traces"
)

// MultiTurn runs the multi-turn benchmark (see the function MultiTurn)
// against the simulator in virtual time: the same clients, prompts, ready
// queue, gaps and cap on requests in flight, the sender's decisions taken
// at simulated instants, in one goroutine, with no clock. At equal times
// the simulator's events (completions) come first, then the sender. The
// same config and seed give byte-identical results. Per-request timeouts
// (cfg.Timeout) apply in virtual time, as in a replay: the request fails
// as "timeout" and its client ends, while the simulator, which has no
// abort, still serves it. Cancelling ctx stops the sends; the requests in
// flight finish (cfg.Drain does not apply: virtual time costs nothing).
func (t *SimTarget) MultiTurn(ctx context.Context, cfg MultiTurnConfig) (*MultiTurnResult, error) {
	st, err := newMultiTurnState(cfg)
	if err != nil {
		return nil, err
	}
	cfg = st.cfg
	t.mu.Lock()
	defer t.mu.Unlock()
	run := t.newRun()
	type turn struct {
		client int
		rec    traces.Record
		rr     RequestResult
	}
	turns := map[*flight]*turn{} // the turns in flight
	var (
		now     int64 // ns since the run's start
		wakeAt  int64 // the sender's next instant; -1: waiting for a completion
		stopped bool
	)
	for {
		if !stopped && ctx.Err() != nil {
			stopped = true // send nothing more; requests in flight finish
		}
		// The sender, as MultiTurn's loop: at the cap it waits for a
		// completion; else it sends a ready turn, if any, then pauses a
		// gap (or, without gaps, goes on at once while turns are ready).
		for !stopped && wakeAt >= 0 && wakeAt <= now && st.ended < cfg.Clients {
			if ctx.Err() != nil {
				stopped = true
				break
			}
			if len(turns) >= cfg.MaxParallel {
				wakeAt = -1
				break
			}
			if c, rec, ok := st.take(); ok {
				tn := &turn{client: c, rec: rec, rr: RequestResult{ID: rec.ID, CachedTokens: -1, Due: now, Slot: now, Start: now, Sent: true}}
				req, err := requestFor(&tn.rec, cfg.Vocab, false)
				if err != nil {
					tn.rr.End = now
					tn.rr.Failed, tn.rr.Detail = "bad record", truncate(err.Error(), 300)
					st.done(c, tn.rec, tn.rr)
				} else {
					tn.rr.PromptTokens = len(req.Tokens)
					f, err := run.submit(&tn.rec, &req, now, cfg.Timeout)
					if err != nil {
						return nil, fmt.Errorf("turn %q: %w", rec.ID, err)
					}
					turns[f] = tn
				}
			}
			idle := len(st.ready) == 0
			if gap, paced := st.gap(); paced {
				wakeAt = now + int64(gap)
			} else if idle {
				wakeAt = -1
			}
		}
		if st.ended == cfg.Clients || (stopped && len(turns) == 0) {
			break
		}
		// The next instant: a simulator event, the sender's wake or a
		// deadline.
		next, ok := run.next(wakeAt, !stopped && wakeAt >= 0)
		if !ok {
			return nil, errors.New("replay: the simulator stopped with turns in flight and none to send")
		}
		now = next
		err := run.advance(next, func(f *flight, resp Response, err error) {
			tn := turns[f]
			delete(turns, f)
			fill(context.Background(), &tn.rr, &f.rc, resp, err, run.start, f.start)
			st.done(tn.client, tn.rec, tn.rr)
			if wakeAt < 0 {
				wakeAt = now
			}
		})
		if err != nil {
			return nil, err
		}
	}
	st.res.Interrupted = stopped
	return st.res, nil
}
