package tree

import (
	"flag"
	"os"
	"testing"
)

// TestMain raises rapid's defaults for plain `go test` to 200 cases of up to
// 100 steps, unless -rapid.checks or -rapid.steps were given (make prop
// passes -rapid.checks=2000).
func TestMain(m *testing.M) {
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, value := range map[string]string{"rapid.checks": "200", "rapid.steps": "100"} {
		if !set[name] {
			if err := flag.Set(name, value); err != nil {
				panic(err)
			}
		}
	}
	os.Exit(m.Run())
}
