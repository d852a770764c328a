package study

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// Shard selects a share of the grid: the points whose index mod Count is
// Index. The zero value is the whole grid.
type Shard struct{ Index, Count int }

// ParseShard parses "i/n" with 0 <= i < n.
func ParseShard(s string) (Shard, error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return Shard{}, fmt.Errorf("shard: want i/n with 0 <= i < n (got %q)", s)
	}
	return Shard{Index: i, Count: n}, nil
}

// String prints "i/n", or "" for the whole grid.
func (sh Shard) String() string {
	if sh.Count <= 1 {
		return ""
	}
	return fmt.Sprintf("%d/%d", sh.Index, sh.Count)
}

// Has reports whether the point index belongs to the shard.
func (sh Shard) Has(point int) bool { return sh.Count <= 1 || point%sh.Count == sh.Index }

// Options configures Run and Merge.
type Options struct {
	// Out is the output folder (created if missing).
	Out string
	// Jobs is how many points are simulated at once; <= 0 means one per
	// CPU. Results do not depend on it.
	Jobs int
	// Shard restricts the run to a share of the grid.
	Shard Shard
	// Version is the kvsim version written into every record.
	Version string
	// Log receives warnings and progress (nil: discarded).
	Log io.Writer
	// TTY draws a progress bar on Log instead of one line per point.
	TTY bool
}

// Outcome is what a run or merge left in its output folder.
type Outcome struct {
	// Manifest describes the study.
	Manifest *Manifest
	// Records holds every result in the folder, in point order.
	Records []*Record
	// Best is the index in Records of the best point for the objective,
	// or -1 when no point meets the constraints.
	Best int
	// Ran and Skipped count the points simulated now and those found
	// already done in results.jsonl.
	Ran, Skipped int
	// Missing counts the points of the grid (of the shard, for a shard
	// run) without a result.
	Missing int
	// Files lists the files written, relative to the output folder.
	Files []string
	// Problems lists what could not be written after the results were
	// safe (a plot, the report): the run is a failure, but every finished
	// point is in results.jsonl and results.csv, and the table can be
	// printed.
	Problems []error
}

// Output file names in the output folder.
const (
	ResultsJSONL = "results.jsonl"
	ResultsCSV   = "results.csv"
	ManifestFile = "study.json"
	ReportFile   = "report.md"
	MRCFile      = "mrc.csv"
	timelineDir  = "timelines"
	plotDir      = "plots"
)

// Run simulates the study's points (the shard's share), skipping those
// already in the output folder's results.jsonl, then writes results.jsonl
// in point order, results.csv and, for a whole-grid run, the plots and
// report.md. Cancelling ctx stops handing out points; every finished
// point stays in results.jsonl for the next run.
func Run(ctx context.Context, s *Study, opt Options) (*Outcome, error) {
	logw := opt.Log
	if logw == nil {
		logw = io.Discard
	}
	if err := os.MkdirAll(filepath.Join(opt.Out, timelineDir), 0o755); err != nil {
		return nil, err
	}
	m := s.manifest(opt.Shard)
	if err := m.write(opt.Out); err != nil {
		return nil, err
	}
	resPath := filepath.Join(opt.Out, ResultsJSONL)
	done, err := loadExisting(resPath, s.Digest(), opt.Version, logw)
	if err != nil {
		return nil, err
	}
	var todo []Point
	skipped := 0
	for _, pt := range s.points {
		if !opt.Shard.Has(pt.Index) {
			continue
		}
		if _, ok := done[pt.Index]; ok {
			skipped++
			continue
		}
		todo = append(todo, pt)
	}
	if s.Report.MRC {
		if err := writeMRC(s, opt.Out); err != nil {
			fmt.Fprintf(logw, "kvsim study: miss-ratio curve: %v\n", err)
		}
	}
	ran, runErr := runPoints(ctx, s, todo, skipped, resPath, opt, logw)
	if runErr != nil {
		return nil, runErr
	}
	out, err := finish(m, opt.Out, logw)
	if err != nil {
		return nil, err
	}
	out.Ran, out.Skipped = ran, skipped
	return out, nil
}

// loadExisting reads results.jsonl for resuming: the points already done.
// A truncated last line is dropped from the file (with a warning) so that
// new lines append cleanly; lines of another study are an error.
func loadExisting(path, digest, version string, logw io.Writer) (map[int]bool, error) {
	lines, warn, err := readResults(path)
	if err != nil {
		return nil, err
	}
	if warn != "" {
		fmt.Fprintf(logw, "kvsim study: warning: %s\n", warn)
		if err := writeLines(path, lines); err != nil {
			return nil, err
		}
	}
	done := map[int]bool{}
	versions := map[string]bool{}
	for _, l := range lines {
		if l.rec.StudyDigest != digest {
			return nil, fmt.Errorf("%s: point %d was written by another study (digest %.12s, this study %.12s): use another --out or remove the folder", path, l.rec.Point, l.rec.StudyDigest, digest)
		}
		done[l.rec.Point] = true
		versions[l.rec.Version] = true
	}
	if len(done) > 0 {
		fmt.Fprintf(logw, "kvsim study: resuming: %d points already in %s\n", len(done), path)
	}
	if len(versions) > 1 || (len(versions) == 1 && !versions[version]) {
		fmt.Fprintf(logw, "kvsim study: warning: %s mixes kvsim versions %v with this one (%s)\n", path, sortedKeys(versions), version)
	}
	return done, nil
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// pointResult is what a worker hands back.
type pointResult struct {
	pt   Point
	raw  []byte
	rec  *Record
	err  error
	wall time.Duration
}

// runPoints simulates todo with a pool of opt.Jobs workers, appending each
// result to results.jsonl as it completes (one write and fsync per line).
func runPoints(ctx context.Context, s *Study, todo []Point, skipped int, resPath string, opt Options, logw io.Writer) (int, error) {
	if len(todo) == 0 {
		return 0, nil
	}
	app, err := openAppender(resPath)
	if err != nil {
		return 0, err
	}
	n, err := runPointsTo(ctx, app, s, todo, skipped, resPath, opt, logw)
	if cerr := app.close(); err == nil && cerr != nil {
		err = fmt.Errorf("%w; the %d points finished are in %s, run again to resume", cerr, n, resPath)
	}
	return n, err
}

func runPointsTo(ctx context.Context, app *appender, s *Study, todo []Point, skipped int, resPath string, opt Options, logw io.Writer) (int, error) {
	jobs := opt.Jobs
	if jobs <= 0 {
		jobs = runtime.GOMAXPROCS(0)
	}
	jobs = min(jobs, len(todo))
	work := make(chan Point)
	results := make(chan pointResult)
	stop := make(chan struct{})
	for range jobs {
		go func() {
			for pt := range work {
				start := time.Now()
				rec, raw, err := simulatePoint(s, pt, opt)
				select {
				case results <- pointResult{pt: pt, raw: raw, rec: rec, err: err, wall: time.Since(start)}:
				case <-stop:
					return
				}
			}
		}()
	}
	go func() {
		defer close(work)
		for _, pt := range todo {
			select {
			case work <- pt:
			case <-stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	prog := newProgress(logw, opt.TTY, len(todo), skipped)
	ran := 0
	for ran < len(todo) {
		var r pointResult
		select {
		case r = <-results:
		case <-ctx.Done():
			close(stop)
			prog.finish()
			return ran, fmt.Errorf("interrupted after %d of %d points; the finished ones are in %s, run again to resume", ran, len(todo), resPath)
		}
		if r.err != nil {
			close(stop)
			prog.finish()
			return ran, fmt.Errorf("point %d (%s): %w", r.pt.Index, formatParams(r.pt.Params, " "), r.err)
		}
		if err := app.add(r.raw); err != nil {
			close(stop)
			prog.finish()
			return ran, fmt.Errorf("point %d: %w; the %d points finished before it are in %s, run again to resume", r.pt.Index, err, ran, resPath)
		}
		ran++
		prog.markDone(r.pt, r.rec, r.wall)
	}
	close(stop)
	prog.finish()
	return ran, nil
}

// simulatePoint runs one point and writes its timeline; it returns the
// record and its results.jsonl line.
func simulatePoint(s *Study, pt Point, opt Options) (*Record, []byte, error) {
	if pt.File.IsFleet() {
		return simulateFleetPoint(s, pt, opt)
	}
	b, err := pt.File.Build()
	if err != nil {
		return nil, nil, err
	}
	res, err := runPointTrace(pt, b.Engine.Run)
	if err != nil {
		return nil, nil, err
	}
	tl := filepath.Join(opt.Out, timelineDir, timelineName(pt.Index))
	if err := writeAtomic(tl, func(w io.Writer) error { return engine.WriteTimeline(w, res.Timeline) }); err != nil {
		return nil, nil, err
	}
	return pointRecord(s, pt, opt, b, res.Summary, nil)
}

// runPointTrace runs run (a server's or a fleet's) on pt's trace, opened
// by openPointTrace, and closes it; a run's error names the trace.
func runPointTrace[R any](pt Point, run func(engine.Source) (R, error)) (R, error) {
	rd, err := openPointTrace(pt)
	if err != nil {
		var zero R
		return zero, err
	}
	defer rd.Close()
	res, err := run(rd)
	if err != nil {
		return res, traces.InFile(pt.Trace, err)
	}
	return res, nil
}

// openPointTrace opens a point's trace with its workload settings (rate
// scale, idle-gap cap) applied.
func openPointTrace(pt Point) (*traces.Reader, error) {
	if pt.Trace == "" {
		return nil, errors.New("no trace: set workload.trace in the base config")
	}
	tf := traces.FormatAuto
	if name := pt.File.Workload.Format; name != "" {
		var err error
		if tf, err = traces.ParseFormat(name); err != nil {
			return nil, fmt.Errorf("workload.format: %w", err)
		}
	}
	rd, err := traces.Open(pt.Trace, tf)
	if err != nil {
		return nil, err
	}
	if err := pt.File.Workload.OpenTrace(rd); err != nil {
		rd.Close()
		return nil, fmt.Errorf("workload.rate_scale: %w", err)
	}
	if c := pt.File.Workload.IdleGapCapNs(); c > 0 {
		if _, err := rd.CapIdleGaps(c); err != nil {
			rd.Close()
			return nil, traces.InFile(pt.Trace, err)
		}
	}
	return rd, nil
}

// pointRecord builds a point's record from its results, and its
// results.jsonl line.
func pointRecord(s *Study, pt Point, opt Options, b *configs.Built, sum engine.Summary, fm *FleetMetrics) (*Record, []byte, error) {
	rec := &Record{
		Point: pt.Index, Params: map[string]any{}, Seed: b.Sim.Seed, Version: opt.Version,
		StudyDigest: s.Digest(), ConfigDigest: pt.Digest, Sizing: sizingOf(pt.File, b), Metrics: sum, Fleet: fm,
	}
	for _, p := range pt.Params {
		rec.Params[p.Key] = p.Value
	}
	raw, err := encodeLine(rec)
	if err != nil {
		return nil, nil, err
	}
	// Hand back the record as it reads back from the line, like a resumed
	// or merged one.
	var back Record
	if err := json.Unmarshal(raw, &back); err != nil {
		return nil, nil, err
	}
	return &back, raw, nil
}

// simulateFleetPoint runs a fleet point as kvsim sim --config runs the
// fleet file (closed loop unless workload.open_loop, no timeline). Its sizing and seed are its first
// group's server's.
func simulateFleetPoint(s *Study, pt Point, opt Options) (*Record, []byte, error) {
	fb, err := pt.File.BuildFleet(configs.ServerOptions{NoTimeline: true}, 0)
	if err != nil {
		return nil, nil, err
	}
	b, err := fb.Groups[0].File.Build()
	if err != nil {
		return nil, nil, fmt.Errorf("fleet group %s: %w", fb.Groups[0].Name, err)
	}
	res, err := runPointTrace(pt, fb.Factory.RunFleet)
	if err != nil {
		return nil, nil, err
	}
	return pointRecord(s, pt, opt, b, res.Summary, fleetMetricsOf(res))
}

func timelineName(point int) string { return fmt.Sprintf("point-%04d.csv", point) }
