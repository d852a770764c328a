package router

import "fmt"

// PD routes prefill/decode disaggregated requests (SGLang's pd_router
// select_pd_pair, fleet-spec 1.6): a prefill replica chosen by the prefill
// pool's own router and policy and a decode replica by the decode pool's,
// from the same request; nothing ties one choice to the other. Both
// routers count in-flight requests whatever their policy, for the whole
// request on both legs, as SGLang's PD router does.
type PD struct {
	// Prefill and Decode are the two pools' routers; read their counters
	// from them. Route and finish through the PD, not through them.
	Prefill, Decode *Router
}

// Pair is a PD decision: one per pool.
type Pair struct{ Prefill, Decode Decision }

// NewPD returns a PD router over prefill prefill replicas and decode
// decode replicas. Config errors name their keys under router.prefill and
// router.decode (SGLang's --prefill-policy and --decode-policy choose the
// policies).
func NewPD(prefillCfg, decodeCfg Config, prefill, decode int, pd, dd Deps) (*PD, error) {
	p, err := newRouter(prefillCfg, prefill, pd, "router.prefill", true)
	if err != nil {
		return nil, err
	}
	d, err := newRouter(decodeCfg, decode, dd, "router.decode", true)
	if err != nil {
		return nil, err
	}
	return &PD{Prefill: p, Decode: d}, nil
}

// Route chooses a prefill and a decode replica for req. If the decode pool
// has no available replica the prefill choice is undone (its in-flight
// count; its tree insert and decision count stay, as SGLang's would) and
// ErrNoReplica returned.
func (p *PD) Route(req *Request) (Pair, error) {
	pre, err := p.Prefill.Route(req)
	if err != nil {
		return Pair{}, fmt.Errorf("prefill: %w", err)
	}
	dec, err := p.Decode.Route(req)
	if err != nil {
		if ferr := p.Prefill.Finish(pre.Replica); ferr != nil {
			panic("router: " + ferr.Error())
		}
		return Pair{}, fmt.Errorf("decode: %w", err)
	}
	return Pair{Prefill: pre, Decode: dec}, nil
}

// Finish records the end of a request routed as pair: both legs' counts
// drop when the client's response ends (SGLang's pd_router). On an error
// neither count changes.
func (p *PD) Finish(pair Pair) error {
	if !p.Decode.canFinish(pair.Decode.Replica) {
		return fmt.Errorf("decode: %w", p.Decode.Finish(pair.Decode.Replica))
	}
	if err := p.Prefill.Finish(pair.Prefill.Replica); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	if err := p.Decode.Finish(pair.Decode.Replica); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return nil
}
