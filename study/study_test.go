package study

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/golden"
	"github.com/kvsim/kvsim/internal/testutil"
)

const tiny = "testdata/tiny.toml"

func loadTiny(t *testing.T) *Study {
	t.Helper()
	s, err := Load(tiny)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func runTo(t *testing.T, s *Study, dir string, opt Options) *Outcome {
	t.Helper()
	opt.Out = dir
	if opt.Version == "" {
		opt.Version = "test"
	}
	out, err := Run(context.Background(), s, opt)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The tiny study's outputs are pinned; the grid order, best point and
// table follow from the file.
func TestGoldenTinyStudy(t *testing.T) {
	s := loadTiny(t)
	if len(s.Points()) != 6 {
		t.Fatalf("points = %d, want 6", len(s.Points()))
	}
	// The first axis varies slowest.
	if p := s.Points()[1].Params; p[0].Value != int64(1500) || p[1].Value != "write_back" {
		t.Errorf("point 1 params = %v, want host_tokens 1500, write_back", p)
	}
	dir := t.TempDir()
	out := runTo(t, s, dir, Options{Jobs: 2})
	if out.Ran != 6 || out.Skipped != 0 || out.Missing != 0 {
		t.Errorf("ran %d skipped %d missing %d, want 6 0 0", out.Ran, out.Skipped, out.Missing)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, out, false); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "golden", "tiny.results.jsonl"), testutil.ReadFile(t, filepath.Join(dir, ResultsJSONL)))
	golden.Check(t, filepath.Join("testdata", "golden", "tiny.results.csv"), testutil.ReadFile(t, filepath.Join(dir, ResultsCSV)))
	golden.Check(t, filepath.Join("testdata", "golden", "tiny.report.md"), testutil.ReadFile(t, filepath.Join(dir, ReportFile)))
	golden.Check(t, filepath.Join("testdata", "golden", "tiny.table.txt"), table.Bytes())
	for _, f := range []string{"plots/hit_rate.png", "plots/hit_rate.svg", "plots/ttft.png", "plots/throughput.png",
		"plots/mrc.png", "plots/occupancy.png", "timelines/point-0004.csv", MRCFile, ManifestFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: missing or empty (%v)", f, err)
		}
	}
}

// Results do not depend on the number of workers.
func TestJobsDoNotChangeResults(t *testing.T) {
	s := loadTiny(t)
	a, b := t.TempDir(), t.TempDir()
	runTo(t, s, a, Options{Jobs: 1})
	runTo(t, s, b, Options{Jobs: 4})
	for _, f := range []string{ResultsJSONL, ResultsCSV, ReportFile} {
		if !bytes.Equal(testutil.ReadFile(t, filepath.Join(a, f)), testutil.ReadFile(t, filepath.Join(b, f))) {
			t.Errorf("%s differs between --jobs 1 and --jobs 4", f)
		}
	}
}

// An interrupted run leaves a truncated last line: the next run warns,
// drops it, runs only the missing points and ends with the same files.
func TestResumeAfterTruncatedLine(t *testing.T) {
	s := loadTiny(t)
	ref := t.TempDir()
	runTo(t, s, ref, Options{Jobs: 2})
	want := testutil.ReadFile(t, filepath.Join(ref, ResultsJSONL))

	dir := t.TempDir()
	runTo(t, s, dir, Options{Jobs: 2})
	lines := strings.SplitAfter(string(want), "\n")
	// Keep points 0..3 in completion-like order, then half of point 4's line.
	kept := []string{lines[2], lines[0], lines[3], lines[1], lines[4][:len(lines[4])/2]}
	if err := os.WriteFile(filepath.Join(dir, ResultsJSONL), []byte(strings.Join(kept, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	out := runTo(t, s, dir, Options{Jobs: 2, Log: &log})
	if out.Ran != 2 || out.Skipped != 4 {
		t.Errorf("ran %d skipped %d, want 2 and 4", out.Ran, out.Skipped)
	}
	if !strings.Contains(log.String(), "results.jsonl:5: ignoring a truncated last line") {
		t.Errorf("no warning about the truncated line:\n%s", log.String())
	}
	if got := testutil.ReadFile(t, filepath.Join(dir, ResultsJSONL)); !bytes.Equal(got, want) {
		t.Errorf("resumed results.jsonl differs from an uninterrupted run:\n%s\nwant\n%s", got, want)
	}
	// A third run has nothing to do.
	if out := runTo(t, s, dir, Options{}); out.Ran != 0 || out.Skipped != 6 {
		t.Errorf("third run: ran %d skipped %d, want 0 and 6", out.Ran, out.Skipped)
	}
}

// A corrupt line that is not the last is an error, not silently dropped;
// results of another study are refused.
func TestResumeRefusesForeignOrCorruptResults(t *testing.T) {
	s := loadTiny(t)
	dir := t.TempDir()
	runTo(t, s, dir, Options{})
	path := filepath.Join(dir, ResultsJSONL)
	data := testutil.ReadFile(t, path)
	bad := strings.Replace(string(data), "\n", "\n{not json\n", 1)
	os.WriteFile(path, []byte(bad), 0o644)
	if _, err := Run(context.Background(), s, Options{Out: dir}); err == nil || !strings.Contains(err.Error(), "results.jsonl:2:") {
		t.Errorf("corrupt middle line: err = %v, want results.jsonl:2: ...", err)
	}
	foreign := strings.ReplaceAll(string(data), s.Digest(), strings.Repeat("0", 64))
	os.WriteFile(path, []byte(foreign), 0o644)
	if _, err := Run(context.Background(), s, Options{Out: dir}); err == nil || !strings.Contains(err.Error(), "another study") {
		t.Errorf("foreign results: err = %v, want another study", err)
	}
}

// Blank lines hold no point; a bad line's error is in the file's terms
// (line, column, key), never Go's.
func TestResultsBlankAndBadLines(t *testing.T) {
	s := loadTiny(t)
	dir := t.TempDir()
	path := filepath.Join(dir, ResultsJSONL)
	os.MkdirAll(dir, 0o755)
	os.WriteFile(path, []byte("\n  \n\n"), 0o644)
	if out := runTo(t, s, dir, Options{}); out.Ran != 6 {
		t.Errorf("an all-blank results.jsonl: ran %d, want 6", out.Ran)
	}
	data := testutil.ReadFile(t, path)
	bad := strings.Replace(string(data), `"point":1,`, `"point":"one",`, 1)
	os.WriteFile(path, []byte(bad), 0o644)
	_, err := Run(context.Background(), s, Options{Out: dir})
	if err == nil || !strings.Contains(err.Error(), "results.jsonl:2: expected a result line written by kvsim study: column ") ||
		!strings.Contains(err.Error(), "point: expected an integer, found a string") || strings.Contains(err.Error(), "Record") {
		t.Errorf("a point that is a string: err = %v", err)
	}
}

// A plot that cannot be drawn does not lose the points: results.jsonl,
// results.csv and report.md are written, and the problem is reported.
func TestPlotFailureKeepsResults(t *testing.T) {
	s := loadTiny(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "plots"), []byte("a file where the plots folder goes"), 0o644)
	out, err := Run(context.Background(), s, Options{Out: dir, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Problems) != 1 || !strings.Contains(out.Problems[0].Error(), "plots") || out.Ran != 6 || len(out.Records) != 6 {
		t.Fatalf("problems %v, ran %d, records %d", out.Problems, out.Ran, len(out.Records))
	}
	for _, f := range []string{ResultsJSONL, ResultsCSV, ReportFile} {
		testutil.ReadFile(t, filepath.Join(dir, f))
	}
}

// Shards cover the grid exactly once and merge into the unsharded files.
func TestShardsMergeToUnsharded(t *testing.T) {
	s := loadTiny(t)
	whole := t.TempDir()
	runTo(t, s, whole, Options{Jobs: 2})
	root := t.TempDir()
	var dirs []string
	for i := range 4 {
		d := filepath.Join(root, "shard", string(rune('a'+i)))
		out := runTo(t, s, d, Options{Shard: Shard{Index: i, Count: 4}})
		for _, r := range out.Records {
			if r.Point%4 != i {
				t.Errorf("shard %d/4 ran point %d", i, r.Point)
			}
		}
		if _, err := os.Stat(filepath.Join(d, ReportFile)); err == nil {
			t.Errorf("shard %d wrote a report; only whole runs and merges do", i)
		}
		dirs = append(dirs, d)
	}
	// A shard given twice is deduplicated.
	merged := filepath.Join(root, "merged")
	out, err := Merge(append(dirs, dirs[0]), Options{Out: merged})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Records) != 6 || out.Missing != 0 {
		t.Errorf("merged %d records, %d missing", len(out.Records), out.Missing)
	}
	for _, f := range []string{ResultsJSONL, ResultsCSV, ReportFile, ManifestFile, MRCFile, "timelines/point-0005.csv"} {
		if !bytes.Equal(testutil.ReadFile(t, filepath.Join(whole, f)), testutil.ReadFile(t, filepath.Join(merged, f))) {
			t.Errorf("%s: merged differs from unsharded", f)
		}
	}
	// A folder of another study is refused.
	other := t.TempDir()
	s2, err := Parse(bytes.Replace(testutil.ReadFile(t, tiny), []byte("6000]"), []byte("7000]"), 1), tiny)
	if err != nil {
		t.Fatal(err)
	}
	runTo(t, s2, other, Options{Shard: Shard{Index: 0, Count: 4}})
	if _, err := Merge([]string{dirs[1], other}, Options{Out: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "not shards of one study") {
		t.Errorf("merging two studies: err = %v", err)
	}
}

// Every bad study file fails with the exact, positioned errors in its
// .err golden file.
func TestStudyFileErrors(t *testing.T) {
	golden.BadFiles(t, "testdata/bad/*.toml", func(t *testing.T, path string) error {
		_, err := Load(path)
		return err
	})
}

func TestParseObjective(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "maximize cache_hit_rate", want: "maximize cache_hit_rate"},
		{in: "minimise  host_kv_gb subject to p99_ttft_ms <= 3e4 and failed == 0", want: "minimize host_kv_gb subject to p99_ttft_ms <= 30000 and failed == 0"},
		{in: "maximize", err: "want"},
		{in: "best cache_hit_rate", err: `must start with "maximize"`},
		{in: "maximize x such that y < 1", err: `want "subject to"`},
		{in: "maximize x subject to y ~ 1", err: "operator"},
		{in: "maximize x subject to y < z", err: `expected a finite number as the bound, found "z"`},
		{in: "maximize x subject to y < NaN", err: `expected a finite number as the bound, found "NaN"`},
		{in: "maximize x subject to y <= inf", err: `expected a finite number as the bound, found "inf"`},
		{in: "maximize x subject to y >= -Inf", err: `expected a finite number as the bound, found "-Inf"`},
		{in: "maximize x subject to y < 1 or z > 2", err: `joined by "and"`},
		{in: "maximize x subject to y < 1 and", err: "want a constraint"},
	} {
		o, err := ParseObjective(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseObjective(%q) error = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || o.String() != tc.want {
			t.Errorf("ParseObjective(%q) = %q, %v; want %q", tc.in, o, err, tc.want)
		}
	}
}

// Best honours the constraints, the direction, and breaks ties by point.
func TestObjectiveBest(t *testing.T) {
	mk := func(point int, hit, p99, host float64) *Record {
		r := &Record{Point: point}
		r.Metrics.CacheHitRate, r.Metrics.P99TTFT, r.Sizing.HostKVGB = hit, p99, host
		return r
	}
	recs := []*Record{mk(0, 0.1, 50, 0), mk(1, 0.3, 20, 100), mk(2, 0.5, 40, 200), mk(3, 0.3, 10, 100)}
	for _, tc := range []struct {
		obj  string
		want int
	}{
		{"maximize cache_hit_rate", 2},
		{"maximize cache_hit_rate subject to p99_ttft_ms <= 30", 1}, // tie with 3: lowest point
		{"minimize host_kv_gb subject to cache_hit_rate >= 0.3", 1},
		{"minimize host_kv_gb", 0},
		{"minimize p99_ttft_ms subject to cache_hit_rate > 0.9", -1},
	} {
		o, err := ParseObjective(tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		if got := o.Best(recs); got != tc.want {
			t.Errorf("%s: best = %d, want %d", tc.obj, got, tc.want)
		}
	}
}

// Every key path of the server schema is sweepable, tables and unknown
// paths are not.
func TestSchemaKeys(t *testing.T) {
	keys := schemaKeys()
	for _, k := range []string{"seed", "server.hicache_ratio", "cache.write_policy", "cache.cp", "gpu.preset",
		"gpu.memory_mib", "model.preset", "model.layers", "cost.efficiency.gemm_mfu", "cost.fitted.prefill",
		"storage.enabled", "workload.trace"} {
		if !slices.Contains(keys, k) {
			t.Errorf("schema lacks %q", k)
		}
		if err := checkKeyPath(k); err != nil {
			t.Errorf("checkKeyPath(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"server", "cost.efficiency", "server.nope", "gpu.preset.x"} {
		if checkKeyPath(k) == nil {
			t.Errorf("checkKeyPath(%q) accepted", k)
		}
	}
}

// A cancelled run keeps what finished and resumes.
func TestCancelledRunResumes(t *testing.T) {
	s := loadTiny(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, s, Options{Out: dir, Jobs: 1, Version: "test"})
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		// The one worker may win the race for every point; then there is
		// nothing to resume.
		if err != nil {
			t.Fatalf("err = %v", err)
		}
	}
	out := runTo(t, s, dir, Options{})
	if len(out.Records) != 6 {
		t.Fatalf("after resume %d records, want 6", len(out.Records))
	}
}

// A study file, and the base config it names, may start with a UTF-8 byte
// order mark: the study is the same as without it.
func TestStudyByteOrderMark(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"tiny_base.toml", "tiny_chat.jsonl"} {
		data := testutil.ReadFile(t, filepath.Join("testdata", name))
		if strings.HasSuffix(name, ".toml") {
			data = append([]byte("\ufeff"), data...)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	doc := "\ufefftitle = \"t\"\nobjective = \"maximize cache_hit_rate\"\nbase = \"tiny_base.toml\"\n[sweep]\n\"cache.host_tokens\" = [1500]\n"
	s, err := Parse([]byte(doc), filepath.Join(dir, "bom.toml"))
	if err != nil {
		t.Fatalf("Parse with byte order marks: %v", err)
	}
	if len(s.Points()) != 1 {
		t.Fatalf("%d points, want 1", len(s.Points()))
	}
}

// The report's comparison with the optimum reads the curve at the largest
// capacity at or below the point's where OPT was computed, and says
// nothing where the two curves do not compare (OPT below LRU: block ids
// that are not prefix-chained).
func TestOPTSentence(t *testing.T) {
	if s := optSentence([]MRCPoint{{1000, 0.5, 0.6}}, 2000); s != "" {
		t.Errorf("OPT below LRU: %q", s)
	}
	nan := math.NaN()
	mrc := []MRCPoint{{1000, 0.9, 0.7}, {2000, 0.8, nan}, {3000, 0.7, 0.5}, {4000, 0.6, 0.6}}
	for _, tc := range []struct {
		capacity int64
		want     string
	}{
		{500, ""},
		{2500, "read at 1,000 tokens, its nearest optimum at or below it), LRU eviction serves 10.0% of the trace's prompt tokens from cache and Belady's offline optimum 30.0%: a smarter eviction policy could add at most 20.0 percentage points"},
		{3500, "LRU eviction serves 30.0% of the trace's prompt tokens from cache and Belady's offline optimum 50.0%"},
		{9000, "Belady's offline optimum 40.0%: LRU is already as good as any eviction policy at this capacity."},
	} {
		got := optSentence(mrc, tc.capacity)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("capacity %d: %q, want it to hold %q", tc.capacity, got, tc.want)
		}
	}
}
