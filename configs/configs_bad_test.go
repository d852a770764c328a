package configs

import (
	"os"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/golden"
)

// Every file in testdata/bad must fail with exactly the error text in its
// .err golden: file, line, column, key path and what was expected.
func TestBadConfigs(t *testing.T) {
	golden.BadFiles(t, "testdata/bad/*.toml", func(t *testing.T, path string) error {
		_, err := Load(path)
		return err
	})
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
