package traces

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kvsim/kvsim/internal/jsonerr"
)

// WEKA kv-cache-tester traces (callanjfox/kv-cache-tester) hold one
// conversation per JSON document:
//
//	{"id": str, "models": [...], "block_size": 64, "hash_id_scope": "local"|"global",
//	 "tool_tokens": n, "system_tokens": n, "totals": {...},
//	 "requests": [request | subagent, ...]}
//
// A request is {"t": s from conversation start, "type": "s"|"n", "model",
// "in", "out", "hash_ids", "input_types", "output_types", "stop",
// "api_time": s, "ttft": s, "think_time": s}. A sub-agent entry has
// "type": "subagent", "duration_ms" and its own nested "requests". It
// stands in its agent's list where the sub-agent was launched; sub-agents
// launched from the same turn run concurrently.
//
// The reader flattens every conversation into records:
//   - Session is the conversation id, or "<id>/sa<k>" for its k-th
//     sub-agent; Turn counts requests within the session; Parent is the
//     session's previous request (for a sub-agent's first request, the
//     request that spawned it).
//   - Joins follow the recording (see joinSubagents): a sub-agent gates
//     (WaitFor its last request) the first later request of its agent
//     whose `t` is at or after the sub-agent's end; with no such request it
//     runs in the background and gates nothing.
//   - ThinkTime is the client-side delay that reproduces the recording:
//     `t` minus the recorded end (`t + api_time`) of Parent, so that a
//     replay with the recorded service times sends every request at its
//     recorded `t` (see recordedDelay for an inconsistent recording). The
//     recorded think_time goes to Observed.ThinkTime.
//   - Arrival is `t`. Conversations all start at time 0. Nested `t` values
//     are on the conversation's clock, unless the first one is smaller than
//     the sub-agent entry's own `t`, in which case they are offsets from it.
//   - Local hash ids (hash_id_scope "local" or absent) are interned per
//     (file, conversation, id) into fresh sequential ids, so ids of
//     different conversations never collide; global ids are interned by
//     value, so equal global ids stay equal across files.
//   - api_time, ttft and stop go to Observed (E2E, TTFT, Status).
//
// Records are sorted by arrival across all conversations (ties keep file
// and request order), so the reader holds every conversation's records in
// memory at once: about 8 bytes per block plus the record headers.

type wekaRequest struct {
	T         json.RawMessage `json:"t"`
	Type      string          `json:"type"`
	Model     string          `json:"model"`
	In        *int            `json:"in"`
	Out       *int            `json:"out"`
	HashIDs   []uint64        `json:"hash_ids"`
	Stop      string          `json:"stop"`
	APITime   *float64        `json:"api_time"`
	TTFT      *float64        `json:"ttft"`
	ThinkTime *float64        `json:"think_time"`
	// DurationMS is a sub-agent's run time in milliseconds (null when
	// not recorded).
	DurationMS *float64        `json:"duration_ms"`
	Requests   json.RawMessage `json:"requests"`
}

type wekaDoc struct {
	ID          string          `json:"id"`
	BlockSize   *int            `json:"block_size"`
	HashIDScope string          `json:"hash_id_scope"`
	Requests    json.RawMessage `json:"requests"`
}

// WEKABlockSize is the default block size of WEKA traces, in tokens.
const WEKABlockSize = 64

var wekaNames = map[string]string{
	"input_len":  "in",
	"output_len": "out",
	"arrival":    "t",
	"think_time": "think_time",
	"blocks":     "hash_ids",
	"block_size": "block_size",
}

type internKey struct {
	conv int // -1 for global ids
	id   uint64
}

type wekaBuilder struct {
	intern    map[internKey]uint64
	recs      []wekaRec
	blockSize int
	seq       int
}

type wekaRec struct {
	rec Record
	seq int
}

// wekaFile is one conversation document being flattened.
type wekaFile struct {
	b      *wekaBuilder
	path   string
	data   []byte
	lines  []int // byte offset of each line start
	conv   int
	local  bool
	bs     int
	convID string
	nSub   int
	// ends holds the recorded end (t + api_time) and the parent of each
	// request of the conversation, by ID (lookups only, never iterated).
	ends map[string]wekaEnd
}

type wekaEnd struct {
	end    int64
	parent string
}

type wekaSession struct {
	name string
	turn int
	last string
}

func (f *wekaFile) pos(off int64) (line, col int) {
	i := sort.Search(len(f.lines), func(i int) bool { return int64(f.lines[i]) > off }) - 1
	if i < 0 {
		return 1, int(off) + 1
	}
	return i + 1, int(off) - f.lines[i] + 1
}

func (f *wekaFile) errAt(off int64, field, format string, args ...any) *ParseError {
	line, col := f.pos(off)
	return &ParseError{Path: f.path, Line: line, Col: col, Field: field, Err: fmt.Errorf(format, args...)}
}

// jsonErrAt maps an encoding/json error inside the value starting at off.
func (f *wekaFile) jsonErrAt(off int64, prefix string, err error) *ParseError {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || (errors.As(err, &se) && se.Error() == "unexpected end of JSON input"):
		return f.errAt(int64(len(f.data)), prefix, "invalid JSON: expected the rest of the document, found the end of the input (truncated file?)")
	case errors.As(err, &se):
		return f.errAt(off+se.Offset-1, prefix, "%v", syntaxError(se.Error()))
	case errors.As(err, &te):
		field, start := locateValue(f.data[off:], te.Offset)
		if start < 0 {
			field, start = te.Field, int(te.Offset)
		}
		if prefix != "" && field != "" {
			field = prefix + "." + field
		} else if prefix != "" {
			field = prefix
		}
		return f.errAt(off+int64(start), field, "expected %s, found %s", jsonerr.Expected(te.Type), jsonerr.Found(te.Value))
	}
	return f.errAt(off, prefix, "expected a JSON object, found %v", err)
}

// arrayElems splits a JSON array into its elements and their offsets
// (relative to the array's start).
func arrayElems(raw []byte) ([]json.RawMessage, []int64, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	t, err := dec.Token()
	if err != nil {
		return nil, nil, err
	}
	if t != json.Delim('[') {
		return nil, nil, fmt.Errorf("not an array")
	}
	var elems []json.RawMessage
	var offs []int64
	for dec.More() {
		off := dec.InputOffset()
		var e json.RawMessage
		if err := dec.Decode(&e); err != nil {
			return nil, nil, err
		}
		// Skip the separator and blanks between the previous token and e.
		for off < int64(len(raw)) && bytes.IndexByte([]byte(" \t\r\n,"), raw[off]) >= 0 {
			off++
		}
		elems = append(elems, e)
		offs = append(offs, off)
	}
	return elems, offs, nil
}

func (f *wekaFile) toNs(n json.RawMessage) (int64, bool) {
	v, err := numberToNs(n, 1e9)
	return v, err == nil && v >= 0
}

func secToNs(s float64) int64 {
	if s <= 0 || s != s || s > 9e9 {
		return 0
	}
	return int64(s*1e9 + 0.5)
}

// walk flattens the entries of one session (sess.last is its last request
// ID afterwards). It returns the latest recorded end (t + api_time) of the
// session's requests and of its sub-agents', or -1 when it has none.
func (f *wekaFile) walk(raw json.RawMessage, base int64, field string, sess *wekaSession, spawnedBy string, tOffset int64) (int64, error) {
	elems, offs, err := arrayElems(raw)
	if err != nil {
		return 0, f.errAt(base, field, "expected an array of requests, found %s", jsonerr.Kind(raw))
	}
	var running []subagentRun // launched and not yet joined
	latest := int64(-1)
	for i, e := range elems {
		off := base + offs[i]
		path := fmt.Sprintf("%s[%d]", field, i)
		var q wekaRequest
		if err := json.Unmarshal(e, &q); err != nil {
			return 0, f.jsonErrAt(off, path, err)
		}
		bad := func(name, format string, args ...any) error {
			return f.errAt(off+int64(fieldCol(e, name)-1), path+"."+name, format, args...)
		}
		var t int64
		if !isNull(q.T) {
			v, ok := f.toNs(q.T)
			if !ok {
				return 0, bad("t", "expected non-negative seconds from the conversation start, found %s", string(q.T))
			}
			t = v + tOffset
		}
		var end int64
		if q.Type == "subagent" || (q.Requests != nil && q.In == nil) {
			reqOff := off + int64(fieldCol(e, "requests")-1) + int64(len(`"requests":`))
			var run *subagentRun
			end, run, err = f.walkSubagent(&q, t, tOffset, reqOff, path+".requests", sess.last, bad)
			if run != nil {
				running = append(running, *run)
			}
		} else {
			end, err = f.addRequest(&q, t, sess, spawnedBy, &running, bad)
		}
		if err != nil {
			return 0, err
		}
		latest = max(latest, end)
	}
	return latest, nil
}

// wekaBad reports a problem with a named field of the element being
// flattened, positioned at the field.
type wekaBad func(name, format string, args ...any) error

// walkSubagent flattens sub-agent entry q, launched at t (conversation
// clock, tOffset applied) by the request parent, its requests array at
// offset off and key path field. It returns the latest recorded end of its
// requests (-1 for none) and, when it has requests, the run to join.
func (f *wekaFile) walkSubagent(q *wekaRequest, t, tOffset, off int64, field, parent string, bad wekaBad) (int64, *subagentRun, error) {
	if q.Requests == nil {
		return 0, nil, bad("requests", "expected the sub-agent's requests, found nothing (field missing)")
	}
	if q.DurationMS != nil && !(*q.DurationMS >= 0 && *q.DurationMS <= 9e12) {
		return 0, nil, bad("duration_ms", "expected a non-negative number of milliseconds, found %v", *q.DurationMS)
	}
	f.nSub++
	sub := &wekaSession{name: fmt.Sprintf("%s/sa%d", f.convID, f.nSub)}
	// Nested times: conversation clock, or offsets from t when they start
	// before it.
	off2 := tOffset
	if first := firstT(q.Requests); !isNull(q.T) && first >= 0 && first < t-tOffset {
		off2 = t
	}
	inner, err := f.walk(q.Requests, off, field, sub, parent, off2)
	if err != nil {
		return 0, nil, err
	}
	if sub.last == "" {
		return inner, nil, nil
	}
	end := inner
	if q.DurationMS != nil && !isNull(q.T) {
		end = max(end, t+int64(*q.DurationMS*1e6+0.5))
	}
	return inner, &subagentRun{last: sub.last, end: end}, nil
}

// addRequest flattens request q of session sess, arriving at t, into a
// record, joining the sub-agent runs that have ended by t. It returns the
// request's recorded end (t + api_time).
func (f *wekaFile) addRequest(q *wekaRequest, t int64, sess *wekaSession, spawnedBy string, running *[]subagentRun, bad wekaBad) (int64, error) {
	switch {
	case isNull(q.T):
		return 0, bad("t", "expected seconds from the conversation start, found nothing (field missing)")
	case q.In == nil:
		return 0, bad("in", "expected an input token count, found nothing (field missing)")
	case q.Out == nil:
		return 0, bad("out", "expected an output token count, found nothing (field missing)")
	case q.HashIDs == nil:
		return 0, bad("hash_ids", "expected an array of block hash ids, found nothing (field missing)")
	}
	sess.turn++
	rec := Record{
		ID:        sess.name + "/" + strconv.Itoa(sess.turn),
		Arrival:   t,
		Session:   sess.name,
		Turn:      sess.turn,
		Parent:    sess.last,
		InputLen:  *q.In,
		OutputLen: *q.Out,
		BlockSize: f.bs,
		Model:     q.Model,
		Kind:      q.Type,
	}
	if rec.Parent == "" {
		rec.Parent = spawnedBy
	}
	rec.WaitFor, *running = joinSubagents(*running, t)
	if q.ThinkTime != nil && *q.ThinkTime < 0 {
		return 0, bad("think_time", "expected non-negative seconds, found %v", *q.ThinkTime)
	}
	if q.APITime != nil && *q.APITime < 0 {
		return 0, bad("api_time", "expected non-negative seconds, found %v", *q.APITime)
	}
	rec.Observed = wekaObserved(q)
	var service int64
	if rec.Observed != nil {
		service = rec.Observed.E2E
	}
	rec.Parent, rec.ThinkTime = recordedDelay(f.ends, rec.Parent, t)
	f.ends[sess.name+"/"+strconv.Itoa(sess.turn)] = wekaEnd{end: t + service, parent: rec.Parent}
	rec.Blocks = f.internBlocks(q.HashIDs)
	rec.normalize()
	if fe := rec.check(wekaNames); fe != nil {
		return 0, bad(fe.field, "%s", fe.msg)
	}
	sess.last = rec.ID
	f.b.recs = append(f.b.recs, wekaRec{rec: rec, seq: f.b.seq})
	f.b.seq++
	return t + service, nil
}

// wekaObserved returns what q recorded of its service, or nil if nothing.
func wekaObserved(q *wekaRequest) *Observed {
	if q.APITime == nil && q.TTFT == nil && q.Stop == "" && q.ThinkTime == nil {
		return nil
	}
	obs := &Observed{CachedTokens: -1, Status: q.Stop}
	if q.APITime != nil {
		obs.E2E = secToNs(*q.APITime)
	}
	if q.TTFT != nil {
		obs.TTFT = secToNs(*q.TTFT)
	}
	if q.ThinkTime != nil {
		obs.ThinkTime = secToNs(*q.ThinkTime)
	}
	return obs
}

// internBlocks maps a request's hash ids to the builder's dense block ids
// (per conversation when the file's ids are local).
func (f *wekaFile) internBlocks(ids []uint64) []uint64 {
	blocks := make([]uint64, len(ids))
	for j, h := range ids {
		k := internKey{conv: -1, id: h}
		if f.local {
			k.conv = f.conv
		}
		g, ok := f.b.intern[k]
		if !ok {
			g = uint64(len(f.b.intern))
			f.b.intern[k] = g
		}
		blocks[j] = g
	}
	return blocks
}

// firstT returns the first request's t (ns) in a requests array, or -1.
func firstT(raw json.RawMessage) int64 {
	var qs []struct {
		T json.RawMessage `json:"t"`
	}
	if json.Unmarshal(raw, &qs) != nil || len(qs) == 0 || isNull(qs[0].T) {
		return -1
	}
	v, err := numberToNs(qs[0].T, 1e9)
	if err != nil {
		return -1
	}
	return v
}

// addFile flattens every conversation document in data.
func (b *wekaBuilder) addFile(path string, data []byte, convBase *int) error {
	lines := []int{0}
	for i, c := range data {
		if c == '\n' {
			lines = append(lines, i+1)
		}
	}
	if pe := checkText(path, 0, data); pe != nil {
		f := &wekaFile{path: path, lines: lines}
		pe.Line, pe.Col = f.pos(int64(pe.Col - 1))
		return pe
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		start := dec.InputOffset()
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			return nil
		}
		f := &wekaFile{b: b, path: path, data: data, lines: lines, conv: *convBase, ends: map[string]wekaEnd{}}
		if err != nil {
			return f.jsonErrAt(0, "", err)
		}
		for start < int64(len(data)) && bytes.IndexByte([]byte(" \t\r\n"), data[start]) >= 0 {
			start++
		}
		*convBase++
		var doc wekaDoc
		if err := json.Unmarshal(raw, &doc); err != nil {
			return f.jsonErrAt(start, "", err)
		}
		f.convID = doc.ID
		if f.convID == "" {
			f.convID = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
			if *convBase > 1 {
				f.convID += "#" + strconv.Itoa(*convBase)
			}
		}
		f.bs = WEKABlockSize
		if doc.BlockSize != nil {
			if *doc.BlockSize <= 0 {
				return f.errAt(start+int64(fieldCol(raw, "block_size")-1), "block_size", "expected a positive block size, found %d", *doc.BlockSize)
			}
			f.bs = *doc.BlockSize
		}
		if b.blockSize == 0 {
			b.blockSize = f.bs
		} else if b.blockSize != f.bs {
			b.blockSize = -1 // mixed
		}
		switch doc.HashIDScope {
		case "", "local":
			f.local = true
		case "global":
		default:
			return f.errAt(start+int64(fieldCol(raw, "hash_id_scope")-1), "hash_id_scope", "expected \"local\" or \"global\", found %q", doc.HashIDScope)
		}
		if doc.Requests == nil {
			return f.errAt(start, "requests", "expected an array of requests, found nothing (field missing)")
		}
		base := start + int64(fieldCol(raw, "requests")-1) + int64(len(`"requests":`))
		for base < int64(len(data)) && data[base] != '[' && bytes.IndexByte([]byte(" \t\r\n"), data[base]) >= 0 {
			base++
		}
		sess := &wekaSession{name: f.convID}
		if _, err := f.walk(doc.Requests, base, "requests", sess, "", 0); err != nil {
			return err
		}
	}
}

// wekaDecoder returns the flattened records in arrival order.
type wekaDecoder struct {
	recs []Record
	i    int
}

func (d *wekaDecoder) next() (Record, error) {
	if d.i >= len(d.recs) {
		return Record{}, io.EOF
	}
	r := d.recs[d.i]
	d.recs[d.i] = Record{} // let the blocks go
	d.i++
	return r, nil
}

// readWEKA reads and flattens WEKA conversation files (already
// decompressed by load).
func readWEKA(paths []string, load func(string) ([]byte, error)) (*wekaDecoder, int, error) {
	b := &wekaBuilder{intern: map[internKey]uint64{}}
	conv := 0
	for _, p := range paths {
		data, err := load(p)
		if err != nil {
			return nil, 0, err
		}
		if err := b.addFile(p, data, &conv); err != nil {
			return nil, 0, err
		}
	}
	slices.SortStableFunc(b.recs, func(a, c wekaRec) int {
		if a.rec.Arrival != c.rec.Arrival {
			if a.rec.Arrival < c.rec.Arrival {
				return -1
			}
			return 1
		}
		return a.seq - c.seq
	})
	d := &wekaDecoder{recs: make([]Record, len(b.recs))}
	for i, r := range b.recs {
		d.recs[i] = r.rec
	}
	return d, max(b.blockSize, 0), nil
}

// OpenFiles opens several trace files (or directories of them) as one
// trace. Only WEKA conversations can be combined; a single file is the same
// as Open. Directories are expanded to their *.json, *.json.gz and
// *.json.zst files in name order.
func OpenFiles(paths []string, f Format) (*Reader, error) {
	var files []string
	for _, p := range paths {
		if p == "-" {
			files = append(files, p)
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("open trace: %w", err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("open trace: %w", err)
		}
		n := len(files)
		for _, e := range ents {
			name := e.Name()
			if !e.IsDir() && (strings.HasSuffix(name, ".json") || strings.HasSuffix(name, ".json.gz") || strings.HasSuffix(name, ".json.zst")) {
				files = append(files, filepath.Join(p, name))
			}
		}
		if len(files) == n {
			return nil, fmt.Errorf("open trace %s: %w: directory has no .json files", p, ErrUnknownFormat)
		}
	}
	if len(files) == 1 && f != FormatWEKA {
		st, _ := os.Stat(paths[0])
		if st == nil || !st.IsDir() {
			return Open(files[0], f)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("open trace: no files given")
	}
	if f != FormatAuto && f != FormatWEKA {
		return nil, fmt.Errorf("open trace: several files can only be read as one trace in the weka format, not %s", f)
	}
	load := func(p string) ([]byte, error) {
		var file io.Reader = os.Stdin
		if p == "-" {
			p = StdinName
		} else {
			f, err := os.Open(p)
			if err != nil {
				return nil, fmt.Errorf("open trace: %w", err)
			}
			defer f.Close()
			file = f
		}
		br, closer, err := decompress(file, p)
		if err != nil {
			return nil, err
		}
		if closer != nil {
			defer closer.Close()
		}
		data, err := io.ReadAll(br)
		if err != nil {
			return nil, &readError{path: p, line: 1 + bytes.Count(data, []byte("\n")), err: err}
		}
		if f == FormatAuto {
			g, err := Detect(data, p)
			if err != nil {
				return nil, explainDetect(data, p, true, err)
			}
			if g != FormatWEKA {
				return nil, fmt.Errorf("open trace %s: several files can only be read as one trace in the weka format, found %s", p, g)
			}
		}
		return data, nil
	}
	d, bs, err := readWEKA(files, load)
	if err != nil {
		return nil, err
	}
	src := strings.Join(paths, ",")
	return &Reader{path: src, format: FormatWEKA, dec: d, hdr: Header{Version: KVSimVersion, Format: "weka", BlockSize: bs, Source: src}}, nil
}
