package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/kvsim/kvsim/internal/fielderr"
	"github.com/kvsim/kvsim/internal/jsonerr"
	"github.com/kvsim/kvsim/planner"
)

func init() {
	register(&command{
		name:    "plan",
		summary: "run the owner-lane eviction planner on a tree snapshot (JSON) and print the plan",
		run:     runPlan,
	})
}

const planUsage = `usage: kvsim plan --input FILE.json [--algo heap|reference]

Reads a tree snapshot and per-lane page deficits, runs the context-parallel
owner-lane eviction planner, and prints the plan as one line of JSON:

  {"victims": [ids in eviction order], "planned_freed": [per lane], "remaining": [per lane]}

Input (every parent listed before its children; the root is id 0, not listed):

  {"cp": 2, "deficits": [6, 2],
   "nodes": [{"id": 1, "parent": 0, "counts": [4, 4], "device": true, "locked": false, "slru": [1, 10]},
             {"id": 2, "parent": 1, "counts": [2, 0], "device": true}]}

  cp        number of owner lanes (>= 1)
  deficits  pages each lane is short of (cp integers >= 0)
  id        node id (not 0, unique)            parent  parent id (0 = root)
  counts    device pages per lane (cp ints)    device  resident on the device
  locked    held by a running request (default false)
  slru      [segment, last_access]: SLRU eviction key, smaller first (default [0, 0])

Exit status: 0 on success, 2 for bad flags or bad input, 1 if FILE cannot be read.

flags:
`

func runPlan(args []string, stdout, stderr io.Writer) int {
	fs := newHintCommand("kvsim plan", planUsage, stdout, stderr)
	input := fs.String("input", "", "the snapshot `FILE` (JSON)")
	algo := fs.String("algo", "heap", "planner: heap (lazy re-evaluation heap) or reference (full rescan)")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	switch {
	case *input == "":
		fmt.Fprintln(stderr, "kvsim plan: --input is required")
		return exitUsage
	case *algo != "heap" && *algo != "reference":
		fmt.Fprintf(stderr, "kvsim plan: --algo: want heap or reference, got %q\n", *algo)
		return exitUsage
	}
	data, err := os.ReadFile(*input)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim plan: %v\n", err)
		return exitFail
	}
	in, err := decodePlanInput(*input, data)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim plan: %v\n", err)
		return exitUsage
	}
	var plan planner.Plan
	if *algo == "reference" {
		plan, err = planner.Reference(in.nodes, in.deficits)
	} else {
		var p *planner.Planner
		if p, err = planner.New(planner.Config{Lanes: in.cp}); err == nil {
			plan, err = p.Plan(in.nodes, in.deficits)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "kvsim plan: %v\n", in.locate(err))
		return exitUsage
	}
	out, err := json.Marshal(struct {
		Victims      []int64 `json:"victims"`
		PlannedFreed []int64 `json:"planned_freed"`
		Remaining    []int64 `json:"remaining"`
	}{plan.Victims, plan.PlannedFreed, plan.Remaining})
	if err != nil {
		fmt.Fprintf(stderr, "kvsim plan: %v\n", err)
		return exitFail
	}
	if _, err := stdout.Write(append(out, '\n')); err != nil {
		fmt.Fprintf(stderr, "kvsim plan: %v\n", err)
		return exitFail
	}
	return exitOK
}

// planInput is a decoded snapshot file, with the byte offsets needed to
// point errors at the node or field they are about.
type planInput struct {
	path        string
	data        []byte
	cp          int
	deficits    []int64
	nodes       []planner.Node
	cpAt        int   // offset of the cp value
	deficitsAt  int   // offset of the deficits value
	nodeAt      []int // offset of each node object
	objectStart int
}

// planNodeJSON is one node as written in the file; pointers tell missing
// fields from zero values.
type planNodeJSON struct {
	ID     *int64   `json:"id"`
	Parent *int64   `json:"parent"`
	Counts *[]int64 `json:"counts"`
	Device *bool    `json:"device"`
	Locked bool     `json:"locked"`
	SLRU   []int64  `json:"slru"`
}

// errAt is an input error at a byte offset of the file: FILE:LINE:COL: MSG,
// the positioned error configs and study files use too.
func (in *planInput) errAt(off int, format string, args ...any) error {
	line, col := planLineCol(in.data, off)
	return &fielderr.At{File: in.path, Line: line, Col: col, Err: fmt.Errorf(format, args...)}
}

// planLineCol converts a byte offset into a 1-based line and column (in
// bytes).
func planLineCol(data []byte, off int) (line, col int) {
	off = max(0, min(off, len(data)))
	line = 1 + bytes.Count(data[:off], []byte{'\n'})
	return line, off - (bytes.LastIndexByte(data[:off], '\n') + 1) + 1
}

// planSkip returns the offset of the first byte at or after off that is not
// JSON whitespace or a separator (',' or ':').
func planSkip(data []byte, off int) int {
	for off < len(data) {
		switch data[off] {
		case ' ', '\t', '\r', '\n', ',', ':':
			off++
		default:
			return off
		}
	}
	return off
}

// decodePlanInput decodes a snapshot file strictly: valid JSON, one object
// with exactly the keys cp, deficits and nodes, nodes with only known keys,
// every required field present, and nothing after the object.
func decodePlanInput(path string, data []byte) (*planInput, error) {
	in := &planInput{path: path, data: data}
	var syntax *json.SyntaxError
	if err := json.Unmarshal(data, new(json.RawMessage)); errors.As(err, &syntax) {
		// Offset counts the bytes read up to and including the bad one.
		return nil, in.errAt(int(syntax.Offset)-1, "%v", err)
	} else if err != nil {
		return nil, in.errAt(0, "%v", err)
	}
	// The document is valid JSON from here on, so Token cannot fail on syntax.
	dec := json.NewDecoder(bytes.NewReader(data))
	in.objectStart = planSkip(data, 0)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, in.errAt(in.objectStart, "want a JSON object with cp, deficits and nodes")
	}
	seen := map[string]bool{}
	for dec.More() {
		keyAt := planSkip(data, int(dec.InputOffset()))
		tok, err := dec.Token()
		if err != nil {
			return nil, in.errAt(keyAt, "%v", err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return nil, in.errAt(keyAt, "duplicate field %q", key)
		}
		seen[key] = true
		valAt := planSkip(data, int(dec.InputOffset()))
		switch key {
		case "cp":
			in.cpAt = valAt
			if err := planDecodeValue(dec, &in.cp); err != nil {
				return nil, in.errAt(valAt, "cp: %v", err)
			}
		case "deficits":
			in.deficitsAt = valAt
			if err := planDecodeValue(dec, &in.deficits); err != nil {
				return nil, in.errAt(valAt, "deficits: %v", err)
			}
		case "nodes":
			if err := in.decodeNodes(dec, valAt); err != nil {
				return nil, err
			}
		default:
			return nil, in.errAt(keyAt, "unknown field %q (want cp, deficits, nodes)", key)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, in.errAt(int(dec.InputOffset()), "%v", err)
	}
	if rest := planSkip(data, int(dec.InputOffset())); rest < len(data) {
		return nil, in.errAt(rest, "unexpected data after the snapshot object")
	}
	for _, key := range []string{"cp", "deficits", "nodes"} {
		if !seen[key] {
			return nil, in.errAt(in.objectStart, "missing field %q", key)
		}
	}
	switch {
	case in.cp < 1:
		return nil, in.errAt(in.cpAt, "cp: must be >= 1 (got %d)", in.cp)
	case len(in.deficits) != in.cp:
		return nil, in.errAt(in.deficitsAt, "deficits: want %d lanes (cp), got %d", in.cp, len(in.deficits))
	}
	return in, nil
}

// planDecodeValue decodes the next value strictly into v and rewords type
// errors as "expected X, found Y".
func planDecodeValue(dec *json.Decoder, v any) error {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	if bytes.Equal(raw, []byte("null")) {
		return errors.New("must not be null")
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	return planTypeError(d.Decode(v))
}

// planTypeError says what was wrong with a value in the snapshot's terms
// (key path, expected and found), never Go's.
func planTypeError(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(jsonerr.Describe(err))
}

// decodeNodes decodes the nodes array element by element, remembering where
// each node starts.
func (in *planInput) decodeNodes(dec *json.Decoder, at int) error {
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('[') {
		return in.errAt(at, "nodes: want an array of node objects")
	}
	for k := 0; dec.More(); k++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return in.errAt(planSkip(in.data, int(dec.InputOffset())), "nodes[%d]: %v", k, err)
		}
		start := int(dec.InputOffset()) - len(raw)
		in.nodeAt = append(in.nodeAt, start)
		var nj planNodeJSON
		if raw[0] != '{' {
			return in.errAt(start, "nodes[%d]: want a node object", k)
		}
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := planTypeError(d.Decode(&nj)); err != nil {
			return in.errAt(start, "nodes[%d]: %v", k, err)
		}
		name := fmt.Sprintf("nodes[%d]", k)
		if nj.ID != nil {
			name = fmt.Sprintf("nodes[%d] (id %d)", k, *nj.ID)
		}
		switch {
		case nj.ID == nil:
			return in.errAt(start, "%s: id: missing", name)
		case nj.Parent == nil:
			return in.errAt(start, "%s: parent: missing", name)
		case nj.Counts == nil:
			return in.errAt(start, "%s: counts: missing or null", name)
		case nj.Device == nil:
			return in.errAt(start, "%s: device: missing", name)
		case nj.SLRU != nil && len(nj.SLRU) != 2:
			return in.errAt(start, "%s: slru: want [segment, last_access], got %d numbers", name, len(nj.SLRU))
		}
		nd := planner.Node{ID: *nj.ID, Parent: *nj.Parent, Counts: *nj.Counts, Device: *nj.Device, Locked: nj.Locked}
		if nj.SLRU != nil {
			nd.SLRU = planner.Priority{Segment: int(nj.SLRU[0]), LastAccess: nj.SLRU[1]}
		}
		in.nodes = append(in.nodes, nd)
	}
	if _, err := dec.Token(); err != nil { // the closing ']'
		return in.errAt(int(dec.InputOffset()), "nodes: %v", err)
	}
	return nil
}

// locate prefixes a planner input error with the file position of the node
// or deficit it names.
func (in *planInput) locate(err error) error {
	var ie *planner.InputError
	if !errors.As(err, &ie) {
		return fmt.Errorf("%s: %w", in.path, err)
	}
	at := in.deficitsAt
	if ie.Node >= 0 && ie.Node < len(in.nodeAt) {
		at = in.nodeAt[ie.Node]
	}
	return in.errAt(at, "%v", err)
}
