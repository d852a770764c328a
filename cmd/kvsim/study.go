package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/study"
)

func init() {
	register(&command{
		name:    "study",
		summary: "run a what-if capacity study from a TOML file: a sweep, a table with the best point, plots and a report",
		run:     runStudy,
	})
}

const studyUsage = `usage: kvsim study FILE.toml|NAME [--out DIR] [--jobs N] [--shard i/n]
       kvsim study merge [--out DIR] DIR...

NAME is a study bundled in the binary (default, chat_host_memory,
fleet_routing, owner_lanes, write_policy: configs/studies/ in the
repository), run from any directory. A study whose base config is a fleet
runs each point as a fleet (docs/fleet.md). Runs every point of the study's grid (in parallel; the results do not
depend on --jobs), appending each to DIR/results.jsonl as it finishes, then
writes results.csv, plots/ and report.md and prints the table with the best
point for the study's objective. Rerunning resumes: points already in
results.jsonl are skipped.

--shard i/n runs only the points whose index mod n is i, into DIR/shard-i-of-n;
'kvsim study merge DIR...' joins such folders into one (default: a folder
"merged" beside the first). docs/studies.md describes the study file,
docs/scale-out.md Kubernetes and Slurm manifests.
`

func runStudy(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "merge" {
		return runStudyMerge(args[1:], stdout, stderr)
	}
	fs := newCommand("kvsim study", studyUsage, stderr)
	out := fs.String("out", "", `output folder (default: the study's [output] dir, else out/<study name>)`)
	jobs := fs.Int("jobs", 0, "points simulated at once (default: one per CPU; each may take ~0.5 GB on the bundled trace)")
	shard := fs.String("shard", "", "run only the share i/n of the grid (point index mod n == i)")
	// Flags may follow the file name.
	pos, code, ok := fs.parsePositional(args)
	if !ok {
		return code
	}
	if len(pos) > 1 {
		fmt.Fprintf(stderr, "kvsim study: unexpected argument %q\n", pos[1])
		return exitUsage
	}
	if *jobs < 0 {
		fmt.Fprintf(stderr, "kvsim study: --jobs: must be >= 0, 0 for one per CPU (got %d)\n", *jobs)
		return exitUsage
	}
	if len(pos) == 0 {
		fmt.Fprintf(stderr, "kvsim study: give a study file, or the name of a bundled study (%s)\n", strings.Join(configs.BundledStudies(), ", "))
		fs.Usage()
		return exitUsage
	}
	file, err := resolveStudy(pos[0], stderr)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim study: %v\n", err)
		return exitUsage
	}
	var sh study.Shard
	if *shard != "" {
		if sh, err = study.ParseShard(*shard); err != nil {
			fmt.Fprintf(stderr, "kvsim study: --%v\n", err)
			return exitUsage
		}
	}
	s, err := study.Load(file)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim study: %v\n", err)
		return exitUsage
	}
	dir := *out
	if dir == "" {
		dir = s.OutDir
	}
	if dir == "" {
		dir = filepath.Join("out", strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)))
	}
	if sh.Count > 1 {
		dir = filepath.Join(dir, fmt.Sprintf("shard-%d-of-%d", sh.Index, sh.Count))
	}
	ctx, stop := interruptContext()
	defer stop()
	fmt.Fprintf(stderr, "kvsim study: %s: %d points%s -> %s\n", s.Title, len(s.Points()), shardNote(sh), dir)
	res, err := study.Run(ctx, s, study.Options{
		Out: dir, Jobs: *jobs, Shard: sh, Version: version, Log: stderr, TTY: isTerminal(stderr),
	})
	if err != nil {
		fmt.Fprintf(stderr, "kvsim study: %v\n", err)
		return exitFail
	}
	return printStudy(stdout, stderr, dir, res)
}

// resolveStudy turns the study argument into a file: a path that exists
// is that file; a bare name (no path separator, no ".toml") that does not
// exist is a bundled study, whose files (embedded in the binary) are
// written once under the user's cache folder, as studies read their
// traces from files. So `kvsim study default` works from any directory.
func resolveStudy(arg string, stderr io.Writer) (string, error) {
	if _, err := os.Stat(arg); err == nil || strings.ContainsAny(arg, `/\`) || strings.HasSuffix(arg, ".toml") {
		return arg, nil // study.Load reports a missing file
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	path, err := configs.BundledStudy(filepath.Join(dir, "kvsim"), arg)
	if err != nil {
		return "", fmt.Errorf("%s: no such study file, and %v", arg, err)
	}
	fmt.Fprintf(stderr, "kvsim study: bundled study %q (its files: %s)\n", arg, filepath.Dir(filepath.Dir(path)))
	return path, nil
}

func shardNote(sh study.Shard) string {
	if sh.Count <= 1 {
		return ""
	}
	return fmt.Sprintf(" (shard %s: index mod %d == %d)", sh, sh.Count, sh.Index)
}

func runStudyMerge(args []string, stdout, stderr io.Writer) int {
	fs := newCommand("kvsim study merge", studyUsage, stderr)
	out := fs.String("out", "", `output folder (default: "merged" beside the first folder)`)
	dirs, code, ok := fs.parsePositional(args)
	if !ok {
		return code
	}
	if len(dirs) == 0 {
		fmt.Fprintln(stderr, "kvsim study merge: give the shards' output folders")
		return exitUsage
	}
	dir := *out
	if dir == "" {
		dir = filepath.Join(filepath.Dir(filepath.Clean(dirs[0])), "merged")
	}
	res, err := study.Merge(dirs, study.Options{Out: dir, Version: version, Log: stderr})
	if err != nil {
		fmt.Fprintf(stderr, "kvsim study merge: %v\n", err)
		return exitFail
	}
	return printStudy(stdout, stderr, dir, res)
}

// printStudy prints the table and where the files are.
func printStudy(stdout, stderr io.Writer, dir string, res *study.Outcome) int {
	m := res.Manifest
	fmt.Fprintf(stdout, "%s\n\n", m.Title)
	if err := study.WriteTable(stdout, res, isTerminal(stdout)); err != nil {
		fmt.Fprintf(stderr, "kvsim study: %v\n", err)
		return exitFail
	}
	if res.Missing > 0 {
		fmt.Fprintf(stdout, "%d points have no result yet\n", res.Missing)
	}
	fmt.Fprintln(stdout)
	for _, f := range res.Files {
		if strings.HasSuffix(f, ".svg") {
			continue
		}
		fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(dir, f))
	}
	if len(res.Problems) > 0 {
		for _, p := range res.Problems {
			fmt.Fprintf(stderr, "kvsim study: %v\n", p)
		}
		fmt.Fprintf(stderr, "kvsim study: every finished point is in %s; fix the problem above and run again to redraw\n", filepath.Join(dir, study.ResultsJSONL))
		return exitFail
	}
	return exitOK
}

// isTerminal reports whether w is a character device (a terminal), so
// that progress is drawn as a bar and the best row in bold; pipes, files
// and batch-job logs get plain lines.
func isTerminal(w io.Writer) bool {
	if c, ok := w.(*checkedWriter); ok {
		w = c.w
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
