package study

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Objective picks a study's best point: maximise or minimise one metric
// among the points that meet every constraint. Its grammar (words are
// separated by spaces; metrics are results.csv column names or numeric
// swept keys):
//
//	objective  = goal [ "subject to" constraint { "and" constraint } ]
//	goal       = ( "maximize" | "maximise" | "minimize" | "minimise" ) metric
//	constraint = metric op number
//	op         = "<=" | "<" | ">=" | ">" | "=="
//
// for example "minimize host_kv_gb subject to p99_ttft_ms <= 30000 and
// failed == 0". Ties go to the lowest point index.
type Objective struct {
	// Maximize is true for maximize, false for minimize.
	Maximize bool
	// Metric is what is maximised or minimised.
	Metric string
	// Constraints must all hold for a point to be eligible.
	Constraints []Constraint
}

// Constraint is "metric op bound".
type Constraint struct {
	Metric string
	Op     string
	Bound  float64
}

// ParseObjective parses an objective string (see [Objective]).
func ParseObjective(s string) (Objective, error) {
	var o Objective
	w := strings.Fields(s)
	if len(w) < 2 {
		return o, fmt.Errorf(`want "maximize METRIC" or "minimize METRIC", optionally followed by "subject to METRIC OP NUMBER [and ...]" (got %q)`, s)
	}
	switch w[0] {
	case "maximize", "maximise":
		o.Maximize = true
	case "minimize", "minimise":
	default:
		return o, fmt.Errorf(`must start with "maximize" or "minimize" (got %q)`, w[0])
	}
	o.Metric = w[1]
	rest := w[2:]
	if len(rest) == 0 {
		return o, nil
	}
	if len(rest) < 2 || rest[0] != "subject" || rest[1] != "to" {
		return o, fmt.Errorf(`after %q want "subject to" (got %q)`, w[0]+" "+w[1], strings.Join(rest, " "))
	}
	rest = rest[2:]
	for {
		if len(rest) < 3 {
			return o, fmt.Errorf(`want a constraint "METRIC OP NUMBER" (got %q)`, strings.Join(rest, " "))
		}
		c := Constraint{Metric: rest[0], Op: rest[1]}
		switch c.Op {
		case "<=", "<", ">=", ">", "==":
		default:
			return o, fmt.Errorf("constraint on %s: operator must be <=, <, >=, > or == (got %q)", c.Metric, c.Op)
		}
		b, err := strconv.ParseFloat(rest[2], 64)
		if err != nil || math.IsNaN(b) || math.IsInf(b, 0) {
			return o, fmt.Errorf("constraint on %s: expected a finite number as the bound, found %q", c.Metric, rest[2])
		}
		c.Bound = b
		o.Constraints = append(o.Constraints, c)
		rest = rest[3:]
		if len(rest) == 0 {
			return o, nil
		}
		if rest[0] != "and" {
			return o, fmt.Errorf(`constraints are joined by "and" (got %q)`, rest[0])
		}
		rest = rest[1:]
	}
}

// String prints the objective in its grammar.
func (o Objective) String() string {
	var b strings.Builder
	if o.Maximize {
		b.WriteString("maximize ")
	} else {
		b.WriteString("minimize ")
	}
	b.WriteString(o.Metric)
	for i, c := range o.Constraints {
		if i == 0 {
			b.WriteString(" subject to ")
		} else {
			b.WriteString(" and ")
		}
		fmt.Fprintf(&b, "%s %s %s", c.Metric, c.Op, strconv.FormatFloat(c.Bound, 'g', -1, 64))
	}
	return b.String()
}

// names lists the metrics the objective mentions.
func (o Objective) names() []string {
	out := []string{o.Metric}
	for _, c := range o.Constraints {
		out = append(out, c.Metric)
	}
	return out
}

// Holds reports whether the constraint holds for v.
func (c Constraint) Holds(v float64) bool {
	switch c.Op {
	case "<=":
		return v <= c.Bound
	case "<":
		return v < c.Bound
	case ">=":
		return v >= c.Bound
	case ">":
		return v > c.Bound
	default:
		return v == c.Bound
	}
}

// Feasible reports whether a record meets every constraint.
func (o Objective) Feasible(r *Record) bool {
	for _, c := range o.Constraints {
		v, ok := r.Metric(c.Metric)
		if !ok || !c.Holds(v) {
			return false
		}
	}
	return true
}

// Best returns the index in recs of the best feasible record, or -1 when
// none meets the constraints. recs are in point order, so ties go to the
// lowest point index.
func (o Objective) Best(recs []*Record) int {
	best := -1
	var bestV float64
	for i, r := range recs {
		if !o.Feasible(r) {
			continue
		}
		v, ok := r.Metric(o.Metric)
		if !ok {
			continue
		}
		if best < 0 || (o.Maximize && v > bestV) || (!o.Maximize && v < bestV) {
			best, bestV = i, v
		}
	}
	return best
}
