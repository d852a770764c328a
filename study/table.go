package study

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// column is one column of the results table.
type column struct {
	head   string
	metric string                 // "" for a swept key column
	key    string                 // swept key
	format func(v float64) string // for metrics
	raw    func(r *Record) string // overrides both
}

func fixed(prec int, scale float64) func(float64) string {
	return func(v float64) string { return fmt.Sprintf("%.*f", prec, v*scale) }
}

// gb prints GB with one decimal, or three significant digits below 1 GB.
func gb(v float64) string {
	if v != 0 && v < 1 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return fmt.Sprintf("%.1f", v)
}

// tableColumns picks the table's columns: the swept keys, the hit rates by
// tier, TTFT, throughput, the KV memory per GPU, for a fleet its replicas,
// imbalance and worst replica's p99 TTFT, and any metric the objective
// names that is not already shown.
func tableColumns(m *Manifest, recs []*Record, obj Objective) []column {
	var cols []column
	for _, k := range m.keys() {
		cols = append(cols, column{head: k, key: k})
	}
	anyStorage := slices.ContainsFunc(recs, func(r *Record) bool { return r.Metrics.StorageHitRate > 0 })
	std := []column{
		{head: "hit", metric: "cache_hit_rate", format: fixed(3, 1)},
		{head: "device", metric: "device_hit_rate", format: fixed(3, 1)},
		{head: "host", metric: "host_hit_rate", format: fixed(3, 1)},
	}
	if anyStorage {
		std = append(std, column{head: "storage", metric: "storage_hit_rate", format: fixed(3, 1)})
	}
	// TTFT in seconds, or in ms when every p99 is under 10 s.
	ttftHead, ttft := " s", fixed(2, 1e-3)
	if !slices.ContainsFunc(recs, func(r *Record) bool { return r.Metrics.P99TTFT >= 1e4 }) {
		ttftHead, ttft = " ms", fixed(1, 1)
	}
	std = append(std,
		column{head: "TTFT p50" + ttftHead, metric: "median_ttft_ms", format: ttft},
		column{head: "TTFT p99" + ttftHead, metric: "p99_ttft_ms", format: ttft},
		column{head: "tok/s", metric: "total_throughput", format: fixed(0, 1)},
		column{head: "HBM KV GB/GPU", metric: "device_kv_gb", format: gb},
		column{head: "host KV GB/GPU", metric: "host_kv_gb", format: gb},
	)
	if slices.ContainsFunc(recs, func(r *Record) bool { return r.Fleet != nil }) {
		std = append(std,
			column{head: "replicas", metric: "replicas", format: fixed(0, 1)},
			column{head: "max/mean in-flight", metric: "max_over_mean_in_flight", format: fixed(2, 1)},
			column{head: "requests CV", metric: "requests_cv", format: fixed(3, 1)},
			column{head: "worst replica TTFT p99" + ttftHead, metric: "max_replica_p99_ttft_ms", format: ttft},
		)
	}
	cols = append(cols, std...)
	for _, name := range obj.names() {
		if slices.ContainsFunc(cols, func(c column) bool { return c.metric == name || c.key == name }) {
			continue
		}
		cols = append(cols, column{head: name, metric: name, format: func(v float64) string { return fmt.Sprintf("%.4g", v) }})
	}
	if len(obj.Constraints) > 0 {
		cols = append(cols, column{head: "meets", raw: func(r *Record) string {
			if obj.Feasible(r) {
				return "yes"
			}
			return "no"
		}})
	}
	return cols
}

func (c column) cell(r *Record) string {
	switch {
	case c.raw != nil:
		return c.raw(r)
	case c.metric != "":
		v, ok := r.Metric(c.metric)
		if !ok {
			return "-"
		}
		return c.format(v)
	default:
		return formatValue(jsonNumber(r.Params[c.key]))
	}
}

// WriteTable prints the results as an aligned text table, the best point
// marked with "*" (and bold when bold is true), followed by a line saying
// which point is best for the objective.
func WriteTable(w io.Writer, out *Outcome, bold bool) error {
	m := out.Manifest
	obj, err := ParseObjective(m.Objective)
	if err != nil {
		return err
	}
	cols := tableColumns(m, out.Records, obj)
	rows := [][]string{append([]string{" ", "point"}, heads(cols)...)}
	for i, r := range out.Records {
		mark := " "
		if i == out.Best {
			mark = "*"
		}
		row := []string{mark, fmt.Sprint(r.Point)}
		for _, c := range cols {
			row = append(row, c.cell(r))
		}
		rows = append(rows, row)
	}
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for j, c := range row {
			width[j] = max(width[j], len([]rune(c)))
		}
	}
	var b strings.Builder
	for i, row := range rows {
		var l strings.Builder
		for j, c := range row {
			if j > 0 {
				l.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[j]-len([]rune(c)))
			if j >= 2+len(m.keys()) || j == 1 {
				l.WriteString(pad + c) // numbers right-aligned
			} else {
				l.WriteString(c + pad)
			}
		}
		line := strings.TrimRight(l.String(), " ")
		if bold && i-1 == out.Best && out.Best >= 0 {
			line = "\033[1m" + line + "\033[0m"
		}
		b.WriteString(line + "\n")
	}
	b.WriteString(bestLine(m, out, obj) + "\n")
	_, err = io.WriteString(w, b.String())
	return err
}

func heads(cols []column) []string {
	var out []string
	for _, c := range cols {
		out = append(out, c.head)
	}
	return out
}

// bestLine says which point is best and why, or that none qualifies.
func bestLine(m *Manifest, out *Outcome, obj Objective) string {
	if out.Best < 0 {
		return fmt.Sprintf("no point meets the objective's constraints (%s)", obj)
	}
	r := out.Records[out.Best]
	v, _ := r.Metric(obj.Metric)
	return fmt.Sprintf("* best for %q: point %d (%s), %s = %s", obj.String(), r.Point, recordParams(m, r), obj.Metric, fmtNum(v))
}

// recordParams prints a record's swept values in axis order.
func recordParams(m *Manifest, r *Record) string {
	var ps []Param
	for _, k := range m.keys() {
		ps = append(ps, Param{Key: k, Value: jsonNumber(r.Params[k])})
	}
	return formatParams(ps, ", ")
}

func fmtNum(v float64) string { return fmt.Sprintf("%.4g", v) }

// writeMarkdownTable prints the table in Markdown, the best row in bold.
func writeMarkdownTable(w io.Writer, m *Manifest, recs []*Record, best int, obj Objective) {
	cols := tableColumns(m, recs, obj)
	hs := append([]string{"point"}, heads(cols)...)
	fmt.Fprintf(w, "| %s |\n", strings.Join(hs, " | "))
	align := make([]string, len(hs))
	for i := range align {
		if i == 0 || i > len(m.keys()) {
			align[i] = "---:"
		} else {
			align[i] = "---"
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(align, "|"))
	for i, r := range recs {
		cells := []string{fmt.Sprint(r.Point)}
		for _, c := range cols {
			cells = append(cells, c.cell(r))
		}
		if i == best {
			for j := range cells {
				cells[j] = "**" + cells[j] + "**"
			}
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}
