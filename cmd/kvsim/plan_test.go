package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/golden"
	"github.com/kvsim/kvsim/planner"
)

// TestPlanGoldenOutput runs every snapshot in testdata/plan with both
// algorithms: the output must match NAME.golden and be the same for both.
func TestPlanGoldenOutput(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "plan", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no snapshots in testdata/plan: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			code, heap, stderr := runCLI(t, "plan", "--input", f)
			if code != exitOK || stderr != "" {
				t.Fatalf("plan --input %s = %d, stderr %q", f, code, stderr)
			}
			code, ref, stderr := runCLI(t, "plan", "--input", f, "--algo", "reference")
			if code != exitOK || stderr != "" {
				t.Fatalf("plan --algo reference --input %s = %d, stderr %q", f, code, stderr)
			}
			if heap != ref {
				t.Fatalf("heap and reference differ:\n heap: %s  ref: %s", heap, ref)
			}
			golden.CheckString(t, strings.TrimSuffix(f, ".json")+".golden", heap)
		})
	}
}

// TestPlanBadInput runs every snapshot in testdata/plan/bad: each must fail
// with exit status 2 and the exact message in NAME.err, for both algorithms.
func TestPlanBadInput(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "plan", "bad", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no snapshots in testdata/plan/bad: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			// Run from the bad directory so that messages name the file as
			// a user would type it.
			t.Chdir(filepath.Dir(f))
			base := filepath.Base(f)
			var msgs []string
			for _, algo := range []string{"heap", "reference"} {
				code, stdout, stderr := runCLI(t, "plan", "--input", base, "--algo", algo)
				if code != exitUsage || stdout != "" {
					t.Fatalf("plan --algo %s --input %s = %d, stdout %q; want %d and no output", algo, base, code, stdout, exitUsage)
				}
				msgs = append(msgs, stderr)
			}
			if msgs[0] != msgs[1] {
				t.Fatalf("heap and reference report differently:\n%s%s", msgs[0], msgs[1])
			}
			golden.CheckString(t, name+".err", msgs[0])
		})
	}
}

func TestPlanUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string // substring of stderr
	}{
		{"no input", []string{"plan"}, exitUsage, "--input is required"},
		{"bad algo", []string{"plan", "--input", "x.json", "--algo", "fast"}, exitUsage, `--algo: want heap or reference, got "fast"`},
		{"bad flag", []string{"plan", "--inptu", "x.json"}, exitUsage, "flag provided but not defined"},
		{"extra argument", []string{"plan", "--input", "x.json", "y.json"}, exitUsage, `unexpected argument "y.json"`},
		{"missing file", []string{"plan", "--input", filepath.Join("testdata", "plan", "no-such.json")}, exitFail, "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.args...)
			if code != tc.code || stdout != "" || !strings.Contains(stderr, tc.want) {
				t.Fatalf("run(%q) = %d, stdout %q, stderr %q; want %d and %q", tc.args, code, stdout, stderr, tc.code, tc.want)
			}
		})
	}
}

func TestPlanHelp(t *testing.T) {
	code, stdout, stderr := runCLI(t, "plan", "-h")
	if code != exitOK || stderr != "" || !strings.Contains(stdout, "usage: kvsim plan --input FILE.json") || !strings.Contains(stdout, "-algo") {
		t.Fatalf("plan -h = %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// FuzzPlanInput: the decoder never panics, and whatever it accepts, both
// planners either plan identically or reject identically.
func FuzzPlanInput(f *testing.F) {
	for _, pattern := range []string{"*.json", "bad/*.json"} {
		files, err := filepath.Glob(filepath.Join("testdata", "plan", pattern))
		if err != nil {
			f.Fatal(err)
		}
		for _, name := range files {
			data, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := decodePlanInput("fuzz.json", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.json:") {
				t.Fatalf("error without position: %v", err)
			}
			return
		}
		if len(in.nodes) > 2000 || in.cp > 64 {
			return // keep each case fast
		}
		ref, refErr := planner.Reference(in.nodes, in.deficits)
		p, err := planner.New(planner.Config{Lanes: in.cp})
		if err != nil {
			t.Fatal(err)
		}
		got, heapErr := p.Plan(in.nodes, in.deficits)
		if (refErr == nil) != (heapErr == nil) {
			t.Fatalf("reference error %v, heap error %v", refErr, heapErr)
		}
		if refErr != nil {
			if refErr.Error() != heapErr.Error() {
				t.Fatalf("reference error %q, heap error %q", refErr, heapErr)
			}
			if loc := in.locate(refErr).Error(); !strings.HasPrefix(loc, "fuzz.json:") {
				t.Fatalf("located error without position: %s", loc)
			}
			return
		}
		if fmt.Sprint(ref) != fmt.Sprint(got) {
			t.Fatalf("reference %+v, heap %+v", ref, got)
		}
	})
}
