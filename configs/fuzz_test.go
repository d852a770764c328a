package configs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Any bytes parse without a panic into a file or an error that names the
// file; a file that parses builds (or fails to) without a panic.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{".", "llamacpp", "testdata/bad"} {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.toml"))
		for _, p := range paths {
			if data, err := os.ReadFile(p); err == nil {
				f.Add(data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data, "fuzz.toml")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.toml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if file.IsLlamaCpp() {
			file.BuildLlama()
			return
		}
		file.Build()
	})
}
