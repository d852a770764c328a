package calibrate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
)

// LlamaLogTask is one task of a llama-server log: when its slot was
// selected and when it launched, in ns since the server started, and the
// server's own timing of its prompt processing (print_timing's "prompt
// eval time": from the start of its prompt's first llama_decode call
// until its first token is sampled).
//
// Between selection and launch the server saves the slot's state to the
// RAM cache and restores a better one from it (server_prompt_cache); the
// saves of the idle slots follow the launch. So a request's TTFT, as its
// client sees it, is the prompt eval time plus its copies plus time that
// is neither (the HTTP request and response, tokenizing, queueing).
type LlamaLogTask struct {
	Task     int   // the server's task id
	Line     int   // the log line of its launch
	Selected int64 // ns: "selected slot by ..." before the launch (Launched when there is none)
	Launched int64 // ns: "launch_slot_: ... processing task"
	// PromptEvalNs and PromptEvalTokens are print_timing's prompt eval
	// time and tokens, when the log has them (HasEval).
	PromptEvalNs     int64
	PromptEvalTokens int
	HasEval          bool
}

var (
	// 0.01.158.902: minutes, seconds, milliseconds, microseconds since
	// the server started (llama.cpp's common/log.cpp with timestamps,
	// llama-server's default).
	llamaLogTime   = regexp.MustCompile(`^(\d+)\.(\d\d)\.(\d\d\d)\.(\d\d\d) `)
	llamaLogSelect = regexp.MustCompile(`get_availabl: .*selected slot`)
	llamaLogLaunch = regexp.MustCompile(`launch_slot_: id +\d+ \| task (\d+) \| processing task`)
	llamaLogEval   = regexp.MustCompile(`print_timing: id +\d+ \| task (\d+) \| prompt eval time = +(\S+) ms / +(\d+) tokens`)
)

// ReadLlamaServerLog reads the tasks of a llama-server log (default
// verbosity or above, with its default timestamps), in launch order.
// Lines of other kinds are skipped. path names the log in errors, which
// give the line and column of what could not be read; a log without a
// single task launch is an error too.
func ReadLlamaServerLog(r io.Reader, path string) ([]LlamaLogTask, error) {
	var tasks []LlamaLogTask
	byID := map[int]int{}
	selected := int64(-1)
	br := bufio.NewReader(r)
	bad := func(line, col int, what string, a ...any) error {
		return fmt.Errorf("%s:%d:%d: %s", path, line, col, fmt.Sprintf(what, a...))
	}
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if len(b) == 0 && err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		l := string(b)
		m := llamaLogTime.FindStringSubmatchIndex(l)
		if m == nil {
			continue
		}
		var t int64
		for i, scale := range []int64{60e9, 1e9, 1e6, 1e3} {
			v, err := strconv.ParseInt(l[m[2+2*i]:m[3+2*i]], 10, 64)
			if err != nil || (i == 0 && v > 1e8) { // minutes: 1e8 x 60e9 ns fits an int64
				return nil, bad(line, m[2+2*i]+1, "timestamp: want minutes.seconds.ms.us, got %q", l[m[0]:m[1]-1])
			}
			t += v * scale
		}
		switch {
		case llamaLogSelect.MatchString(l):
			selected = t
		case llamaLogLaunch.MatchString(l):
			s := llamaLogLaunch.FindStringSubmatchIndex(l)
			id, err := strconv.Atoi(l[s[2]:s[3]])
			if err != nil {
				return nil, bad(line, s[2]+1, "task id: want an integer, got %q", l[s[2]:s[3]])
			}
			if selected < 0 || selected > t {
				selected = t
			}
			byID[id] = len(tasks)
			tasks = append(tasks, LlamaLogTask{Task: id, Line: line, Selected: selected, Launched: t})
			selected = -1
		case llamaLogEval.MatchString(l):
			e := llamaLogEval.FindStringSubmatchIndex(l)
			id, err := strconv.Atoi(l[e[2]:e[3]])
			if err != nil {
				return nil, bad(line, e[2]+1, "task id: want an integer, got %q", l[e[2]:e[3]])
			}
			i, ok := byID[id]
			if !ok {
				continue // a task launched before the log began
			}
			ms, err := strconv.ParseFloat(l[e[4]:e[5]], 64)
			if err != nil || !(ms >= 0 && ms <= 1e9) {
				return nil, bad(line, e[4]+1, "prompt eval time: want a non-negative number of ms, got %q", l[e[4]:e[5]])
			}
			n, err := strconv.Atoi(l[e[6]:e[7]])
			if err != nil {
				return nil, bad(line, e[6]+1, "prompt eval tokens: want an integer, got %q", l[e[6]:e[7]])
			}
			tasks[i].PromptEvalNs, tasks[i].PromptEvalTokens, tasks[i].HasEval = int64(ms*1e6+0.5), n, true
		}
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("%s: no task launch (a line \"M.SS.mmm.uuu ... launch_slot_: ... processing task\"): not a llama-server log at default verbosity or above, with its timestamps at the start of each line", path)
	}
	return tasks, nil
}
