package study

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/internal/fielderr"
)

// Study is a parsed and validated study file: a base server configuration,
// the grid of points to simulate, the objective that picks the best point,
// and how to report it. Every point has been applied to the base and
// validated by configs.Parse when Load or Parse returns.
type Study struct {
	// Path is the study file as given ("" for data parsed without a file).
	Path string
	// Title is a one-line name for the study (the report's heading).
	Title string
	// Question is the capacity question the study answers, in prose.
	Question string
	// Objective picks the best point.
	Objective Objective
	// Axes are the grid's dimensions in file order: every [sweep] key, then
	// every [[zip]] group. The first axis varies slowest.
	Axes []Axis
	// Report holds the [report] settings.
	Report ReportSettings
	// OutDir is [output] dir, relative to the current directory ("" when
	// the file does not set it).
	OutDir string
	// Base names the base configuration: its path, or "inline".
	Base string
	// BaseTOML is the base configuration as written (the file, or the
	// inline [base] tables re-encoded).
	BaseTOML string

	points []Point
	digest string
	fleet  bool // the base is a fleet file: points run as fleets
}

// Axis is one dimension of the grid: a single key path with its values,
// or a zipped group of key paths whose values move together. study.json
// stores it as {"keys": [...], "values": [[...], ...]}.
type Axis struct {
	// Keys are the key paths of the server schema (e.g.
	// "server.hicache_ratio"); more than one for a zipped group.
	Keys []string `json:"keys"`
	// Values[i][k] is key k's value at the axis's i-th step.
	Values [][]any `json:"values"`

	pos []pos // where each key is written in the study file
}

// Len is the number of steps of the axis.
func (a Axis) Len() int { return len(a.Values) }

// Param is one swept key's value at a point.
type Param struct {
	Key   string
	Value any
}

// Point is one configuration of the grid.
type Point struct {
	// Index is the point's position in the grid (the first axis varies
	// slowest), stable across runs, shards and parallelism.
	Index int
	// Params are the swept keys' values, in axis order.
	Params []Param
	// File is the validated server configuration of the point.
	File *configs.File
	// Digest is the sha256 of the point's canonical configuration (the
	// TOML document with the trace replaced by its content's sha256).
	Digest string
	// Trace is the trace file the point replays, resolved for opening.
	Trace string
}

// ReportSettings are the [report] keys.
type ReportSettings struct {
	// X is the capacity axis of the plots: a swept key path or a metric
	// (e.g. "host_kv_gb"). Default: the last swept numeric key.
	X string
	// Along is the swept key that varies along each plotted line. Default:
	// X when X is swept, else the last axis's first key.
	Along string
	// Timeline is the point whose tier occupancy over time is plotted:
	// "best" (default) or a point index.
	Timeline string
	// MRC turns the trace's LRU miss-ratio curve on (default true).
	MRC bool
}

// pos is a position in a file; line 0 means unknown.
type pos struct{ line, col int }

// fileSchema is the strict top-level schema of a study file.
type fileSchema struct {
	Title     string           `toml:"title"`
	Question  string           `toml:"question"`
	Base      any              `toml:"base"`
	Objective string           `toml:"objective"`
	Sweep     map[string]any   `toml:"sweep"`
	Zip       []map[string]any `toml:"zip"`
	Report    struct {
		X        string `toml:"x"`
		Along    string `toml:"along"`
		Timeline any    `toml:"timeline"`
		MRC      *bool  `toml:"mrc"`
	} `toml:"report"`
	Output struct {
		Dir string `toml:"dir"`
	} `toml:"output"`
}

// Load reads and validates a study file.
func Load(path string) (*Study, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load study: %w", err)
	}
	return Parse(data, path)
}

// Parse decodes and validates a study. name is the file's path, used in
// error messages and to resolve the base configuration and traces.
// Every problem is reported at once, each as "file:line:col: key: message".
func Parse(data []byte, name string) (*Study, error) {
	data = configs.StripBOM(data)
	var sf fileSchema
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sf); err != nil {
		return nil, configs.TOMLError(name, data, &sf, err)
	}
	keys, err := scanKeys(data)
	if err != nil {
		return nil, configs.TOMLError(name, data, nil, err)
	}
	p := &parser{name: name, data: data, keys: keys}
	s := &Study{Path: name, Title: sf.Title, Question: sf.Question, OutDir: sf.Output.Dir}
	if s.Title == "" {
		p.errAt("title", "title: must be set (a one-line name for the report)")
	}
	base, baseFile := p.base(sf.Base)
	s.fleet = base != nil && len(groupNames(base.doc)) > 0
	s.Axes = p.axes(sf)
	obj, err := ParseObjective(sf.Objective)
	switch {
	case sf.Objective == "":
		p.errAt("objective", `objective: must be set (e.g. "maximize cache_hit_rate subject to p99_ttft_ms <= 2000")`)
	case err != nil:
		p.errAt("objective", "objective: %v", err)
	default:
		s.Objective = obj
		for _, m := range obj.names() {
			if !s.isMetric(m) && !s.hasNumericKey(m) {
				p.errAt("objective", "objective: unknown metric %q%s", m, suggest(m, s.metricNames()))
			}
		}
	}
	s.Report = p.report(sf, s)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	if base == nil {
		return nil, errors.Join(p.errs...)
	}
	s.Base, s.BaseTOML = base.name, base.text
	n, sizes, ok := gridSize(s.Axes)
	if !ok {
		p.errPos(s.Axes[0].pos[0], "sweep: the grid has %s points, more than %d: a study runs a simulation per point; sweep fewer values, or zip keys that move together", sizes, MaxPoints)
		return nil, errors.Join(p.errs...)
	}
	if tl, err := strconv.Atoi(s.Report.Timeline); err == nil && (tl < 0 || tl >= n) {
		p.errAt("report.timeline", `report.timeline: must be "best" or a point index from 0 to %d (got %d)`, n-1, tl)
		return nil, errors.Join(p.errs...)
	}
	s.points = p.points(s, base, baseFile, n)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	h := sha256.New()
	io.WriteString(h, "kvsim-study-v1\n")
	for _, a := range s.Axes {
		fmt.Fprintf(h, "axis %q\n", a.Keys)
	}
	for _, pt := range s.points {
		fmt.Fprintf(h, "point %d %s\n", pt.Index, pt.Digest)
	}
	s.digest = hex.EncodeToString(h.Sum(nil))
	return s, nil
}

// Points returns every point of the grid in index order.
func (s *Study) Points() []Point { return s.points }

// Digest is the sha256 of what decides the study's results: the axes and
// every point's configuration digest (which covers the trace's content).
// Presentation (title, question, objective, report) is not part of it, so
// shards agree on it whatever their output settings.
func (s *Study) Digest() string { return s.digest }

// metricNames lists the metrics of the study's records: those of every
// study, and the fleet metrics for a fleet study.
func (s *Study) metricNames() []string {
	if s.fleet {
		return append(metricNames(), fleetMetricNames()...)
	}
	return metricNames()
}

func (s *Study) isMetric(name string) bool { return slices.Contains(s.metricNames(), name) }

// hasNumericKey reports whether key is swept with numbers only.
func (s *Study) hasNumericKey(key string) bool {
	for _, a := range s.Axes {
		for k, name := range a.Keys {
			if name != key {
				continue
			}
			for _, v := range a.Values {
				if _, ok := number(v[k]); !ok {
					return false
				}
			}
			return true
		}
	}
	return false
}

// parser collects the problems of one study file.
type parser struct {
	name string
	data []byte
	keys []keyInfo
	errs []error
}

// keyInfo is one key assignment of the study file, in file order.
type keyInfo struct {
	parts []string // the full key path: table parts, then the key's parts
	at    pos
	table bool // a [table] or [[array]] header
}

func (p *parser) pos(path string) pos {
	for _, k := range p.keys {
		if strings.Join(k.parts, ".") == path {
			return k.at
		}
	}
	return pos{}
}

func (p *parser) errAt(path, format string, args ...any) {
	p.errPos(p.pos(path), format, args...)
}

func (p *parser) errPos(at pos, format string, args ...any) {
	p.errs = append(p.errs, &fielderr.At{File: p.name, Line: at.line, Col: at.col, Err: fmt.Errorf(format, args...)})
}

// scanKeys lists the study file's key assignments and table headers with
// their positions, in file order (go-toml's maps lose the order, and the
// order of [sweep] keys is the grid's order), from configs.ScanKeys; an
// element of an array of tables has its index as a part ("zip", "0").
// Keys inside values and implied tables are left out: a [sweep] key is
// one key = [values] line.
func scanKeys(data []byte) ([]keyInfo, error) {
	keys, err := configs.ScanKeys(data)
	out := make([]keyInfo, 0, len(keys))
	for _, k := range keys {
		if k.Inline || k.Implied {
			continue
		}
		parts := make([]string, len(k.Path))
		for i, st := range k.Path {
			parts[i] = st.Key
			if st.Index >= 0 {
				parts[i] = strconv.Itoa(st.Index)
			}
		}
		out = append(out, keyInfo{parts: parts, at: pos{k.At.Line, k.At.Col}, table: k.Header})
	}
	return out, err
}

// baseDoc is the decoded base configuration.
type baseDoc struct {
	name string         // its path, or "inline"
	text string         // as written
	doc  map[string]any // decoded
}

// base loads the base configuration: a path relative to the study file, or
// inline tables. It returns the document and the file that relative trace
// paths in it are resolved against.
func (p *parser) base(v any) (*baseDoc, string) {
	switch b := v.(type) {
	case nil:
		p.errPos(pos{}, `base: must be set: a server config path ("../default.toml") or inline [base] tables`)
		return nil, ""
	case string:
		path := b
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(p.name), b)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			p.errAt("base", "base: %v", err)
			return nil, ""
		}
		data = configs.StripBOM(data)
		// The base alone must be a valid server config: its own errors are
		// reported with positions in its own file.
		if _, err := configs.Parse(data, path); err != nil {
			p.errs = append(p.errs, err)
			return nil, ""
		}
		var doc map[string]any
		if err := toml.Unmarshal(data, &doc); err != nil {
			p.errs = append(p.errs, configs.TOMLError(path, data, &doc, err))
			return nil, ""
		}
		return &baseDoc{name: filepath.ToSlash(path), text: string(data), doc: doc}, path
	case map[string]any:
		text, err := toml.Marshal(b)
		if err != nil {
			p.errAt("base", "base: %v", err)
			return nil, ""
		}
		return &baseDoc{name: "inline", text: string(text), doc: b}, p.name
	default:
		p.errAt("base", "base: expected a path (a string) or a table, found %s", configs.Found(v))
		return nil, ""
	}
}

// axes collects the [sweep] keys and [[zip]] groups in file order.
func (p *parser) axes(sf fileSchema) []Axis {
	var axes []Axis
	seen := map[string]pos{}
	add := func(parts []string, root any, at pos, prefix string) (string, []any, bool) {
		key := strings.Join(parts, ".")
		v := lookup(root, parts)
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			p.errPos(at, "%s%q: must be a non-empty list of values (got %s)", prefix, key, describe(v))
			return "", nil, false
		}
		if _, _, ok := fleetKey(key); ok || strings.HasPrefix(key, fleetGroupsKey) {
			if err := checkFleetKey(key, list); err != nil {
				p.errPos(at, "%s%v", prefix, err)
				return "", nil, false
			}
		} else if err := checkKeyPath(key); err != nil {
			p.errPos(at, "%s%v", prefix, err)
			return "", nil, false
		}
		if prev, dup := seen[key]; dup {
			p.errPos(at, "%s%q: swept twice (also at line %d)", prefix, key, prev.line)
			return "", nil, false
		}
		seen[key] = at
		// Each value must be one the key takes: refused here, with its
		// place in the study file, rather than when its point is built.
		bad := false
		for i, v := range list {
			if err := configs.Check(key, v); err != nil {
				p.errPos(at, "%s.%q[%d]: %v", strings.TrimSuffix(prefix, ": "), key, i, err)
				bad = true
			}
		}
		if bad {
			return "", nil, false
		}
		return key, list, true
	}
	var sweep any = sf.Sweep
	for _, k := range p.keys {
		if k.table || len(k.parts) < 2 || k.parts[0] != "sweep" {
			continue
		}
		key, list, ok := add(k.parts[1:], sweep, k.at, "sweep: ")
		if !ok {
			continue
		}
		a := Axis{Keys: []string{key}, pos: []pos{k.at}}
		for _, v := range list {
			a.Values = append(a.Values, []any{v})
		}
		axes = append(axes, a)
	}
	for i, group := range sf.Zip {
		idx := strconv.Itoa(i)
		var a Axis
		var hdr pos
		for _, k := range p.keys {
			if len(k.parts) < 2 || k.parts[0] != "zip" || k.parts[1] != idx {
				continue
			}
			if k.table {
				hdr = k.at
				continue
			}
			prefix := fmt.Sprintf("zip[%d]: ", i)
			key, list, ok := add(k.parts[2:], any(group), k.at, prefix)
			if !ok {
				continue
			}
			if len(a.Keys) > 0 && len(list) != len(a.Values) {
				p.errPos(k.at, "%s%q has %d values, %q has %d: zipped keys need the same number", prefix, key, len(list), a.Keys[0], len(a.Values))
				continue
			}
			if len(a.Keys) == 0 {
				a.Values = make([][]any, len(list))
			}
			a.Keys = append(a.Keys, key)
			a.pos = append(a.pos, k.at)
			for j, v := range list {
				a.Values[j] = append(a.Values[j], v)
			}
		}
		if len(a.Keys) == 0 {
			p.errPos(hdr, "zip[%d]: needs at least one key", i)
			continue
		}
		axes = append(axes, a)
	}
	if len(axes) == 0 && len(p.errs) == 0 {
		p.errAt("sweep", "sweep: needs at least one key path with a list of values")
	}
	return axes
}

// report decodes [report] against the study's axes.
func (p *parser) report(sf fileSchema, s *Study) ReportSettings {
	r := ReportSettings{X: sf.Report.X, Along: sf.Report.Along, Timeline: "best", MRC: true}
	if sf.Report.MRC != nil {
		r.MRC = *sf.Report.MRC
	}
	switch t := sf.Report.Timeline.(type) {
	case nil:
	case string:
		if t != "best" {
			p.errAt("report.timeline", `report.timeline: must be "best" or a point index (got %q)`, t)
		}
	case int64:
		r.Timeline = strconv.FormatInt(t, 10)
	default:
		p.errAt("report.timeline", `report.timeline: must be "best" or a point index (got %v)`, t)
	}
	if len(s.Axes) == 0 {
		return r
	}
	if r.X == "" {
		for _, a := range s.Axes {
			for _, k := range a.Keys {
				if s.hasNumericKey(k) {
					r.X = k
				}
			}
		}
	} else if !s.isMetric(r.X) && !s.hasNumericKey(r.X) {
		p.errAt("report.x", "report.x: %q is neither a metric nor a numeric swept key%s", r.X, suggest(r.X, append(s.metricNames(), s.keys()...)))
	}
	if r.Along == "" {
		if s.axisOf(r.X) >= 0 {
			r.Along = r.X
		} else {
			r.Along = s.Axes[len(s.Axes)-1].Keys[0]
		}
	} else if s.axisOf(r.Along) < 0 {
		p.errAt("report.along", "report.along: %q is not a swept key%s", r.Along, suggest(r.Along, s.keys()))
	}
	return r
}

// keys lists every swept key path.
func (s *Study) keys() []string { return axesKeys(s.Axes) }

// axesKeys lists the keys of axes in order.
func axesKeys(axes []Axis) []string {
	var out []string
	for _, a := range axes {
		out = append(out, a.Keys...)
	}
	return out
}

// axisOf returns the index of the axis that sweeps key, or -1.
func (s *Study) axisOf(key string) int {
	for i, a := range s.Axes {
		if slices.Contains(a.Keys, key) {
			return i
		}
	}
	return -1
}

// points applies every grid point to the base and validates it.
// MaxPoints bounds a study's grid: each point is a simulation, and a grid
// of more is a mistake (a long list swept by accident) that would run for
// days or exhaust memory.
const MaxPoints = 100_000

// gridSize is the number of points of the axes' grid, the product of
// their lengths written out ("3 x 4 x 2 = 24"), and false when it is over
// MaxPoints (checked as it multiplies: no overflow).
func gridSize(axes []Axis) (int, string, bool) {
	n := 1
	var parts []string
	over := false
	for _, a := range axes {
		parts = append(parts, strconv.Itoa(a.Len()))
		if !over && n > MaxPoints/a.Len() {
			over = true
		}
		if !over {
			n *= a.Len()
		}
	}
	if over {
		return 0, strings.Join(parts, " x "), false
	}
	return n, strings.Join(parts, " x ") + " = " + strconv.Itoa(n), n <= MaxPoints
}

// points builds the n points of the grid (gridSize).
func (p *parser) points(s *Study, base *baseDoc, baseFile string, n int) []Point {
	hashes := map[string]string{}
	var out []Point
	idx := make([]int, len(s.Axes))
	for i := range n {
		rem := i
		for k := len(s.Axes) - 1; k >= 0; k-- {
			idx[k] = rem % s.Axes[k].Len()
			rem /= s.Axes[k].Len()
		}
		pt, err := p.point(s, base, baseFile, i, idx, hashes)
		if err != nil {
			p.errs = append(p.errs, err)
			if len(p.errs) >= 20 {
				p.errPos(pos{}, "too many errors")
				return nil
			}
			continue
		}
		out = append(out, pt)
	}
	return out
}

// point builds point i, with idx[k] the step of axis k.
func (p *parser) point(s *Study, base *baseDoc, baseFile string, i int, idx []int, hashes map[string]string) (Point, error) {
	doc := deepCopy(base.doc).(map[string]any)
	pt := Point{Index: i}
	traceFrom := baseFile
	for k, a := range s.Axes {
		for j, key := range a.Keys {
			v := a.Values[idx[k]][j]
			setKey := func() error { return set(doc, strings.Split(key, "."), v) }
			if _, _, ok := fleetKey(key); ok {
				setKey = func() error { return setFleetKey(doc, key, v) }
			}
			if err := setKey(); err != nil {
				return pt, p.pointErr(s, pt, a.pos[j], err.Error())
			}
			pt.Params = append(pt.Params, Param{Key: key, Value: v})
			if key == "workload.trace" {
				traceFrom = p.name
			}
		}
	}
	// The trace: resolve it for opening, and identify it by content.
	if w, ok := lookup(doc, []string{"workload", "trace"}).(string); ok && w != "" {
		resolved := w
		if !filepath.IsAbs(w) {
			resolved = filepath.Join(filepath.Dir(traceFrom), w)
		}
		pt.Trace = resolved
		sum, ok := hashes[resolved]
		if !ok {
			var err error
			if sum, err = hashFile(resolved); err != nil {
				return pt, p.pointErr(s, pt, p.pos("base"), "workload.trace: "+err.Error())
			}
			hashes[resolved] = sum
		}
		set(doc, []string{"workload", "trace"}, "sha256:"+sum)
		canon, err := toml.Marshal(doc)
		if err != nil {
			return pt, fmt.Errorf("%s: point %d: %v", p.name, i, err)
		}
		d := sha256.Sum256(canon)
		pt.Digest = hex.EncodeToString(d[:])
		set(doc, []string{"workload", "trace"}, resolved)
	} else {
		canon, err := toml.Marshal(doc)
		if err != nil {
			return pt, fmt.Errorf("%s: point %d: %v", p.name, i, err)
		}
		d := sha256.Sum256(canon)
		pt.Digest = hex.EncodeToString(d[:])
	}
	data, err := toml.Marshal(doc)
	if err != nil {
		return pt, fmt.Errorf("%s: point %d: %v", p.name, i, err)
	}
	f, err := configs.Parse(data, pointName)
	if err != nil {
		return pt, p.mapConfigErr(s, pt, base, err)
	}
	if err := sglangOnly(f); err != nil {
		return pt, p.pointErr(s, pt, p.pos("base"), err.Error())
	}
	if pt.Trace == "" {
		// Checked here, before anything runs, rather than by the first
		// point to run.
		return pt, p.pointErr(s, pt, p.pos("base"), "workload.trace: every point replays a trace: set workload.trace in the base config, or sweep it")
	}
	pt.File = f
	return pt, nil
}

// pointName is the name configs.Parse sees for a point's document. It has
// no slash, so the (already resolved) trace path is used as it is.
const pointName = "point"

// pointErr formats a problem of one point at a position of the study file.
func (p *parser) pointErr(s *Study, pt Point, at pos, msg string) error {
	where := p.name
	if at.line > 0 {
		where = fmt.Sprintf("%s:%d:%d", p.name, at.line, at.col)
	}
	return fmt.Errorf("%s: point %d (%s): %s", where, pt.Index, formatParams(pt.Params, " "), msg)
}

// mapConfigErr re-positions configs.Parse's errors about a point's generated
// document onto the study file: an error about a swept key points at the
// [sweep] line; one about an inline base key at that key in the study file;
// anything else at the point as a whole.
func (p *parser) mapConfigErr(s *Study, pt Point, base *baseDoc, err error) error {
	var errs []error
	for _, e := range fielderr.Flatten(err) {
		key, rest := configErrKey(e)
		if fk := fleetErrKey(configErrPath(e), groupNames(base.doc)); fk != "" {
			key = fk
		}
		at := pos{}
		found := false
		for _, a := range s.Axes {
			for j, k := range a.Keys {
				if k == key || strings.HasPrefix(key, k+".") || strings.HasPrefix(k, fleetGroupsKey) && strings.HasPrefix(k, key+".") {
					at, found = a.pos[j], true
				}
			}
		}
		if !found && base.name == "inline" {
			at = p.pos("base." + key)
		}
		if at.line == 0 {
			at = p.pos("sweep")
		}
		errs = append(errs, p.pointErr(s, pt, at, rest))
	}
	return errors.Join(errs...)
}

// configErrKey is the key (its parts up to any array index, joined by
// dots) that one of configs.Parse's errors about a point's document is
// about, and the error without the document's name and position. A field
// error carries its key; any other error's is the text before its first
// ": ".
func configErrKey(e error) (key, rest string) {
	var at *fielderr.At
	if errors.As(e, &at) {
		if fe, ok := at.Err.(*fielderr.Error); ok {
			var parts []string
			for _, st := range fe.Path {
				if st.Index >= 0 {
					break
				}
				parts = append(parts, st.Key)
			}
			return strings.Join(parts, "."), fe.Error()
		}
		rest = at.Err.Error()
	} else {
		rest = strings.TrimPrefix(e.Error(), pointName)
		// Strip ":line:col" of the generated document.
		if strings.HasPrefix(rest, ":") {
			r := rest[1:]
			for range 2 {
				if j := strings.IndexFunc(r, func(c rune) bool { return c < '0' || c > '9' }); j > 0 && r[j] == ':' {
					r = r[j+1:]
				}
			}
			rest = strings.TrimSpace(r)
		}
		rest = strings.TrimPrefix(rest, ": ")
	}
	key, _, _ = strings.Cut(rest, ": ")
	if i := strings.IndexByte(key, '['); i >= 0 {
		key = key[:i]
	}
	return key, rest
}

// hashFile returns the hex sha256 of a file's bytes (of every file below
// it, in name order, for a directory).
func hashFile(path string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, _ := filepath.Rel(path, p)
		fmt.Fprintf(h, "%s\n", filepath.ToSlash(rel))
		_, err = io.Copy(h, f)
		return err
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lookup walks a decoded TOML document along parts; nil when absent.
func lookup(v any, parts []string) any {
	for _, k := range parts {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// set assigns v at parts in a decoded TOML document, creating tables.
func set(doc map[string]any, parts []string, v any) error {
	m := doc
	for i, k := range parts[:len(parts)-1] {
		next, ok := m[k]
		if !ok {
			sub := map[string]any{}
			m[k] = sub
			m = sub
			continue
		}
		sub, ok := next.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: is a value, not a table", strings.Join(parts[:i+1], "."))
		}
		m = sub
	}
	m[parts[len(parts)-1]] = v
	return nil
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	default:
		return v
	}
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case []any:
		return "an empty list"
	case map[string]any:
		return "a table"
	default:
		return fmt.Sprintf("%v", v)
	}
}

// number returns a numeric TOML value as a float64.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// formatValue prints a swept value the way it is written in TOML.
func formatValue(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	default:
		return fmt.Sprint(x)
	}
}

// formatParams prints "key=value" pairs joined by sep.
func formatParams(ps []Param, sep string) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(sep)
		}
		fmt.Fprintf(&b, "%s=%s", p.Key, formatValue(p.Value))
	}
	return b.String()
}
