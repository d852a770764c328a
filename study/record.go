package study

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kvsim/kvsim/internal/atomicfile"
	"github.com/kvsim/kvsim/internal/jsonerr"
	"github.com/kvsim/kvsim/tree"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/sim/engine"
)

// Record is one point's result: one line of results.jsonl.
type Record struct {
	// Point is the point's index in the grid.
	Point int `json:"point"`
	// Params are the swept keys' values (JSON sorts the keys).
	Params map[string]any `json:"params"`
	// Seed is the simulator's seed.
	Seed uint64 `json:"seed"`
	// Version is the kvsim version that simulated the point.
	Version string `json:"kvsim_version"`
	// StudyDigest identifies the study ([Study.Digest]).
	StudyDigest string `json:"study_digest"`
	// ConfigDigest identifies the point's configuration ([Point.Digest]).
	ConfigDigest string `json:"config_digest"`
	// Sizing is the point's memory layout.
	Sizing Sizing `json:"sizing"`
	// Metrics is the simulator's full metric set (a fleet's: over every
	// request of the fleet).
	Metrics engine.Summary `json:"metrics"`
	// Fleet holds a fleet point's fleet metrics; absent for one server.
	Fleet *FleetMetrics `json:"fleet,omitempty"`
}

// Sizing is what SGLang's memory derivation gave a point, per GPU (rank).
// GB are 10^9 bytes.
type Sizing struct {
	// GPUs is the TP group's size (tp_size): the GPUs one replica uses.
	GPUs int `json:"gpus"`
	// Lanes is the number of owner lanes (cache.cp), each with its own
	// device and host pool.
	Lanes int `json:"lanes"`
	// DeviceTokens and HostTokens are each lane's pools in tokens.
	DeviceTokens int64 `json:"device_tokens"`
	HostTokens   int64 `json:"host_tokens"`
	// KVBytesPerToken is the KV cache's bytes per token per GPU.
	KVBytesPerToken int64 `json:"kv_bytes_per_token"`
	// DeviceKVGB and HostKVGB are the KV pools per GPU in GB: the HBM the
	// device pool takes and the pinned host memory the host pool takes.
	DeviceKVGB float64 `json:"device_kv_gb"`
	HostKVGB   float64 `json:"host_kv_gb"`
	// CacheCapacityTokens is how many distinct tokens of KV the tiers can
	// hold together: lanes x (device + host) under write_back (the tiers
	// are exclusive), lanes x max(device, host) under write-through (the
	// host keeps a copy of what the device holds).
	CacheCapacityTokens int64 `json:"cache_capacity_tokens"`
}

// sizingOf derives a point's Sizing from its configuration.
func sizingOf(f *configs.File, b *configs.Built) Sizing {
	c := b.Sim.Cache
	lanes := max(c.CP, 1)
	cell := b.Sizing.CellBytes
	z := Sizing{
		GPUs: f.Server.TPSize, Lanes: lanes,
		DeviceTokens: c.DeviceTokens, HostTokens: c.HostTokens, KVBytesPerToken: cell,
		DeviceKVGB: float64(c.DeviceTokens*cell) / 1e9, HostKVGB: float64(c.HostTokens*cell) / 1e9,
	}
	if c.WritePolicy == tree.WriteBack {
		z.CacheCapacityTokens = int64(lanes) * (c.DeviceTokens + c.HostTokens)
	} else {
		z.CacheCapacityTokens = int64(lanes) * max(c.DeviceTokens, c.HostTokens)
	}
	return z
}

// metricField locates a metric: a field of Sizing or of engine.Summary.
type metricField struct {
	name   string
	sizing bool
	index  []int
}

// metricFields lists the metrics in results.csv's order: the sizing, then
// the simulator's summary, each under its JSON name.
var metricFields = sync.OnceValue(func() []metricField {
	var out []metricField
	add := func(t reflect.Type, sizing bool) {
		// VisibleFields flattens embedded structs (engine.Summary embeds the
		// serving benchmark's engine.Serving) in declaration order.
		for _, f := range reflect.VisibleFields(t) {
			if f.Anonymous {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			out = append(out, metricField{name: name, sizing: sizing, index: f.Index})
		}
	}
	add(reflect.TypeFor[Sizing](), true)
	add(reflect.TypeFor[engine.Summary](), false)
	return out
})

// metricNames lists every metric name.
func metricNames() []string {
	var out []string
	for _, f := range metricFields() {
		out = append(out, f.name)
	}
	return out
}

// Metric returns a metric of the record by its name (a results.csv
// column), or a numeric swept key's value.
func (r *Record) Metric(name string) (float64, bool) {
	for _, f := range metricFields() {
		if f.name != name {
			continue
		}
		v := reflect.ValueOf(r.Metrics)
		if f.sizing {
			v = reflect.ValueOf(r.Sizing)
		}
		fv := v.FieldByIndex(f.index)
		switch fv.Kind() {
		case reflect.Float64:
			return fv.Float(), true
		case reflect.Int, reflect.Int64:
			return float64(fv.Int()), true
		}
		return 0, false
	}
	if v, ok := fleetMetric(r.Fleet, name); ok {
		return v, true
	}
	if v, ok := r.Params[name]; ok {
		return number(jsonNumber(v))
	}
	return 0, false
}

// jsonNumber turns a number decoded from JSON (float64) or from TOML
// (int64, float64) into a TOML-style value.
func jsonNumber(v any) any {
	if f, ok := v.(float64); ok {
		return f
	}
	return v
}

// line is one results.jsonl line: the record and its exact bytes (written
// and copied as they are, so that merged and unsharded files are equal).
type line struct {
	rec Record
	raw []byte // with the trailing newline
}

// writeLines writes the lines' exact bytes to path, atomically.
func writeLines(path string, lines []line) error {
	return writeAtomic(path, func(w io.Writer) error {
		for _, l := range lines {
			if _, err := w.Write(l.raw); err != nil {
				return err
			}
		}
		return nil
	})
}

// encodeLine marshals a record as one JSON line.
func encodeLine(r *Record) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// readResults reads a results.jsonl file. A last line without its newline
// or that is not valid JSON (an interrupted write) is dropped and reported
// in warn; any other bad line is an error. A missing file is empty.
func readResults(path string) (lines []line, warn string, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	n := 0
	for len(data) > 0 {
		n++
		end := bytes.IndexByte(data, '\n')
		last := end < 0 || end == len(data)-1
		var raw []byte
		if end < 0 {
			raw, data = data, nil
		} else {
			raw, data = data[:end+1], data[end+1:]
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue // a blank line holds no point
		}
		var rec Record
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		derr := dec.Decode(&rec)
		if derr == nil && end < 0 {
			derr = io.ErrUnexpectedEOF
		}
		if derr != nil {
			if last {
				return lines, fmt.Sprintf("%s:%d: ignoring a truncated last line (an interrupted run); its point runs again", path, n), nil
			}
			return nil, "", fmt.Errorf("%s:%d: expected a result line written by kvsim study: %s", path, n, jsonProblem(derr))
		}
		lines = append(lines, line{rec: rec, raw: raw})
	}
	return lines, "", nil
}

// jsonProblem says what encoding/json found wrong in a line, in the file's
// terms (column, key path), never in Go's (struct and type names).
func jsonProblem(err error) string {
	p := jsonerr.Explain(err)
	if p.Syntax && (p.Offset < 0 || strings.HasPrefix(p.Msg, "the document ends")) {
		return "the line ends before its JSON value does"
	}
	msg := p.Msg
	switch {
	case p.Path != "":
		msg = p.Path + ": " + msg
	case !p.Syntax:
		msg = "the line: " + msg
	}
	if p.Offset >= 0 {
		msg = fmt.Sprintf("column %d: %s", p.Offset, msg)
	}
	return msg
}

// appender appends lines to results.jsonl, each with one write followed by
// an fsync. The file holds whole lines only (internal/atomicfile.Lines): a
// line that does not fit on the disk is cut off, and that point runs again
// when the study is resumed.
type appender struct{ l *atomicfile.Lines }

func openAppender(path string) (*appender, error) {
	l, err := atomicfile.AppendLines(path)
	if err != nil {
		return nil, err
	}
	return &appender{l: l}, nil
}

func (a *appender) add(raw []byte) error {
	if _, err := a.l.Write(raw); err != nil {
		return err
	}
	return a.l.Sync()
}

func (a *appender) close() error { return a.l.Close() }

// writeAtomic writes a file atomically (see internal/atomicfile).
func writeAtomic(path string, fill func(io.Writer) error) error {
	return atomicfile.Write(path, fill)
}

// writeCSV writes results.csv: one row per record, the swept keys in axis
// order, then seed, version, digests and every metric.
func writeCSV(w io.Writer, keys []string, recs []*Record) error {
	cols := append([]string{"point"}, keys...)
	cols = append(cols, "seed", "kvsim_version", "study_digest", "config_digest")
	names := metricNames()
	if slices.ContainsFunc(recs, func(r *Record) bool { return r.Fleet != nil }) {
		names = append(names, fleetMetricNames()...)
	}
	cols = append(cols, names...)
	bw := bufio.NewWriter(w)
	bw.WriteString(strings.Join(cols, ",") + "\n")
	for _, r := range recs {
		row := []string{strconv.Itoa(r.Point)}
		for _, k := range keys {
			row = append(row, csvField(formatValue(jsonNumber(r.Params[k]))))
		}
		row = append(row, strconv.FormatUint(r.Seed, 10), csvField(r.Version), r.StudyDigest, r.ConfigDigest)
		for _, m := range names {
			v, _ := r.Metric(m)
			row = append(row, strconv.FormatFloat(v, 'g', -1, 64))
		}
		bw.WriteString(strings.Join(row, ",") + "\n")
	}
	return bw.Flush()
}

func csvField(s string) string {
	if strings.ContainsAny(s, ",\"\n") {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}
