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
	bad := l.bad
	switch {
	case isNull(m.ChatID):
		return Record{}, bad("chat_id", "expected an integer request id, found nothing (field missing)")
	case isNull(m.Timestamp):
		return Record{}, bad("timestamp", "expected seconds since the trace start, found nothing (field missing)")
	case m.InputLength == nil:
		return Record{}, bad("input_length", "expected a token count, found nothing (field missing)")
	case m.OutputLength == nil:
		return Record{}, bad("output_length", "expected a token count, found nothing (field missing)")
	case m.HashIDs == nil:
		return Record{}, bad("hash_ids", "expected an array of block hash ids, found nothing (field missing)")
	}
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
	at, err := numberToNs(m.Timestamp, 1e9)
	if err != nil {
		return Record{}, bad("timestamp", "expected seconds since the trace start, found %s", string(m.Timestamp))
	}
	if m.Turn < 0 {
		return Record{}, bad("turn", "expected a non-negative turn number, found %d", m.Turn)
	}
	rec := Record{
		ID:        strconv.FormatInt(chat, 10),
		Arrival:   at,
		Turn:      m.Turn,
		InputLen:  *m.InputLength,
		OutputLen: *m.OutputLength,
		Blocks:    m.HashIDs,
		BlockSize: BailianBlockSize,
		Kind:      m.Type,
	}
	rec.normalize()
	if fe := rec.check(bailianNames); fe != nil {
		return Record{}, bad(fe.field, "%s", fe.msg)
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
