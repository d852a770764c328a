package traces

import (
	"bufio"
	"encoding/json"
	"strconv"
)

// tokensLine is one line of a token-id trace (LLMServingSim workloads):
//
//	{"input_toks": n, "output_toks": n, "arrival_time_ns": ns,
//	 "input_tok_ids": [...], "output_tok_ids": [...]}
//
// The id arrays are optional; without input_tok_ids the record carries
// lengths only.
type tokensLine struct {
	InputToks    *int    `json:"input_toks"`
	OutputToks   *int    `json:"output_toks"`
	ArrivalNs    *int64  `json:"arrival_time_ns"`
	InputTokIDs  []int32 `json:"input_tok_ids"`
	OutputTokIDs []int32 `json:"output_tok_ids"`
}

var tokensNames = map[string]string{
	"input_len":  "input_toks",
	"output_len": "output_toks",
	"arrival":    "arrival_time_ns",
	"tokens":     "input_tok_ids",
}

type tokensFormat struct {
	n    int
	last int64
}

func newTokens(br *bufio.Reader, path string) *jsonlDecoder {
	return newJSONL(br, path, &tokensFormat{})
}

func (d *tokensFormat) record(l jsonLine) (Record, error) {
	var m tokensLine
	if err := json.Unmarshal(l.data, &m); err != nil {
		return Record{}, jsonError(l.path, l.line, l.data, err)
	}
	if err := l.require(
		want{"arrival_time_ns", m.ArrivalNs != nil, "nanoseconds since the trace start"},
		want{"input_toks", m.InputToks != nil || m.InputTokIDs != nil, wantCount},
		want{"output_toks", m.OutputToks != nil || m.OutputTokIDs != nil, wantCount},
	); err != nil {
		return Record{}, err
	}
	bad := l.bad
	rec := Record{
		ID:           strconv.Itoa(d.n),
		Arrival:      *m.ArrivalNs,
		Tokens:       m.InputTokIDs,
		OutputTokens: m.OutputTokIDs,
	}
	if m.InputToks != nil {
		rec.InputLen = *m.InputToks
	} else {
		rec.InputLen = len(m.InputTokIDs)
	}
	if m.OutputToks != nil {
		rec.OutputLen = *m.OutputToks
	} else {
		rec.OutputLen = len(m.OutputTokIDs)
	}
	if err := l.check(&rec, tokensNames); err != nil {
		return Record{}, err
	}
	if rec.OutputTokens != nil && len(rec.OutputTokens) != rec.OutputLen {
		return Record{}, bad("output_tok_ids", "expected %d token ids (output_toks), found %d", rec.OutputLen, len(rec.OutputTokens))
	}
	if rec.Arrival < d.last {
		return Record{}, bad("arrival_time_ns", "expected a time >= the previous record's (%d ns), found %d ns", d.last, rec.Arrival)
	}
	d.last = rec.Arrival
	d.n++
	return rec, nil
}
