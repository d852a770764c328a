package calibrate

import (
	"os"
	"strings"
	"testing"
)

// testdata/llama-server.log is the beginning of a real llama-server log
// (b11669, -np 4, default verbosity): a calibration run's first tasks.
func TestReadLlamaServerLog(t *testing.T) {
	f, err := os.Open("testdata/llama-server.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tasks, err := ReadLlamaServerLog(f, "testdata/llama-server.log")
	if err != nil {
		t.Fatal(err)
	}
	want := []LlamaLogTask{
		{Task: 0, Line: 12, Selected: 244_335_000, Launched: 244_373_000, PromptEvalNs: 3_730_000, PromptEvalTokens: 12, HasEval: true},
		{Task: 33, Line: 20, Selected: 277_038_000, Launched: 277_235_000, PromptEvalNs: 980_000, PromptEvalTokens: 1, HasEval: true},
		{Task: 66, Line: 30, Selected: 305_529_000, Launched: 305_555_000, PromptEvalNs: 7_980_000, PromptEvalTokens: 52, HasEval: true},
		{Task: 99, Line: 38, Selected: 339_306_000, Launched: 339_334_000, PromptEvalNs: 22_790_000, PromptEvalTokens: 148, HasEval: true},
	}
	if len(tasks) != len(want) {
		t.Fatalf("%d tasks, want %d: %+v", len(tasks), len(want), tasks)
	}
	for i := range want {
		if tasks[i] != want[i] {
			t.Errorf("task %d = %+v, want %+v", i, tasks[i], want[i])
		}
	}
}

func TestReadLlamaServerLogErrors(t *testing.T) {
	launch := "0.00.100.000 I slot launch_slot_: id  0 | task 7 | processing task, is_child = 0\n"
	for _, c := range []struct{ name, in, want string }{
		{"empty", "", "srv.log: no task launch"},
		{"not a log", "hello\nworld\n", "srv.log: no task launch"},
		{"bad eval time", launch + "0.00.130.000 I slot print_timing: id  0 | task 7 | prompt eval time = 1.2.3 ms /    12 tokens\n",
			`srv.log:2:71: prompt eval time: want a non-negative number of ms, got "1.2.3"`},
		{"huge minutes", "99999999999999999999.00.100.000 I slot launch_slot_: id  0 | task 7 | processing task\n", "srv.log:1:1: timestamp"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadLlamaServerLog(strings.NewReader(c.in), "srv.log")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
	// A launch without a selection line before it (a log cut at its
	// start) was selected when it launched; an eval of an unknown task is
	// skipped.
	in := "0.00.050.000 I slot print_timing: id  0 | task 3 | prompt eval time = 1.00 ms / 1 tokens\n" + launch
	tasks, err := ReadLlamaServerLog(strings.NewReader(in), "srv.log")
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 1 || tasks[0].Selected != 100e6 || tasks[0].HasEval {
		t.Errorf("tasks %+v, want task 7 selected at its launch, no eval", tasks)
	}
}

func FuzzReadLlamaServerLog(f *testing.F) {
	if b, err := os.ReadFile("testdata/llama-server.log"); err == nil {
		f.Add(string(b))
	}
	f.Add("0.00.100.000 I slot get_availabl: id  0 | task -1 | selected slot by LRU\n0.00.100.500 I slot launch_slot_: id  0 | task 7 | processing task\n0.00.130.000 I slot print_timing: id  0 | task 7 | prompt eval time = 3.5 ms / 12 tokens\n")
	f.Add("0.00.130.000 I slot print_timing: id  0 | task 7 | prompt eval time = NaN ms / 12 tokens\n")
	f.Fuzz(func(t *testing.T, in string) {
		tasks, err := ReadLlamaServerLog(strings.NewReader(in), "fuzz.log")
		if err != nil {
			if len(tasks) != 0 {
				t.Fatalf("error %v with %d tasks", err, len(tasks))
			}
			return
		}
		if len(tasks) == 0 {
			t.Fatal("no tasks and no error")
		}
		for _, k := range tasks {
			if k.Selected > k.Launched || k.Selected < 0 || k.PromptEvalNs < 0 || (!k.HasEval && (k.PromptEvalNs != 0 || k.PromptEvalTokens != 0)) {
				t.Fatalf("bad task %+v", k)
			}
		}
	})
}
