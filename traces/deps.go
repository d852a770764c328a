package traces

// The dependency rules every reader follows (docs/trace-formats.md,
// "Dependencies"): a request is sent
//
//	max(Arrival, end of Parent + ThinkTime, end of every WaitFor gate)
//
// where ThinkTime is the client's delay after its own agent's previous
// request (Parent) and a WaitFor gate (a joined sub-agent) is a plain gate
// with no delay of its own. The readers choose Parent, WaitFor and
// ThinkTime so that a replay whose every request takes exactly its recorded
// service time sends every request at its recorded Arrival.

// subagentRun is a sub-agent launched by an agent and not yet joined: last
// is its last request's ID, end its recorded end (ns).
type subagentRun struct {
	last string
	end  int64
}

// joinSubagents returns the last requests of the running sub-agents that
// had ended by t (ns), in launch order: the agent's request sent at t is
// the first one after their end, so it waits for them. The others stay
// running (the slice is reused).
func joinSubagents(running []subagentRun, t int64) (gates []string, still []subagentRun) {
	k := 0
	for _, s := range running {
		if s.end <= t {
			gates = append(gates, s.last)
		} else {
			running[k] = s
			k++
		}
	}
	return gates, running[:k]
}

// recordedDelay returns the parent a request sent at t (ns) waits for and
// its delay after that parent's recorded end. Normally the parent is the
// agent's previous request and the delay t - its end. When the recording
// is inconsistent (the request was sent before its parent ended: whole
// second timestamps, or a client that did not wait), the request cannot
// have waited for it: it waits instead for the nearest ancestor (parent's
// parent, ...) that had ended by t, or for nothing when none had, so the
// recorded start is still reproduced.
func recordedDelay(ends map[string]wekaEnd, parent string, t int64) (string, int64) {
	for parent != "" {
		e, ok := ends[parent]
		if !ok {
			return parent, 0
		}
		if e.end <= t {
			return parent, t - e.end
		}
		parent = e.parent
	}
	return "", 0
}
