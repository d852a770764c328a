package traces

import (
	"bufio"
	"encoding/json"
	"strconv"
)

// BailianBlockSize is the number of tokens behind each Qwen-Bailian hash id.
const BailianBlockSize = 16

// bailianLine is one line of an Alibaba Qwen-Bailian usage trace:
//
//	{"chat_id": int, "parent_chat_id": int (-1: none), "timestamp": s,
//	 "input_length": n, "output_length": n, "type": str, "turn": n,
//	 "hash_ids": [...]}
//
// Its fields are flat (not an embedded hashLine): encoding/json allocates
// once more per line for an embedded struct.
type bailianLine struct {
	ChatID       json.RawMessage `json:"chat_id"`
	ParentChatID json.RawMessage `json:"parent_chat_id"`
	Timestamp    json.RawMessage `json:"timestamp"`
	InputLength  *int            `json:"input_length"`
	OutputLength *int            `json:"output_length"`
	Type         string          `json:"type"`
	Turn         int             `json:"turn"`
	HashIDs      []uint64        `json:"hash_ids"`
}

var bailianNames = map[string]string{
	"input_len":  "input_length",
	"output_len": "output_length",
	"arrival":    "timestamp",
	"blocks":     "hash_ids",
}

type bailianFormat struct {
	last int64
	// root maps a chat id to the first chat of its conversation, which
	// names the session. One entry per request (two int64s).
	root map[int64]int64
}

func newBailian(br *bufio.Reader, path string) *jsonlDecoder {
	return newJSONL(br, path, &bailianFormat{root: map[int64]int64{}})
}

func (d *bailianFormat) record(l jsonLine) (Record, error) {
	var m bailianLine
	if err := json.Unmarshal(l.data, &m); err != nil {
		return Record{}, jsonError(l.path, l.line, l.data, err)
	}
	if err := l.require(want{"chat_id", !isNull(m.ChatID), "an integer request id"}); err != nil {
		return Record{}, err
	}
	const at = "seconds since the trace start"
	h := hashLine{Timestamp: m.Timestamp, InputLength: m.InputLength, OutputLength: m.OutputLength, HashIDs: m.HashIDs}
	if err := h.require(l, at); err != nil {
		return Record{}, err
	}
	bad := l.bad
	chat, err := rawInt(m.ChatID)
	if err != nil || chat < 0 {
		return Record{}, bad("chat_id", "expected a non-negative integer, found %s", string(m.ChatID))
	}
	parent := int64(-1)
	if !isNull(m.ParentChatID) {
		parent, err = rawInt(m.ParentChatID)
		if err != nil {
			return Record{}, bad("parent_chat_id", "expected an integer (-1 for none), found %s", string(m.ParentChatID))
		}
	}
	rec, err := h.record(l, at, 1e9, BailianBlockSize)
	if err != nil {
		return Record{}, err
	}
	if m.Turn < 0 {
		return Record{}, bad("turn", "expected a non-negative turn number, found %d", m.Turn)
	}
	rec.ID, rec.Turn, rec.Kind = strconv.FormatInt(chat, 10), m.Turn, m.Type
	if err := l.check(&rec, bailianNames); err != nil {
		return Record{}, err
	}
	if rec.Arrival < d.last {
		return Record{}, bad("timestamp", "expected a time >= the previous record's (%s s), found %s s", fmtSec(d.last), string(m.Timestamp))
	}
	if _, dup := d.root[chat]; dup {
		return Record{}, bad("chat_id", "expected a unique request id, found %d again", chat)
	}
	root := chat
	if parent >= 0 {
		rec.Parent = strconv.FormatInt(parent, 10)
		if r, ok := d.root[parent]; ok {
			root = r
		} else {
			root = parent // the parent is outside this file (a cut trace)
		}
	}
	d.root[chat] = root
	d.last = rec.Arrival
	rec.Session = strconv.FormatInt(root, 10)
	return rec, nil
}

// fmtSec prints nanoseconds as seconds without trailing zeros.
func fmtSec(ns int64) string {
	return strconv.FormatFloat(float64(ns)/1e9, 'f', -1, 64)
}
