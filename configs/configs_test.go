package configs

import (
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/traces"
	"strings"
	"testing"
)

// must returns what fn returns, failing the test if fn fails: must(t,
// f.Build), must(t, f.BuildLlama).
func must[T any](tb testing.TB, fn func() (T, error)) T {
	tb.Helper()
	v, err := fn()
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// mustLoad loads the file at path or fails the test.
func mustLoad(tb testing.TB, path string) *File {
	tb.Helper()
	return must(tb, func() (*File, error) { return Load(path) })
}

// mustParse parses doc as the file name or fails the test.
func mustParse(tb testing.TB, doc []byte, name string) *File {
	tb.Helper()
	return must(tb, func() (*File, error) { return Parse(doc, name) })
}

// checkFleetDocError checks that Parse refuses fleetDoc(doc), named
// t.toml, with exactly want, and reports whether it did.
func checkFleetDocError(t *testing.T, doc, want string) bool {
	t.Helper()
	_, err := Parse(fleetDoc(doc), "t.toml")
	if err == nil || err.Error() != want {
		t.Errorf("%q: error\n%v\nwant\n%s", doc, err, want)
		return false
	}
	return true
}

func TestDefaultBuilds(t *testing.T) {
	b := must(t, Default().Build)
	if b.Sim.Cache.DeviceTokens <= 0 || b.Sim.Cache.HostTokens != b.Sizing.HostTokens || b.Sim.Cache.HostTokens == 0 {
		t.Fatalf("default cache %+v", b.Sim.Cache)
	}
	t.Logf("device %d host %d tokens; %s", b.Sim.Cache.DeviceTokens, b.Sim.Cache.HostTokens, strings.Join(b.Explain, "\n"))
}

// BenchmarkDefaultSim runs the full model on the bundled default: the
// Mooncake conversation trace (12,031 requests, one hour) on the default
// server. It reports simulated requests per wall second.
func BenchmarkDefaultSim(b *testing.B) {
	f := mustLoad(b, "default.toml")
	built := must(b, f.Build)
	var n int
	for b.Loop() {
		rd, err := traces.Open(f.TracePath(), traces.FormatMooncake)
		if err != nil {
			b.Fatal(err)
		}
		s, err := sim.New(built.Sim, built.Cost)
		if err != nil {
			b.Fatal(err)
		}
		res, err := s.Run(rd)
		if err != nil {
			b.Fatal(err)
		}
		rd.Close()
		n = len(res.Requests)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
}
