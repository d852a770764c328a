package study

import (
	"bufio"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Plot is one figure of the report.
type Plot struct {
	// Name is the file name without extension (plots/NAME.png and .svg).
	Name string
	// Caption says what the figure shows, for the report.
	Caption string
}

// series is the points of one line: those that share every swept value
// except the along axis's, in order of x.
type series struct {
	label string
	recs  []*Record
	x     []float64
}

// groupSeries splits records into lines along the report's axis.
func groupSeries(m *Manifest, recs []*Record) []series {
	alongAxis := -1
	for i, a := range m.Axes {
		if slices.Contains(a.Keys, m.Report.Along) {
			alongAxis = i
		}
	}
	var out []series
	index := map[string]int{}
	for _, r := range recs {
		x, ok := r.Metric(m.Report.X)
		if !ok {
			continue
		}
		var ps []Param
		for i, a := range m.Axes {
			if i == alongAxis {
				continue
			}
			for _, k := range a.Keys {
				ps = append(ps, Param{Key: k, Value: jsonNumber(r.Params[k])})
			}
		}
		label := formatParams(ps, ", ")
		i, ok := index[label]
		if !ok {
			i = len(out)
			index[label] = i
			out = append(out, series{label: label})
		}
		out[i].recs = append(out[i].recs, r)
		out[i].x = append(out[i].x, x)
	}
	for i := range out {
		s := &out[i]
		idx := make([]int, len(s.x))
		for j := range idx {
			idx[j] = j
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			if s.x[a] < s.x[b] {
				return -1
			}
			if s.x[a] > s.x[b] {
				return 1
			}
			return 0
		})
		recs, xs := make([]*Record, len(idx)), make([]float64, len(idx))
		for j, k := range idx {
			recs[j], xs[j] = s.recs[k], s.x[k]
		}
		s.recs, s.x = recs, xs
	}
	return out
}

// axisLabel names a capacity axis with its unit.
func axisLabel(key string) string {
	switch key {
	case "host_kv_gb":
		return "host (DRAM) KV pool per GPU, GB"
	case "device_kv_gb":
		return "device (HBM) KV pool per GPU, GB"
	case "cache_capacity_tokens":
		return "KV the tiers can hold, tokens"
	case "host_tokens":
		return "host KV pool per lane, tokens"
	case "device_tokens":
		return "device KV pool per lane, tokens"
	case "server.hicache_ratio":
		return "host pool / device pool (--hicache-ratio)"
	case "server.hicache_size":
		return "host pool per GPU, GB (--hicache-size)"
	case "server.mem_fraction_static":
		return "--mem-fraction-static"
	case "cache.cp":
		return "owner lanes (cache.cp, context-parallel ranks)"
	case "cache.host_tokens":
		return "host pool per lane, tokens (cache.host_tokens)"
	case "cache.device_tokens":
		return "device pool per lane, tokens (cache.device_tokens)"
	}
	return key
}

const plotW, plotH = 7.5 * vg.Inch, 4.6 * vg.Inch

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = 13
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.X.Label.TextStyle.Font.Size = 11
	p.Y.Label.TextStyle.Font.Size = 11
	p.Legend.TextStyle.Font.Size = 9
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

// addLine draws xs, ys with markers; dash selects the dash pattern.
func addLine(p *plot.Plot, xs, ys []float64, c color.Color, dash, shape int, width vg.Length) (*plotter.Line, *plotter.Scatter) {
	pts := make(plotter.XYs, len(xs))
	for i := range xs {
		pts[i] = plotter.XY{X: xs[i], Y: ys[i]}
	}
	l, s, err := plotter.NewLinePoints(pts)
	if err != nil {
		return nil, nil
	}
	l.Color = c
	l.Width = width
	l.Dashes = plotutil.Dashes(dash)
	s.Color = c
	s.Shape = plotutil.Shape(shape)
	s.Radius = vg.Points(3)
	p.Add(l, s)
	return l, s
}

// save writes plots (one column of aligned panels) as PNG and SVG.
func save(dir, name string, panels []*plot.Plot, h vg.Length) error {
	rows := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter, PadY: 3 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	img := vgimg.NewWith(vgimg.UseWH(plotW, h), vgimg.UseDPI(110))
	svg := vgsvg.New(plotW, h)
	for _, c := range []vg.CanvasSizer{img, svg} {
		dc := draw.New(c)
		dc.SetColor(color.White)
		dc.Fill(dc.Rectangle.Path())
		cv := plot.Align(rows, tiles, dc)
		for i, p := range panels {
			p.Draw(cv[i][0])
		}
	}
	if err := writeAtomic(filepath.Join(dir, name+".png"), func(w io.Writer) error {
		_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
		return err
	}); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, name+".svg"), func(w io.Writer) error {
		_, err := svg.WriteTo(w)
		return err
	})
}

// humanTicks labels a linear axis with k/M suffixes.
type humanTicks struct{}

func (humanTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	span := hi - lo
	for _, t := range (plot.DefaultTicks{}).Ticks(lo, hi) {
		if t.Value < lo-span*1e-9 || t.Value > hi+span*1e-9 {
			continue // out-of-range ticks would still pad the plot
		}
		if t.Label != "" {
			t.Label = humanNum(t.Value)
		}
		ts = append(ts, t)
	}
	return ts
}

// logTicks labels an axis whose data are log10 of the values (gonum's
// LogScale centres axis labels at the arithmetic mean of the range, which
// pads the plot badly; a linear axis over log10 values does not), at
// 1, 2, 5 x 10^k (only 10^k over more than 3.5 decades), with k/M suffixes.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	few := hi-lo <= 3.5
	for e := math.Floor(lo); e <= hi+1e-9; e++ {
		base := math.Pow(10, e)
		for _, m := range []float64{1, 2, 3, 4, 5, 6, 7, 8, 9} {
			v := math.Log10(base * m)
			if v < lo-1e-9 || v > hi+1e-9 {
				continue // out-of-range ticks would still pad the plot
			}
			t := plot.Tick{Value: v}
			if m == 1 || (few && (m == 2 || m == 5)) {
				t.Label = humanNum(base * m)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// log10s returns log10 of each value.
func log10s(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = math.Log10(x)
	}
	return out
}

func humanNum(v float64) string {
	a := math.Abs(v)
	trim := func(x float64, suf string) string {
		return strconv.FormatFloat(x, 'f', -1, 64) + suf
	}
	switch {
	case a >= 1e9:
		return trim(math.Round(v/1e9*100)/100, "G")
	case a >= 1e6:
		return trim(math.Round(v/1e6*100)/100, "M")
	case a >= 1e3:
		return trim(math.Round(v/1e3*100)/100, "k")
	default:
		return trim(math.Round(v*1000)/1000, "")
	}
}

// drawPlots writes every figure the records allow into dir/plots and
// returns their names in report order.
func drawPlots(m *Manifest, dir string, recs []*Record, best int, obj Objective, mrc []MRCPoint, note string) ([]Plot, error) {
	pdir := filepath.Join(dir, plotDir)
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return nil, err
	}
	var out []Plot
	ss := groupSeries(m, recs)
	if len(ss) > 0 && m.Report.X != "" {
		xl := axisLabel(m.Report.X)
		if err := plotHitRate(pdir, ss, xl, m); err != nil {
			return nil, err
		}
		out = append(out, Plot{"hit_rate", "Prompt tokens served from each cache tier (SGLang's cached_tokens / prompt tokens) against " + xl + ". Solid: all tiers; dashed: device (HBM); dotted: host (DRAM), loaded back over PCIe."})
		if err := plotTTFT(pdir, ss, xl, obj); err != nil {
			return nil, err
		}
		out = append(out, Plot{"ttft", "Time to first token against " + xl + ": median (solid) and 99th percentile (dashed), log scale. Queueing dominates when the server cannot keep up with the trace."})
		if err := plotThroughput(pdir, ss, xl); err != nil {
			return nil, err
		}
		out = append(out, Plot{"throughput", "Token throughput (prompt + generated tokens per second over the run) against " + xl + ". The trace's arrival rate caps it; a server that keeps up delivers it."})
		if slices.ContainsFunc(recs, func(r *Record) bool { return r.Fleet != nil }) {
			if err := plotFleetBalance(pdir, ss, xl); err != nil {
				return nil, err
			}
			out = append(out, Plot{"fleet_balance", "How evenly the router spread the load against " + xl + ": the largest replica's mean in-flight count over the replicas' mean (solid; 1 is even) and the coefficient of variation of the requests routed per replica (dashed; 0 is even)."})
		}
	}
	if len(mrc) > 0 || len(recs) > 0 {
		if err := plotMRC(pdir, ss, mrc, note); err != nil {
			return nil, err
		}
		cap := "Miss ratio (share of prompt tokens not served from cache) against the KV capacity of the tiers: "
		if len(mrc) > 0 {
			cap += "the solid line is an ideal LRU prefix cache of that many tokens on the trace (" + note + "), from its LRU stack distances; " +
				"the dashed line is the offline optimum at the same capacity (Belady: evict the block whose next use is furthest), the fewest misses any eviction policy can get, computed at the dots; "
		}
		cap += "markers are the simulated points at the distinct KV their pools can hold (max(device, host) under write-through, device + host under write-back)."
		out = append(out, Plot{"mrc", cap})
	}
	if tp := timelinePoint(m, recs, best, obj); tp >= 0 {
		r := recs[tp]
		path := filepath.Join(dir, timelineDir, timelineName(r.Point))
		if _, err := os.Stat(path); err == nil {
			if err := plotOccupancy(pdir, path, r, m); err != nil {
				return nil, err
			}
			why := "the best point"
			if m.Report.Timeline != "best" {
				why = "point " + m.Report.Timeline
			} else if best < 0 {
				why = "the point with the highest hit rate (no point meets the constraints)"
			}
			out = append(out, Plot{"occupancy", fmt.Sprintf("Tier occupancy over the run for %s, point %d (%s): KV tokens on the device and in host memory against their pool sizes (dashed), and requests running and waiting.", why, r.Point, recordParams(m, r))})
		}
	}
	return out, nil
}

// fromZero starts a capacity axis at zero when every x is >= 0, so that
// the distances between capacities read true.
func fromZero(p *plot.Plot, ss []series) {
	for _, s := range ss {
		for _, x := range s.x {
			if x < 0 {
				return
			}
		}
	}
	p.X.Min = 0
}

// timelinePoint picks the record whose timeline is plotted, or -1.
func timelinePoint(m *Manifest, recs []*Record, best int, obj Objective) int {
	if len(recs) == 0 {
		return -1
	}
	if m.Report.Timeline != "best" {
		n, err := strconv.Atoi(m.Report.Timeline)
		if err != nil {
			return -1
		}
		return slices.IndexFunc(recs, func(r *Record) bool { return r.Point == n })
	}
	if best >= 0 {
		return best
	}
	top := 0
	for i, r := range recs {
		if r.Metrics.CacheHitRate > recs[top].Metrics.CacheHitRate {
			top = i
		}
	}
	return top
}

func legendTitle(s series, what string) string {
	if s.label == "" {
		return what
	}
	if what == "" {
		return s.label
	}
	return s.label + ": " + what
}

func plotHitRate(dir string, ss []series, xl string, m *Manifest) error {
	p := newPlot("Cache hit rate by tier", xl, "share of prompt tokens served from cache")
	p.Y.Min, p.Y.Max = 0, 0.05
	anyStorage := false
	for _, s := range ss {
		for _, r := range s.recs {
			p.Y.Max = max(p.Y.Max, r.Metrics.CacheHitRate*1.15)
			anyStorage = anyStorage || r.Metrics.StorageHitRate > 0
		}
	}
	// Head room for the legend (top left), one line per entry.
	entries := 3
	if anyStorage {
		entries = 4
	}
	p.Y.Max = min(p.Y.Max*(1+0.05*float64(entries*len(ss))), 1)
	for i, s := range ss {
		c := plotutil.Color(i)
		get := func(f func(r *Record) float64) []float64 {
			out := make([]float64, len(s.recs))
			for j, r := range s.recs {
				out[j] = f(r)
			}
			return out
		}
		l, sc := addLine(p, s.x, get(func(r *Record) float64 { return r.Metrics.CacheHitRate }), c, 0, i, vg.Points(2))
		p.Legend.Add(legendTitle(s, "all tiers"), l, sc)
		l, sc = addLine(p, s.x, get(func(r *Record) float64 { return r.Metrics.DeviceHitRate }), c, 1, i, vg.Points(1.2))
		p.Legend.Add(legendTitle(s, "device (HBM)"), l, sc)
		l, sc = addLine(p, s.x, get(func(r *Record) float64 { return r.Metrics.HostHitRate }), c, 2, i, vg.Points(1.2))
		p.Legend.Add(legendTitle(s, "host (DRAM)"), l, sc)
		if anyStorage {
			l, sc = addLine(p, s.x, get(func(r *Record) float64 { return r.Metrics.StorageHitRate }), c, 3, i, vg.Points(1.2))
			p.Legend.Add(legendTitle(s, "storage"), l, sc)
		}
	}
	p.Legend.Left = true
	p.X.Tick.Marker = humanTicks{}
	fromZero(p, ss)
	return save(dir, "hit_rate", []*plot.Plot{p}, plotH)
}

func plotTTFT(dir string, ss []series, xl string, obj Objective) error {
	p := newPlot("Time to first token", xl, "TTFT, seconds (log scale)")
	lo, hi := math.Inf(1), 0.0
	for i, s := range ss {
		c := plotutil.Color(i)
		p50 := make([]float64, len(s.recs))
		p99 := make([]float64, len(s.recs))
		for j, r := range s.recs {
			p50[j] = max(r.Metrics.MedianTTFT/1e3, 1e-3)
			p99[j] = max(r.Metrics.P99TTFT/1e3, 1e-3)
			lo, hi = min(lo, p50[j]), max(hi, p99[j])
		}
		l, sc := addLine(p, s.x, log10s(p50), c, 0, i, vg.Points(2))
		p.Legend.Add(legendTitle(s, "median"), l, sc)
		l, sc = addLine(p, s.x, log10s(p99), c, 2, i, vg.Points(1.5))
		p.Legend.Add(legendTitle(s, "p99"), l, sc)
	}
	// The objective's TTFT bounds, as horizontal lines.
	xlo, xhi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		xlo, xhi = min(xlo, slices.Min(s.x)), max(xhi, slices.Max(s.x))
	}
	xlo = min(xlo, 0)
	for _, c := range obj.Constraints {
		if (c.Metric != "median_ttft_ms" && c.Metric != "p99_ttft_ms") || c.Bound <= 0 {
			continue
		}
		y := c.Bound / 1e3
		l, err := plotter.NewLine(plotter.XYs{{X: xlo, Y: math.Log10(y)}, {X: xhi, Y: math.Log10(y)}})
		if err != nil {
			return err
		}
		l.Color, l.Width, l.Dashes = color.Gray{Y: 90}, vg.Points(1), []vg.Length{vg.Points(6), vg.Points(3)}
		p.Add(l)
		p.Legend.Add("objective: "+c.Metric+" "+c.Op+" "+strconv.FormatFloat(c.Bound, 'g', -1, 64), l)
		lo, hi = min(lo, y), max(hi, y)
	}
	if hi > 0 {
		p.Y.Tick.Marker = logTicks{}
		// Room for the legend (bottom left) under the data: a decade and a
		// bit more per few entries.
		p.Y.Min = math.Floor(math.Log10(lo)) - 1 - float64(len(ss)/3)
		p.Y.Max = math.Ceil(math.Log10(hi))
	}
	p.Legend.Top, p.Legend.Left = false, true
	p.X.Tick.Marker = humanTicks{}
	fromZero(p, ss)
	return save(dir, "ttft", []*plot.Plot{p}, plotH)
}

func plotThroughput(dir string, ss []series, xl string) error {
	p := newPlot("Throughput", xl, "tokens per second (prompt + generated)")
	p.Y.Min = 0
	for i, s := range ss {
		ys := make([]float64, len(s.recs))
		for j, r := range s.recs {
			ys[j] = r.Metrics.TotalThroughput
			p.Y.Max = max(p.Y.Max, ys[j]*1.15)
		}
		l, sc := addLine(p, s.x, ys, plotutil.Color(i), 0, i, vg.Points(2))
		p.Legend.Add(legendTitle(s, "total token throughput"), l, sc)
	}
	p.Legend.Top = false
	p.X.Tick.Marker = humanTicks{}
	p.Y.Tick.Marker = humanTicks{}
	fromZero(p, ss)
	return save(dir, "throughput", []*plot.Plot{p}, plotH)
}

func plotMRC(dir string, ss []series, mrc []MRCPoint, note string) error {
	p := newPlot("Miss-ratio curve", "KV capacity of the cache tiers, tokens (log scale)", "miss ratio (share of prompt tokens recomputed)")
	p.Y.Min, p.Y.Max = 0, 1
	lo, hi := math.Inf(1), 0.0
	simLo, minY := math.Inf(1), 1.0
	var trace, optTrace *plotter.XYs
	var optLast plotter.XY
	if len(mrc) > 0 {
		pts := make(plotter.XYs, 0, len(mrc))
		for _, q := range mrc {
			pts = append(pts, plotter.XY{X: math.Log10(float64(q.CapacityTokens)), Y: q.MissRatio})
			lo, hi = min(lo, float64(q.CapacityTokens)), max(hi, float64(q.CapacityTokens))
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		trace = &l.XYs
		l.Color = color.Gray{Y: 60}
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add("trace, ideal LRU prefix cache", l)
		var opts plotter.XYs
		for _, q := range mrc {
			if !math.IsNaN(q.OPTMissRatio) {
				opts = append(opts, plotter.XY{X: math.Log10(float64(q.CapacityTokens)), Y: q.OPTMissRatio})
			}
		}
		if len(opts) > 0 {
			ol, sc, err := plotter.NewLinePoints(opts)
			if err != nil {
				return err
			}
			ol.Color, sc.Color = color.Gray{Y: 0}, color.Gray{Y: 0}
			ol.Width = vg.Points(1.5)
			ol.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			sc.Shape = draw.CircleGlyph{}
			sc.Radius = vg.Points(1.5)
			optTrace = &ol.XYs
			optLast = opts[len(opts)-1]
			p.Add(ol, sc)
			p.Legend.Add("trace, offline optimum (Belady)", ol, sc)
		}
	}
	for i, s := range ss {
		pts := make(plotter.XYs, 0, len(s.recs))
		for _, r := range s.recs {
			x := float64(r.Sizing.CacheCapacityTokens)
			pts = append(pts, plotter.XY{X: math.Log10(x), Y: 1 - r.Metrics.CacheHitRate})
			lo, hi = min(lo, x), max(hi, x)
			simLo, minY = min(simLo, x), min(minY, 1-r.Metrics.CacheHitRate)
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.Color = plotutil.Color(i)
		sc.Shape = plotutil.Shape(i)
		sc.Radius = vg.Points(4)
		p.Add(sc)
		p.Legend.Add(legendTitle(s, "simulated"), sc)
	}
	if hi > 0 {
		// From a decade and more below the smallest simulated point (the
		// curve's far left, tiny caches, says little) to the top.
		if !math.IsInf(simLo, 1) {
			lo = max(lo, simLo/10)
		}
		p.X.Tick.Marker = logTicks{}
		p.X.Min = math.Floor(math.Log10(max(lo, 1)))
		p.X.Max = math.Ceil(math.Log10(hi))
	}
	for _, q := range mrc {
		if math.Log10(float64(q.CapacityTokens)) >= p.X.Min {
			minY = min(minY, q.MissRatio)
			if !math.IsNaN(q.OPTMissRatio) {
				minY = min(minY, q.OPTMissRatio)
			}
		}
	}
	p.Y.Min = max(0, math.Floor(minY*10)/10-0.1)
	if trace != nil && len(mrc) > 0 && p.X.Max > math.Log10(float64(mrc[len(mrc)-1].CapacityTokens)) {
		// Beyond every unique block the LRU holds the whole trace: flat.
		*trace = append(*trace, plotter.XY{X: p.X.Max, Y: mrc[len(mrc)-1].MissRatio})
	}
	if optTrace != nil && p.X.Max > optLast.X {
		*optTrace = append(*optTrace, plotter.XY{X: p.X.Max, Y: optLast.Y})
	}
	p.Legend.Top = false
	p.Legend.Left = true
	return save(dir, "mrc", []*plot.Plot{p}, plotH)
}

// plotOccupancy draws a point's timeline: tokens per tier (top) and
// requests running and waiting (bottom).
func plotOccupancy(dir, path string, r *Record, m *Manifest) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var t, dev, busy, host, stor, wait, run []float64
	sc := bufio.NewScanner(f)
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		v := strings.Split(sc.Text(), ",")
		if len(v) != 9 {
			return fmt.Errorf("%s: bad timeline line %q", path, sc.Text())
		}
		num := func(i int) float64 { x, _ := strconv.ParseFloat(v[i], 64); return x }
		t = append(t, num(0)/60)
		// Device use: tree tokens plus tokens requests hold outside the
		// tree; in use: the locked (non-evictable) part of the tree plus
		// the latter.
		dev = append(dev, num(1)+num(2))
		busy = append(busy, num(1)-num(3)+num(2))
		host = append(host, num(4))
		stor = append(stor, num(6))
		wait = append(wait, num(7))
		run = append(run, num(8))
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(t) == 0 {
		return nil
	}
	lanes := float64(max(r.Sizing.Lanes, 1))
	devCap := lanes * float64(r.Sizing.DeviceTokens)
	hostCap := lanes * float64(r.Sizing.HostTokens)
	unit, scale := "KV tokens", 1.0
	switch top := max(devCap, hostCap, slices.Max(stor)); {
	case top >= 2e6:
		unit, scale = "KV tokens, millions", 1e-6
	case top >= 2e3:
		unit, scale = "KV tokens, thousands", 1e-3
	}
	for _, ys := range [][]float64{dev, busy, host, stor} {
		for i := range ys {
			ys[i] *= scale
		}
	}
	devCap, hostCap = devCap*scale, hostCap*scale
	top := newPlot(fmt.Sprintf("Tier occupancy, point %d (%s)", r.Point, recordParams(m, r)), "", unit)
	top.Title.TextStyle.Font.Size = 11
	top.Y.Min = 0
	line := func(p *plot.Plot, ys []float64, c color.Color, dash int, name string) {
		pts := make(plotter.XYs, len(t))
		for i := range t {
			pts[i] = plotter.XY{X: t[i], Y: ys[i]}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return
		}
		l.Color, l.Dashes, l.Width = c, plotutil.Dashes(dash), vg.Points(1.3)
		p.Add(l)
		p.Legend.Add(name, l)
	}
	constant := func(v float64) []float64 {
		out := make([]float64, len(t))
		for i := range out {
			out[i] = v
		}
		return out
	}
	line(top, dev, plotutil.Color(0), 0, "device: used (cached prefixes + running requests)")
	line(top, busy, plotutil.Color(2), 0, "device: pinned by running requests")
	line(top, constant(devCap), plotutil.Color(0), 2, "device pool")
	if hostCap > 0 {
		line(top, host, plotutil.Color(1), 0, "host")
		line(top, constant(hostCap), plotutil.Color(1), 2, "host pool")
	}
	if slices.Max(stor) > 0 {
		line(top, stor, plotutil.Color(3), 0, "storage")
	}
	top.Y.Max = max(devCap, hostCap, slices.Max(stor), slices.Max(dev)) * 1.4
	top.Legend.Left = true
	top.X.Tick.Marker = humanTicks{}
	top.Y.Tick.Marker = humanTicks{}
	bot := newPlot("", "simulated time, minutes", "requests")
	bot.Y.Min = 0
	line(bot, run, plotutil.Color(4), 0, "running")
	line(bot, wait, plotutil.Color(5), 0, "waiting")
	bot.Y.Max = max(slices.Max(run), slices.Max(wait), 1) * 1.3
	bot.Legend.Left = true
	bot.X.Tick.Marker = humanTicks{}
	bot.Y.Tick.Marker = humanTicks{}
	return save(dir, "occupancy", []*plot.Plot{top, bot}, plotH*1.5)
}
