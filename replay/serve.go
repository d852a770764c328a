package replay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// ServeConfig configures a Server.
type ServeConfig struct {
	// Sim is the simulated server (its Model is the served model name).
	Sim SimConfig
	// TimeScale is wall seconds per simulated second: 1 runs in real time
	// (tokens are streamed when their simulated time comes), 0.1 ten times
	// faster, 0 as fast as possible (virtual time jumps to the next event
	// at once, and stands still while no request is in the server). >= 0.
	TimeScale float64
	// Version is reported by /server_info.
	Version string
	// Info holds extra fields for /server_info (sizes, cost model).
	Info map[string]any
	// MaxBodyBytes bounds a request body (default 64 MiB).
	MaxBodyBytes int64
	// ShutdownTimeout bounds how long Serve waits for requests in flight
	// once its context is cancelled (0: the default, 10 s; negative: no
	// wait); past it connections are closed and Serve returns a
	// [*CutError].
	ShutdownTimeout time.Duration
	// WriteStall bounds how long one write to a client may block (a client
	// that stopped reading; default 30 s): past it the connection is
	// closed, and the simulator, which never waits for a client, goes on.
	WriteStall time.Duration
}

// Limits of the HTTP server: a request's headers and body must arrive
// within a minute, and a kept-alive connection idle for 5 s is closed, as
// uvicorn (SGLang's server) closes it.
const (
	serveReadTimeout = time.Minute
	serveIdleTimeout = 5 * time.Second
)

// Server answers SGLang's and OpenAI's HTTP APIs from the simulator. One
// goroutine owns the simulator (an [engine.Engine]): handlers submit
// requests to it over a channel, and it publishes each request's progress
// to the request's mailbox, which the handler streams. The simulator never waits
// for a client: a slow or vanished client only stops its own stream.
//
// Requests are submitted at the current virtual time. With TimeScale > 0
// virtual time follows the wall clock (scaled) and events are released
// when their wall time comes; with TimeScale 0 the simulator runs to its
// next event at once while requests are in it, and stands still when it
// is empty, so a closed-loop client (each request sent when the previous
// one finished) sees exactly the in-process SimTarget's timeline.
type Server struct {
	cfg  ServeConfig
	cmds chan command

	statsMu sync.Mutex
	stats   serverStats

	// inFlight counts the generation handlers running (serveGen), so that
	// a shutdown can say how many it cut.
	inFlight atomic.Int64
	// loopDone is closed when the simulator loop has returned.
	loopDone chan struct{}

	nextRID uint64
	ridMu   sync.Mutex
}

// serverStats are the counters /metrics reports.
type serverStats struct {
	Requests, Failed, Flushes                       int64
	PromptTokens, GenTokens                         int64
	Cached, CachedDevice, CachedHost, CachedStorage int64
	InSystem, Waiting                               int64
}

type commandKind int

const (
	cmdSubmit commandKind = 1 + iota
	cmdFlush
	cmdMetrics
)

type command struct {
	kind    commandKind
	job     *job
	reply   chan error
	metrics chan simMetrics // cmdMetrics
}

// job is one request inside the server: the handler fills the input, the
// loop publishes progress under mu.
type job struct {
	prompt  []int32
	n       int
	out     []int32
	session string // the routing key of a fleet behind the server (sessionKey)

	mu      sync.Mutex
	tokens  int  // tokens generated so far
	cached  int  // cached_tokens, known from the first token on
	done    bool // finished (res is set)
	res     engine.RequestResult
	arrival int64 // virtual ns (absolute)
	notify  chan struct{}
}

func (j *job) publish() {
	select {
	case j.notify <- struct{}{}:
	default:
	}
}

// NewServer checks cfg and builds a server (it does not listen yet).
func NewServer(cfg ServeConfig) (*Server, error) {
	if !(cfg.TimeScale >= 0) || cfg.TimeScale > 1e6 {
		return nil, fmt.Errorf("time-scale: must be >= 0 (got %v)", cfg.TimeScale)
	}
	if cfg.Sim.OutputVocab == (traces.Vocab{}) {
		cfg.Sim.OutputVocab = traces.DefaultVocab
	}
	if err := cfg.Sim.OutputVocab.Validate(); err != nil {
		return nil, fmt.Errorf("output vocab: %w", err)
	}
	if cfg.Sim.Engine == nil {
		return nil, errors.New("replay: server without an engine")
	}
	if _, err := cfg.Sim.Engine.New(); err != nil {
		return nil, err
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 64 << 20
	}
	switch {
	case cfg.ShutdownTimeout == 0:
		cfg.ShutdownTimeout = 10 * time.Second
	case cfg.ShutdownTimeout < 0:
		cfg.ShutdownTimeout = 0
	}
	if cfg.WriteStall == 0 {
		cfg.WriteStall = 30 * time.Second
	}
	return &Server{cfg: cfg, cmds: make(chan command, 1024), loopDone: make(chan struct{})}, nil
}

// Serve runs the simulator loop and serves HTTP on ln until ctx is
// cancelled; then it stops accepting and lets requests in flight finish
// for ShutdownTimeout. It returns nil when they all finished, else closes
// their connections and returns a [*CutError] counting them. Other errors
// of the listener are returned.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	loopCtx, stopLoop := context.WithCancel(context.Background())
	loopDone := make(chan error, 1)
	go func() {
		err := s.loop(loopCtx)
		close(s.loopDone)
		loopDone <- err
	}()
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 30 * time.Second, ReadTimeout: serveReadTimeout, IdleTimeout: serveIdleTimeout}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		if hs.Shutdown(sctx) != nil {
			cut := s.inFlight.Load()
			hs.Close()
			if cut > 0 {
				err = &CutError{Requests: cut, Timeout: s.cfg.ShutdownTimeout}
			}
		}
		cancel()
	case err = <-served:
	case err = <-loopDone:
		hs.Close()
		stopLoop()
		return fmt.Errorf("simulator: %w", err)
	}
	stopLoop()
	if lerr := <-loopDone; lerr != nil && err == nil {
		err = fmt.Errorf("simulator: %w", lerr)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// CutError is Serve's error when generation requests were still in
// flight at the end of the shutdown timeout: their connections were
// closed, their streams cut.
type CutError struct {
	Requests int64         // requests cut
	Timeout  time.Duration // the shutdown timeout they did not finish in
}

func (e *CutError) Error() string {
	noun := "requests"
	if e.Requests == 1 {
		noun = "request"
	}
	return fmt.Sprintf("%d %s in flight cut: not finished within the shutdown timeout of %v", e.Requests, noun, e.Timeout)
}

// loop owns the simulator.
func (s *Server) loop(ctx context.Context) error {
	o, err := newEngine(s.cfg.Sim.Engine)
	if err != nil {
		return err
	}
	l := &serveLoop{s: s, o: o, jobs: map[string]*job{}, touched: map[*job]bool{}, scale: s.cfg.TimeScale, wall0: time.Now(), carried: newCarried()}
	defer func() {
		if l.timer != nil {
			l.timer.Stop()
		}
	}()
	for {
		if err := l.catchUp(); err != nil {
			return err
		}
		if err := l.drain(); err != nil {
			return err
		}
		next, ok := l.o.Next()
		var done bool
		if l.scale == 0 {
			done, err = l.waitFast(ctx, next, ok)
		} else {
			done, err = l.waitTimed(ctx, next, ok)
		}
		if done || err != nil {
			return err
		}
	}
}

// serveLoop is the state of Server.loop: the engine, the requests it
// runs by ID, and the wall clock the virtual one follows.
type serveLoop struct {
	s       *Server
	o       engine.Engine
	base    engine.Time // virtual time at which o started
	jobs    map[string]*job
	seq     uint64
	touched map[*job]bool
	scale   float64
	wall0   time.Time
	timer   *time.Timer
	// carried holds the counters of the engines /flush_cache replaced.
	carried *carried
}

// vOf maps a wall time to the virtual time it stands for.
func (l *serveLoop) vOf(w time.Time) engine.Time {
	return engine.Time(float64(w.Sub(l.wall0)) / l.scale)
}

// wallOf maps an absolute virtual time to its wall time.
func (l *serveLoop) wallOf(v engine.Time) time.Time {
	return l.wall0.Add(time.Duration(float64(v) * l.scale))
}

// catchUp runs the engine to the virtual time the wall clock stands for
// (TimeScale > 0; at 0 virtual time moves only with events).
func (l *serveLoop) catchUp() error {
	if l.scale > 0 {
		if v := l.vOf(time.Now()) - l.base; v > l.o.Now() {
			return l.runUntil(v)
		}
	}
	return nil
}

// runUntil advances the engine to virtual time v (of the engine) and
// passes its events on.
func (l *serveLoop) runUntil(v engine.Time) error {
	evs, err := l.o.RunUntil(v)
	if err != nil {
		return err
	}
	l.dispatch(evs)
	return nil
}

// dispatch passes the engine's events to their requests' jobs and the
// server's counters, and wakes each job touched once.
func (l *serveLoop) dispatch(evs []engine.Event) {
	for _, e := range evs {
		j := l.jobs[e.ID]
		if j == nil {
			panic("replay: serve: event for an unknown request " + e.ID)
		}
		j.mu.Lock()
		j.tokens = int(e.Tokens)
		j.cached = int(e.CachedTokens)
		if e.Done {
			j.done = true
			j.res = e.Result
			delete(l.jobs, e.ID)
		}
		j.mu.Unlock()
		l.touched[j] = true
		l.s.account(e)
	}
	for j := range l.touched {
		j.publish()
	}
	clear(l.touched)
}

// drain takes every command waiting, at the current virtual time.
func (l *serveLoop) drain() error {
	for {
		select {
		case c := <-l.s.cmds:
			if err := l.handle(c); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

func (l *serveLoop) handle(c command) error {
	switch c.kind {
	case cmdSubmit:
		return l.submit(c.job)
	case cmdFlush:
		c.reply <- l.flush()
	case cmdMetrics:
		if err := l.catchUp(); err != nil {
			return err
		}
		c.metrics <- simMetrics{extra: l.carried.apply(engineMetrics(l.o)), virtualNs: int64(l.base + l.o.Now())}
	}
	return nil
}

// submit hands a request to the engine at the current virtual time.
func (l *serveLoop) submit(j *job) error {
	s, o := l.s, l.o
	l.seq++
	id := fmt.Sprintf("r%d", l.seq)
	j.arrival = int64(l.base + o.Now())
	rec := traces.Record{ID: id, Arrival: int64(o.Now()), InputLen: len(j.prompt), Tokens: j.prompt, OutputLen: j.n, OutputTokens: j.out, Session: j.session}
	if err := o.Submit(rec); err != nil {
		return err
	}
	l.jobs[id] = j
	s.statsMu.Lock()
	s.stats.Requests++
	s.stats.InSystem++
	s.stats.Waiting++
	s.statsMu.Unlock()
	return nil
}

// flush replaces the engine by a fresh one (an empty cache) that starts
// at the current virtual time; it refuses while requests run or wait.
// The old engine's counters are carried on (l.carried): no counter of
// /metrics goes back at a flush.
func (l *serveLoop) flush() error {
	if len(l.jobs) > 0 {
		return fmt.Errorf("%d requests running or waiting", len(l.jobs))
	}
	fresh, err := newEngine(l.s.cfg.Sim.Engine)
	if err != nil {
		return err
	}
	l.carried.add(engineMetrics(l.o))
	l.base += l.o.Now()
	l.o = fresh
	l.s.statsMu.Lock()
	l.s.stats.Flushes++
	l.s.statsMu.Unlock()
	return nil
}

// waitFast is a step of the loop at time scale 0 (as fast as possible):
// run to the engine's next event while requests are in it, else wait for
// a command. done says the context ended.
func (l *serveLoop) waitFast(ctx context.Context, next engine.Time, ok bool) (done bool, err error) {
	if ok && len(l.jobs) > 0 {
		return false, l.runUntil(next)
	}
	select {
	case c := <-l.s.cmds:
		return false, l.handle(c)
	case <-ctx.Done():
		return true, nil
	}
}

// waitTimed is a step of the loop in real time: wait until the wall time
// of the engine's next event (if any) or a command. done says the
// context ended.
func (l *serveLoop) waitTimed(ctx context.Context, next engine.Time, ok bool) (done bool, err error) {
	var wake <-chan time.Time
	if ok {
		d := time.Until(l.wallOf(l.base + next))
		if d <= 0 {
			return false, nil
		}
		if l.timer == nil {
			l.timer = time.NewTimer(d)
		} else {
			l.timer.Reset(d)
		}
		wake = l.timer.C
	}
	select {
	case c := <-l.s.cmds:
		if err := l.handle(c); err != nil {
			return false, err
		}
	case <-wake:
	case <-ctx.Done():
		return true, nil
	}
	if l.timer != nil && !l.timer.Stop() {
		select {
		case <-l.timer.C:
		default:
		}
	}
	return false, nil
}

// account updates the counters with one simulator event.
func (s *Server) account(e engine.Event) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if !e.Done {
		s.stats.GenTokens++
		if e.Tokens == 1 {
			s.stats.Waiting--
		}
		return
	}
	s.stats.InSystem--
	r := &e.Result
	if r.Failed != "" {
		s.stats.Failed++
		if r.OutputTokens == 0 {
			s.stats.Waiting--
		}
		return
	}
	s.stats.PromptTokens += r.PromptTokens
	s.stats.Cached += r.CachedTokens
	s.stats.CachedDevice += r.CachedDevice
	s.stats.CachedHost += r.CachedHost
	s.stats.CachedStorage += r.CachedStorage
}

// submit hands a job to the loop.
func (s *Server) submit(ctx context.Context, j *job) error {
	select {
	case s.cmds <- command{kind: cmdSubmit, job: j}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush asks the loop for a fresh simulator.
func (s *Server) flush(ctx context.Context) error {
	reply := make(chan error, 1)
	err, aerr := ask(ctx, s, command{kind: cmdFlush, reply: reply}, reply)
	if aerr != nil {
		return aerr
	}
	return err
}
