package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// kvsim sim streams --per-request and --timeline while it runs; the files
// must hold byte for byte what the run's kept Result encodes to, as they did
// when they were written after the run.
func TestSimStreamsWhatTheResultHolds(t *testing.T) {
	trace := simTrace(t)
	dir := t.TempDir()
	perReq, timeline := filepath.Join(dir, "req.jsonl"), filepath.Join(dir, "tl.csv")
	runOK(t, "sim", "--trace", trace, "--per-request", perReq, "--timeline", timeline)
	srv, err := configs.Default().BuildServer(configs.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := traces.Open(trace, traces.FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	res, err := srv.Run(rd)
	if err != nil {
		t.Fatal(err)
	}
	var wantReq, wantTL bytes.Buffer
	enc := json.NewEncoder(&wantReq)
	for _, r := range res.Requests {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := engine.WriteTimeline(&wantTL, res.Timeline); err != nil {
		t.Fatal(err)
	}
	if len(res.Requests) == 0 || len(res.Timeline) == 0 {
		t.Fatalf("the kept run has %d results and %d samples", len(res.Requests), len(res.Timeline))
	}
	for _, f := range []struct {
		path string
		want []byte
	}{{perReq, wantReq.Bytes()}, {timeline, wantTL.Bytes()}} {
		got := testutil.ReadFile(t, f.path)
		if !bytes.Equal(got, f.want) {
			t.Errorf("%s differs from the kept result's encoding:\n%s\nwant:\n%s", filepath.Base(f.path), got, f.want)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
