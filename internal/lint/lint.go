package lint

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Layers gives each top-level directory its place in the import order. A
// package may import packages of a strictly lower layer, or packages of
// its own top-level directory (ordered by SubLayers). internal/ is
// importable from everywhere.
var Layers = map[string]int{
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

// layerOrder is Layers as the messages print it.
const layerOrder = "tree, traces <- planner <- sim <- fleet <- replay <- configs <- calibrate <- study <- cmd"

// SubLayers orders the packages within a top-level directory, by their
// directory relative to the module root: a package may import one of its
// own top-level directory only if that one's sub-layer is strictly lower.
// A top-level directory listed here must list every package of it that
// imports or is imported by another of it; one not listed is not checked
// within (its packages are still checked against Layers).
var SubLayers = map[string]map[string]int{
	// sim/engine, sim/hw and sim/policy are leaves of sim: the shared
	// types and the engine seam, the hardware and cost models, the
	// policy-only model. The two server models, sim and sim/llamacpp,
	// build on them and never on each other.
	"sim":     {"sim/engine": 0, "sim/hw": 0, "sim/policy": 0, "sim": 1, "sim/llamacpp": 1},
	"planner": {"planner": 0, "planner/synth": 1},
	"replay":  {"replay/replaytest": 0, "replay": 1},
}

// TestOnly lists the internal packages that only tests may import: they
// import testing and define test flags (-update), or hold test fixtures,
// which do not belong in a binary.
var TestOnly = map[string]bool{"internal/enginetest": true, "internal/golden": true, "internal/testutil": true}

// Core lists the top-level directories whose non-test code must be
// deterministic.
var Core = map[string]bool{"tree": true, "planner": true, "sim": true, "traces": true, "fleet": true}

// Banned maps "pkg.Func" (pkg by import path) to the advice printed when
// the simulator core uses it.
var Banned = map[string]string{
	"time.Now":       "use the injected sim clock",
	"time.Since":     "use the injected sim clock",
	"time.Until":     "use the injected sim clock",
	"time.Sleep":     "advance virtual time instead",
	"time.After":     "schedule an event instead",
	"time.AfterFunc": "schedule an event instead",
	"time.Tick":      "schedule an event instead",
	"time.NewTimer":  "schedule an event instead",
	"time.NewTicker": "schedule an event instead",
}

// Finding is one violation: where, relative to the root checked, and
// what.
type Finding struct {
	Pos token.Position // Filename is slash-separated, relative to the root
	Msg string
}

// String prints the finding as "file:line:col: message".
func (f Finding) String() string { return f.Pos.String() + ": " + f.Msg }

// goFile is one parsed Go file of the tree.
type goFile struct {
	rel  string // slash path relative to the root
	test bool
	file *ast.File
}

// tree is the Go files below a module root, in path order.
type tree struct {
	module string // the module path, from root/go.mod
	fset   *token.FileSet
	files  []goFile
}

// load parses every Go file below root (skipping testdata, vendor and dot
// directories), with positions relative to root.
func load(root string) (*tree, error) {
	mod, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	t := &tree{module: mod, fset: token.NewFileSet()}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		// Object resolution tells a package name from a local variable
		// of the same name (rand.IntN on a *rand.Rand called rand).
		f, err := parser.ParseFile(t.fset, rel, src, 0)
		if err != nil {
			return err
		}
		t.files = append(t.files, goFile{rel: rel, test: strings.HasSuffix(p, "_test.go"), file: f})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(t.files, func(a, b goFile) int { return strings.Compare(a.rel, b.rel) })
	return t, nil
}

// modulePath reads the module path from a go.mod file.
func modulePath(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", errors.New(gomod + ": no module line")
}

func topDir(rel string) string {
	top, _, _ := strings.Cut(rel, "/")
	return top
}

// report records a finding at pos.
type report func(pos token.Pos, format string, a ...any)

// run loads the Go files below root and returns what check reports on
// them.
func run(root string, check func(*tree, report)) ([]Finding, error) {
	t, err := load(root)
	if err != nil {
		return nil, err
	}
	var out []Finding
	check(t, func(pos token.Pos, format string, a ...any) {
		out = append(out, Finding{t.fset.Position(pos), fmt.Sprintf(format, a...)})
	})
	return out, nil
}

// Imports checks the import direction of every Go file below the module
// root: each import of a module package must go to a lower layer
// ([Layers]), or within a top-level directory to a lower sub-layer
// ([SubLayers]).
func Imports(root string) ([]Finding, error) { return run(root, imports) }

func imports(t *tree, add report) {
	for _, f := range t.files {
		from := topDir(f.rel)
		fromPkg := path.Dir(f.rel)
		fromLayer, known := Layers[from]
		for _, imp := range f.file.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil || !strings.HasPrefix(p, t.module+"/") {
				continue
			}
			toPkg := strings.TrimPrefix(p, t.module+"/")
			to := topDir(toPkg)
			if to == "internal" {
				if TestOnly[toPkg] && !f.test {
					add(imp.Pos(), "%s imports %s <- only tests may import it", fromPkg, toPkg)
				}
				continue
			}
			if to == from {
				// An external test package (package x_test) is above
				// every package of its directory.
				external := strings.HasSuffix(f.file.Name.Name, "_test")
				if sub, ok := SubLayers[from]; ok && toPkg != fromPkg && !external {
					fl, okFrom := sub[fromPkg]
					tl, okTo := sub[toPkg]
					switch {
					case !okFrom || !okTo:
						add(imp.Pos(), "%s imports %s: add both to internal/lint's SubLayers[%q]", fromPkg, toPkg, from)
					case tl >= fl:
						add(imp.Pos(), "%s must not import %s <- within %s/, SubLayers orders the packages", fromPkg, p, from)
					}
				}
				continue
			}
			toLayer, ok := Layers[to]
			if !ok {
				add(imp.Pos(), "import %q: unknown top-level package %q; add it to internal/lint's Layers", p, to)
				continue
			}
			if !known {
				if from != "internal" && from != "examples" {
					add(imp.Pos(), "%q is not in internal/lint's Layers", from)
				}
				continue
			}
			if toLayer >= fromLayer {
				add(imp.Pos(), "%s must not import %s <- imports flow %s", fromPkg, p, layerOrder)
			}
		}
	}
}

// Determinism checks the non-test files of the simulator core ([Core])
// for wall-clock and timer calls ([Banned]), the global math/rand
// generator, crypto/rand, go statements and select statements.
func Determinism(root string) ([]Finding, error) { return run(root, determinism) }

func determinism(t *tree, add report) {
	for _, gf := range t.files {
		if gf.test || !Core[topDir(gf.rel)] {
			continue
		}
		names := map[string]string{} // local name -> import path
		for _, imp := range gf.file.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				continue
			}
			name := importName(p)
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names[name] = p
			switch p {
			case "crypto/rand":
				add(imp.Pos(), "import crypto/rand <- take a seeded *rand.Rand")
			case "math/rand":
				add(imp.Pos(), "import math/rand <- use math/rand/v2 with an injected, seeded *rand.Rand")
			}
		}
		ast.Inspect(gf.file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				add(n.Pos(), "go statement <- the simulator core is single-threaded; schedule an event")
			case *ast.SelectStmt:
				add(n.Pos(), "select statement <- the simulator core does not use channels")
			case *ast.SelectorExpr:
				id, ok := n.X.(*ast.Ident)
				if !ok || id.Obj != nil { // id.Obj: declared in the file, not an import
					return true
				}
				p, ok := names[id.Name]
				if !ok {
					return true
				}
				key := p + "." + n.Sel.Name
				if advice, bad := Banned[key]; bad {
					add(n.Pos(), "%s <- %s", key, advice)
				}
				if p == "math/rand/v2" && isGlobalRandFunc(n.Sel.Name) {
					add(n.Pos(), "rand.%s uses the global generator <- use an injected, seeded *rand.Rand", n.Sel.Name)
				}
			}
			return true
		})
	}
}

// importName is the name an import of p binds without an explicit name:
// its last element, or the one before a major version suffix ("rand" for
// math/rand/v2).
func importName(p string) string {
	dir, name := path.Split(p)
	if len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" && dir != "" {
		return path.Base(dir)
	}
	return name
}

// isGlobalRandFunc reports whether math/rand/v2's name is a function of
// the global generator (anything but the constructors and types).
func isGlobalRandFunc(name string) bool {
	switch name {
	case "New", "NewPCG", "NewChaCha8", "NewZipf", "Rand", "Source", "PCG", "ChaCha8", "Zipf":
		return false
	}
	return true
}
