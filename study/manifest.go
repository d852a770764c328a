package study

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// Manifest is study.json: what a run's output folder holds results of,
// enough to merge shards and write the table, plots and report without the
// study file.
type Manifest struct {
	// Format is the manifest format version (1).
	Format int `json:"kvsim_study"`
	// Study is the study file's path as given to kvsim study.
	Study     string `json:"study"`
	Title     string `json:"title"`
	Question  string `json:"question,omitempty"`
	Objective string `json:"objective"`
	// Axes are the swept keys and their values in grid order.
	Axes []Axis `json:"axes"`
	// Report holds the [report] settings.
	Report ManifestReport `json:"report"`
	// Base and BaseTOML name and hold the base configuration.
	Base     string `json:"base"`
	BaseTOML string `json:"base_toml"`
	// StudyDigest is [Study.Digest].
	StudyDigest string `json:"study_digest"`
	// Points is the grid's size.
	Points int `json:"points"`
	// Shard is "i/n" for a shard's folder, "" for a whole grid or a merge.
	Shard string `json:"shard,omitempty"`
}

// ManifestReport is [report] as stored in study.json.
type ManifestReport struct {
	X        string `json:"x"`
	Along    string `json:"along"`
	Timeline string `json:"timeline"`
	MRC      bool   `json:"mrc"`
}

const manifestFormat = 1

func (s *Study) manifest(sh Shard) *Manifest {
	m := &Manifest{
		Format: manifestFormat, Study: s.Path, Title: s.Title, Question: s.Question,
		Objective: s.Objective.String(), Base: s.Base, BaseTOML: s.BaseTOML,
		StudyDigest: s.digest, Points: len(s.points), Shard: sh.String(),
		Report: ManifestReport{X: s.Report.X, Along: s.Report.Along, Timeline: s.Report.Timeline, MRC: s.Report.MRC},
	}
	for _, a := range s.Axes {
		m.Axes = append(m.Axes, Axis{Keys: a.Keys, Values: a.Values})
	}
	return m
}

// keys lists the swept keys in axis order.
func (m *Manifest) keys() []string { return axesKeys(m.Axes) }

func (m *Manifest) write(dir string) error {
	return writeAtomic(filepath.Join(dir, ManifestFile), func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	})
}

// ReadManifest reads a folder's study.json.
func ReadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, ManifestFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: not a kvsim study output folder: %w", dir, err)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if m.Format != manifestFormat {
		return nil, fmt.Errorf("%s: kvsim_study format %d, this kvsim reads %d", path, m.Format, manifestFormat)
	}
	return &m, nil
}

// finish rewrites results.jsonl in point order and writes results.csv; for
// a whole grid (not a shard) it also draws the plots and writes report.md.
func finish(m *Manifest, dir string, logw io.Writer) (*Outcome, error) {
	resPath := filepath.Join(dir, ResultsJSONL)
	lines, warn, err := readResults(resPath)
	if err != nil {
		return nil, err
	}
	if warn != "" {
		fmt.Fprintf(logw, "kvsim study: warning: %s\n", warn)
	}
	lines, err = dedupe(lines, m.StudyDigest, resPath, logw)
	if err != nil {
		return nil, err
	}
	if err := writeLines(resPath, lines); err != nil {
		return nil, err
	}
	recs := make([]*Record, len(lines))
	for i := range lines {
		recs[i] = &lines[i].rec
	}
	if err := writeAtomic(filepath.Join(dir, ResultsCSV), func(w io.Writer) error { return writeCSV(w, m.keys(), recs) }); err != nil {
		return nil, err
	}
	obj, err := ParseObjective(m.Objective)
	if err != nil {
		return nil, fmt.Errorf("%s: objective: %w", filepath.Join(dir, ManifestFile), err)
	}
	out := &Outcome{Manifest: m, Records: recs, Best: obj.Best(recs), Files: []string{ResultsJSONL, ResultsCSV}}
	want := m.Points
	if sh, err := ParseShard(m.Shard); err == nil && m.Shard != "" {
		want = 0
		for i := range m.Points {
			if sh.Has(i) {
				want++
			}
		}
	}
	out.Missing = want - len(recs)
	if m.Shard != "" {
		return out, nil
	}
	// From here on the results are safe on disk: a plot or the report that
	// cannot be written is reported, and the rest is still written.
	// mrc.csv is read once, for the plot and for the report's comparison
	// of LRU with the optimum.
	mrc, note, err := readMRC(dir)
	var plots []Plot
	if err == nil {
		plots, err = drawPlots(m, dir, recs, out.Best, obj, mrc, note)
	}
	if err != nil {
		out.Problems = append(out.Problems, fmt.Errorf("plots: %w", err))
		plots = nil
	}
	for _, p := range plots {
		out.Files = append(out.Files, filepath.Join(plotDir, p.Name+".png"), filepath.Join(plotDir, p.Name+".svg"))
	}
	if err := writeAtomic(filepath.Join(dir, ReportFile), func(w io.Writer) error {
		return writeReport(w, m, recs, out.Best, obj, plots, mrc)
	}); err != nil {
		out.Problems = append(out.Problems, fmt.Errorf("report: %w", err))
		return out, nil
	}
	out.Files = append(out.Files, ReportFile)
	return out, nil
}

// dedupe sorts lines by point and keeps one line per point; a line of
// another study is an error.
func dedupe(lines []line, digest, path string, logw io.Writer) ([]line, error) {
	slices.SortStableFunc(lines, func(a, b line) int { return a.rec.Point - b.rec.Point })
	var out []line
	for _, l := range lines {
		if l.rec.StudyDigest != digest {
			return nil, fmt.Errorf("%s: point %d belongs to another study (digest %.12s, want %.12s)", path, l.rec.Point, l.rec.StudyDigest, digest)
		}
		if n := len(out); n > 0 && out[n-1].rec.Point == l.rec.Point {
			if !bytes.Equal(out[n-1].raw, l.raw) {
				fmt.Fprintf(logw, "kvsim study: warning: point %d has two different results (kvsim %s and %s); keeping the first\n",
					l.rec.Point, out[n-1].rec.Version, l.rec.Version)
			}
			continue
		}
		out = append(out, l)
	}
	return out, nil
}

// Merge joins the output folders of shards of one study into opt.Out:
// it checks that they belong to the same study (digest), keeps one result
// per point, copies the timelines and the miss-ratio curve, and writes
// results, table data, plots and report as a whole-grid run would.
func Merge(dirs []string, opt Options) (*Outcome, error) {
	logw := opt.Log
	if logw == nil {
		logw = io.Discard
	}
	if len(dirs) == 0 {
		return nil, errors.New("merge: no folders")
	}
	var m *Manifest
	var all []line
	for _, d := range dirs {
		dm, err := ReadManifest(d)
		if err != nil {
			return nil, err
		}
		if m == nil {
			m = dm
		} else if dm.StudyDigest != m.StudyDigest {
			return nil, fmt.Errorf("merge: %s is study %.12s, %s is study %.12s: not shards of one study", d, dm.StudyDigest, dirs[0], m.StudyDigest)
		}
		lines, warn, err := readResults(filepath.Join(d, ResultsJSONL))
		if err != nil {
			return nil, err
		}
		if warn != "" {
			fmt.Fprintf(logw, "kvsim study: warning: %s\n", warn)
		}
		all = append(all, lines...)
	}
	merged := *m
	merged.Shard = ""
	if err := os.MkdirAll(filepath.Join(opt.Out, timelineDir), 0o755); err != nil {
		return nil, err
	}
	lines, err := dedupe(all, m.StudyDigest, "merge", logw)
	if err != nil {
		return nil, err
	}
	versions := map[string]bool{}
	for _, l := range lines {
		versions[l.rec.Version] = true
	}
	if len(versions) > 1 {
		fmt.Fprintf(logw, "kvsim study: warning: the shards ran different kvsim versions %v; results may differ between versions\n", sortedKeys(versions))
	}
	for _, l := range lines {
		name := timelineName(l.rec.Point)
		for _, d := range dirs {
			if err := copyFile(filepath.Join(d, timelineDir, name), filepath.Join(opt.Out, timelineDir, name)); err == nil {
				break
			}
		}
	}
	for _, d := range dirs {
		if err := copyFile(filepath.Join(d, MRCFile), filepath.Join(opt.Out, MRCFile)); err == nil {
			break
		}
	}
	if err := merged.write(opt.Out); err != nil {
		return nil, err
	}
	if err := writeLines(filepath.Join(opt.Out, ResultsJSONL), lines); err != nil {
		return nil, err
	}
	return finish(&merged, opt.Out, logw)
}

// copyFile copies src to dst atomically (a no-op when they are the same).
func copyFile(src, dst string) error {
	if a, err := filepath.Abs(src); err == nil {
		if b, err := filepath.Abs(dst); err == nil && a == b {
			return nil
		}
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return writeAtomic(dst, func(w io.Writer) error { _, err := w.Write(data); return err })
}
