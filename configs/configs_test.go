package configs

import (
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/traces"
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

// Every key of [scheduler] reaches the simulator's SchedulerConfig, written
// as a table, as dotted keys or as an inline table, and a value out of its
// range is refused with the key's position.
func TestSchedulerKeysReachTheSimulator(t *testing.T) {
	base := testutil.ReadFile(t, "default.toml")
	keys := `schedule_conservativeness = 0.5
init_new_token_ratio = 0.6
min_new_token_ratio_factor = 0.2
new_token_ratio_decay_steps = 300
clip_max_new_tokens = 1024
retract_decode_steps = 7
lpm_fallback_queue = 9`
	want := sim.SchedulerTuning{ScheduleConservativeness: 0.5, InitNewTokenRatio: 0.6,
		MinNewTokenRatioFactor: 0.2, NewTokenRatioDecaySteps: 300, ClipMaxNewTokens: 1024,
		RetractDecodeSteps: 7, LPMFallbackQueue: 9}
	table := "[scheduler]\npolicy = \"lpm\"\n" + keys + "\n"
	dotted := "scheduler.policy = \"lpm\"\nscheduler." + strings.ReplaceAll(keys, "\n", "\nscheduler.") + "\n"
	inline := "scheduler = {policy = \"lpm\", " + strings.ReplaceAll(keys, "\n", ", ") + "}\n"
	for name, section := range map[string]string{"table": table, "dotted": dotted, "inline": inline} {
		doc := strings.Replace(string(base), "[scheduler]\npolicy = \"fcfs\"              # --schedule-policy\n", "", 1)
		doc = strings.Replace(doc, "[model]", section+"\n[model]", 1)
		f, err := Parse([]byte(doc), name+".toml")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b := must(t, f.Build)
		if got := b.Sim.Scheduler.SchedulerTuning; got != want {
			t.Errorf("%s: tuning %+v, want %+v", name, got, want)
		}
		if b.Sim.Scheduler.Policy != sim.LPM {
			t.Errorf("%s: policy %v, want lpm", name, b.Sim.Scheduler.Policy)
		}
	}
	doc := strings.Replace(string(base), "policy = \"fcfs\"", "policy = \"fcfs\"\nlpm_fallback_queue = -1", 1)
	_, err := Parse([]byte(doc), "bad.toml")
	if err == nil || !strings.Contains(err.Error(), "bad.toml:36:") || !strings.Contains(err.Error(), "scheduler.lpm_fallback_queue") {
		t.Errorf("lpm_fallback_queue = -1: error %v, want one at bad.toml:36 naming scheduler.lpm_fallback_queue", err)
	}
	// 0 would silently be the default, and a huge count overflow the
	// headroom's products: both refused at the key.
	for _, line := range strings.Split(keys, "\n") {
		k, _, _ := strings.Cut(line, " = ")
		for v, want := range map[string]string{"0": "0 is not supported", "100000000": "must be in ["} {
			if v == "100000000" && k == "schedule_conservativeness" {
				continue // any finite scale is fine: the ratio is capped at 1
			}
			doc := strings.Replace(string(base), "policy = \"fcfs\"", "policy = \"fcfs\"\n"+k+" = "+v, 1)
			_, err := Parse([]byte(doc), "bad.toml")
			if v == "100000000" && strings.Contains(k, "ratio") && !strings.Contains(k, "steps") {
				want = "must be in (0, 1]" // a ratio's own range
			}
			if err == nil || !strings.Contains(err.Error(), "bad.toml:36:1: scheduler."+k+": "+want) {
				t.Errorf("%s = %s: error %v, want %q at its line", k, v, err, want)
			}
		}
	}
}
