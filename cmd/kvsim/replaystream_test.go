package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/traces"
)

// kvsim replay streams a trace file (read ahead for the checks, then as
// the run goes, --per-request written as requests finish) and gives the
// bytes of the same replay with the trace in memory (--idle-gap-cap, with
// a cap longer than every gap, reads it into memory and changes nothing),
// in every pacing mode, on a multi-turn trace whose turns wait for their
// parents and on a Mooncake trace whose requests finish out of order.
func TestReplayCLIStreamedEqualsInMemory(t *testing.T) {
	recs, err := traces.GenerateChat(traces.ChatConfig{
		Clients: 6, Rounds: 4, RequestLength: 200, OutputLength: 16, SubQuestionLength: 40,
		Rate: 20, Order: "fifo", Seed: 5, Vocab: traces.DefaultVocab,
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "chat.jsonl")
	writeTrace(t, path, traces.Header{Format: "kvsim"}, recs)
	if recs[len(recs)-1].Parent == "" {
		t.Fatalf("the chat trace has no dependencies to wait for")
	}
	for _, mode := range [][]string{nil, {"--max-concurrency", "3"}, {"--timestamps", "--speedup", "4"}, {"--request-rate", "50", "--max-concurrency", "5"}} {
		for _, path := range []string{path, replayTrace} {
			t.Run(filepath.Base(path)+" "+strings.Join(mode, " "), func(t *testing.T) {
				replayStreamedAndInMemory(t, dir, path, mode)
			})
		}
	}
}

// replayStreamedAndInMemory replays the trace at path against the
// simulator with the flags of mode, streamed and in memory, and compares
// the JSON objects and the per-request traces.
func replayStreamedAndInMemory(t *testing.T, dir, path string, mode []string) {
	out := map[bool]string{}
	perReq := map[bool][]byte{}
	for _, streamed := range []bool{true, false} {
		pr := filepath.Join(dir, "per-request.jsonl")
		args := append([]string{"replay", "--target", "sim", "--trace", path, "--json", "--per-request", pr}, mode...)
		if !streamed {
			args = append(args, "--idle-gap-cap", "1000h")
		}
		code, stdout, stderr := runCLI(t, args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		out[streamed], perReq[streamed] = stdout, testutil.ReadFile(t, pr)
	}
	if out[true] != out[false] || string(perReq[true]) != string(perReq[false]) {
		t.Fatalf("streamed and in-memory replays differ:\n%s\n%s", out[true], out[false])
	}
}
