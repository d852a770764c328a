package llamacpp

import (
	"fmt"

	"github.com/kvsim/kvsim/sim/engine"
)

// Factory builds llama-server engines of one configuration and cost model.
// It is the [engine.Factory] configs returns for engine.kind = "llamacpp".
type Factory struct {
	Config Config
	Cost   CostModel
	// Sink, if set, receives Run's per-request results as they are
	// produced instead of the Result (see [Sim.Stream]): memory then
	// follows the requests in flight, not the trace's length.
	Sink func(engine.RequestResult) error
}

var _ engine.Factory = (*Factory)(nil)

// Info implements engine.Factory. llama-server's cache is token-granular.
func (f *Factory) Info() engine.Info {
	return engine.Info{Kind: "llamacpp", Server: "kvsim-sim-llamacpp", PageSize: 1}
}

// New implements engine.Factory: an [Online] simulation.
func (f *Factory) New() (engine.Engine, error) { return NewOnline(f.Config, f.Cost) }

// Run implements engine.Factory with [Sim.Run]: open loop (the model has
// no closed-loop batch path; a replay paces dependencies itself).
func (f *Factory) Run(src engine.Source) (*engine.Result, error) {
	s, err := New(f.Config, f.Cost)
	if err != nil {
		return nil, err
	}
	if f.Sink != nil {
		s.Stream(f.Sink)
	}
	return s.Run(src)
}

// Refuse returns why the server refuses every request of a prompt of
// input tokens (one longer than a slot's context), or "" when it does not.
func (f *Factory) Refuse(input int) string {
	if nctx := f.Config.SlotContext(); input > nctx {
		return fmt.Sprintf("request (%d tokens) exceeds the available context size (%d tokens)", input, nctx)
	}
	return ""
}

// TextStream returns what the server streams of a request whose output
// ids are the server's own: a function that takes each sampled id and
// reports whether the server sends text now ([Stream.Add]), or nil when
// every token is streamed as it comes (TokenTextWhole).
func (f *Factory) TextStream() func(id int32) bool {
	if f.Config.TokenText == TokenTextWhole {
		return nil
	}
	s, err := NewStream(f.Config.TokenText)
	if err != nil {
		panic("llamacpp: " + err.Error()) // Config.Validate checked TokenText
	}
	return s.Add
}
