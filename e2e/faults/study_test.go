//go:build faults

package faults

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/kvsim/kvsim/internal/testutil"
)

// studyFile writes a study of 8 points on a 192-request chat (about a
// tenth of a second a point) into dir and returns its path.
func studyFile(t *testing.T, dir string) string {
	t.Helper()
	tr := filepath.Join(dir, "chat192.jsonl")
	if o := kvsim(t, run{args: []string{"trace", "gen", "multiturn", "--clients", "32", "--rounds", "6", "--request-length", "400",
		"--output-length", "16", "--rate", "8", "--seed", "3", "--out", tr}}); o.code != 0 {
		t.Fatalf("trace gen: %v", o)
	}
	return writeFile(t, dir, "study.toml", []byte(fmt.Sprintf(`title = "fault suite study"
objective = "maximize cache_hit_rate subject to p99_ttft_ms <= 100000"

[base]
seed = 1
[base.model]
preset = "qwen2.5-14b"
[base.gpu]
preset = "h200"
[base.cache]
hierarchical = true
device_tokens = 12000
[base.workload]
trace = %q

[sweep]
"cache.host_tokens" = [12000, 24000, 48000, 96000]
"cache.write_policy" = ["write_through", "write_back"]

[report]
x = "cache.host_tokens"
`, tr)))
}

// A study interrupted by SIGINT or SIGTERM stops, says how to resume and
// exits 1; killed outright, it just stops. Either way results.jsonl holds
// whole lines, and running the study again finishes it with results
// byte-identical to an uninterrupted run.
func TestStudyInterrupted(t *testing.T) {
	dir := t.TempDir()
	sf := studyFile(t, dir)
	ref := filepath.Join(dir, "ref")
	check(t, kvsim(t, run{args: []string{"study", sf, "--out", ref, "--jobs", "1"}}), expect{code: 0})
	want := testutil.ReadFile(t, filepath.Join(ref, "results.jsonl"))
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			b := start(t, run{args: []string{"study", sf, "--out", out, "--jobs", "1"}})
			waitLines(t, filepath.Join(out, "results.jsonl"), 3)
			o := b.stop(t, sig)
			switch sig {
			case syscall.SIGKILL:
				check(t, o, expect{code: -1})
			default:
				check(t, o, expect{code: 1, stderr: []string{`interrupted after \d+ of 8 points; the finished ones are in .*results.jsonl, run again to resume`}})
			}
			if n := wholeJSONLines(t, filepath.Join(out, "results.jsonl")); n >= 8 {
				t.Fatalf("the study finished (%d lines) before it was interrupted: make it longer", n)
			}
			check(t, kvsim(t, run{args: []string{"study", sf, "--out", out, "--jobs", "1"}}), expect{code: 0, stderr: []string{`resuming: \d+ points already`}})
			if got, _ := os.ReadFile(filepath.Join(out, "results.jsonl")); !bytes.Equal(got, want) {
				t.Errorf("the resumed results.jsonl differs from an uninterrupted run's")
			}
		})
	}
}

// A study on a full disk stops with the file named, leaves whole lines
// only, and once there is room again finishes with the results of an
// uninterrupted run.
func TestStudyDiskFull(t *testing.T) {
	dir := t.TempDir()
	sf := studyFile(t, dir)
	ref := filepath.Join(dir, "ref")
	check(t, kvsim(t, run{args: []string{"study", sf, "--out", ref, "--jobs", "1"}}), expect{code: 0})
	want, _ := os.ReadFile(filepath.Join(ref, "results.jsonl"))

	disk, r := fullDisk(t, 16<<10)
	out := filepath.Join(disk, "out")
	r.args = []string{"study", sf, "--out", out, "--jobs", "1"}
	r.timeout = time.Minute
	o := kvsim(t, r)
	check(t, o, expect{code: 1, stderr: []string{regexp.QuoteMeta(out) + `.*(no space left on device|file too large)`}})
	t.Logf("on a full disk: %v", o)
	wholeJSONLines(t, filepath.Join(out, "results.jsonl"))
	// Room again: move the output to a roomy disk and resume there.
	roomy := filepath.Join(t.TempDir(), "out")
	if err := os.CopyFS(roomy, os.DirFS(out)); err != nil {
		t.Fatal(err)
	}
	check(t, kvsim(t, run{args: []string{"study", sf, "--out", roomy, "--jobs", "1"}}), expect{code: 0})
	if got, _ := os.ReadFile(filepath.Join(roomy, "results.jsonl")); !bytes.Equal(got, want) {
		t.Errorf("the study finished after a full disk differs from an uninterrupted run")
	}
}

// Memory follows the server's state, not the simulated time span: two
// requests 9e12 ms apart (the sweep's case, which ran out of memory
// sampling every idle second) simulate in a few MB and well under a
// second.
func TestIdleGapMemory(t *testing.T) {
	dir := t.TempDir()
	tr := writeFile(t, dir, "gap.jsonl", []byte(`{"kvsim_trace":1,"format":"kvsim"}
{"id":"a","arrival_ns":0,"input_len":1100,"output_len":8}
{"id":"b","arrival_ns":9000000000000000000,"input_len":1100,"output_len":8}
`))
	for _, extra := range [][]string{nil, {"--timeline", filepath.Join(dir, "tl.csv")}} {
		o := kvsim(t, run{args: append([]string{"sim", "--config", testdata("small.toml"), "--trace", tr, "--json"}, extra...), timeout: 30 * time.Second})
		check(t, o, expect{code: 0, maxRSSMB: 100})
	}
}
