package calibrate

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/internal/golden"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/sim/llamacpp"
)

// goldenCalibration is an SGLang fit whose coefficients need every
// float form: an exponent, a fraction, a whole number and 0.
func goldenCalibration() *Calibration {
	return &Calibration{
		Fitted:         hw.Fitted{Prefill: [4]float64{1.2345678e6, 10000, 0.000123456789, 0}, Decode: [3]float64{2.5e6, 0, 1.0000004}},
		PrefillSamples: 24, DecodeSamples: 360, PrefillR2: 0.99995, DecodeR2: 1, TTFTMAPE: 0.123, ITLMAPE: 0,
		Method: "non-negative least squares (Lawson-Hanson active set, free intercept), relative weights",
	}
}

// goldenLlama returns a llama-server fit with tiles, copies from server
// logs and an after-prompt curve (tiles), or with both call-size tiers and
// neither logs nor curve (tiers).
func goldenLlama(tiles bool) *LlamaCalibration {
	c := &LlamaCalibration{
		Cost: llamacpp.CPUCost{
			Fitted:    hw.Fitted{Prefill: [4]float64{3.030987654e6, 133698.2, 208.6864, 0}, Decode: [3]float64{852843.4, 168639, 686.4613}},
			StateCopy: 0.2891094, StateFresh: 0.7200721, StateRestore: 0.2891094, Delay: 800000,
		},
		PrefillSamples: 334, PrefillShapes: 44, DecodeSamples: 216, DecodeShapes: 17,
		PrefillMAPE: 12.7, DecodeMAPE: 8.6, PrefillMAPEAll: 19.3, DecodeMAPEAll: 18.04, MaxBatch: 3.99,
		Method: "non-negative least squares (Lawson-Hanson active set, free intercept), relative weights, shape medians",
	}
	if tiles {
		c.Cost.Tile, c.Cost.ShortPair = 64, 763.4981
		c.CopySamples, c.CopyShapes, c.CopyMAPE, c.CopyOtherNs = 120, 47, 12.5, 1.234e6
		c.Cost.AfterPromptCurve = []llamacpp.AfterPromptPoint{{Context: 700, Ns: 1.9e6, Decay: 0.55}, {Context: 5200, Ns: 412345.67, Decay: 0}}
		c.AfterPromptSteps = 2400
	} else {
		c.Cost.SmallCall, c.Cost.SmallPair = 63, 1234.5678
		c.Cost.MediumCall, c.Cost.MediumPair = 127, 456.78901
		c.Cost.StateRestore = 0.31
	}
	return c
}

// The snippets' text, pinned: a change of layout or of the numbers shows
// in the diff of the golden files.
func TestSnippetGolden(t *testing.T) {
	var b bytes.Buffer
	if err := goldenCalibration().WriteTOML(&b, "measured.jsonl"); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "sglang.toml.golden"), b.Bytes())
	for _, c := range []struct {
		name  string
		tiles bool
	}{{"llamacpp-tiles.toml.golden", true}, {"llamacpp-tiers.toml.golden", false}} {
		b.Reset()
		cfg := llamacpp.DefaultConfig()
		cfg.Slots, cfg.Context, cfg.TokenText = 4, 8192, "byte-level"
		if err := goldenLlama(c.tiles).WriteLlamaTOML(&b, cfg, "cal1.jsonl cal2.jsonl"); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, filepath.Join("testdata", c.name), b.Bytes())
	}
}

// sixDigits is x as the snippets write it: six significant digits.
func sixDigits(x float64) float64 {
	r, err := strconv.ParseFloat(fmt.Sprintf("%.6g", x), 64)
	if err != nil {
		panic(err)
	}
	return r
}

// coefficient draws a coefficient of the magnitudes fits give (1e-7 to
// 1e3 ns: more per pair or byte would make a call take over the hour
// configs allows), or 0.
func coefficient(t *rapid.T, label string) float64 {
	if rapid.IntRange(0, 5).Draw(t, label+"-zero") == 0 {
		return 0
	}
	return math.Pow(10, rapid.Float64Range(-7, 3).Draw(t, label))
}

// The SGLang snippet, as the [cost] section of a config, loads with
// configs.Parse and gives the fitted coefficients to six significant
// digits.
func TestPropSnippetLoads(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := goldenCalibration()
		for i := range c.Fitted.Prefill {
			c.Fitted.Prefill[i] = coefficient(t, fmt.Sprintf("a%d", i))
		}
		for i := range c.Fitted.Decode {
			c.Fitted.Decode[i] = coefficient(t, fmt.Sprintf("b%d", i))
		}
		c.Fitted.Prefill[0] *= float64(rapid.SampledFrom([]int{-1, 1}).Draw(t, "intercept-sign"))
		var b bytes.Buffer
		if err := c.WriteTOML(&b, "measured.jsonl"); err != nil {
			t.Fatal(err)
		}
		base := "[model]\npreset = \"qwen2.5-14b\"\n[gpu]\npreset = \"h200\"\n"
		f, err := configs.Parse(append([]byte(base), b.Bytes()...), "cost.toml")
		if err != nil {
			t.Fatalf("the snippet does not load: %v\n%s", err, b.Bytes())
		}
		want := c.Fitted
		for i := range want.Prefill {
			want.Prefill[i] = sixDigits(want.Prefill[i])
		}
		for i := range want.Decode {
			want.Decode[i] = sixDigits(want.Decode[i])
		}
		if f.Cost.Kind != "fitted" || f.Cost.Fitted != want {
			t.Fatalf("loaded kind %q, %+v; want \"fitted\", %+v\n%s", f.Cost.Kind, f.Cost.Fitted, want, b.Bytes())
		}
	})
}

// The llama-server config, alone, loads with the server arguments it was
// given and the fitted cost to six significant digits, whichever optional
// parts (tiles or call-size tiers, after-prompt curve) the fit has.
func TestPropLlamaSnippetLoads(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := goldenLlama(rapid.Bool().Draw(t, "tiles"))
		k := &c.Cost
		for i := range k.Prefill {
			k.Prefill[i] = coefficient(t, fmt.Sprintf("a%d", i))
		}
		for i := range k.Decode {
			k.Decode[i] = coefficient(t, fmt.Sprintf("b%d", i))
		}
		k.StateCopy, k.StateFresh, k.StateRestore = coefficient(t, "copy"), coefficient(t, "fresh"), coefficient(t, "restore")
		k.Delay = rapid.Int64Range(0, 5e6).Draw(t, "delay")
		if k.Tile > 0 {
			k.ShortPair = coefficient(t, "short")
		} else {
			k.SmallPair, k.MediumPair = 1+coefficient(t, "small"), 1+coefficient(t, "medium")
		}
		k.AfterPromptCurve = nil
		ctx := int64(0)
		for i := range rapid.IntRange(0, 4).Draw(t, "points") {
			ctx += rapid.Int64Range(1, 3000).Draw(t, fmt.Sprintf("ctx%d", i))
			k.AfterPromptCurve = append(k.AfterPromptCurve, llamacpp.AfterPromptPoint{Context: ctx, Ns: coefficient(t, fmt.Sprintf("ns%d", i)), Decay: rapid.Float64Range(0, 0.99).Draw(t, fmt.Sprintf("decay%d", i))})
		}
		cfg := llamacpp.DefaultConfig()
		cfg.Slots = rapid.IntRange(1, 8).Draw(t, "slots")
		cfg.NoCacheIdleSlots = rapid.Bool().Draw(t, "no-cache-idle")
		cfg.TokenText = rapid.SampledFrom([]string{"", "byte-level"}).Draw(t, "token-text")
		var b bytes.Buffer
		if err := c.WriteLlamaTOML(&b, cfg, "cal.jsonl"); err != nil {
			t.Fatal(err)
		}
		f, err := configs.Parse(b.Bytes(), "calibrated.toml")
		if err != nil {
			t.Fatalf("the config does not load: %v\n%s", err, b.Bytes())
		}
		got, err := f.BuildLlama()
		if err != nil {
			t.Fatalf("the config does not build: %v\n%s", err, b.Bytes())
		}
		want := *k
		for i := range want.Prefill {
			want.Prefill[i] = sixDigits(want.Prefill[i])
		}
		for i := range want.Decode {
			want.Decode[i] = sixDigits(want.Decode[i])
		}
		for _, p := range []*float64{&want.StateCopy, &want.StateFresh, &want.StateRestore, &want.SmallPair, &want.MediumPair, &want.ShortPair} {
			*p = sixDigits(*p)
		}
		want.AfterPromptCurve = slices.Clone(want.AfterPromptCurve)
		for i := range want.AfterPromptCurve {
			p := &want.AfterPromptCurve[i]
			p.Ns, p.Decay = sixDigits(p.Ns), sixDigits(p.Decay)
		}
		if got.Config != cfg || !reflect.DeepEqual(*got.Cost, want) {
			t.Fatalf("loaded %+v\n%+v\nwant %+v\n%+v\n%s", got.Config, *got.Cost, cfg, want, b.Bytes())
		}
	})
}
