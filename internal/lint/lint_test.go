package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/kvsim/kvsim"

// layer gives each top-level directory its place in the import order. A
// package may import packages of a strictly lower layer, or packages below its
// own top-level directory. internal/ is importable from everywhere.
var layer = map[string]int{
	"tree":      0,
	"traces":    0,
	"planner":   1,
	"sim":       2,
	"fleet":     3,
	"replay":    4,
	"configs":   5,
	"calibrate": 6,
	"study":     7,
	"cmd":       8,
	"e2e":       9,
}

// core lists the top-level directories whose non-test code must be
// deterministic.
var core = map[string]bool{"tree": true, "planner": true, "sim": true, "traces": true}

// banned maps "pkg.Func" (pkg by import path) to the advice printed.
var banned = map[string]string{
	"time.Now":       "use the injected sim clock",
	"time.Since":     "use the injected sim clock",
	"time.Until":     "use the injected sim clock",
	"time.Sleep":     "advance virtual time instead",
	"time.After":     "schedule an event instead",
	"time.Tick":      "schedule an event instead",
	"time.NewTimer":  "schedule an event instead",
	"time.NewTicker": "schedule an event instead",
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("repo root not found from internal/lint: %v", err)
	}
	return dir
}

type goFile struct {
	rel  string // slash path relative to the repo root
	test bool
	file *ast.File
}

func parseAll(t *testing.T) (*token.FileSet, []goFile) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	var files []goFile
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files = append(files, goFile{rel: filepath.ToSlash(rel), test: strings.HasSuffix(path, "_test.go"), file: f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].rel < files[j].rel })
	return fset, files
}

func topDir(rel string) string {
	top, _, _ := strings.Cut(rel, "/")
	return top
}

func TestImportDirection(t *testing.T) {
	fset, files := parseAll(t)
	for _, f := range files {
		from := topDir(f.rel)
		fromLayer, known := layer[from]
		for _, imp := range f.file.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil || !strings.HasPrefix(path, module+"/") {
				continue
			}
			to := topDir(strings.TrimPrefix(path, module+"/"))
			if to == "internal" || to == from {
				continue
			}
			toLayer, ok := layer[to]
			if !ok {
				t.Errorf("%s: import %q: unknown top-level package %q; add it to internal/lint's layer table", fset.Position(imp.Pos()), path, to)
				continue
			}
			if !known {
				if from != "internal" && from != "examples" {
					t.Errorf("%s: %q is not in internal/lint's layer table", f.rel, from)
				}
				continue
			}
			if toLayer >= fromLayer {
				t.Errorf("%s: %s must not import %s <- imports flow tree, traces <- planner <- sim <- fleet <- replay <- configs <- calibrate <- study <- cmd",
					fset.Position(imp.Pos()), from, path)
			}
		}
	}
}

func TestDeterministicCore(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	_, files := parseAll(t)
	for _, gf := range files {
		if gf.test || !core[topDir(gf.rel)] {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, gf.rel), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]string{} // local name -> import path
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			name := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names[name] = path
			switch path {
			case "crypto/rand":
				t.Errorf("%s: import crypto/rand <- take a seeded *rand.Rand", fset.Position(imp.Pos()))
			case "math/rand":
				t.Errorf("%s: import math/rand <- use math/rand/v2 with an injected, seeded *rand.Rand", fset.Position(imp.Pos()))
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: go statement <- the simulator core is single-threaded; schedule an event", fset.Position(n.Pos()))
			case *ast.SelectStmt:
				t.Errorf("%s: select statement <- the simulator core does not use channels", fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				id, ok := n.X.(*ast.Ident)
				if !ok {
					return true
				}
				path, ok := names[id.Name]
				if !ok {
					return true
				}
				key := path + "." + n.Sel.Name
				if advice, bad := banned[key]; bad {
					t.Errorf("%s: %s <- %s", fset.Position(n.Pos()), key, advice)
				}
				if path == "math/rand/v2" && isGlobalRandFunc(n.Sel.Name) {
					t.Errorf("%s: rand.%s uses the global generator <- use an injected, seeded *rand.Rand", fset.Position(n.Pos()), n.Sel.Name)
				}
			}
			return true
		})
	}
}

func isGlobalRandFunc(name string) bool {
	switch name {
	case "New", "NewPCG", "NewChaCha8", "NewZipf", "Rand", "Source", "PCG", "ChaCha8", "Zipf":
		return false
	}
	return true
}

// TestLintCatchesViolations makes sure the checks above are not vacuous: the
// banned-call table and layer table must recognise what they are meant to.
func TestLintCatchesViolations(t *testing.T) {
	if _, ok := banned["time.Now"]; !ok {
		t.Fatal("time.Now is not banned")
	}
	if !isGlobalRandFunc("IntN") || isGlobalRandFunc("New") {
		t.Fatal("isGlobalRandFunc misclassifies")
	}
	if layer["tree"] >= layer["planner"] || layer["sim"] >= layer["replay"] {
		t.Fatal(fmt.Sprint("layer order broken: ", layer))
	}
}
