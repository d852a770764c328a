package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/internal/fielderr"
	"github.com/kvsim/kvsim/replay"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "serve the simulator over HTTP (SGLang /generate, OpenAI completions and chat, /flush_cache, /metrics)",
		run:     runServe,
	})
}

const serveUsage = `usage: kvsim serve [--config F.toml] [--addr 127.0.0.1:30000] [--time-scale X]

Answers SGLang's and OpenAI's HTTP APIs from the simulated server of --config
(default: the bundled configs/default.toml), or, for a fleet file
([[fleet.groups]]), from the whole fleet behind its router, one endpoint: POST /generate, /v1/completions,
/v1/chat/completions (streaming or not), /flush_cache, GET /server_info,
/get_server_info, /get_model_info, /health, /v1/models and /metrics (Prometheus). Output token
ids are a deterministic function of the prompt, so clients that echo them get
exact cache hits. --time-scale 1 streams tokens at their simulated times; 0
answers as fast as possible (virtual time stands still between requests).
Ctrl-C (or SIGTERM) stops accepting and lets requests in flight finish for
--shutdown-timeout, then exits 0; requests still in flight then are cut, their
number said on stderr, and it exits 1.
See docs/replay.md.
`

// serveSignalContext returns the context that SIGINT/SIGTERM cancel; tests
// replace it.
var serveSignalContext = replaySignalContext

// serveListen opens the listener; tests replace it.
var serveListen = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// serveReady is called with the address once the server listens (tests).
var serveReady = func(addr string) {}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := newCommand("kvsim serve", serveUsage, stderr)
	cfgPath := fs.String("config", "", "the simulated server (TOML); default: the bundled default")
	addr := fs.String("addr", "127.0.0.1:30000", "address to listen on")
	scale := fs.Float64("time-scale", 1, "wall seconds per simulated second: 1 real time, 0 as fast as possible")
	shutdown := fs.Duration("shutdown-timeout", 10*time.Second, "on Ctrl-C, how long requests in flight may finish (0: cut them at once); those still in flight are cut and the exit code is 1")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	usageErr := fs.usageErr
	if !(*scale >= 0) {
		return usageErr("--time-scale: must be >= 0 (got %v)", *scale)
	}
	if *shutdown < 0 {
		return usageErr("--shutdown-timeout: must be >= 0 (got %v)", *shutdown)
	}
	if !validHostPort(*addr) {
		return usageErr("--addr: expected HOST:PORT, e.g. 127.0.0.1:30000, found %q", *addr)
	}
	srv, banner, err := buildServe(*cfgPath, *scale, *shutdown)
	if err != nil {
		return usageErr("%v", err)
	}
	ln, err := serveListen(*addr)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim serve: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stderr, "kvsim serve: %s on http://%s, time scale %v\n", banner, ln.Addr(), *scale)
	ctx, stop := serveSignalContext()
	defer stop()
	serveReady(ln.Addr().String())
	if err := srv.Serve(ctx, ln); err != nil {
		var cut *replay.CutError
		if errors.As(err, &cut) {
			fmt.Fprintf(stderr, "kvsim serve: stopped; %v (--shutdown-timeout)\n", err)
			return exitFail
		}
		fmt.Fprintf(stderr, "kvsim serve: %v\n", err)
		return exitFail
	}
	fmt.Fprintln(stderr, "kvsim serve: stopped")
	return exitOK
}

// buildServe builds the server of the config at path (the bundled
// default for ""): one simulated server, or, for a fleet file, the whole
// fleet behind its router as one engine. banner describes it.
func buildServe(path string, scale float64, shutdown time.Duration) (*replay.Server, string, error) {
	cfg := replay.ServeConfig{TimeScale: scale, Version: version, ShutdownTimeout: shutdown}
	if shutdown == 0 {
		cfg.ShutdownTimeout = -1 // no wait (ServeConfig's 0 is its default)
	}
	f, err := loadFile(path)
	if err != nil {
		return nil, "", err
	}
	var banner string
	if f.IsFleet() {
		sc, b, err := fleetEngine(f, path)
		if err != nil {
			return nil, "", err
		}
		if err := oneModel(path, b.Groups); err != nil {
			return nil, "", err
		}
		cfg.Sim = sc
		cfg.Info = map[string]any{"kvsim_config": path, "kvsim_fleet": b.Describe, "kvsim_router_policy": b.Factory.Router.Policy.String()}
		policy := b.Factory.Router.Policy.String()
		if pd := b.Factory.PD; pd != nil {
			policy = fmt.Sprintf("prefill %v, decode %v", pd.Config.Prefill.Policy, pd.Config.Decode.Policy)
		}
		banner = fmt.Sprintf("a fleet of %d replicas (%s) behind %s", len(b.Factory.Replicas), strings.Join(b.Describe, "; "), policy)
	} else {
		built, err := f.Build()
		if err != nil {
			return nil, "", err
		}
		cfg.Sim = replay.SimConfig{Engine: built.Engine, Model: f.Model.Name}
		cfg.Info = map[string]any{"kvsim_config": path, "kvsim_explain": built.Explain}
		banner = fmt.Sprintf("%s (%s on %s, device pool %d tokens, page %d)",
			f.Model.Name, cmp.Or(f.Cost.Kind, "roofline"), f.GPU.Name, built.Sim.Cache.DeviceTokens, built.Sim.Cache.PageSize)
	}
	srv, err := replay.NewServer(cfg)
	return srv, banner, err
}

// validHostPort reports whether addr is a listen address, HOST:PORT.
func validHostPort(addr string) bool {
	_, _, err := net.SplitHostPort(addr)
	return err == nil
}

// oneModel refuses a fleet whose groups run different models, at the
// first group (of the file at path) whose model differs from the first
// group's. SGLang's router sends a request that names a model only to
// that model's workers, under a policy of its own (fleet-spec 1.1), while
// kvsim's fleet routes every request over every replica; kvsim serve
// would serve them all under one name.
func oneModel(path string, groups []configs.FleetGroupFile) error {
	first := groups[0]
	for i, g := range groups {
		if g.File.Model.Name == first.File.Model.Name {
			continue
		}
		key := fielderr.Key("fleet", "groups").At(i).Key("set")
		err := fielderr.New(key, "group %q runs model %q, group %q model %q: kvsim serve serves one model (its /v1/models, the \"model\" of its responses); SGLang's router sends a request naming a model to that model's replicas only, which kvsim's fleet does not model (it routes over every replica). Serve each model's groups from a fleet file of their own",
			g.Name, g.File.Model.Name, first.Name, first.File.Model.Name)
		return placeKey(path, key, err)
	}
	return nil
}

// placeKey returns err at the line and column where key is written in the
// TOML file at path (at the file alone when it cannot say).
func placeKey(path string, key fielderr.Path, err error) error {
	at := &fielderr.At{File: path, Err: err}
	if data, rerr := os.ReadFile(path); rerr == nil {
		if ps, perr := configs.KeyPositions(data); perr == nil {
			if p, ok := ps.Find(key); ok {
				at.Line, at.Col = p.Line, p.Col
			}
		}
	}
	return at
}
