package configs

import (
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/traces"
	"strings"
	"testing"
)

func TestDefaultBuilds(t *testing.T) {
	f := Default()
	b, err := f.Build()
	if err != nil {
		t.Fatal(err)
	}
	if b.Sim.Cache.DeviceTokens <= 0 || b.Sim.Cache.HostTokens != b.Sizing.HostTokens || b.Sim.Cache.HostTokens == 0 {
		t.Fatalf("default cache %+v", b.Sim.Cache)
	}
	t.Logf("device %d host %d tokens; %s", b.Sim.Cache.DeviceTokens, b.Sim.Cache.HostTokens, strings.Join(b.Explain, "\n"))
}

// BenchmarkDefaultSim runs the full model on the bundled default: the
// Mooncake conversation trace (12,031 requests, one hour) on the default
// server. It reports simulated requests per wall second.
func BenchmarkDefaultSim(b *testing.B) {
	f, err := Load("default.toml")
	if err != nil {
		b.Fatal(err)
	}
	built, err := f.Build()
	if err != nil {
		b.Fatal(err)
	}
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
