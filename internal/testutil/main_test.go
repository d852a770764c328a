package testutil

import (
	"flag"
	"os"
	"testing"
)

// probe is a flag the TestMain gives a default, as the repository's
// TestMains give rapid.checks one.
var probe = flag.Int("probe", 0, "a flag for TestMainDefault")

func TestMain(m *testing.M) {
	os.Exit(MainWithDefaults(m, map[string]string{"probe": "7"}))
}

// The default reaches the flag when the command line does not give it
// (go test -args -probe=3 must make this test see 3).
func TestMainDefault(t *testing.T) {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || (f.Name == "probe" && f.Value.String() != "7") })
	if !given && *probe != 7 {
		t.Errorf("probe = %d, want the default 7", *probe)
	}
}
