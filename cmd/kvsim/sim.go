package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/internal/atomicfile"
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/sim/llamacpp"
	"github.com/kvsim/kvsim/traces"
)

func init() {
	register(&command{
		name:    "sim",
		summary: "simulate an SGLang HiCache server on a trace (default: Qwen2.5-14B, TP 4 on H200s, the Mooncake conversation trace)",
		run:     runSim,
	})
}

const simUsage = `usage: kvsim sim [--config FILE.toml] [--trace FILE] [--format F] [--seed N]
                 [--open-loop] [--idle-gap-cap D] [--json] [--per-request FILE]
                 [--timeline FILE] [--explain]

Simulates the server described by --config (default: the bundled
configs/default.toml) on the trace named by --trace or by the config's
[workload], and prints the serving-benchmark metrics and cache activity.
`

func runSim(args []string, stdout, stderr io.Writer) int {
	if f := fleetConfig(args); f != nil {
		return runFleetSim(f, args, stdout, stderr) // cmd/kvsim/fleet.go
	}
	fs := newCommand("kvsim sim", simUsage, stderr)
	sf := defineSimFlags(fs)
	cfgPath, tracePath, format, seed, asJSON, perReq, explain := sf.cfgPath, sf.tracePath, sf.format, sf.seed, sf.asJSON, sf.perReq, sf.explain
	timeline, gapCap := defineTimelineFlags(fs)
	if code, ok := fs.parse(args); !ok {
		return code
	}
	outs := []outputFlag{{"per-request", *perReq}, {"timeline", *timeline}}
	if code, ok := checkOutputDirs(outs, stderr); !ok {
		return code
	}
	f, err := loadConfig(*cfgPath, "kvsim sim runs")
	if err != nil {
		return fs.usageErr("%v", err)
	}
	if *seed != 0 {
		f.Seed = *seed
	}
	sf.applyOpenLoop(f)
	capNs, code, ok := idleGapCap(fs, f, *gapCap)
	if !ok {
		return code
	}
	// The server model, whichever the config describes (SGLang or
	// llama.cpp's llama-server). Nobody asked for a timeline: keep none.
	srv, err := f.BuildServer(configs.ServerOptions{NoTimeline: *timeline == ""})
	if err != nil {
		fmt.Fprintf(stderr, "kvsim sim: %v\n", err)
		return exitUsage
	}
	if *explain {
		for _, l := range srv.Explain {
			fmt.Fprintln(stdout, l)
		}
		fmt.Fprintln(stdout)
	}
	tp, rd, closeTrace, code := openSimTrace(fs, f, *cfgPath, *tracePath, *format, outs, stderr)
	if rd == nil {
		return code
	}
	defer closeTrace()
	if code, ok := capTraceGaps(rd, tp, capNs, stderr); !ok {
		return code
	}
	streams, err := streamSimOutputs(srv.Factory, *perReq, *timeline)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim sim: %v\n", err)
		return exitFail
	}
	res, err := srv.Run(rd)
	if ferr := finishAll(streams, err); ferr != nil && err == nil {
		fmt.Fprintf(stderr, "kvsim sim: %v\n", ferr)
		return exitFail
	}
	if err == nil {
		warnIgnoredDeps(stderr, res.IgnoredDeps)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kvsim sim: %v\n", runError(tp, err))
		return exitFail
	}
	if streams == nil {
		if err := writeSimOutputs(res, *perReq, *timeline); err != nil {
			fmt.Fprintf(stderr, "kvsim sim: %v\n", err)
			return exitFail
		}
	}
	if *asJSON {
		out := simJSON{res.Summary, tp, nameOr(*cfgPath, "default"), srv.Seed, version}
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			fmt.Fprintf(stderr, "kvsim sim: %v\n", err)
			return exitFail
		}
		return exitOK
	}
	srv.WriteTable(stdout, tp, res)
	return exitOK
}

// openTrace opens the trace at path, or, for the config's own trace of
// the bundled default (fromConfig), the copy embedded in the binary, so
// that `kvsim sim` works from any directory. closeTrace closes both.
// simFlags are the flags kvsim sim has for one server and for a fleet
// (fleet.go): the same names, defaults and meanings.
type simFlags struct {
	fs                                 *cmdFlags
	cfgPath, tracePath, format, perReq *string
	seed                               *uint64
	asJSON, explain, openLoop          *bool
}

// defineSimFlags defines kvsim sim's shared flags on fs.
func defineSimFlags(fs *cmdFlags) simFlags {
	return simFlags{
		fs:        fs,
		cfgPath:   fs.String("config", "", "server or fleet configuration (TOML); default: the bundled default (one server)"),
		tracePath: fs.String("trace", "", "trace file (overrides the config's workload.trace)"),
		format:    fs.String("format", "", "trace format (mooncake, bailian, weka, azure, tokens, kvsim); default: the config's workload.format for the config's trace, else detected"),
		seed:      fs.Uint64("seed", 0, "seed (overrides the config's; in a fleet, every replica's and the router's)"),
		asJSON:    fs.Bool("json", false, "print one JSON object instead of the tables"),
		perReq:    fs.String("per-request", "", "write every request's result (and in a fleet its replica) as JSON lines to this file"),
		explain:   fs.Bool("explain", false, "print how the memory sizes and cost model (a fleet's: each replica group's) were derived"),
		openLoop:  fs.Bool("open-loop", false, "release every request at its trace arrival, ignoring its dependencies (overrides the config's workload.open_loop; default: closed loop, a request waits for its parent and sub-agents to finish in simulated time, on any replica of a fleet, plus its delay)"),
	}
}

// applyOpenLoop sets f's workload.open_loop to --open-loop if it was given.
func (sf simFlags) applyOpenLoop(f *configs.File) {
	sf.fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "open-loop" {
			f.Workload.OpenLoop = *sf.openLoop
		}
	})
}

// simJSON is what kvsim sim --json prints.
type simJSON struct {
	engine.Summary
	Trace   string `json:"trace"`
	Config  string `json:"config"`
	Seed    uint64 `json:"seed"`
	Version string `json:"kvsim_version"`
}

// loadFile loads the config at path, a server or a fleet, or the bundled
// default for "".
func loadFile(path string) (*configs.File, error) {
	if path == "" {
		return configs.Default(), nil
	}
	return configs.Load(path)
}

// loadConfig is loadFile for a command (who, e.g. "kvsim calibrate fits")
// that runs one server: a fleet file is refused, not silently run as its
// base server.
func loadConfig(path, who string) (*configs.File, error) {
	f, err := loadFile(path)
	if err != nil {
		return nil, err
	}
	if err := f.OneServer(who); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// simTracePath resolves the trace to simulate and its format: the flags',
// else the config's workload.trace and workload.format.
func simTracePath(f *configs.File, path, format string) (string, traces.Format, error) {
	if path == "" {
		path = f.TracePath()
		if format == "" {
			format = f.Workload.Format
		}
	}
	if path == "" {
		return "", 0, errors.New("no trace: give --trace or set workload.trace in the config")
	}
	if format == "" {
		return path, traces.FormatAuto, nil
	}
	// configs.Load has checked workload.format; only the flag is left.
	tf, err := traces.ParseFormat(format)
	if err != nil {
		return "", 0, fmt.Errorf("--format: %w", err)
	}
	return path, tf, nil
}

func openTrace(f *configs.File, fromConfig bool, path string, tf traces.Format) (rd *traces.Reader, closeTrace func(), err error) {
	if !fromConfig || !f.Bundled() {
		rd, err := traces.Open(path, tf)
		if err != nil {
			return nil, nil, err
		}
		return rd, func() { rd.Close() }, nil
	}
	rc, err := f.OpenBundledTrace()
	if err != nil {
		return nil, nil, err
	}
	if rd, err = traces.NewReader(rc, path, tf); err != nil {
		rc.Close()
		return nil, nil, err
	}
	return rd, func() { rd.Close(); rc.Close() }, nil
}

// gapCutNote says what an idle-gap cap cut.
func gapCutNote(c traces.GapCut) string {
	fam := "session families"
	if c.Families == 1 {
		fam = "session family"
	}
	return fmt.Sprintf("idle-gap cap %v: cut %d gaps in %d %s, %.3f s in all (span %.3f s -> %.3f s)",
		time.Duration(c.Cap), c.Gaps, c.Families, fam, float64(c.Cut)/1e9, float64(c.SpanBefore)/1e9, float64(c.SpanAfter)/1e9)
}

// outputDirExists checks, before a long run, that the folder an output
// file goes to exists and that the path is not itself a folder, so that the
// run is not lost at its end.
func outputDirExists(path string) error {
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("cannot write %s: %s is not a folder", path, dir)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("cannot write %s: it is a folder", path)
	}
	return nil
}

// defineTimelineFlags defines kvsim sim's --timeline and --idle-gap-cap,
// for a server and a fleet.
func defineTimelineFlags(fs *cmdFlags) (timeline *string, gapCap *time.Duration) {
	timeline = fs.String("timeline", "", "write the tier-occupancy timeline as CSV to this file")
	gapCap = new(time.Duration)
	durationVar(fs.FlagSet, gapCap, "idle-gap-cap", 0, "cut every gap between consecutive request starts of a session family longer than this to it, shifting later times left (overrides the config's workload.idle_gap_cap; 0: none)")
	return timeline, gapCap
}

// idleGapCap returns the idle-gap cap of a run, ns: --idle-gap-cap if
// given (flag gapCap), else f's workload.idle_gap_cap. It reports a bad
// flag as a usage error (the exit code, false).
func idleGapCap(fs *cmdFlags, f *configs.File, gapCap time.Duration) (int64, int, bool) {
	capNs := f.Workload.IdleGapCapNs()
	set := false
	fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == "idle-gap-cap" })
	if set {
		if gapCap < 0 {
			return 0, fs.usageErr("--idle-gap-cap: must be >= 0 (got %v)", gapCap), false
		}
		capNs = int64(gapCap)
	}
	return capNs, exitOK, true
}

// capTraceGaps cuts the idle gaps of rd, the trace at tp, to capNs (none
// if 0) and says how many it cut. It reports a failure (the exit code,
// false).
func capTraceGaps(rd *traces.Reader, tp string, capNs int64, stderr io.Writer) (int, bool) {
	if capNs <= 0 {
		return exitOK, true
	}
	cut, err := rd.CapIdleGaps(capNs)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim sim: %v\n", traces.InFile(tp, err))
		return exitFail, false
	}
	fmt.Fprintf(stderr, "kvsim sim: %s\n", gapCutNote(cut))
	return exitOK, true
}

// openSimTrace resolves the trace of a sim run (the flags', else the
// config's), checks that the outputs are apart from each other and from
// the inputs, and opens it. On an error it returns a nil reader and the
// exit code, having said why.
func openSimTrace(fs *cmdFlags, f *configs.File, cfgPath, tracePath, format string, outs []outputFlag, stderr io.Writer) (string, *traces.Reader, func(), int) {
	tp, tf, err := simTracePath(f, tracePath, format)
	if err != nil {
		return "", nil, nil, fs.usageErr("%v", err)
	}
	if err := checkOutputsApart(outs, cfgPath, tp); err != nil {
		return "", nil, nil, fs.usageErr("%v", err)
	}
	rd, closeTrace, err := openTrace(f, tracePath == "", tp, tf)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim sim: %v\n", err)
		return "", nil, nil, exitFail
	}
	if err := f.Workload.OpenTrace(rd); err != nil {
		closeTrace()
		fmt.Fprintf(stderr, "kvsim sim: workload.rate_scale: %v\n", err)
		return "", nil, nil, exitFail
	}
	return tp, rd, closeTrace, exitOK
}

// outputFlag is an output file given by a flag.
type outputFlag struct{ flag, path string }

// checkOutputDirs checks, before a run, that the folder of every output
// exists; it reports one that does not as a usage error (the exit code,
// false).
func checkOutputDirs(outs []outputFlag, stderr io.Writer) (int, bool) {
	for _, o := range outs {
		if err := outputDirExists(o.path); err != nil {
			fmt.Fprintf(stderr, "kvsim sim: --%s: %v\n", o.flag, err)
			return exitUsage, false
		}
	}
	return exitOK, true
}

// checkOutputsApart checks, before a long run, that no two outputs name
// the same file (one would overwrite the other) and that no output names
// one of the run's inputs (which it would overwrite).
func checkOutputsApart(outs []outputFlag, inputs ...string) error {
	for i, o := range outs {
		if o.path == "" {
			continue
		}
		for _, p := range outs[:i] {
			if p.path != "" && sameFile(o.path, p.path) {
				if p.path != o.path {
					return fmt.Errorf("--%s %s and --%s %s: both reach %s; give each its own file", p.flag, p.path, o.flag, o.path, reached(o.path))
				}
				return fmt.Errorf("--%s and --%s: both name %s; give each its own file", p.flag, o.flag, o.path)
			}
		}
		for _, in := range inputs {
			if in != "" && in != "-" && sameFile(o.path, in) {
				return fmt.Errorf("--%s %s: that is an input of this run; writing it would overwrite it", o.flag, o.path)
			}
		}
	}
	return nil
}

// sameFile reports whether two paths name one file: the same file on disk
// when both exist, else the same cleaned absolute path.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(fa, fb)
	}
	return reached(a) == reached(b)
}

// reached returns the file a write to path reaches, whether or not it
// exists yet: its absolute form with the symbolic links of its folders
// and, while it is one, of itself followed (a link to a file not yet
// written is written through).
func reached(path string) string {
	for range 40 { // as the kernel's limit on links followed
		abs, err := filepath.Abs(path)
		if err != nil {
			return path
		}
		dir, base := filepath.Split(abs)
		if d, err := filepath.EvalSymlinks(dir); err == nil {
			dir = d
		}
		p := filepath.Join(dir, base)
		target, err := os.Readlink(p)
		if err != nil {
			return p
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(dir, target)
		}
		path = target
	}
	return path
}

// outputError is a failure to write an output file while the simulation
// runs: it names the flag and the path the user gave, not the trace (the
// run's other errors name the trace) or the temporary file being written.
type outputError struct {
	flag, path string
	err        error
}

func (e *outputError) Error() string {
	cause := e.err
	var pe *fs.PathError
	if errors.As(cause, &pe) {
		cause = pe.Err
	}
	return fmt.Sprintf("--%s %s: %v", e.flag, e.path, cause)
}

func (e *outputError) Unwrap() error { return e.err }

// runError names the trace in an error of a run, unless the error is an
// output's own ([outputError]).
func runError(trace string, err error) error {
	var oe *outputError
	if errors.As(err, &oe) {
		return oe
	}
	return traces.InFile(trace, err)
}

func nameOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// writeAtomic writes a file atomically (see internal/atomicfile): a
// failure never leaves a truncated file behind.
func writeAtomic(path string, fill func(io.Writer) error) error {
	return atomicfile.Write(path, fill)
}

// streamSimOutputs sets the server model up to stream --per-request and
// --timeline to their files as it produces them (and to keep no record it
// is not asked for), so memory follows the requests in flight, not the
// trace's length. It returns the open streams: none for a model that
// cannot stream, which writeSimOutputs writes after the run. The
// llama-server model has no timeline: its file gets the header only, as
// writeSimOutputs writes it.
func streamSimOutputs(f engine.Factory, perReq, timeline string) ([]*lineStream, error) {
	var setResult func(func(engine.RequestResult) error)
	setSample := func(func(engine.Sample) error) {}
	switch sf := f.(type) {
	case *sim.Factory:
		setResult = func(fn func(engine.RequestResult) error) { sf.Sink.Result = fn }
		setSample = func(fn func(engine.Sample) error) { sf.Sink.Sample = fn }
	case *llamacpp.Factory:
		setResult = func(fn func(engine.RequestResult) error) { sf.Sink = fn }
	default:
		return nil, nil
	}
	streams, err := createOutputs(outputFlag{"per-request", perReq}, outputFlag{"timeline", timeline})
	if err != nil {
		return nil, err
	}
	setResult(func(engine.RequestResult) error { return nil })
	if ls := streams[0]; ls != nil {
		enc := json.NewEncoder(ls.w)
		setResult(func(r engine.RequestResult) error { return ls.named(enc.Encode(r)) })
	}
	if ls := streams[1]; ls != nil {
		ls.w.WriteString(engine.TimelineHeader + "\n")
		var row []byte
		setSample(func(x engine.Sample) error {
			row = append(x.AppendCSV(row[:0]), '\n')
			_, err := ls.w.Write(row)
			return ls.named(err)
		})
	}
	return streams, nil
}

// writeSimOutputs writes --per-request and --timeline (each if asked for)
// from a finished run's result.
func writeSimOutputs(res *engine.Result, perReq, timeline string) error {
	if perReq != "" {
		if err := writeAtomic(perReq, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			for _, r := range res.Requests {
				if err := enc.Encode(r); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if timeline == "" {
		return nil
	}
	return writeAtomic(timeline, func(w io.Writer) error { return engine.WriteTimeline(w, res.Timeline) })
}

// lineStream is an output file written while a run goes on: buffered into
// a temporary file beside it and renamed into place by finish only if the
// run and every write succeeded (internal/atomicfile), so a reader never
// sees a partial file and a failure leaves none.
type lineStream struct {
	f *atomicfile.File
	w *bufio.Writer
	// flag and path name the output in errors (createOutputs); empty for
	// createLineStream's.
	flag, path string
}

func createLineStream(path string) (*lineStream, error) {
	f, err := atomicfile.Create(path)
	if err != nil {
		return nil, err
	}
	return &lineStream{f: f, w: bufio.NewWriterSize(f, 1<<16)}, nil
}

// createOutputs creates a stream for each output asked for (nil for one
// whose path is empty), in the order of outs; their errors name their
// flags. If one cannot be created, those created are removed.
func createOutputs(outs ...outputFlag) ([]*lineStream, error) {
	streams := make([]*lineStream, len(outs))
	for i, o := range outs {
		if o.path == "" {
			continue
		}
		ls, err := createLineStream(o.path)
		if err != nil {
			err = &outputError{o.flag, o.path, err}
			finishAll(streams, err)
			return nil, err
		}
		ls.flag, ls.path = o.flag, o.path
		streams[i] = ls
	}
	return streams, nil
}

// finishAll completes every stream (nil ones left out) if err (the run's)
// is nil and every one flushes, and removes them all otherwise, so that a
// run that fails to write one output leaves none it has not already
// finished. It returns the first error, naming its output's flag.
func finishAll(streams []*lineStream, err error) error {
	if err == nil {
		for _, s := range streams {
			if s != nil {
				if err = s.named(s.w.Flush()); err != nil {
					break
				}
			}
		}
	}
	first := err
	for _, s := range streams {
		if s == nil {
			continue
		}
		if ferr := s.f.Finish(err); ferr != nil && first == nil {
			first = s.named(ferr)
		}
	}
	return first
}

// named returns err (nil for nil) as an error of the stream's output flag,
// if it has one.
func (s *lineStream) named(err error) error {
	var oe *outputError
	if err == nil || s.flag == "" || errors.As(err, &oe) {
		return err
	}
	return &outputError{s.flag, s.path, err}
}

// finish completes the file if err (the run's) is nil and removes it
// otherwise; it returns the first error.
func (s *lineStream) finish(err error) error {
	if err == nil {
		err = s.w.Flush()
	}
	return s.f.Finish(err)
}

// warnIgnoredDeps warns that n dependencies of a closed-loop run named no
// earlier request (nothing when n is 0).
func warnIgnoredDeps(stderr io.Writer, n int) {
	if n > 0 {
		fmt.Fprintf(stderr, "kvsim sim: warning: %d dependencies (parent, wait_for) name no earlier request, and their requests ran without them; kvsim trace validate says where\n", n)
	}
}
