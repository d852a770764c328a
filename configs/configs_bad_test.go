package configs

import (
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/golden"
	"github.com/kvsim/kvsim/internal/testutil"
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
	doc := testutil.ReadFile(t, "../docs/config.md")
	keys := schemaKeys()
	for _, k := range keys {
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("docs/config.md does not document `%s`", k)
		}
	}
}
