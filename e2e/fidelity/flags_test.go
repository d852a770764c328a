package main

import (
	"flag"
	"fmt"
	"testing"
)

// parseFlags names every required flag left empty, and only those.
func TestParseFlagsNamesMissing(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-out", "x"}, "chain: -trace required (see -h)"},
		{nil, "chain: -trace, -out required (see -h)"},
		{[]string{"-trace", "t", "-out", "x"}, ""},
	} {
		fs := flag.NewFlagSet("chain", flag.ContinueOnError)
		fs.String("trace", "", "")
		fs.String("out", "", "")
		err := parseFlags(fs, tc.args, "trace", "out")
		if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && got != tc.want {
			t.Errorf("parseFlags(%q) = %v, want %q", tc.args, err, tc.want)
		}
	}
}
