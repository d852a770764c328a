package configs

import (
	"fmt"
	"io"
	"strings"

	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/sim/llamacpp"
)

// Server is a file's simulated server, built: an [engine.Factory] for the
// model the file describes (SGLang or llama-server) and what the commands
// print about it. [File.BuildServer] is the one place that looks at
// engine.kind; kvsim sim, replay --target sim, compare and bench use the
// Server without knowing the model.
type Server struct {
	engine.Factory
	// Model is the served model's name (replay's Info, results): the
	// model's for SGLang, "llama-server" for a llama-server.
	Model string
	// TraceOutputs says that the output ids a trace recorded are the
	// server's own and should be what the simulator generates
	// (replay.SimConfig.TraceOutputs): true for a llama-server, whose
	// traces are realized chats and captures of it.
	TraceOutputs bool
	// Seed is the seed the simulation uses (0 for a model without one).
	Seed uint64
	// Explain says where the numbers came from, one line each.
	Explain []string

	table func(w io.Writer, trace string, res *engine.Result)
}

// ServerOptions adjusts what BuildServer builds.
type ServerOptions struct {
	// NoTimeline drops the tier-occupancy timeline (Result.Timeline) when
	// nobody will read it.
	NoTimeline bool
}

// BuildServer builds the file's simulated server, whichever model it
// describes.
func (f *File) BuildServer(opt ServerOptions) (*Server, error) {
	if f.IsLlamaCpp() {
		lb, err := f.BuildLlama()
		if err != nil {
			return nil, err
		}
		return &Server{
			Factory: &llamacpp.Factory{Config: lb.Config, Cost: lb.Cost},
			Model:   "llama-server", TraceOutputs: true,
			Explain: []string{fmt.Sprintf("llama-server model: %+v", lb.Config), fmt.Sprintf("cost (fitted, ns): %+v", *lb.Cost)},
			table:   func(w io.Writer, trace string, res *engine.Result) { writeLlamaTable(w, trace, lb, res) },
		}, nil
	}
	b, err := f.Build()
	if err != nil {
		return nil, err
	}
	if opt.NoTimeline {
		b.Sim.TimelineInterval = -1
		b.Engine = &sim.Factory{Config: b.Sim, Cost: b.Cost, OpenLoop: f.Workload.OpenLoop}
	}
	return &Server{
		Factory: b.Engine, Model: f.Model.Name, Seed: b.Sim.Seed, Explain: b.Explain,
		table: func(w io.Writer, trace string, res *engine.Result) { writeSimTable(w, trace, f, b, res) },
	}, nil
}

// Describe names the file's server in one phrase: the model, GPU, TP size
// and host-memory ratio of an SGLang server, or the slots of a llama-server.
func (f *File) Describe() string {
	if f.IsLlamaCpp() {
		return fmt.Sprintf("llama-server model, %d slots", f.Llama.Config.Slots)
	}
	return fmt.Sprintf("%s on %s, tp %d, hicache_ratio %g", f.Model.Name, f.GPU.Name, f.Server.TPSize, f.Server.HiCacheRatio)
}

// WriteTable prints a run's results in the layout of SGLang's serving
// benchmark, under a header that describes the server, followed by the
// model's cache section.
func (s *Server) WriteTable(w io.Writer, trace string, res *engine.Result) { s.table(w, trace, res) }

// writeSimTable is WriteTable for SGLang: the serving benchmark's block
// and the cache section.
func writeSimTable(w io.Writer, trace string, f *File, b *Built, res *engine.Result) {
	s := res.Summary
	c := b.Sim.WithDefaults().Cache
	line := func(k string, v any) { engine.TableLine(w, k, v) }
	head := engine.TableHeading
	head(w, " kvsim simulation ", '=')
	line("Server:", fmt.Sprintf("%s on %s, tp %d", f.Model.Name, f.GPU.Name, f.Server.TPSize))
	hostDesc := "off"
	if c.HostTokens > 0 {
		hostDesc = fmt.Sprintf("%d tokens, %s", c.HostTokens, c.WritePolicy)
	}
	line("Device KV pool (tokens per rank):", c.DeviceTokens)
	line("Host KV pool:", hostDesc)
	s.WriteTableBody(w, trace, "KV Cache", "  device hit rate:", "  host hit rate (loaded back):")
	line("Device evicted tokens:", s.DeviceEvictions)
	line("  demoted to host:", s.Demoted)
	line("Host evicted tokens:", s.HostEvictions)
	line("Write-through tokens (D2H):", s.WriteThroughTokens)
	if s.WriteBackTokens > 0 {
		line("Write-back tokens (D2H, stalling):", s.WriteBackTokens)
	}
	line("Load-back tokens (H2D):", s.LoadBackTokens)
	line("PCIe H2D / D2H (GB):", fmt.Sprintf("%.2f / %.2f", s.H2DGB, s.D2HGB))
	line("Retractions:", s.Retractions)
	fmt.Fprintln(w, strings.Repeat("=", 50))
}

// writeLlamaTable is WriteTable for the llama-server model: the serving
// benchmark's block and the slot and RAM-cache hits.
func writeLlamaTable(w io.Writer, trace string, lb *LlamaBuilt, res *engine.Result) {
	s := res.Summary
	line := func(k string, v any) { engine.TableLine(w, k, v) }
	engine.TableHeading(w, " kvsim simulation ", '=')
	line("Server:", fmt.Sprintf("llama-server model, %d slots of %d tokens", lb.Config.Slots, lb.Config.Context/max(lb.Config.Slots, 1)))
	s.WriteTableBody(w, trace, "Prompt cache", "  kept in the slot:", "  restored from the RAM cache:")
	fmt.Fprintln(w, strings.Repeat("=", 50))
}

// SGLangOnly returns an error naming engine.kind when the file describes
// another server than SGLang, for the commands that need SGLang's model
// (its sizing, its /server_info): who says what they do ("studies
// simulate").
func (f *File) SGLangOnly(who string) error {
	if f.IsLlamaCpp() {
		return fmt.Errorf(`engine.kind: %s SGLang only (got "llamacpp": a llama-server, which kvsim sim, replay --target sim, compare and calibrate run)`, who)
	}
	return nil
}
