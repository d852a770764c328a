package configs

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Every file in testdata/bad must fail with exactly the error text in its
// .err golden: file, line, column, key path and what was expected.
func TestBadConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad configs: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			_, err := Load(path)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			got := err.Error() + "\n"
			golden := strings.TrimSuffix(path, ".toml") + ".err"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Fatalf("error text:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// docs/config.md must document every key the decoder accepts, so the
// reference cannot drift from the code.
func TestConfigDocListsEveryKey(t *testing.T) {
	doc, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	keys := schemaKeys()
	for _, k := range keys {
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("docs/config.md does not document `%s`", k)
		}
	}
}
